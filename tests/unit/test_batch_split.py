"""The per-batch table of ``benchmarks/batch_split.py``, on made-up timings: batches
of one shape are summed, the rest is what the clocked parts leave, and the last
row totals every batch."""

import types

import pytest
import torch

from benchmarks.batch_split import PARTS, _table


def _batch(rows: int, source: int):
    return types.SimpleNamespace(sample={"net_input": {"src_tokens": torch.ones(rows, source)}})


def test_batches_of_one_shape_add_up_and_the_rest_is_left_over():
    batches = [_batch(32, 5), _batch(32, 5), _batch(20, 40)]
    best = {"ours": [0.010, 0.012, 0.100], "ct2": [0.011, 0.011, 0.080]}
    split = [dict(zip(PARTS, parts)) for parts in
             ([0.002, 0.006, 0.001], [0.002, 0.007, 0.001], [0.020, 0.060, 0.005])]
    header, rule, short, long, total = _table(batches, best, split)
    cells = [line.strip("|").split("|") for line in (short, long, total)]
    assert [c[0].strip() for c in cells] == ["32 x 5", "20 x 40", "**all**"]
    assert [int(c[1]) for c in cells] == [2, 1, 3]
    short_cells = [float(c) for c in cells[0][2:]]
    assert short_cells == pytest.approx([22.0, 22.0, 1.0, 4.0, 13.0, 2.0, 3.0])
    all_cells = [float(c) for c in cells[2][2:]]
    assert all_cells == pytest.approx([122.0, 102.0, 0.84, 24.0, 73.0, 7.0, 18.0], abs=0.01)
