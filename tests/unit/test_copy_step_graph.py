"""The drafting copy's step graph (``onnxruntime/copy_graph.py``): one input per row,
attending to the cache as it is and to its own key apart, must compute what the
verify graph computes for that input.

- its candidates are the verify graph's logits' best, best first, and their
  scores are those logits (fp32, the shipped tiny model), for two rows at
  different positions over a cache with stale slots after each row's start
  (a mask that let them in, or a position off by one, moves every score);
- its new keys and values are the verify graph's;
- exported to ONNX and run by ONNX Runtime, it gives the same (before the
  export quantizes it: the engine's variants then take 4 or 8 bits).
"""

from __future__ import annotations

import pytest
import torch

from nmt_specdec.decoding.backends.onnxruntime.attention_inputs import example_inputs
from nmt_specdec.decoding.backends.onnxruntime.copy_graph import CANDIDATES, CopyStepGraph
from nmt_specdec.decoding.backends.onnxruntime.graphs import VerifyGraph
from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier
from tests.helpers.shipped_model import load_model

SLOTS, SOURCE = 10, 7


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(3)
    model, _ = load_model()
    lean = LeanVerifier(model.eval().decoder)
    heads, dim = lean.heads, lean.dim
    layers = len(lean.layers)
    past = [torch.randn(2, heads, SLOTS, dim // heads) for _ in range(2 * layers)]
    cross = [torch.randn(2, heads, SOURCE, dim // heads) for _ in range(2 * layers)]
    memory_mask = torch.ones(2, 1, 1, SOURCE, dtype=torch.bool)
    memory_mask[1, ..., :2] = False  # a left-padded source
    inputs = dict(tokens=torch.tensor([[11], [12]]), start=torch.tensor([3, 6]),
                  memory_mask=memory_mask, past=past, cross=cross)
    return lean, inputs


def _verify(lean, i):
    """The verify graph's (logits (B, V), new keys, new values) for the same inputs."""
    chain = torch.arange(1)
    mask, index = example_inputs(lean.heads, False, i["start"], SLOTS, chain.view(-1, 1) >= chain)
    with torch.no_grad():
        logits, _, _, keys, values = VerifyGraph(lean)(
            i["tokens"], i["start"], i["memory_mask"], chain, mask, index, *i["past"],
            *i["cross"])
    return logits[:, 0], keys, values


def _step_inputs(i):
    self_mask = torch.arange(SLOTS).view(1, 1, 1, -1) < i["start"].view(-1, 1, 1, 1)
    return (i["tokens"], i["start"], i["memory_mask"], self_mask, *i["past"], *i["cross"])


def test_the_step_scores_the_verify_graphs_best_candidates(setup):
    lean, inputs = setup
    logits, keys, values = _verify(lean, inputs)
    with torch.no_grad():
        scores, candidates, new_keys, new_values = CopyStepGraph(lean)(*_step_inputs(inputs))
    best = logits.topk(CANDIDATES, -1)
    assert torch.equal(candidates, best.indices)
    torch.testing.assert_close(scores, best.values, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(new_keys, keys, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(new_values, values, atol=1e-5, rtol=1e-5)


def test_the_exported_step_runs_as_the_module(setup, tmp_path):
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort

    from nmt_specdec.decoding.backends.onnxruntime import graph_files

    lean, inputs = setup
    graph_files._export_copy_step(lean, tmp_path)
    session = ort.InferenceSession(str(tmp_path / graph_files.COPY_STEP),
                                   providers=["CPUExecutionProvider"])
    step = _step_inputs(inputs)
    names = [i.name for i in session.get_inputs()]
    scores, candidates, keys, _ = session.run(None, {n: t.numpy() for n, t in zip(names, step)})
    with torch.no_grad():
        expected = CopyStepGraph(lean)(*step)
    assert (candidates == expected[1].numpy()).all()
    torch.testing.assert_close(torch.from_numpy(scores), expected[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.from_numpy(keys), expected[2], atol=1e-5, rtol=1e-5)
