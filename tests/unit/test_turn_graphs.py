"""TurnGraphs: a turn that the device refuses to capture runs eagerly from then
on, with one warning, instead of stopping the decoding (checked on the CPU with
torch.cuda's capture calls replaced)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from nmt_specdec.decoding.graphs import TurnGraphs


@pytest.fixture
def refusing_device(monkeypatch):
    @contextlib.contextmanager
    def refuse(graph, pool=None):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore")
        yield  # pragma: no cover

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "pool")
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: object())
    monkeypatch.setattr(torch.cuda, "graph", refuse)


def test_a_refused_capture_falls_back_to_eager_turns(refusing_device) -> None:
    graphs, turns = TurnGraphs(enabled=True), []
    with pytest.warns(RuntimeWarning, match="capture failed.*not permitted"):
        graphs.run(2, lambda: turns.append(2), torch.device("cuda"))
    graphs.run(2, lambda: turns.append(2), torch.device("cuda"))
    graphs.run(4, lambda: turns.append(4), torch.device("cuda"))
    assert turns == [2, 2, 4]  # every turn ran, none was lost to the failed capture
    assert len(graphs) == 0 and not graphs.enabled and graphs.capture_seconds == 0


def test_turns_run_eagerly_on_a_cpu() -> None:
    graphs, turns = TurnGraphs(enabled=True), []
    for _ in range(3):
        graphs.run(0, lambda: turns.append(0), torch.device("cpu"))
    assert turns == [0, 0, 0] and len(graphs) == 0
