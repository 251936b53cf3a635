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
    assert chosen[-50:] == [0] * 50


def test_oracle_drafter_chooses_the_largest_k():
    # Drafts cost a fifth of a step each and are always all accepted.
    policy = AutoK(8, cost=lambda k, batch: 1.0 + 0.2 * k)
    chosen = run_policy(policy, accept=lambda k: k)
    assert chosen[-50:] == [8] * 50


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


def test_cost_table_measures_and_extrapolates():
    table = CostTable(prior_slope=0.5)
    assert table(3, 1) is None
    table.record(0, 1, 2.0)
    assert table(0, 1) == 2.0 and table(2, 1) == pytest.approx(4.0)  # prior slope
    table.record(4, 1, 4.0)
    assert table(2, 1) == pytest.approx(3.0)  # linear between measured K
    assert table(0, 32) is None  # another batch bucket
    table.record(0, 1, 4.0)
    assert 2.0 < table(0, 1) < 4.0  # moving average
