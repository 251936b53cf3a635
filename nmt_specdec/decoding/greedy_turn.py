"""A greedy turn of a batch on the CPU, decided on the host.

A batch that drafts nothing (K=0: ``--spec-k 0``, or a greedy batch of
``--spec-k auto``) takes one token per row per turn: the argmax of the
constrained logits. The batched loop's shared path gets there through ~25 small
tensor ops (constraints, certification, acceptance, commit, scores, writes),
each a few microseconds of dispatch; on numpy views of the same buffers whole
greedy passes over 500 sentences at batch 32 took 0.98x the time (fp32 and
int8, ONNX Runtime, AMD EPYC; one process, alternating, 10 pairs).

The decisions are the shared path's, in the same order on the same float32
values: constraints as :func:`~.scoring.constrain_logits_`
(:func:`constrain_rows_`), certification of an 8-bit projection's bound as
:func:`~.steps.constrained_scores` (and the same fp32 recomputation where it
fails), the first index among ties as :func:`~.acceptance.argmax_last`, and
scores as :func:`~.scoring.positional_scores`. Tested equal to the shared path
token for token and score for score (``tests/integration/test_greedy_turn.py``).

Shapes: B active rows, V vocabulary, T buffer width.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.acceptance import Commit
from nmt_specdec.decoding.backends.base import Verified, VerifierCalls
from nmt_specdec.decoding.scoring import Constraints, normaliser
from nmt_specdec.decoding.steps import Rows


def takes_host_turn(verified: Verified) -> bool:
    """Whether a greedy turn over these scores is decided on the host: float32
    logits on the CPU, which the loop decides itself (no in-graph decision)."""
    logits = verified.logits
    return (logits.device.type == "cpu" and logits.dtype == torch.float32
            and verified.decision is None and not logits.requires_grad)


def greedy_turn_on_host(verifier: VerifierCalls, rules: Constraints, rows: Rows,
                        verified: Verified, checks: Tuple[bool, bool],
                        margin: float) -> Tuple[Rows, Commit, Tensor]:
    """One greedy turn of every active row, from ``verified`` (one position).

    Args:
        checks: ``(check_min_len, check_max_len)`` of :func:`~.steps.plan_turn`.
        margin: :func:`~.scoring.certainty_margin` of the acceptance settings.

    Returns:
        As the loop's turn: the rows after it, the :class:`Commit` and the (B,)
        accepted drafts (zeros).
    """
    steps = rows.lengths.numpy() - 1  # the output step each row's position predicts
    limits = rows.max_len.numpy()
    lse = (verified.normaliser if verified.normaliser is not None
           else normaliser(verified.logits))[:, 0].numpy()
    logits = constrain_rows_(verified.logits[:, 0].numpy(), steps, limits, rules, *checks)
    tokens, best = _best(logits)
    if verified.bound is not None and not (best > verified.bound[:, 0].numpy() + margin).all():
        # An 8-bit score may matter here: this call's scores again, in fp32.
        exact = verifier.exact_logits(verified.hidden).float()
        lse = normaliser(exact)[:, 0].numpy()
        logits = constrain_rows_(exact[:, 0].numpy(), steps, limits, rules, *checks)
        tokens, best = _best(logits)
    return _commit(rows, verified.hidden, tokens, best - lse, rules.eos)


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


def _best(logits: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(B,) argmax (the first index among ties) and its value."""
    tokens = logits.argmax(-1)
    return tokens, logits[np.arange(logits.shape[0]), tokens]


def _commit(rows: Rows, hidden: Tensor, tokens: np.ndarray, scores: np.ndarray,
            eos: int) -> Tuple[Rows, Commit, Tensor]:
    """Writes each row's token and score after its committed ones."""
    batch = np.arange(tokens.shape[0])
    at = rows.lengths.numpy()
    rows.tokens.numpy()[batch, at] = tokens
    rows.scores.numpy()[batch, at] = scores
    committed = torch.from_numpy(tokens)
    ones = torch.ones_like(committed)
    commit = Commit(committed.unsqueeze(1), ones, committed == eos)
    # The state that predicted the token (the next draft reads it): a copy, the
    # verifier's buffer is overwritten by its next call.
    rows = rows._replace(lengths=rows.lengths + ones, states=hidden[:, 0].clone())
    return rows, commit, torch.zeros_like(committed)
