"""Verifier scores from logits, without a full ``log_softmax``.

Acceptance (Xia et al., Eq. 4) compares a draft with the verifier's top-beta and
its margin to the top-1; both are invariant to the per-position normaliser, so
they run on raw logits. Log-probabilities are needed only for the committed
tokens (fairseq's positional scores): logit minus ``logsumexp`` of the row.

Shapes: B rows, N positions, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor


def positional_scores(logits: Tensor, normaliser: Tensor, tokens: Tensor) -> Tensor:
    """Log-probabilities of ``tokens`` (B, N) under constrained ``logits``.

    Args:
        logits: (B, N, V) constrained logits.
        normaliser: (B, N) ``logsumexp`` of the raw logits (fairseq normalises
            before constraining).
        tokens: (B, N) token ids.
    """
    return logits.gather(2, tokens.unsqueeze(2)).squeeze(2) - normaliser


def normaliser(logits: Tensor) -> Tensor:
    """(B, N) ``logsumexp`` over the vocabulary, in float32."""
    return torch.logsumexp(logits.float(), dim=-1)


def certain(best: Tensor, bound: Tensor, margin: float) -> bool:
    """Whether every position's decision stands on exact logits.

    Args:
        best: (B, N) best constrained logit per position.
        bound: (B, N) the verifier's bound (:class:`~.backends.base.Verified`):
            no inexact logit lies above it.
        margin: how far below the best a token still matters (the rule's
            :attr:`~.rules.AcceptanceRule.margin`: 0 at beta = 1; tau for beta > 1,
            whose criterion reads every token within tau).
    """
    return bool((best > bound + margin).all())
