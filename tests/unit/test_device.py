"""The generators' device helpers (:mod:`nmt_specdec.decoding.device`); their CUDA
paths run in ``tests/integration/test_cuda.py``."""

from __future__ import annotations

import contextlib

import torch

from nmt_specdec.decoding.device import attention_kernels, model_device, on_device


def test_a_batch_moves_to_the_models_device_and_keeps_its_other_entries() -> None:
    sample = {"id": torch.tensor([3]), "net_input": {
        "src_tokens": torch.tensor([[5, 2]]), "src_lengths": torch.tensor([2]), "flag": "x"}}
    moved = on_device(sample, torch.device("meta"))
    assert moved["net_input"]["src_tokens"].device.type == "meta"
    assert moved["net_input"]["src_lengths"].device.type == "meta"
    assert moved["net_input"]["flag"] == "x" and moved["id"] is sample["id"]
    assert sample["net_input"]["src_tokens"].device.type == "cpu"  # the caller's is left alone
    assert on_device(sample, torch.device("cpu")) is sample


def test_only_cuda_restricts_the_attention_kernels() -> None:
    assert model_device(torch.nn.Linear(2, 2)).type == "cpu"
    assert isinstance(attention_kernels(torch.device("cpu")), contextlib.nullcontext)
    assert not isinstance(attention_kernels(torch.device("cuda")), contextlib.nullcontext)
