"""Greedy batches on the CPU, decided on the host.

A greedy turn takes one token per row: the argmax of the constrained logits.
The batched loop's shared path gets there through ~25 small tensor ops a turn
(constraints, certification, acceptance, commit, scores, writes, the flags'
read) besides the ~10 that prepare the call, each a few microseconds of
dispatch, more right after a runtime call has swept the caches. Here the host
decides on numpy views of the same buffers:

- :func:`decode_greedy_rows`, the loop of a batch that never drafts
  (``--spec-k 0``, a greedy batch of ``--spec-k auto``): every row commits one
  token a turn, so all rows have the same length, a host int; the call's inputs
  are kept tensors written through numpy (a graph runtime keeps their bindings),
  and the committed tokens, lengths and finished rows are host arrays;
- :func:`greedy_turn_on_host`, a greedy turn of a batch that may draft (the
  batched loop's turn with K=0).

The decisions are the shared path's, in the same order on the same float32
values: constraints as :func:`~..decision.constraints.constrain_host_` (the
host form of the batched loop's rule), certification of an 8-bit projection's
bound as :func:`~.steps.constrained_scores` (and the same fp32 recomputation
where it fails), the first index among ties as
:func:`~..decision.acceptance.argmax_last`, and scores as
:func:`~..decision.scores.positional_scores`. Tested equal to the batched loop
token for token, score for score and iteration for iteration
(``tests/integration/test_greedy_rows.py``).

Shapes: B active rows, V vocabulary, T buffer width.
"""

from __future__ import annotations

import time
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.decision.acceptance import Commit
from nmt_specdec.decoding.backends.base import Verified, VerifierCalls
from nmt_specdec.decoding.decision.constraints import Constraints, constrain_host_
from nmt_specdec.decoding.decision.scores import normaliser
from nmt_specdec.decoding.loops.steps import Batch, LoopParts, Rows, end_turn, plan_turn


def decode_greedy_rows(parts: LoopParts, batch: Batch) -> List[Optional[tuple]]:
    """The loop of a batch that never drafts: ``(tokens, scores, iterations)`` per
    input row, as :func:`~.batched.decode_rows` returns them."""
    rows, cache, cross, limits = batch.rows, batch.cache, batch.cross, batch.limits
    rules, verifier = parts.rules, parts.verifier
    margin = parts.options.acceptance.margin
    host = _HostRows(rows, limits)
    finished: List[Optional[tuple]] = [None] * len(limits)
    turn = committed = 0
    while host.index.size:
        started = time.perf_counter()
        active = host.index.size
        _, checks = plan_turn(parts, 0, turn, host.length, host.limit_list)
        inputs, start = host.inputs()
        verified = verifier.verify(inputs, start, host.length - 1, cache, cross, True)
        tokens, scores = _decide(verifier, rules, verified, host.steps(), host.limits,
                                 checks, margin)
        host.commit(tokens, scores)
        turn += 1
        committed += active
        end_turn(parts, 0, [1] * active if parts.k_policy.wants_counts else [], started)
        done = tokens == rules.eos
        if done.any():
            for i in np.flatnonzero(done).tolist():
                finished[int(host.index[i])] = host.result(i, turn)
                parts.stats.sentences += 1
            kept = np.flatnonzero(~done)
            if kept.size:
                keep = torch.from_numpy(kept)
                host.keep_rows(kept, keep)
                cache.keep_rows(keep)
                cross = verifier.keep_rows(cross, keep)
            else:
                host.index = kept
    parts.stats.add_tally([], [], committed, committed)
    return finished


