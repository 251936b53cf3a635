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


class _Clock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


class _Generator:
    def __init__(self, cost):
        self.cost, self.resets = cost, 0

    def reset_k_policy(self):
        self.resets += 1


def test_interleaved_rounds_visit_every_arm_per_batch_in_rotating_order(monkeypatch):
    from types import SimpleNamespace

    import benchmarks.auto_overhead as auto_overhead

    clock, calls = _Clock(), []

    class Task:
        def inference_step(self, generator, models, sample):
            calls.append((sample, generator.cost))
            clock.now += generator.cost

    monkeypatch.setattr(auto_overhead, "time", clock)
    batches = [SimpleNamespace(sample=index) for index in range(3)]
    runs = {name: SimpleNamespace(generator=_Generator(cost), model=None, batches=batches)
            for name, cost in (("greedy", 1.0), ("auto", 2.0), ("K=2", 4.0))}
    seconds = auto_overhead.interleaved_seconds(Task(), runs, rounds=2)
    assert seconds == {"greedy": [3.0, 3.0], "auto": [6.0, 6.0], "K=2": [12.0, 12.0]}
    assert runs["auto"].generator.resets == 2
    # Batch by batch, every arm once, the first arm rotating.
    assert calls[:9] == [(0, 1.0), (0, 2.0), (0, 4.0), (1, 2.0), (1, 4.0), (1, 1.0),
                         (2, 4.0), (2, 1.0), (2, 2.0)]
