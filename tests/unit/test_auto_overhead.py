"""The ratios of ``benchmarks/auto_overhead.py``, on made-up timings: each round's
seconds are divided by auto's of the same round, and the best fixed K is the one
with the fewest median seconds, whatever its ratios."""

import pytest

from benchmarks.auto_overhead import HEADER, format_row, ratios


def test_rounds_are_compared_with_auto_of_the_same_round():
    seconds = {"greedy": [1.0, 2.0, 1.0], "auto": [1.0, 1.0, 2.0]}
    found = ratios(seconds)
    assert found.greedy == pytest.approx((0.75, 1.0, 1.5))
    assert found.best_k is None and found.best is None


def test_the_best_fixed_k_has_the_fewest_median_seconds():
    seconds = {"greedy": [3.0, 3.0, 3.0], "auto": [2.0, 2.5, 2.0],
               "K=2": [2.2, 2.2, 2.6], "K=4": [1.9, 2.5, 2.1]}
    found = ratios(seconds)
    assert found.best_k == "K=4"  # median 2.1 against K=2's 2.2
    assert found.best[1] == pytest.approx(1.0)  # ratios 0.95, 1.0, 1.05


def test_a_row_has_a_cell_per_column():
    found = ratios({"greedy": [1.0, 1.0], "auto": [1.0, 1.02], "K=3": [0.9, 0.95]})
    row = format_row("onnxruntime", 32, found, 1, 343, (1, 0.01, 0.002, 1.0), 16)
    assert row.count("|") == HEADER.splitlines()[0].count("|")
    assert "K=3: " in row and "1 of 16: +1.00% | +0.20% |" in row
    no_fixed = format_row("torch", 1, ratios({"greedy": [1.0], "auto": [1.0]}), 0, 10,
                          (0, 0.0, 0.0, 1.0), 5)
    assert no_fixed.count("|") == row.count("|")
