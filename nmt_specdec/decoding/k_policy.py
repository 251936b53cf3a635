"""How many tokens to draft this iteration: ``--spec-k N`` or ``--spec-k auto``.

Speed is committed tokens per second. Drafting K tokens commits, in
expectation, ``1 + sum_{i<=K} P(n >= i)`` tokens (n: accepted drafts, a prefix)
and costs one draft pass over K slots plus one verify pass over K+1 positions.
``AutoK`` keeps running estimates of both and drafts the K that maximises their
ratio; K=0 (plain greedy) wins where drafting cannot pay, e.g. a poor drafter
or large batches on a compute-bound CPU.

- Acceptance: ``P(n >= i) = prod_{j<=i} c_j`` with ``c_j`` the chance that slot
  j is accepted once slot j-1 was, counted with exponential forgetting (of the
  slots drafted) on a prior at its predecessor's ``c`` (a slot never drafted
  reads as its predecessor). ``n`` is what the loop committed beyond one token:
  an accepted EOS draft counts as a rejection at its slot, since a sentence's
  last turn commits nothing after its EOS (docs/results.md, "An accepted EOS
  draft is a rejection").
- Cost: measured seconds per iteration for each (K, batch-size bucket) within a
  source-length context, the median of the last few iterations at that K there
  (a batch's first iteration, dearer for every K, left to the per-sentence
  cost), a drafting K's relative to K=0's cost there when it was measured, the
  drafting K's smoothed onto one curve in K (costs grow with sentence length,
  and K=0 is timed more often than a drafting K:
  :class:`~.cost_table.CostTable`). Every K up to the limit is measured before
  any is compared (four iterations each; the first at a K pays for first use
  and is not trusted): an untried K is never priced from another. A new context
  measures K=0 there and prices a drafting K not yet read there at its ratio
  to K=0 in the nearest context that read it.
  Only in a batch of several rows, once two drafting K in a row lose to
  greedy, each by more than the one before, are the larger K left unmeasured
  (retries still try them).
- Retries: after ``retry_every`` iterations of a bucket the K measured longest
  ago runs again (as many iterations as a measurement takes: the median of its
  readings then is a new one), so neither a noisy measurement nor acceptance learned
  early locks a K out. A retry that leaves the best K as it was doubles the
  wait for the next (up to ``max_retry_every``); one that changes it starts
  again; only drafting batches retry.
- Batches of several rows (:class:`BatchArms`): whether to draft at all is
  decided per batch, from the tokens per second whole batches committed with
  and without drafting: a per-iteration cost model misses what drafting costs
  later (ragged rows make every later pass, K=0 too, pay for per-row cache
  writes and masks).
- One row (:class:`SentenceArms`): whether to draft is decided per sentence,
  from a model of a sentence's time in each arm: a per-sentence cost (what
  drafting costs once a sentence: the draft head's source keys/values, a wider
  cache, a dearer first iteration) plus its expected tokens times the seconds
  per token these estimates give, so short sentences may decode greedily where
  long ones draft (the per-iteration model alone drafted short sentences that
  each cost more than they saved). Drafting
  sentences choose K per iteration as above. Where greedy stands for a while, a
  re-check sentence drafts the largest K for its first :data:`RECHECK_TURNS`
  iterations, since one at the K the estimates favour would never re-measure
  the later slots they wrote off, then the best drafting K (never K=0): the
  verdict for greedy rests on that K's cost, which greedy sentences do not time.
- A greedy sentence or batch costs the policy one record per iteration
  (``choose`` returns 0, no counts are read back: ``wants_counts``): it times
  its iterations as K=0's, so that K=0's estimate stays as current as the
  drafting K it is compared with. The drafting batch of several rows drafts at
  once. What each of these rules bought: docs/results.md, "What
  ``--spec-k auto`` costs".

Shapes: B active rows.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

from nmt_specdec.decoding.arms import BatchArms, SentenceArms
from nmt_specdec.decoding.cost_table import CostTable
from nmt_specdec.decoding.options import DecodingOptions

CostFn = Callable[[int, int], Optional[float]]


class KPolicy:
    """Fixed K: always the largest K allowed (``limit``)."""

    wants_counts = False  # the loop reads accepted counts back only for policies that learn
    # False for a batch that will not draft: the loop then sizes it as greedy (no
    # cache slots for drafts, which a graph backend would attend over, masked).
    may_draft = True

    def choose(self, limit: int, batch: int) -> int:
        """K for this iteration, at most ``limit``, for ``batch`` active rows."""
        return limit

    def observe(self, num_accepted: List[int], k: int, seconds: float) -> None:
        """An iteration that drafted ``k`` took ``seconds``; ``num_accepted`` per row."""

    def start_batch(self, rows: int, source_length: int = 0) -> None:
        """A batch of ``rows`` sentences starts, the longest ``source_length`` tokens."""

    def end_batch(self, tokens: int, seconds: float) -> None:
        """The batch committed ``tokens`` output tokens in ``seconds`` of decoding."""


class AcceptanceEstimate:
    """Running per-slot acceptance: ``c_j = P(slot j accepted | slot j-1 accepted)``.

    Forgetting touches only the slots an iteration drafted: a slot not drafted
    keeps what was learned of it. Decaying every slot at every iteration let a
    run of K=2 iterations wear the counts of slots 3 and 4 down towards the
    prior, so K=3 and 4 looked worse the longer they were not drafted.

    Args:
        slots: largest K.
        decay: weight of a slot's past counts each time it is drafted again.
    """

    def __init__(self, slots: int, decay: float = 0.98):
        self.reached = [0.0] * slots  # iterations where slot j was drafted after an accepted j-1
        self.passed = [0.0] * slots   # ... and slot j was accepted too
        self.decay = decay
        self.tokens: Optional[List[float]] = None  # :meth:`expected_tokens`, until observe

    def observe(self, num_accepted: List[int], k: int) -> None:
        self.tokens = None
        for j in range(min(k, len(self.reached))):
            self.reached[j] *= self.decay
            self.passed[j] *= self.decay
        for n in num_accepted:
            for j in range(min(k, n + 1)):  # slots 1..min(k, n+1) were reached
                self.reached[j] += 1
                self.passed[j] += j < n

    def conditional(self) -> List[float]:
        """Each slot's counts on a prior of two iterations at its predecessor's
        estimate (the first slot's: 1/2, i.e. Beta(1, 1)): a slot seldom drafted
        reads about as its predecessor does, not as a coin (kept counts of a
        slot drafted once, by a retry, held K=8 out for good at 2/3)."""
        out, previous = [], 0.5
        for reached, passed in zip(self.reached, self.passed):
            previous = (passed + 2 * previous) / (reached + 2)
            out.append(previous)
        return out

    def expected_tokens(self) -> List[float]:
        """Committed tokens per iteration for K = 0..slots (a new list each call;
        computed once between observations: every choice reads it several times)."""
        if self.tokens is None:
            out, survive = [1.0], 1.0
            for c in self.conditional():
                survive *= c
                out.append(out[-1] + survive)
            self.tokens = out
        return list(self.tokens)


RECHECK_TURNS = 4  # a re-check sentence's iterations at the largest K (every slot measured)


class AutoK(KPolicy):
    """Chooses the K that maximises expected committed tokens per second.

    Args:
        max_k: the largest K (the draft head's block size).
        cost: seconds per iteration for (K, batch); default: measured online.
        retry_every, max_retry_every: iterations of a bucket between retries of
            another K than the best, at first and at most.
    """

    wants_counts = True

    def __init__(self, max_k: int, cost: Optional[CostFn] = None, retry_every: int = 40,
                 max_retry_every: int = 640):
        self.max_k = max_k
        self.acceptance = AcceptanceEstimate(max_k)
        self.table = CostTable() if cost is None else None
        self.cost: CostFn = cost if cost is not None else self.table
        self.batch = 1
        self.arms = BatchArms()
        self.sentences = SentenceArms()
        self.may_draft = True  # this batch's arm
        self.recheck = 0  # iterations left that re-check a greedy verdict: they draft
        self.batch_turns: Dict[int, int] = {}  # K -> iterations of this batch
        self.batch_bucket = 1
        self.retry_every, self.max_retry_every = retry_every, max_retry_every
        self.turns: Dict[int, int] = {}  # bucket -> iterations chosen
        self.last_run: Dict[Tuple[int, int], int] = {}  # (K, bucket) -> turn it last ran
        self.retries: Dict[int, Tuple[int, int, int]] = {}  # bucket -> (best K, wait, next)
        self.retrying: Dict[int, Tuple[int, int]] = {}  # bucket -> (retried K, turns left)

    def start_batch(self, rows: int, source_length: int = 0) -> None:
        self.batch_bucket = CostTable.bucket(rows)
        if self.table is not None:
            self.table.context = CostTable.context_of(source_length)
        self.batch_turns = {}
        if rows == 1:
            self.may_draft = self.sentences.drafts(source_length, self.per_token())
            self.recheck = RECHECK_TURNS if self.may_draft and self.sentences.rechecking else 0
        else:
            self.may_draft, self.recheck = self.arms.drafts(self.batch_bucket), 0
        self.wants_counts = self.may_draft  # a greedy batch has nothing to learn per turn

    def end_batch(self, tokens: int, seconds: float) -> None:
        if self.batch_bucket > 1:
            self.arms.record(self.batch_bucket, self.may_draft, tokens, seconds)
            return
        estimated = [self.cost(k, 1) for k in self.batch_turns]
        overhead = (None if None in estimated else seconds - sum(
            turns * cost for turns, cost in zip(self.batch_turns.values(), estimated)))
        self.sentences.record(self.may_draft, tokens, overhead, self.per_token())

    def per_token(self) -> Optional[Tuple[float, float]]:
        """Seconds per committed token of one row: greedy's, and the best drafting
        K's; None until every K is measured."""
        costs = self._considered(self._costs(self.max_k, 1, 1), 1)
        if None in costs or len(costs) < 2 or self._unread_best(costs, 1) is not None:
            return None
        tokens = self.acceptance.expected_tokens()
        return costs[0], min(costs[k] / tokens[k] for k in range(1, len(costs)))

    def _unread_best(self, costs: List[Optional[float]], bucket: int) -> Optional[int]:
        """The best drafting K where it is priced from another context only (None:
        read here, or no measured table): a new context reads it before the
        sentence model compares drafting with greedy there, since the ratio to
        K=0 a drafting K has elsewhere drifts with the sentences' length."""
        if self.table is None or len(costs) < 2:
            return None
        best = self._best(costs, 1)
        return None if self.table.read_here(best, bucket) else best

    def choose(self, limit: int, batch: int) -> int:
        if not self.may_draft:
            self.batch = batch  # a greedy batch of several rows times its K=0 (observe)
            return 0
        self.batch = batch
        bucket = CostTable.bucket(batch)
        turn = self.turns[bucket] = self.turns.get(bucket, 0) + 1
        costs = self._considered(self._costs(limit, bucket, batch), bucket)
        unread = None if None in costs else self._unread_best(costs, bucket)
        if None in costs:
            k = costs.index(None)  # measured seconds beat a guess: run it (again)
        elif unread is not None:  # a new context: the best drafting K read here
            k = unread
        elif self.recheck:  # every slot drafted: each one's acceptance measured anew
            self.recheck -= 1
            k = limit
        else:
            # A re-check sentence drafts every turn: its readings of the best
            # drafting K are what a verdict for greedy rests on.
            rechecking = bucket == 1 and self.sentences.rechecking and len(costs) > 1
            k = self._best(costs, 1 if rechecking else 0)
            retry_k, left = self.retrying.get(bucket, (0, 0))
            if left and retry_k <= limit:  # a retry measures its K anew: several turns
                k, self.retrying[bucket] = retry_k, (retry_k, left - 1)
            elif limit > 0 and self._retry_now(bucket, k, turn):
                k = min((kk for kk in range(limit + 1) if kk != k),
                        key=lambda kk: self.last_run.get((kk, bucket), -1))
                self.retrying[bucket] = (k, 0 if self.table is None else self.table.min_count - 1)
        self.last_run[(k, bucket)] = turn
        return k

    def _costs(self, limit: int, bucket: int, batch: int) -> List[Optional[float]]:
        """Seconds per iteration for K = 0..limit (None: not measured yet)."""
        if self.table is not None:
            return self.table.estimates(limit, bucket)
        return [self.cost(k, batch) for k in range(limit + 1)]

    def _considered(self, costs: List[Optional[float]], bucket: int) -> List[Optional[float]]:
        """``costs`` up to the first K not measured yet, or, in a batch of several
        rows, up to the first K >= 2 that commits fewer tokens per second than
        greedy and than K-1: a larger K verifies more positions for less and less
        acceptance, so it is not measured (only retried). Where a verified position
        costs nearly a whole step (batch 32 on a CPU), measuring K=3 and 4 would take
        much of a batch at a fraction of greedy's speed. One row measures every K:
        its exploring iterations are cheap, and its rates need not fall with K (a
        copy of the verifier drafts nearly as well at K=4 as at K=1)."""
        tokens = self.acceptance.expected_tokens()
        for k in range(1, len(costs)):
            if costs[k] is None:
                return costs[: k + 1]
            rate = tokens[k] / costs[k]
            if (bucket > 1 and k >= 2 and rate < tokens[0] / costs[0]
                    and rate <= tokens[k - 1] / costs[k - 1]):
                return costs[: k + 1]
        return costs

    def _best(self, costs: List[Optional[float]], smallest: int) -> int:
        """The K in ``smallest..len(costs)-1`` that commits the most tokens per second
        (the smaller K on a tie)."""
        tokens = self.acceptance.expected_tokens()
        return max(range(smallest, len(costs)), key=lambda k: (tokens[k] / costs[k], -k))

    def _retry_now(self, bucket: int, best: int, turn: int) -> bool:
        """Whether this iteration of ``bucket`` retries another K than ``best``."""
        last_best, wait, due = self.retries.get(bucket, (best, self.retry_every,
                                                         turn + self.retry_every))
        if best != last_best:  # the best K changed: look again soon
            wait, due = self.retry_every, turn + self.retry_every
        retry = turn >= due
        if retry:
            wait = min(2 * wait, self.max_retry_every)
            due = turn + wait
        self.retries[bucket] = (best, wait, due)
        return retry

    def observe(self, num_accepted: List[int], k: int, seconds: float) -> None:
        first = not self.batch_turns  # dearer for every K: a per-sentence cost
        self.batch_turns[k] = self.batch_turns.get(k, 0) + 1
        if self.may_draft:
            self.acceptance.observe(num_accepted, k)
        if self.table is not None and not first:
            self.table.record(k if self.may_draft else 0, self.batch, seconds)


def make_k_policy(options: DecodingOptions) -> KPolicy:
    return AutoK(options.k) if options.auto_k else KPolicy()
