"""``--spec-k auto``: the K that maximises expected committed tokens per second."""

from __future__ import annotations

import pytest

from nmt_specdec.decoding.k_policy import AcceptanceEstimate, AutoK, CostTable


def run_policy(policy: AutoK, accept: callable, limit: int = 8, batch: int = 1,
               turns: int = 200) -> list[int]:
    """Drives the policy: each turn, every row accepts ``accept(k)`` drafts."""
    chosen = []
    for _ in range(turns):
        k = policy.choose(limit, batch)
        policy.observe([accept(k)] * batch, k, seconds=policy.cost(k, batch) or 1.0)
        chosen.append(k)
    return chosen


def test_expected_tokens_from_scripted_counts():
    est = AcceptanceEstimate(slots=3, decay=1.0)
    # K=3 twice: one row accepts 3, the other 1 -> slot 1: 2/2, slot 2: 1/2, slot 3: 1/1.
    est.observe([3, 1], 3)
    # Beta(1,1) prior: c1 = 3/4, c2 = 2/4, c3 = 2/3.
    assert est.conditional() == pytest.approx([3 / 4, 2 / 4, 2 / 3])
    assert est.expected_tokens() == pytest.approx([1, 1.75, 1.75 + 0.375, 2.125 + 0.25])


def test_zero_acceptance_and_full_step_drafts_choose_zero():
    # Every drafted position costs a whole greedy step; nothing is ever accepted.
    policy = AutoK(8, cost=lambda k, batch: 1.0 + k)
    chosen = run_policy(policy, accept=lambda k: 0)
    assert chosen[-50:].count(0) >= 48  # but for a retry every 40 iterations


def test_oracle_drafter_chooses_the_largest_k():
    # Drafts cost a fifth of a step each and are always all accepted.
    policy = AutoK(8, cost=lambda k, batch: 1.0 + 0.2 * k)
    chosen = run_policy(policy, accept=lambda k: k)
    assert chosen[-50:].count(8) >= 48


def test_respects_the_limit():
    policy = AutoK(8, cost=lambda k, batch: 1.0 + 0.2 * k)
    assert set(run_policy(policy, accept=lambda k: k, limit=3)) <= {0, 1, 2, 3}


def test_measured_costs_pick_the_middle():
    # Each slot accepted with 0.8 once its predecessor was; a drafted token costs a
    # quarter of a step: (1 + .8 + .64 + ...) / (1 + .25 k) peaks at K = 3.
    rates = [(1 + sum(0.8 ** i for i in range(1, k + 1))) / (1 + 0.25 * k) for k in range(9)]
    best = max(range(9), key=rates.__getitem__)
    policy = AutoK(8, cost=lambda k, batch: 1.0 + 0.25 * k)
    policy.acceptance.reached = [1e6] * 8
    policy.acceptance.passed = [8e5] * 8
    assert policy.choose(8, 1) == best == 3


def test_cost_table_trusts_the_fastest_recent_iteration():
    table = CostTable(window=3, min_count=2)
    assert table(3, 1) is None
    table.record(0, 1, 9.0)  # a first iteration at a K pays for first use: not trusted
    table.record(0, 1, 2.0)
    assert table(0, 1) is None  # one trusted iteration is not yet a measurement
    table.record(0, 1, 4.0)
    assert table(0, 1) == pytest.approx(2.0)
    table.record(0, 1, 50.0)  # a hiccup only ever adds time: it does not count
    assert table(0, 1) == pytest.approx(2.0)
    table.record(0, 1, 3.0)
    table.record(0, 1, 3.0)  # only the last three count
    assert table(0, 1) == pytest.approx(3.0)
    assert table(2, 1) is None  # greedy says nothing of a drafting K
    assert table(0, 32) is None  # another batch bucket


def drive(policy: AutoK, seconds, accept, turns: int) -> list[int]:
    """Batch 1 with the measured cost table: ``seconds(k, turn)`` per iteration."""
    chosen = []
    for turn in range(turns):
        k = policy.choose(4, 1)
        policy.observe([accept(k)], k, seconds=seconds(k, turn))
        chosen.append(k)
    return chosen


def test_auto_k_measures_every_k_instead_of_extrapolating_from_a_slow_start():
    # A quarter of the iterations accept nothing, the rest every draft; an
    # iteration costs 1 + 0.15 K, so K=4 wins (4 tokens in 1.6). K=1's first iterations ran slow (a noisy neighbour): a line drawn
    # from them priced every drafting K out and auto decoded greedily for good.
    def seconds(k, turn):
        return 5.0 if k == 1 and turn < 12 else 1.0 + 0.15 * k
    pattern = [4, 4, 4, 0]  # accepted drafts, cycling
    turns = iter(range(10 ** 6))
    chosen = drive(AutoK(4), seconds, lambda k: min(pattern[next(turns) % 4], k), 300)
    assert set(chosen[:25]) == {0, 1, 2, 3, 4}  # each K measured early
    assert chosen[-100:].count(4) >= 95


