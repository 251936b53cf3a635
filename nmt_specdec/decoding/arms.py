"""Whether to draft at all, before ``--spec-k auto`` chooses K: per batch of
several rows (:class:`BatchArms`, from whole batches' tokens per second) and per
sentence at batch 1 (:class:`SentenceArms`). Why per batch and per sentence:
:mod:`.k_policy`'s docstring."""

from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Tuple


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
    """Draft or not, per sentence of a batch of one: whichever its length makes cheaper.

    Drafting saves per committed token and costs per sentence: the draft head's
    source keys/values, a cache wider by K slots, a first iteration dearer than
    greedy's. So a short sentence may decode faster greedily where a long one
    drafts faster. A sentence's time is modelled as a per-sentence cost of its
    arm plus its expected output tokens times the arm's seconds per token:

        greedy:   O_greedy + n * c_0         drafting: O_draft + n * min_K c_K / t_K

    with ``c_K`` and ``t_K`` the per-iteration costs and tokens of
    :class:`~.k_policy.AutoK` (``per_token``), ``O`` an arm's median, over its last
    ``window`` sentences, of its seconds beyond the iterations' estimated costs
    (what the per-iteration model leaves out, its bias included), and ``n`` the
    source length times the output tokens per source token seen so far. A
    sentence drafts where the model says drafting is cheaper at its length.

    The first sentences are greedy until greedy's per-sentence cost is known (K=0
    is then measured too), then they draft until every K and drafting's
    per-sentence cost are. A model that says greedy for ``wait`` sentences in a row
    is re-checked by a drafting sentence (:mod:`.k_policy`: its first iterations
    draft every slot), so that drafting's estimates do not go stale: a re-check
    that finds greedy still the cheaper at its length doubles the wait (16, 32,
    64, ... sentences: 4 in 500, 8 in 5,000), a sentence the model drafts resets
    it to ``first_wait``.

    Args:
        first_wait: greedy sentences in a row before the first re-check.
        window: sentences kept per arm for its per-sentence cost.
    """

    def __init__(self, first_wait: int = 16, window: int = 9):
        self.first_wait, self.window = first_wait, window
        self.wait = first_wait
        self.overheads: Dict[bool, List[float]] = {False: [], True: []}  # arm -> newest last
        self.tokens = self.sources = 0  # output and source tokens of the sentences so far
        self.sentences = 0
        self.last_drafted = 0  # sentences before the last drafting one, plus one
        self.length = 0  # source length of this sentence
        self.rechecking = False  # whether this sentence drafts as a re-check

    def drafts(self, length: int, per_token: Optional[Tuple[float, float]]) -> bool:
        """Whether the next sentence, of ``length`` source tokens, may draft.

        Args:
            per_token: seconds per committed token of greedy and of the best
                drafting K; None until every K is measured.
        """
        self.length, self.rechecking = length, False
        if not self.overheads[False]:
            return False
        if per_token is None or self.pays(length, per_token):
            return True
        self.rechecking = self.sentences >= self.last_drafted + self.wait
        return self.rechecking

    def pays(self, length: int, per_token: Tuple[float, float]) -> bool:
        """Whether drafting decodes a sentence of ``length`` source tokens faster."""
        if not self.overheads[False] or not self.overheads[True]:
            return True
        if length > 0 and self.sources:
            tokens = length * self.tokens / self.sources
        else:  # no source length: a sentence as long as the average so far
            tokens = self.tokens / max(self.sentences, 1)
        greedy, drafting = per_token
        return (statistics.median(self.overheads[True]) + tokens * drafting
                < statistics.median(self.overheads[False]) + tokens * greedy)

    def record(self, drafted: bool, tokens: int, overhead: Optional[float],
               per_token: Optional[Tuple[float, float]]) -> None:
        """A sentence ended with ``tokens`` output tokens; ``overhead``: its seconds
        beyond its iterations' estimated costs (None: some K it ran unmeasured)."""
        self.sentences += 1
        self.tokens += tokens
        self.sources += self.length
        if overhead is not None:
            kept = self.overheads[drafted]
            kept.append(overhead)
            del kept[:-self.window]
        if not drafted:
            return
        self.last_drafted = self.sentences
        if per_token is None:
            return
        if self.pays(self.length, per_token):
            self.wait = self.first_wait
        elif self.rechecking:  # a re-check that confirmed greedy
            self.wait *= 2
