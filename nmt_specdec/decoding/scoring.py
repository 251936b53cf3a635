"""Verifier scores from logits, without a full ``log_softmax``.

Acceptance (Xia et al., Eq. 4) compares a draft with the verifier's top-beta and
its margin to the top-1; both are invariant to the per-position normaliser, so
they run on raw logits. Log-probabilities are needed only for the committed
tokens (fairseq's positional scores): logit minus ``logsumexp`` of the row.

fairseq's ``SequenceGenerator`` constrains log-probabilities after the softmax
(pad forbidden, unk penalised, EOS forbidden before ``min_len`` and forced at
``max_len``); these column edits commute with subtracting the normaliser, so
applying them to logits gives the same argmax, top-beta and scores.

Shapes: B rows, N positions, V vocabulary.
"""

from __future__ import annotations

import math
from typing import List, NamedTuple, Tuple

import numpy as np
import torch
from torch import Tensor


class Constraints(NamedTuple):
    """fairseq's per-step constraints (ids from the target dictionary).

    The last three are SequenceGenerator options that only the batched tensor
    loop applies (:attr:`plain` is False when one is set): ``temperature``
    divides the logits before the softmax, ``no_repeat_ngram`` blocks a token
    that would repeat an n-gram of its prefix (:func:`repeated_ngram_bans`),
    ``match_source_len`` allows EOS only at each row's ``max_len`` (its source
    length) and scores it 0 there, as fairseq's ``LengthConstrainedBeamSearch``.
    """

    pad: int
    eos: int
    unk: int
    min_len: int = 1
    unk_penalty: float = 0.0
    temperature: float = 1.0
    no_repeat_ngram: int = 0
    match_source_len: bool = False

    @property
    def plain(self) -> bool:
        """No option beyond pad, unk and the length limits: every loop applies them."""
        return self.temperature == 1.0 and not self.no_repeat_ngram \
            and not self.match_source_len


def constrain_logits_(logits: Tensor, steps: Tensor, max_len: Tensor, rules: Constraints,
                      check_min_len: bool = True, check_max_len: bool = True) -> Tensor:
    """Applies the constraints in place (columns, and whole rows only at max_len).

    Args:
        logits: (B, N, V) raw verifier logits.
        steps: (B, N) output step (0-based, BOS excluded) each position predicts.
        max_len: (B,) step at which EOS is forced.
        rules: the constraints.
        check_min_len, check_max_len: False when the caller knows that no step is
            below ``min_len`` (or at ``max_len``): those rules are then skipped.

    Returns:
        ``logits``, modified.
    """
    logits[:, :, rules.pad] = -math.inf
    if rules.unk_penalty:
        logits[:, :, rules.unk] -= rules.unk_penalty
    if not (check_min_len or check_max_len):
        return logits
    eos = logits[:, :, rules.eos].clone()  # (B, N)
    if check_min_len:
        eos = eos.masked_fill(steps < rules.min_len, -math.inf)
    if check_max_len:
        at_max = steps >= max_len.unsqueeze(1)  # (B, N)
        logits.masked_fill_(at_max.unsqueeze(2), -math.inf)
    logits[:, :, rules.eos] = eos
    return logits


def search_rules_(logits: Tensor, steps: Tensor, max_len: Tensor, rules: Constraints,
                  bans: List[Tuple[int, int, List[int]]]) -> Tensor:
    """The options of :class:`Constraints` beyond :attr:`~Constraints.plain`, in
    place, after :func:`constrain_logits_` (as fairseq applies them after its own).

    Args:
        logits: (B, N, V) constrained logits.
        steps, max_len: as :func:`constrain_logits_`.
        bans: ``(row, position, tokens)`` from :func:`repeated_ngram_bans`.
    """
    if rules.match_source_len:  # EOS only at the source length
        logits[:, :, rules.eos].masked_fill_(steps < max_len.unsqueeze(1), -math.inf)
    for row, position, tokens in bans:
        logits[row, position, tokens] = -math.inf
    return logits


def repeated_ngram_bans(prefixes: List[List[int]], blocks: List[List[List[int]]],
                        size: int) -> List[Tuple[int, int, List[int]]]:
    """fairseq's ``NGramRepeatBlock``: the tokens each position may not predict
    because they would repeat an n-gram of ``size`` tokens already in its prefix.

    Args:
        prefixes: per row, the committed tokens, BOS first (fairseq's prefix).
        blocks: per row and verify position, the inputs after the committed ones
            that the position sees (its drafted ancestors, itself included).
        size: n.

    Returns:
        ``(row, position, tokens)`` for every position with banned tokens.
    """
    bans = []
    for row, (prefix, positions) in enumerate(zip(prefixes, blocks)):
        for position, drafted in enumerate(positions):
            seen = prefix + drafted
            if len(seen) < size - 1:
                continue
            key = seen[len(seen) - size + 1:]
            banned = sorted({seen[i + size - 1] for i in range(len(seen) - size + 1)
                             if seen[i: i + size - 1] == key})
            if banned:
                bans.append((row, position, banned))
    return bans


def constrain_row_(row: np.ndarray, step: int, max_len: int, rules: Constraints,
                   check_min_len: bool = True, check_max_len: bool = True) -> np.ndarray:
    """:func:`constrain_logits_` for one position's (V,) float32 logits as a numpy
    array (the single-row loop's greedy turn: a few scalar writes instead of
    tensor ops), in the same order, so the same values.

    Args:
        step: the output step (0-based) this position predicts.
        max_len: the step at which EOS is forced.
    """
    row[rules.pad] = -math.inf
    if rules.unk_penalty:
        row[rules.unk] -= rules.unk_penalty
    if check_min_len or check_max_len:
        eos = -math.inf if check_min_len and step < rules.min_len else row[rules.eos]
        if check_max_len and step >= max_len:
            row[:] = -math.inf
        row[rules.eos] = eos
    return row


def constrain_rows_(logits: np.ndarray, steps: np.ndarray, max_len: np.ndarray,
                    rules: Constraints, check_min_len: bool = True,
                    check_max_len: bool = True) -> np.ndarray:
    """:func:`~.scoring.constrain_logits_` for one position per row: (B, V) float32
    logits as a numpy array, ``steps`` and ``max_len`` (B,), in the same order."""
    logits[:, rules.pad] = -math.inf
    if rules.unk_penalty:
        logits[:, rules.unk] -= rules.unk_penalty
    if check_min_len or check_max_len:
        eos = logits[:, rules.eos].copy()
        if check_min_len:
            eos[steps < rules.min_len] = -math.inf
        if check_max_len:
            logits[steps >= max_len] = -math.inf
        logits[:, rules.eos] = eos
    return logits


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
        margin: how far below the best a token still matters (0 at beta = 1;
            tau for beta > 1, whose criterion reads every token within tau).
    """
    return bool((best > bound + margin).all())


def certainty_margin(beta: int, tau: float) -> float:
    """The ``margin`` of :func:`certain` for these acceptance settings."""
    return 0.0 if beta == 1 else tau
