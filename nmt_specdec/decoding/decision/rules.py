"""The draft test of Spec-Verify, one object per rule, each in a torch and a host form.

A rule says whether a draft passes under the verifier's scores at the position
that predicts it (its parent: the previous slot in a chain, the chain input
one depth up for a leaf of a tree, a chain being a tree of width one). The
walks (:mod:`.acceptance`, :mod:`.tree`) take a rule and never look inside:

- :class:`ExactGreedy` (beta = 1): the draft is the verifier's argmax, the
  first index among tied scores, greedy's own tie-break, so beta = 1 is
  exactly greedy decoding;
- :class:`TopBeta` (Xia et al., Eq. 4): the draft is among the verifier's
  top-beta (ties in its favour) and within ``tau`` of the best.

A draft scored ``-inf`` (e.g. anything but EOS at the length limit) never
passes. Speculative sampling is not a pass/fail test on scores alone (it reads
the draft's own probability and a draw): :mod:`.sampling`.

Shapes: B rows, N scored positions, D drafts, V vocabulary.
"""

from __future__ import annotations

from functools import lru_cache
from typing import List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.decision.certified import Inexact, exact_best, exact_rank


def argmax_last(scores: Tensor) -> Tensor:
    """``scores.argmax(dim=-1)`` (the first index among ties), through numpy for
    float32 scores on the CPU, where numpy's argmax is an order of magnitude
    faster than torch's over a batch's scores."""
    if scores.device.type == "cpu" and scores.dtype == torch.float32 \
            and not scores.requires_grad:
        return torch.from_numpy(scores.numpy().argmax(-1))
    return scores.argmax(dim=-1)


class AcceptanceRule:
    """Whether drafts pass under their parents' scores.

    Attributes:
        exact: the rule accepts the verifier's greedy choice only (beta = 1).
        margin: how far below the best score a token still matters to the rule
            (an 8-bit projection must certify the scores down to there, see
            :func:`~.scores.certain`).
    """

    exact = False
    margin = 0.0

    def passes(self, scores: Tensor, drafts: Tensor, parent: Optional[Tensor] = None) -> Tensor:
        """Torch form: (B, D) bool, draft d tested under ``scores[:, parent[d]]``.

        Args:
            scores: (B, N, V) constrained verifier scores (logits or log-probabilities).
            drafts: (B, D) draft tokens.
            parent: (D,) the position each draft is a prediction of (None: d).
        """
        raise NotImplementedError

    def passes_host(self, flat: np.ndarray, drafts: Sequence[int],
                    parents: Sequence[int]) -> List[bool]:
        """Host form of :meth:`passes` for one row: ``flat`` (N, V) float32 scores."""
        raise NotImplementedError

    def certify_host(self, flat: np.ndarray, inexact: Inexact, drafts: Sequence[int],
                     parents: Sequence[int]) -> None:
        """Where ``flat`` (N, V) holds inexact scores, writes exact ones wherever
        :meth:`passes_host` and the correction (each position's argmax) read
        them, so that they decide as on exact scores (:mod:`.certified`)."""
        for position in range(flat.shape[0]):
            exact_best(flat[position], position, inexact)


def _at(values: Tensor, parent: Optional[Tensor]) -> Tensor:
    """(B, D) per-position ``values`` (B, N) at each draft's parent."""
    return values if parent is None else values.index_select(1, parent)


def _draft_scores(scores: Tensor, drafts: Tensor, parent: Optional[Tensor]) -> Tensor:
    """(B, D) the score of each draft under its parent, without a (B, D, V) copy."""
    if parent is None:
        return scores.gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    flat = scores.reshape(scores.size(0), -1)
    return flat.gather(1, parent * scores.size(-1) + drafts)


class ExactGreedy(AcceptanceRule):
    """beta = 1: a draft passes only as its parent's argmax."""

    exact = True

    def passes(self, scores: Tensor, drafts: Tensor, parent: Optional[Tensor] = None) -> Tensor:
        passed = drafts == _at(argmax_last(scores), parent)
        return passed & torch.isfinite(_draft_scores(scores, drafts, parent))

    def passes_host(self, flat: np.ndarray, drafts: Sequence[int],
                    parents: Sequence[int]) -> List[bool]:
        parents, drafts = list(parents), list(drafts)
        top1 = flat.argmax(axis=1)
        return ((top1[parents] == drafts) & np.isfinite(flat[parents, drafts])).tolist()


class TopBeta(AcceptanceRule):
    """Xia et al.'s Eq. 4: among the parent's top-``beta`` (fewer than beta tokens
    score strictly higher) and at most ``tau`` below its best score."""

    def __init__(self, beta: int, tau: float):
        self.beta, self.tau, self.margin = beta, tau, tau

    def passes(self, scores: Tensor, drafts: Tensor, parent: Optional[Tensor] = None) -> Tensor:
        draft = _draft_scores(scores, drafts, parent)
        best = _at(scores.amax(dim=-1), parent)
        # beta >= V admits the whole vocabulary (topk itself would raise).
        kth = _at(scores.topk(min(self.beta, scores.size(-1)), dim=-1).values[..., -1], parent)
        return (draft >= kth) & (best - draft <= self.tau) & torch.isfinite(draft)

    def passes_host(self, flat: np.ndarray, drafts: Sequence[int],
                    parents: Sequence[int]) -> List[bool]:
        rows = flat[list(parents)]  # (D, V)
        draft = rows[np.arange(len(rows)), list(drafts)]
        # At or above the beta-th best: fewer than beta tokens strictly above it.
        above = np.count_nonzero(rows > draft[:, None], axis=1)
        best = rows.max(axis=1)
        return ((above < self.beta) & (best - draft <= self.tau) & np.isfinite(draft)).tolist()

    def certify_host(self, flat: np.ndarray, inexact: Inexact, drafts: Sequence[int],
                     parents: Sequence[int]) -> None:
        super().certify_host(flat, inexact, drafts, parents)
        for draft, parent in zip(drafts, parents):
            exact_rank(flat[parent], parent, inexact, draft, self.beta, self.tau)


@lru_cache(maxsize=32)
def acceptance_rule(beta: int, tau: float) -> AcceptanceRule:
    """The rule of ``--spec-beta``/``--spec-tau`` (validated by the caller)."""
    if beta < 1:
        raise ValueError(f"beta must be >= 1, got {beta}")
    if tau < 0:
        raise ValueError(f"tau must be >= 0, got {tau}")
    return ExactGreedy() if beta == 1 else TopBeta(beta, tau)