class _HostRows:
    """The active rows of a greedy batch: their input positions, limits and
    shared length on the host; committed tokens and scores written through numpy
    views of the batch's buffers; the verify call's inputs kept between turns."""

    def __init__(self, rows: Rows, limits: List[int]):
        self.tokens, self.scores = rows.tokens, rows.scores  # (B, T+1), BOS first
        self.index = np.arange(len(limits))  # row in the input batch
        self.limits = np.asarray(limits)
        self.limit_list = list(limits)
        self.length = 1  # committed tokens of every row, BOS included
        self._kept_for(len(limits))
        self._last[:, 0] = self.tokens.numpy()[:, 0]

    def _kept_for(self, batch: int) -> None:
        self._inputs = torch.zeros(batch, 1, dtype=torch.long)  # (B, 1) last tokens
        self._start = torch.zeros(batch, dtype=torch.long)  # (B,) their positions
        self._last, self._first = self._inputs.numpy(), self._start.numpy()

    def steps(self) -> np.ndarray:
        """(B,) the output step each row's position predicts (BOS excluded)."""
        return np.full(self.index.size, self.length - 1)

    def inputs(self) -> Tuple[Tensor, Tensor]:
        """The verify call's (B, 1) last tokens and (B,) their positions."""
        self._first[:] = self.length - 1
        return self._inputs, self._start

    def commit(self, tokens: np.ndarray, scores: np.ndarray) -> None:
        self.tokens.numpy()[:, self.length] = tokens
        self.scores.detach().numpy()[:, self.length] = scores
        self._last[:, 0] = tokens
        self.length += 1

    def result(self, i: int, turns: int) -> tuple:
        """Row ``i``'s committed tokens and scores (BOS excluded), and its turns."""
        return (self.tokens[i, 1: self.length].clone(), self.scores[i, 1: self.length].clone(),
                turns)

    def keep_rows(self, kept: np.ndarray, keep: Tensor) -> None:
        """Keeps rows ``kept`` (B',), in that order (``keep``: the same as a tensor)."""
        self.tokens = self.tokens.index_select(0, keep)
        self.scores = self.scores.index_select(0, keep)
        self.index, self.limits = self.index[kept], self.limits[kept]
        self.limit_list = self.limits.tolist()
        last = self._last[kept, 0]
        self._kept_for(kept.size)
        self._last[:, 0] = last


def greedy_turn_on_host(verifier: VerifierCalls, rules: Constraints, rows: Rows,
                        verified: Verified, checks: Tuple[bool, bool],
                        margin: float) -> Tuple[Rows, Commit, Tensor]:
    """One greedy turn of every active row of the batched loop, from ``verified``
    (one position). Returns, as the loop's turn: the rows after it, the
    :class:`Commit` and the (B,) accepted drafts (zeros)."""
    tokens, scores = _decide(verifier, rules, verified, rows.lengths.numpy() - 1,
                             rows.max_len.numpy(), checks, margin)
    batch = np.arange(tokens.shape[0])
    at = rows.lengths.numpy()
    rows.tokens.numpy()[batch, at] = tokens
    rows.scores.detach().numpy()[batch, at] = scores
    committed = torch.from_numpy(tokens)
    ones = torch.ones_like(committed)
    commit = Commit(tokens=committed.unsqueeze(1), counts=ones, finished=committed == rules.eos)
    # The state that predicted the token (the next draft reads it): a copy, the
    # verifier's buffer is overwritten by its next call.
    rows = rows._replace(lengths=rows.lengths + ones, states=verified.hidden[:, 0].clone())
    return rows, commit, torch.zeros_like(committed)


def _decide(verifier: VerifierCalls, rules: Constraints, verified: Verified,
            steps: np.ndarray, limits: np.ndarray, checks: Tuple[bool, bool],
            margin: float) -> Tuple[np.ndarray, np.ndarray]:
    """(B,) each row's token and its score, from ``verified`` (one position).

    Args:
        steps, limits: (B,) the output step each position predicts, and the step
            at which EOS is forced.
        checks: ``(check_min_len, check_max_len)`` of :func:`~.steps.plan_turn`.
        margin: the acceptance rule's :attr:`~..decision.rules.AcceptanceRule.margin`.
    """
    # numpy has no bfloat16 (float32: no copy); decisions need no gradient.
    logits = verified.logits[:, 0].detach().float()
    lse = (verified.normaliser if verified.normaliser is not None
           else normaliser(verified.logits))[:, 0].detach().float().numpy()
    host = constrain_host_(logits.numpy(), steps, limits, rules, *checks)
    tokens, best = _best(host)
    if verified.bound is not None and not (best > verified.bound[:, 0].numpy() + margin).all():
        # An 8-bit score may matter here: this call's scores again, in fp32.
        exact = verifier.exact_logits(verified.hidden).detach().float()
        lse = normaliser(exact)[:, 0].numpy()
        tokens, best = _best(constrain_host_(exact[:, 0].numpy(), steps, limits, rules,
                                             *checks))
    return tokens, best - lse


def _best(logits: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(B,) argmax (the first index among ties) and its value."""
    tokens = logits.argmax(-1)
    return tokens, logits[np.arange(logits.shape[0]), tokens]
