"""Cache compaction plans: scripted examples plus loop references over B and K."""

from __future__ import annotations

import pytest
import torch

from nmt_specdec.decoding.replay.ragged import compaction_index



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
