"""Ragged-batch bookkeeping: scripted examples plus loop references over B and K."""

from __future__ import annotations

import pytest
import torch

from nmt_specdec.ragged import append_ragged, compaction_index, left_pad

P = 1  # pad
F = -1  # fill used when a buffer grows


# --------------------------------------------------------------------- append_ragged


def test_append_no_growth():
    # width 5, lengths [2, 1], append 2 values: row 0 gets both, row 1 one.
    buffer = torch.tensor([[10, 11, P, P, P], [20, P, P, P, P]])
    new = torch.tensor([[12, 13], [21, 99]])
    out = append_ragged(buffer, torch.tensor([2, 1]), new, torch.tensor([2, 1]), F)
    assert out.tolist() == [[10, 11, 12, 13, P], [20, 21, P, P, P]]
    # Pure: a new tensor, the input is unchanged.
    assert buffer.tolist() == [[10, 11, P, P, P], [20, P, P, P, P]]


def test_append_grows_to_lengths_plus_width():
    # width 3, lengths [3, 1], N=3: the buffer grows to max(lengths + N) = 6,
    # the new slots start as F; row 1 appends nothing (count 0).
    buffer = torch.tensor([[10, 11, 12], [20, P, P]])
    new = torch.tensor([[13, 14, 15], [97, 98, 99]])
    out = append_ragged(buffer, torch.tensor([3, 1]), new, torch.tensor([3, 0]), F)
    assert out.tolist() == [[10, 11, 12, 13, 14, 15], [20, P, P, F, F, F]]
    assert buffer.shape == (2, 3)


def test_append_zero_counts_keeps_everything():
    # Rows with count 0, including one of length 0: slot 0 must not be clobbered.
    buffer = torch.tensor([[10, 11, P], [P, P, P]])
    new = torch.tensor([[77], [88]])
    out = append_ragged(buffer, torch.tensor([2, 0]), new, torch.tensor([0, 0]), F)
    assert out.tolist() == buffer.tolist()


def test_append_to_empty_row_with_unused_values():
    # Regression: row 0 has length 0 and keeps 1 of 3 values. The 2 unused
    # values must not race with the kept write at slot 0 (they used to be
    # scattered to slot 0 too, and the stale value could win).
    buffer = torch.tensor([[5, P, P, P], [6, P, P, P]])
    new = torch.tensor([[50, 51, 52], [60, 61, 62]])
    out = append_ragged(buffer, torch.tensor([0, 1]), new, torch.tensor([1, 2]), F)
    assert out.tolist() == [[50, P, P, P], [6, 60, 61, P]]


def test_append_float_scores():
    buffer = torch.tensor([[0.0, -1.0], [0.0, 0.0]])
    out = append_ragged(buffer, torch.tensor([2, 1]), torch.tensor([[-0.5], [-0.25]]),
                        torch.tensor([1, 1]), 0.0)
    assert out.tolist() == [[0.0, -1.0, -0.5], [0.0, -0.25, 0.0]]


def _append_reference(buffer, lengths, new, counts, fill):
    width = max(buffer.size(1), int((lengths + new.size(1)).max()))
    out = torch.full((buffer.size(0), width), fill, dtype=buffer.dtype)
    out[:, : buffer.size(1)] = buffer
    for b in range(buffer.size(0)):
        n, start = int(counts[b]), int(lengths[b])
        out[b, start : start + n] = new[b, :n]
    return out


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("k", [0, 1, 4])
@pytest.mark.parametrize("seed", [0, 1])
def test_append_matches_loop_reference(batch, k, seed):
    g = torch.Generator().manual_seed(seed)
    width = int(torch.randint(1, 7, (1,), generator=g))
    lengths = torch.randint(0, width + 1, (batch,), generator=g)
    buffer = torch.randint(4, 50, (batch, width), generator=g)
    new = torch.randint(50, 99, (batch, k + 1), generator=g)
    counts = torch.randint(0, k + 2, (batch,), generator=g)
    out = append_ragged(buffer, lengths, new, counts, F)
    assert torch.equal(out, _append_reference(buffer, lengths, new, counts, F))


