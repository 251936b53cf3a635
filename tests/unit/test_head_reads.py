"""Where ``benchmarks/head_reads.py`` cuts its training sentences: uniform cuts, a
share drawn from the anchors after a miss, and every cut (or every listed one)."""

import torch

from benchmarks.head_reads import every_cut, make_batch

PAD = 1


def _item(length: int, after_miss=None) -> dict:
    item = {"enc": torch.zeros(3, 4), "tgt": torch.arange(4, 4 + length),
            "label": torch.arange(4, 4 + length), "top": torch.zeros(length, 2),
            "low": torch.zeros(length, 2)}
    if after_miss is not None:
        item["after_miss"] = torch.tensor(after_miss)
    return item


def test_a_miss_share_draws_that_many_cuts_from_the_listed_anchors():
    items = [_item(9, [5]), _item(6, []), _item(7)]
    generator = torch.Generator().manual_seed(0)
    batch = make_batch(items, 4, PAD, generator, miss_share=0.5)
    cuts = batch["cuts"].view(3, 4)
    assert cuts[0, :2].tolist() == [5, 5]  # two of four from its one listed anchor
    assert batch["rows"].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    for row, item in enumerate(items):  # the rest (and rows with none listed) uniform, in range
        assert 0 <= int(cuts[row].min()) and int(cuts[row].max()) < item["tgt"].numel()


def test_uniform_cuts_read_no_list():
    generator = torch.Generator().manual_seed(0)
    batch = make_batch([_item(9, [5])] * 50, 4, PAD, generator)
    assert batch["cuts"].ne(5).any()
    assert batch["cuts"].eq(5).float().mean() < 0.5


def test_every_cut_or_every_listed_one():
    items = [_item(3, [2]), _item(2, [1])]
    every = every_cut(items, PAD)
    assert every["cuts"].tolist() == [0, 1, 2, 0, 1]
    assert every["rows"].tolist() == [0, 0, 0, 1, 1]
    listed = every_cut(items, PAD, "after_miss")
    assert listed["cuts"].tolist() == [2, 1] and listed["rows"].tolist() == [0, 1]
    assert listed["lengths"].tolist() == [3, 2]

