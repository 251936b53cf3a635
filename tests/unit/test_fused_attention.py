"""``benchmarks/fused_attention.py``: the verify graph with ONNX Runtime's fused
attention scores a call as the engine's graph does, with fewer nodes."""

import numpy as np
import torch

from benchmarks.fused_attention import export_pair, time_pair
from tests.helpers.shipped_model import load_model


def _call(session, start: int, slots: int, source: int) -> dict:
    """One position against a cache of ``slots`` (``start`` of them filled)."""
    rng = np.random.default_rng(0)
    feed = {"tokens": np.array([[5]]), "start": np.array([start]), "offsets": np.array([0]),
            "memory_mask": np.ones((1, 1, 1, source), dtype=bool),
            "self_mask": np.array([[[[s < start for s in range(slots)] + [True]]]])}
    for item in session.get_inputs():
        if item.name not in feed:  # past_* (B, H, T, D) and cross_* (B, H, S, D)
            heads, dim = item.shape[1], item.shape[3]
            length = slots if item.name.startswith("past") else source
            feed[item.name] = rng.standard_normal((1, heads, length, dim)).astype(np.float32)
    return feed


def test_the_fused_graph_scores_a_call_as_the_engines(tmp_path):
    import onnxruntime as ort

    model, task = load_model()
    torch.manual_seed(0)
    paths = export_pair(model, task.target_dictionary.pad(), tmp_path)
    session = ort.InferenceSession(str(paths["engine"]), providers=["CPUExecutionProvider"])
    found = time_pair(paths, _call(session, 6, 9, 5), rounds=1, calls=1)
    assert found["nodes"]["fused"] < found["nodes"]["engine"]
    assert found["difference"] < 1e-4
