"""Decisions on inexact logits, certified: exact where they read, not everywhere.

An 8-bit output projection (:mod:`~nmt_specdec.decoding.backends.onnxruntime.projection`)
gives every logit within a known bound of its exact value. Greedy decoding
needs only the best token exact; the sample of :mod:`.sampling` is
``argmax_j (e_j + g_j)`` over the k tokens with the largest exact constrained
logits ``e_j``, with the Gumbel noise ``g_j`` of :mod:`.draws`. Its top-k set is
rarely certain (the k-th and the tokens just below it lie closer together than
the bound), but the winner usually is: a token outside the set that might enter
it still needs noise of several units to beat the winner.

:func:`certified_sample` finds the winner from exact values of a few tokens:

1. ``upper_j`` = inexact logit + bound (>= ``e_j``); the ``first`` tokens with
   the largest ``upper`` are scored exactly (the known set);
2. the winner among the known set's top k, with perturbed value ``v``;
3. it stands if (a) it is surely in the top k: fewer than k tokens, known or
   not, may score above it; and (b) no token outside the known set that may be
   in the top k (``upper`` at or above the known set's k-th) may beat it
   (``upper + g >= v``);
4. otherwise the tokens that broke (a) or (b) are scored exactly too, and it
   goes back to 2.

The result is the winner over the exact top k, whichever tokens were scored:
the same token as with every logit exact, up to float rounding.

Most positions need none of that: the call's scores above its ``ceiling`` are
exact already (the projection scored its candidates in fp32), and where k of
them lie above the ceiling by more than fp32's rounding, they are the exact
top k. :func:`known_sample` takes the winner among them, reading no bound and
no other token, and where it leads clearly, no float64 score either. How many
positions each way settles:
``benchmarks/topk_certification.py`` (docs/results.md).

Relaxed acceptance (beta > 1) reads more than the best token too: whether a
draft is among the top beta and within tau of the best. :func:`exact_best` and
:func:`exact_rank` make exact what that test and the correction read
(:meth:`~.rules.AcceptanceRule.certify_host`).

Shapes: V vocabulary, M tokens scored exactly.
"""

from __future__ import annotations

import math
from typing import Callable, List, Optional, Tuple

import numpy as np

from nmt_specdec.decoding.decision.draws import NEAR

FIRST = 16  # tokens scored exactly before the first check (at least 2k)
SHORTLIST = 256  # tokens with the largest upper bounds the checks look at first

Scorer = Callable[[np.ndarray], np.ndarray]  # ids (M,) -> float64 (M,)


def certified_sample(scores: np.ndarray, bounds: np.ndarray, exact: Scorer, noise: Scorer,
                     topk: int) -> Tuple[int, float, float]:
    """The sampled token of one position, its exact constrained logit and its noise.

    The checks run on the ``SHORTLIST`` tokens with the largest upper bounds
    while every other token is surely outside the top k (below the known k-th),
    else on the whole vocabulary: the same answer, with array operations on a
    few hundred tokens instead of V.

    Args:
        scores: (V,) float32 inexact constrained logits (-inf: forbidden).
        bounds: (V,) how far each inexact logit may be from its exact value.
        exact: exact constrained logits (float64) of token ids, -inf where forbidden.
        noise: the position's Gumbel noise (float64) of token ids.
        topk: the cut (0 < topk < V).
    """
    upper = scores + bounds  # float32: the bound is twice the worst error, rounding is nothing
    short = max(SHORTLIST, 4 * topk)
    if short < upper.size:
        part = np.argpartition(upper, upper.size - short - 1)
        ids = part[upper.size - short:]
        found = _winner(upper[ids], ids, exact, noise, topk, upper[part[upper.size - short - 1]])
        if found is not None:
            return found
    return _winner(upper, np.arange(upper.size), exact, noise, topk, -np.inf)


def known_sample(scores: np.ndarray, candidates: np.ndarray, ceiling: float, rounding: float,
                 exact: Scorer, noise: Scorer, topk: int,
                 near: Optional[Callable[[List[int]], List[float]]] = None
                 ) -> Optional[Tuple[int, float, float]]:
    """:func:`certified_sample` where the exact scores of the call settle the top
    k, else None.

    ``candidates`` (M,): the tokens the call scored in fp32, the largest score
    first; every score above ``ceiling`` is one of them, within ``rounding`` of
    its float64 value. Where the first k + 1 keep that order in ``scores`` (no
    constraint moved one) and the k-th lies more than twice ``rounding`` above
    both the next one and the ceiling, the first k are the exact top k.

    ``near``: noise within :data:`~.draws.NEAR` of ``noise``, as Python floats
    (cheaper to draw). Where the winner on fp32 scores and that noise leads by
    more than twice both distances, it is the exact winner, returned with its
    fp32 score and that noise; closer calls score the k tokens exactly."""
    if topk >= candidates.size:
        return None
    first = candidates[: topk + 1]
    ids, values = first.tolist(), scores[first].tolist()
    if not (values[topk] > -math.inf and values[topk - 1] - max(values[topk], ceiling) > 2 * rounding
            and all(a >= b for a, b in zip(values, values[1:]))):
        return None
    members, values = ids[:topk], values[:topk]
    if near is not None:
        drawn = near(members)
        perturbed = [value + draw for value, draw in zip(values, drawn)]
        rank = max(range(topk), key=perturbed.__getitem__)
        runner_up = max((p for i, p in enumerate(perturbed) if i != rank), default=-math.inf)
        if perturbed[rank] - runner_up > 2 * (rounding + NEAR):
            return members[rank], values[rank], drawn[rank]
    chosen = np.array(members)
    exact_values, drawn = exact(chosen), noise(chosen)
    rank = int(np.argmax(exact_values + drawn))
    return members[rank], float(exact_values[rank]), float(drawn[rank])


