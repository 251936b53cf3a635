"""A cache that grows by chunks (``grow_by``, the ONNX Runtime backend's at every batch size)
holds what a full-size cache holds, in fewer slots."""

from __future__ import annotations

import torch

from nmt_specdec.decoding.cache import StaticKVCache


def test_growing_cache_keeps_every_written_slot():
    like = torch.zeros(1)
    full = StaticKVCache(2, 3, 2, 40, 4, like)
    grown = StaticKVCache(2, 3, 2, 40, 4, like, grow_by=16)
    assert grown.key.size(3) == 16
    start = torch.tensor([0, 2, 5])
    generator = torch.Generator().manual_seed(0)
    for step in range(9):  # ragged passes of 3 new inputs per row
        new = 3
        keys = torch.randn(2, 3, 2, new, 4, generator=generator)
        values = torch.randn(2, 3, 2, new, 4, generator=generator)
        for cache in (full, grown):
            cache.begin_pass(start, new, int(start.max()), mask=False)
            cache.store_all(keys, values)
        start = start + 1 + step % 3
    used = grown.width
    assert 16 < used <= grown.key.size(3) < 40  # grew, by whole chunks, not to the maximum
    assert grown.key.size(3) % 16 == 0
    assert torch.equal(grown.key, full.key[:, :, :, : grown.key.size(3)])
    assert torch.equal(grown.value, full.value[:, :, :, : grown.value.size(3)])
    assert not full.key[:, :, :, grown.key.size(3):].any()  # nothing was written beyond


def test_growth_stops_at_the_most_a_batch_may_need():
    cache = StaticKVCache(1, 1, 1, 20, 2, torch.zeros(1), grow_by=16)
    cache.reserve(19)
    assert cache.key.size(3) == 20
