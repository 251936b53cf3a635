"""The verifier-state cache: shards written whole or not at all, read back by
dataset index, rebuilt when damaged or made for something else."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from nmt_specdec.model import state_cache

DIM = 4


def _sentences(n: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    encoder = [torch.randn(3 + i % 4, DIM, generator=generator) for i in range(n)]
    states = [torch.randn(2 + i % 3, DIM, generator=generator) for i in range(n)]
    return encoder, states


def _meta(sentences: int, verifier: str = "v1") -> state_cache.CacheMeta:
    return state_cache.CacheMeta(verifier=verifier, data="d1", dim=DIM, sentences=sentences,
                                 shard_size=4)


def _write(root, n: int):
    encoder, states = _sentences(n)
    meta = _meta(n)
    state_cache.prepare(root, meta)
    for index in range(state_cache.num_shards(meta)):
        part = slice(index * 4, (index + 1) * 4)
        state_cache.write_shard(root, index, encoder[part], states[part])
    return encoder, states


def test_items_read_back_in_dataset_order_as_float16(tmp_path) -> None:
    encoder, states = _write(tmp_path, 10)  # shards of 4, 4 and 2
    cache = state_cache.StateCache(tmp_path)
    assert len(cache) == 10 and len(cache.shards) == 3
    for index in (0, 3, 4, 9):
        enc, st = cache[index]
        assert enc.dtype == np.float16 and enc.shape == tuple(encoder[index].shape)
        np.testing.assert_allclose(enc, encoder[index].numpy(), atol=2e-3)
        np.testing.assert_allclose(st, states[index].numpy(), atol=2e-3)
    assert cache.disk_bytes() > 10 * 5 * DIM * 2


def test_a_damaged_shard_is_found_and_not_read(tmp_path) -> None:
    _write(tmp_path, 10)
    states = tmp_path / "shard-00001" / "states.npy"
    states.write_bytes(states.read_bytes()[:-8])  # truncated
    assert state_cache.open_shard(tmp_path, 1, DIM) is None
    assert state_cache.open_shard(tmp_path, 0, DIM) is not None
    with pytest.raises(ValueError, match="shard 1 is missing or damaged"):
        state_cache.StateCache(tmp_path)
    # An unfinished shard (no done.json) is missing, whatever else is there.
    (tmp_path / "shard-00002" / state_cache.DONE).unlink()
    assert state_cache.open_shard(tmp_path, 2, DIM) is None


def test_a_cache_of_another_verifier_is_emptied(tmp_path) -> None:
    _write(tmp_path, 10)
    state_cache.prepare(tmp_path, _meta(10))  # the same: kept
    assert state_cache.open_shard(tmp_path, 0, DIM) is not None
    state_cache.prepare(tmp_path, _meta(10, verifier="v2"))
    assert not (tmp_path / "shard-00000").exists()
    assert json.loads((tmp_path / state_cache.META).read_text())["verifier"] == "v2"


def test_arrays_never_load_pickled_objects(tmp_path) -> None:
    _write(tmp_path, 4)
    np.save(tmp_path / "shard-00000" / "lengths.npy", np.array([object()], dtype=object),
            allow_pickle=True)
    assert state_cache.open_shard(tmp_path, 0, DIM) is None
