"""``benchmarks/auto_bookkeeping.py``: the simulated sentences give the policy the
same inputs every run, so two runs make the same choices, and where drafting
pays (slots accepted 9 times in 10) the policy drafts most iterations."""

from benchmarks.auto_bookkeeping import simulate


def test_the_simulation_repeats_its_choices_and_drafts_where_drafting_pays():
    first = simulate(sentences=60, max_k=4, acceptance=0.9, turns=6, seed=0)
    second = simulate(sentences=60, max_k=4, acceptance=0.9, turns=6, seed=0)
    assert first[3] == second[3]
    assert sum(first[3].values()) == 60 * 6
    assert first[3][0] < 60  # greedy only while K=0 and drafting are measured, and new contexts
    assert all(microseconds > 0 for microseconds in first[:3])
