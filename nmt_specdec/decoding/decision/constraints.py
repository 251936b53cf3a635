"""fairseq's per-step constraints on verifier scores, in a torch and a numpy form.

fairseq's ``SequenceGenerator`` constrains log-probabilities after the softmax
(pad forbidden, unk penalised, EOS forbidden before ``min_len`` and forced at
``max_len``); these column edits commute with subtracting the normaliser, so
applying them to logits gives the same argmax, top-beta and scores.

:func:`constrain_logits_` is the form the batched loop applies to (B, N, V)
tensors; :func:`constrain_host_` is the same rule, in the same order, on numpy
arrays (the host loops' greedy turns: a few column writes instead of tensor
ops). ``tests/unit/test_decision_forms.py`` holds the two equal.
:func:`search_rules_` adds the rarer options of :class:`Constraints`.

Shapes: B rows, N positions, V vocabulary.
"""

from __future__ import annotations

import math
from typing import List, NamedTuple, Tuple, Union

import numpy as np
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
        return self.temperature == 1.0 and self.per_row

    @property
    def per_row(self) -> bool:
        """No option but a temperature beyond :attr:`plain`: the single-row loop
        applies them all."""
        return not self.no_repeat_ngram and not self.match_source_len


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


def constrain_host_(logits: np.ndarray, steps: Union[int, np.ndarray],
                    max_len: Union[int, np.ndarray], rules: Constraints,
                    check_min_len: bool = True, check_max_len: bool = True) -> np.ndarray:
    """:func:`constrain_logits_` on the host, in place, in the same order (so the
    same float32 values), for one position per row.

    Args:
        logits: (B, V) float32 logits as a numpy array.
        steps, max_len: (B,) arrays, or ints that hold for every row (one
            sentence: scalar comparisons, no array is made).
    """
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
