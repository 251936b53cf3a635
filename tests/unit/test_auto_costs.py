"""The table of ``benchmarks/auto_costs.py``, on made-up iterations: a fixed K's
cells come from its own iterations (first ones left out of the seconds, counted in
the tokens), auto's from its policy's estimates."""

from types import SimpleNamespace

import pytest

from benchmarks.auto_costs import HEADER, Turn, rows


def _policy(costs, tokens):
    return SimpleNamespace(table=SimpleNamespace(estimates=lambda limit, bucket: costs[:limit + 1]),
                           acceptance=SimpleNamespace(expected_tokens=lambda: tokens))


def _cells(row):
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_fixed_k_cells_leave_first_iterations_out_of_the_seconds():
    fixed = {2: [Turn(0, True, 2, 0.100, 3), Turn(0, False, 2, 0.020, 3),
                 Turn(1, True, 2, 0.100, 1), Turn(1, False, 2, 0.030, 1)]}
    auto_turns = [Turn(1, False, 2, 0.060, 2)]
    (row,) = rows(auto_turns, _policy([0.010, 0.015, 0.040], [1.0, 1.8, 2.5]), fixed)
    cells = _cells(row)
    assert cells[0] == "2"
    assert cells[1:4] == ["40.0", "2.50", "16.00"]  # auto's estimates
    assert cells[4] == "1"  # auto timed one iteration at K=2
    assert float(cells[5]) == pytest.approx(25.0)  # the mean of 20 and 30 ms
    assert float(cells[7]) == pytest.approx(2.0)  # 8 tokens in 4 iterations
    assert float(cells[8]) == pytest.approx(12.5)
    assert cells[9] == "30.0" and float(cells[10]) == pytest.approx(2.0)  # sentence 1: 60 / 30 ms


def test_a_k_auto_never_measured_has_empty_estimates():
    fixed = {3: [Turn(0, False, 3, 0.030, 4)]}
    (row,) = rows([], _policy([0.010, None, None, None], [1.0, 1.8, 2.5, 3.0]), fixed)
    cells = _cells(row)
    assert cells[1:5] == ["-", "-", "-", "0"]
    assert row.count("|") == HEADER.splitlines()[0].count("|")
