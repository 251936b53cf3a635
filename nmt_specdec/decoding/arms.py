"""Whether to draft at all, before ``--spec-k auto`` chooses K: per batch of
several rows (:class:`BatchArms`, from whole batches' tokens per second) and per
sentence at batch 1 (:class:`SentenceArms`). Why per batch and per sentence:
:mod:`.k_policy`'s docstring."""

from __future__ import annotations

from typing import Dict, Optional, Tuple


def moving_average(old: Optional[float], new: float, weight: float) -> float:
    """Exponential moving average; the first value stands alone."""
    return new if old is None else old + weight * (new - old)


class BatchArms:
    """Draft or not, per batch of several rows: whichever committed more tokens
    per second on earlier batches of the same size bucket.

    A bucket's first batch decodes greedily (the safe arm), its second drafts,
    its third is greedy again, and the two greedy batches weigh alike: batches
    come sorted by length, and greedy's rate then brackets the drafting batch's
    sentences, not only the shorter ones before it (the first greedy batch also
    pays the warm-up). Then the faster
    arm runs, and the other runs again (a re-check: costs and acceptance drift
    with sentence length) after ``retry_every`` batches of that bucket. A
    re-check that leaves the winner standing doubles the wait, one that changes
    it starts again from ``retry_every``: re-checks come at batches 35, 100,
    229, 486, ..., so where drafting loses 30% they cost < 1% from the 100th
    batch on.

    Args:
        retry_every: batches of a bucket before the first re-check.
        smoothing: weight of a new batch in an arm's moving average (n-th: >= 1/n).
    """

    def __init__(self, retry_every: int = 32, smoothing: float = 0.3):
        self.rate: Dict[Tuple[int, bool], float] = {}  # (bucket, drafts) -> tokens/s
        self.runs: Dict[Tuple[int, bool], int] = {}  # (bucket, drafts) -> batches run
        self.batches: Dict[int, int] = {}
        self.due: Dict[int, Tuple[int, int]] = {}  # bucket -> (wait, batch of the re-check)
        self.retry_every, self.smoothing = retry_every, smoothing

    def winner(self, bucket: int) -> Optional[bool]:
        """Whether drafting committed more tokens per second; None until greedy ran
        twice and drafting once."""
        if self.runs.get((bucket, False), 0) < 2 or (bucket, True) not in self.runs:
            return None
        return self.rate[(bucket, True)] > self.rate[(bucket, False)]

    def drafts(self, bucket: int) -> bool:
        """Whether the next batch of this bucket drafts."""
        best = self.winner(bucket)
        if best is None:  # greedy, one drafting batch, greedy
            return (bucket, False) in self.runs and (bucket, True) not in self.runs
        return (not best) if self.batches[bucket] >= self.due[bucket][1] else best

    def record(self, bucket: int, drafted: bool, tokens: int, seconds: float) -> None:
        before = self.winner(bucket)
        seen = self.batches[bucket] = self.batches.get(bucket, 0) + 1
        key = (bucket, drafted)
        runs = self.runs[key] = self.runs.get(key, 0) + 1
        self.rate[key] = moving_average(self.rate.get(key), tokens / max(seconds, 1e-9),
                                        max(self.smoothing, 1 / runs))
        after = self.winner(bucket)
        if after is None:
            return
        if before is None or after != before:  # the winner is new: look again soon
            wait = self.retry_every
        elif drafted != before:  # a re-check that confirmed the winner
            wait = 2 * self.due[bucket][0]
        else:
            return
        self.due[bucket] = (wait, seen + wait)


class SentenceArms:
    """Draft or not, per sentence of a batch of one.

    Sentences draft (K chosen per iteration) until the per-iteration estimates
    say K=0 is the best K; from then on they decode greedily, but for one
    re-check sentence after ``first_wait`` sentences. A re-check that finds K=0
    still the best doubles the wait, without a cap; one that finds drafting
    better goes back to drafting sentences. With 16 the re-checks come 16, 32,
    64, ... greedy sentences apart: 4 in 500 sentences, 8 in 5000, each costing
    a sentence at a losing K.

    A sentence ``longer`` times longer (source tokens) than any the verdict was
    reached or confirmed on is re-checked at once: what drafting buys grows with
    the sentence, and fairseq feeds sentences shortest first, so a verdict
    reached on the first few would otherwise stand, at ever longer waits, over
    sentences it says nothing about. In a shuffled stream this adds a re-check
    only each time the longest sentence so far grows ``longer`` times.

    Args:
        first_wait: greedy sentences before the first re-check.
        longer: source length ratio that triggers a re-check.
    """

    def __init__(self, first_wait: int = 16, longer: float = 1.5):
        self.first_wait, self.longer = first_wait, longer
        self.sentences = 0
        self.wait = first_wait
        self.due: Optional[int] = None  # sentence of the next re-check; None: drafting
        self.length = 0  # source length of this sentence
        self.judged = 0  # the longest source the standing verdict was reached on

    def drafts(self, length: int = 0) -> bool:
        """Whether the next sentence, of ``length`` source tokens, may draft."""
        self.length = length
        return (self.due is None or self.sentences >= self.due
                or length >= self.longer * max(self.judged, 1))

    @property
    def rechecking(self) -> bool:
        """Whether a sentence that drafts now is a re-check of a greedy verdict."""
        return self.due is not None

    def record(self, drafted: bool, greedy_wins: Optional[bool]) -> None:
        """A sentence ended; ``greedy_wins``: the verdict of a drafting sentence's
        estimates (None: some K not measured yet, or a greedy sentence)."""
        self.sentences += 1
        if drafted:
            self.judged = max(self.judged, self.length)
        if not drafted or greedy_wins is None:
            return
        if not greedy_wins:
            self.due, self.wait, self.judged = None, self.first_wait, 0
            return
        if self.due is not None:  # a re-check that confirmed greedy
            self.wait *= 2
        self.due = self.sentences + self.wait