def test_append_empty_batch():
    out = append_ragged(torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                        torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, dtype=torch.long), F)
    assert out.shape == (0, 3)


# ------------------------------------------------------------------------- left_pad


def test_left_pad_scripted():
    # Right-padded rows of lengths [3, 1, 2] in a width-4 buffer -> width 3.
    tokens = torch.tensor([[5, 6, 7, P], [8, P, P, P], [9, 4, P, P]])
    out = left_pad(tokens, torch.tensor([3, 1, 2]), P)
    assert out.tolist() == [[5, 6, 7], [P, P, 8], [P, 9, 4]]


def test_left_pad_ignores_garbage_past_length():
    # Values past a row's length (not pad) must not leak into the output.
    tokens = torch.tensor([[5, 6, 42], [8, 43, 44]])
    out = left_pad(tokens, torch.tensor([2, 1]), P)
    assert out.tolist() == [[5, 6], [P, 8]]


@pytest.mark.parametrize("batch", [1, 4, 9])
def test_left_pad_matches_loop_reference(batch):
    g = torch.Generator().manual_seed(batch)
    lengths = torch.randint(1, 8, (batch,), generator=g)
    tokens = torch.randint(4, 99, (batch, 8), generator=g)
    out = left_pad(tokens, lengths, P)
    width = int(lengths.max())
    assert out.shape == (batch, width)
    for b in range(batch):
        n = int(lengths[b])
        assert out[b].tolist() == [P] * (width - n) + tokens[b, :n].tolist()


# ------------------------------------------------------------------ compaction_index


def test_compaction_scripted_with_holes():
    # Old cache width 3. Row 0 had 2 valid entries (slot 2 is a hole), row 1 had
    # none (slots 0-2 are holes), row 2 had 3. The pass appended N=3 entries at
    # slots 3, 4, 5; rows keep [1, 2, 0] of them.
    plan = compaction_index(torch.tensor([2, 0, 3]), torch.tensor([1, 2, 0]), old_width=3)
    # New lengths [3, 2, 3] -> width 3.
    #   row 0: old 0, old 1, new 3
    #   row 1: new 3, new 4, (padding)
    #   row 2: old 0, old 1, old 2
    assert plan.index.tolist() == [[0, 1, 3], [3, 4, 0], [0, 1, 2]]
    assert plan.padding_mask.tolist() == [[False, False, False], [False, False, True],
                                          [False, False, False]]


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("k", [0, 1, 4])
def test_compaction_gathers_valid_entries_left_aligned(batch, k):
    # Simulate a cache whose entries are labelled (row, time); holes are -1.
    g = torch.Generator().manual_seed(batch * 10 + k)
    old_width = int(torch.randint(0, 6, (1,), generator=g))
    cached = torch.randint(0, old_width + 1, (batch,), generator=g)
    kept = torch.randint(0, k + 2, (batch,), generator=g)
    kept[0] = k + 1  # at least one row keeps something so the cache is not empty
    n_new = k + 1
    cache = torch.full((batch, old_width + n_new), -1)
    expected = []
    for b in range(batch):
        labels_old = [100 * b + t for t in range(int(cached[b]))]
        labels_new = [100 * b + 50 + t for t in range(n_new)]
        cache[b, : int(cached[b])] = torch.tensor(labels_old, dtype=torch.long)
        cache[b, old_width:] = torch.tensor(labels_new)
        expected.append(labels_old + labels_new[: int(kept[b])])
    plan = compaction_index(cached, kept, old_width)
    width = max(len(e) for e in expected)
    assert plan.index.shape == (batch, width)
    out = cache.gather(1, plan.index)
    for b in range(batch):
        n = len(expected[b])
        assert out[b, :n].tolist() == expected[b]
        assert plan.padding_mask[b].tolist() == [t >= n for t in range(width)]
        # Padding slots point at a real slot (0) so that gather stays in range.
        assert (plan.index[b, n:] == 0).all()
