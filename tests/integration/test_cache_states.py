"""``cache_states``: one pass of a stock toy verifier over a binarized split.

The cache holds what the verifier computes for each sentence alone (batched and
padded here, float16 there), in dataset order; a rerun keeps finished shards
and rebuilds a damaged one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nmt_specdec.workflows import cache_states


@pytest.fixture(scope="module")
def cached(tmp_path_factory, toy_data_bin: Path, tiny_transformer_ckpt: Path):
    out = tmp_path_factory.mktemp("states") / "valid"
    cache = cache_states.run(tiny_transformer_ckpt, toy_data_bin, "valid", out,
                             max_tokens=64, shard_sentences=16, progress=False)
    return out, cache


def test_states_are_the_verifiers_for_each_sentence_alone(cached, toy_data_bin,
                                                          tiny_transformer_ckpt) -> None:
    _, cache = cached
    model, task = cache_states.load_verifier(tiny_transformer_ckpt, toy_data_bin)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    assert len(cache) == len(dataset) > 16  # more than one shard
    eos = task.target_dictionary.eos()
    for index in (0, 7, 16, len(dataset) - 1):
        source, target = dataset.src[index], dataset.tgt[index]
        with torch.no_grad():
            out = model.encoder(source.unsqueeze(0), src_lengths=torch.tensor([len(source)]))
            prev = torch.cat([target.new_full((1,), eos), target[:-1]]).unsqueeze(0)
            states, _ = model.decoder(prev, encoder_out=out, features_only=True)
        encoder, cached_states = cache[index]
        np.testing.assert_allclose(encoder, out["encoder_out"][0][:, 0].numpy(),
                                   atol=5e-3, rtol=2e-3)
        np.testing.assert_allclose(cached_states, states[0].numpy(), atol=5e-3, rtol=2e-3)


def test_a_rerun_keeps_finished_shards_and_rebuilds_a_damaged_one(
        cached, toy_data_bin, tiny_transformer_ckpt) -> None:
    out, cache = cached
    kept = (out / "shard-00000" / "states.npy").stat().st_mtime_ns
    indices = (0, 17, len(cache) - 1)
    before = {i: [np.array(a) for a in cache[i]] for i in indices}
    damaged = out / "shard-00001" / "encoder.npy"
    damaged.write_bytes(b"not an array")
    again = cache_states.run(tiny_transformer_ckpt, toy_data_bin, "valid", out,
                             max_tokens=64, shard_sentences=16, progress=False)
    assert (out / "shard-00000" / "states.npy").stat().st_mtime_ns == kept
    for index in indices:
        for new, old in zip(again[index], before[index]):
            np.testing.assert_array_equal(new, old)