def test_auto_k_retries_a_k_that_a_noisy_burst_priced_out():
    # K=2 is the best K, but its first measured iterations all ran 4x slow; the
    # retries measure it again and auto comes back to it.
    def seconds(k, turn):
        slow = k == 2 and turn < 40
        return (4.0 if slow else 1.0) * (1.0 + 0.3 * k)
    def accept(k):  # slot 1 always, slot 2 usually, later slots never
        return min(k, 2)
    chosen = drive(AutoK(4, retry_every=10), seconds, accept, 600)
    assert chosen[:20].count(2) >= 3  # K=2 measured in the burst, priced out...
    assert chosen[-100:].count(2) >= 85  # ... and back once retries measured it again


def test_auto_k_measures_greedy_instead_of_extrapolating_it():
    # A draft call costs a whole step before any slot (greedy 1.0, drafting 2.0 + 0.1 K)
    # and each slot is accepted half the time once its predecessor was: K=4 commits
    # 1.94 tokens in 2.4 (0.81 a unit of time), greedy 1 in 1. A line through the
    # drafting K would price greedy at 2.0 and never try it.
    policy = AutoK(4)
    # P(n >= j) = 2^-j, the long runs first (as a sentence's easy start would).
    geometric = [4, 3, 2, 2] + [1] * 4 + [0] * 8
    chosen = []
    for turn in range(300):
        k = policy.choose(4, 1)
        accepted = min(geometric[turn % len(geometric)], k)
        policy.observe([accepted], k, seconds=1.0 if k == 0 else 2.0 + 0.1 * k)
        chosen.append(k)
    assert 0 in chosen[:5]  # tried early, once something else was measured
    assert chosen[-100:].count(0) >= 95


def test_batch_arms_try_greedy_then_drafting_then_keep_the_faster():
    from nmt_specdec.decoding.k_policy import BatchArms

    arms = BatchArms(retry_every=4)
    tokens_per_second = {False: 100.0, True: 70.0}  # drafting loses, as at batch 32 on a CPU
    tried = []
    for _ in range(12):
        drafts = arms.drafts(32)
        tried.append(drafts)
        arms.record(32, drafts, tokens=int(tokens_per_second[drafts]), seconds=1.0)
    # Greedy, one drafting batch, then greedy but for a retry every 4 batches of the bucket.
    assert tried[:2] == [False, True]
    assert tried[2:] == [False, False, True, False, False, False, True, False, False, False]
    assert not arms.drafts(8)  # another bucket starts again from greedy


def test_batch_arms_keep_drafting_where_it_wins():
    from nmt_specdec.decoding.k_policy import BatchArms

    arms = BatchArms(retry_every=100)
    for _ in range(6):
        drafts = arms.drafts(4)
        arms.record(4, drafts, tokens=150 if drafts else 100, seconds=1.0)
    assert arms.drafts(4)


def test_auto_k_decodes_a_batch_greedily_until_drafting_has_proved_faster():
    policy = AutoK(4, cost=lambda k, batch: 1.0 + 0.1 * k)  # drafting looks cheap per turn
    policy.start_batch(32)
    assert policy.choose(4, 32) == 0 and not policy.wants_counts  # the first batch: greedy
    assert not policy.may_draft  # ... sized as greedy by the loop
    policy.end_batch(tokens=1000, seconds=1.0)
    policy.start_batch(32)
    assert policy.choose(4, 32) > 0 and policy.wants_counts  # the second: drafting
    policy.end_batch(tokens=700, seconds=1.0)  # ... which committed fewer tokens per second
    policy.start_batch(32)
    assert policy.choose(4, 32) == 0
    policy.start_batch(1)  # a single row is always decided per iteration
    assert policy.choose(4, 1) > 0


def test_retries_back_off_while_the_best_k_stands():
    # Drafting never pays: retries are all the drafting auto does, and each one that
    # confirms greedy doubles the wait (40, 80, 160, ... 640): 6 in 2000 iterations.
    policy = AutoK(4, cost=lambda k, batch: 1.0 + k)
    chosen = run_policy(policy, accept=lambda k: 0, limit=4, turns=2000)
    retries = [turn for turn, k in enumerate(chosen) if k != 0]
    assert 4 <= len(retries) <= 8
    assert retries[1] - retries[0] < retries[-1] - retries[-2]
