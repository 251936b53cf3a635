"""Seconds per iteration of each K, as ``--spec-k auto`` measures them
(:class:`CostTable`; how :mod:`.k_policy` uses them: its docstring)."""

from __future__ import annotations

import math
import statistics
from typing import Dict, List, Optional, Tuple


class CostTable:
    """Measured seconds per iteration by (K, batch bucket, context), the context the
    bucket of the longest source's length (powers of two: 1, 2-3, 4-7, ...).

    Every iteration costs more as sentences grow (longer caches and sources), and
    fairseq feeds them shortest first, while a drafting K is measured in bursts
    (exploration, re-checks) and K=0 all along. So readings are kept by context,
    and a drafting reading relative to K=0's estimate there when it was taken,
    priced at K=0's estimate there now (the median of its last ``window`` ratios
    times K=0's cost): the sentences of a context still grow while it lasts. A
    drafting K not read in this context yet takes its ratio from the nearest
    context that read it. Kept as ratios to K=0's estimate over every context,
    readings went stale once K=0 was timed on other sentences, and auto decoded
    long stretches greedily where drafting paid (docs/results.md, "`auto` priced
    within a source-length context").

    The first iteration at a new K is not trusted: it pays for first use (the
    runtime plans memory for a new shape, buffers are bound). A K counts as
    measured in a context after ``min_count`` trusted iterations there. The median,
    not the fastest reading: a drafting iteration (two runtime calls) scatters more
    than a greedy one, so the fastest of a few readings priced drafting lower
    against greedy than it ran.

    Args:
        window: trusted iterations kept per (K, bucket, context).
        min_count: trusted iterations before a K has an estimate in a context.
    """

    def __init__(self, window: int = 7, min_count: int = 3):
        # (K, bucket, context) -> trusted (seconds, K=0's estimate then or None), newest last
        self.recent: Dict[Tuple[int, int, int], List[Tuple[float, Optional[float]]]] = {}
        self.first: Dict[Tuple[int, int], float] = {}  # first iterations, not trusted
        self.window, self.min_count = window, min_count
        self.context = 0  # the current batch's :meth:`context_of`
        # (K, bucket, context) -> :meth:`_ratio` of its readings, dropped when K records there
        self.ratios: Dict[Tuple[int, int, int], Optional[float]] = {}
        self.recorded = 0  # readings so far: :meth:`estimates` is kept until the next one
        self.kept: Tuple[tuple, List[Optional[float]]] = ((), [])

    @staticmethod
    def bucket(batch: int) -> int:
        """The power of two at or above ``batch`` (1 for 1)."""
        return 1 << (batch - 1).bit_length() if batch > 1 else 1

    @staticmethod
    def context_of(source_length: int) -> int:
        """The context of a batch whose longest source has ``source_length`` tokens."""
        return source_length.bit_length()

    def record(self, k: int, batch: int, seconds: float) -> None:
        bucket = self.bucket(batch)
        if (k, bucket) not in self.first:
            self.first[(k, bucket)] = seconds
            return
        key = (k, bucket, self.context)
        recent = self.recent.setdefault(key, [])
        recent.append((seconds, None if k == 0 else self._greedy(bucket)))
        del recent[:-self.window]
        self.ratios.pop(key, None)
        self.recorded += 1

    def __call__(self, k: int, batch: int) -> Optional[float]:
        """Estimated seconds of an iteration with K=k in the current context; None
        until measured there."""
        bucket = self.bucket(batch)
        return self._greedy(bucket) if k == 0 else self._priced(k, bucket, self._greedy(bucket))

    def read_here(self, k: int, bucket: int) -> bool:
        """Whether K=k is measured in the current context (not priced from another)."""
        return len(self._readings(k, bucket)) >= self.min_count

    def estimates(self, limit: int, bucket: int) -> List[Optional[float]]:
        """:meth:`__call__` for K = 0..limit of one bucket, the drafting K's on the
        curve ``a + b * sqrt(K)`` through their own estimates (least squares, each
        weighted by its readings).

        A drafting iteration's cost grows with K, by less per slot at larger K (a
        verify call over more positions makes fuller use of the weights it reads
        once): the head's K=1..4 and the copy's K=1..10 lie within a few percent of
        such a curve. One curve through every drafting K's readings scatters less
        than each K's median alone, which a few noisy readings moved by more than
        what separates K=2 from K=1 or 3. Kept until the next reading or context
        (a choice and a sentence's start and end ask for the same)."""
        asked = (limit, bucket, self.context, self.recorded)
        if self.kept[0] != asked:
            self.kept = (asked, self._estimates(limit, bucket))
        return list(self.kept[1])

    def _estimates(self, limit: int, bucket: int) -> List[Optional[float]]:
        greedy = self._greedy(bucket)
        own = [greedy] + [self._priced(k, bucket, greedy) for k in range(1, limit + 1)]
        points = [(math.sqrt(k), cost, max(len(self._readings(k, bucket)), 1))
                  for k, cost in enumerate(own) if k > 0 and cost is not None]
        if len(points) < 2:
            return own
        total = sum(n for _, _, n in points)
        mean_x = sum(x * n for x, _, n in points) / total
        mean_cost = sum(cost * n for _, cost, n in points) / total
        spread = sum(n * (x - mean_x) ** 2 for x, _, n in points)
        slope = sum(n * (x - mean_x) * (cost - mean_cost) for x, cost, n in points) / spread
        return [cost if k == 0 or cost is None else mean_cost + slope * (math.sqrt(k) - mean_x)
                for k, cost in enumerate(own)]

    def _readings(self, k: int, bucket: int) -> List[Tuple[float, Optional[float]]]:
        return self.recent.get((k, bucket, self.context), [])

    def _greedy(self, bucket: int) -> Optional[float]:
        """K=0's estimate in the current context (None: not measured there yet)."""
        readings = self._readings(0, bucket)
        if len(readings) < self.min_count:
            return None
        return statistics.median(seconds for seconds, _ in readings)

    def _priced(self, k: int, bucket: int, greedy: Optional[float]) -> Optional[float]:
        """A drafting K's estimate: its ratios to K=0's cost then, priced at
        ``greedy`` (K=0's now); its seconds as read where K=0 was not measured.
        Not measured in this context, it is priced from the nearest context where
        it was (its ratios there), once K=0 is measured here: a new context then
        costs greedy iterations, not a new round of drafting at every K."""
        readings = self._readings(k, bucket)
        if len(readings) < self.min_count:
            ratio = self._nearest_ratio(k, bucket)
            return None if ratio is None or greedy is None else greedy * ratio
        ratio = self._ratio((k, bucket, self.context))
        if greedy is None or ratio is None:
            return statistics.median(seconds for seconds, _ in readings)
        return greedy * ratio

    def _ratio(self, key: Tuple[int, int, int]) -> Optional[float]:
        """The median ratio to K=0 of the readings at ``key`` (None: too few, or
        one taken before K=0 was measured there), kept until ``key`` records again:
        every iteration asks for it, and its readings change only then."""
        if key not in self.ratios:
            readings = self.recent.get(key, [])
            self.ratios[key] = (
                statistics.median(seconds / then for seconds, then in readings)
                if len(readings) >= self.min_count and all(then is not None for _, then in readings)
                else None)
        return self.ratios[key]

    def _nearest_ratio(self, k: int, bucket: int) -> Optional[float]:
        """K's median ratio to K=0 in the nearest context that measured it."""
        measured = {context: self._ratio((kk, bb, context)) for kk, bb, context in self.recent
                    if (kk, bb) == (k, bucket)}
        measured = {context: ratio for context, ratio in measured.items() if ratio is not None}
        if not measured:
            return None
        return measured[min(measured, key=lambda context: (abs(context - self.context), -context))]