def _winner(upper: np.ndarray, ids: np.ndarray, exact: Scorer, noise: Scorer, topk: int,
            rest: float) -> Optional[Tuple[int, float, float]]:
    """:func:`certified_sample` among tokens ``ids`` with upper bounds ``upper``
    (S,), every other token's at most ``rest``; None where one of those may be in
    the top k."""
    first = min(max(FIRST, 2 * topk), upper.size)
    seen = np.argpartition(upper, upper.size - first)[upper.size - first:]  # into ids
    known = exact(ids[seen])
    outside = np.isfinite(upper)
    outside[seen] = False
    while True:
        order = np.argsort(-known, kind="stable")[:topk]  # the known set's top k
        members, values = seen[order], known[order]
        if rest > -np.inf and rest >= values[-1]:  # a token not looked at may be in it
            return None
        maybe = np.flatnonzero(outside & (upper >= values[-1]))  # may be in the top k
        drawn = noise(ids[np.concatenate([members, maybe])])
        perturbed = values + drawn[: members.size]
        rank = int(np.argmax(perturbed))
        best, value = values[rank], perturbed[rank]
        reach = upper[maybe]
        threat = maybe[reach + drawn[members.size:] >= value]  # (b)
        above = maybe[reach > best]  # (a): may score above the winner
        more = threat if rank + above.size < topk else np.union1d(threat, above)
        if more.size == 0:
            return int(ids[members[rank]]), float(best), float(drawn[rank])
        seen, known = np.concatenate([seen, more]), np.concatenate([known, exact(ids[more])])
        outside[more] = False


class Inexact:
    """One row's inexact scores (N, V), as a decision certifies them.

    Args:
        ceiling: (N,) no inexact score of a position lies above it (the verify
            call's ``bound``): every score above it is exact already.
        bounds_of: computes the (N, V) largest error of each score, on first use.
        exact: (position, ids) -> the exact scores (float64) of tokens ``ids``.
        candidates: (N, M) the tokens whose scores the call made exact, the
            largest first; None where unknown or where a constraint may reorder
            them (no sample is then taken from them alone).
        rounding: (N,) how far an exact score may lie from the call's fp32 one
            (above the ceiling); none where omitted.
    """

    def __init__(self, ceiling: np.ndarray, bounds_of: Callable[[], np.ndarray],
                 exact: Callable[[int, np.ndarray], np.ndarray],
                 candidates: Optional[np.ndarray] = None,
                 rounding: Optional[np.ndarray] = None):
        self.ceiling, self.exact, self._bounds_of = ceiling, exact, bounds_of
        self.candidates = candidates
        self.rounding = np.zeros_like(ceiling) if rounding is None else rounding
        self._bounds: Optional[np.ndarray] = None

    @property
    def bounds(self) -> np.ndarray:
        """(N, V); zeroed where a score was made exact."""
        if self._bounds is None:
            self._bounds = self._bounds_of()
        return self._bounds


def exact_best(scores: np.ndarray, position: int, inexact: Inexact) -> None:
    """Makes the argmax of one position's ``scores`` (V,) and its value exact:
    where the best score lies above the ceiling it is; else every token that may
    be the best (upper bound at or above the largest lower bound) is scored
    exactly."""
    if scores.max() > inexact.ceiling[position]:
        return
    bounds = inexact.bounds[position]
    ids = np.flatnonzero(scores + bounds >= (scores - bounds).max())
    scores[ids], bounds[ids] = inexact.exact(position, ids), 0


def exact_rank(scores: np.ndarray, position: int, inexact: Inexact, token: int, beta: int,
               tau: float) -> None:
    """After :func:`exact_best`: makes ``scores`` (V,) exact where the top-beta/tau
    test of ``token`` reads it: its own score and every token that may lie on
    either side of it. Nothing is written where that holds already (the token
    above the ceiling: so is every token above it), or where the test fails
    whatever the exact scores (the token further than tau below the best even
    at its upper bound, or beta tokens surely above it): it fails on these too."""
    if scores[token] > inexact.ceiling[position]:
        return
    bounds = inexact.bounds[position]
    reach = scores[token] + bounds[token]
    if not reach >= scores.max() - tau or np.count_nonzero(scores - bounds > reach) >= beta:
        return
    scores[token] = inexact.exact(position, np.array([token]))[0]
    bounds[token] = 0
    value = scores[token]
    either = np.flatnonzero((scores - bounds <= value) & (scores + bounds > value) & (bounds > 0))
    scores[either], bounds[either] = inexact.exact(position, either), 0
