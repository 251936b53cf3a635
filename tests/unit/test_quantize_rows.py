"""The encoder's 8-bit products: every row quantized on its own (``quantize_rows``,
batches), or one sentence at a time (``quantize_sentence``, a batch of one).

A sentence's encoding must not depend on the other sentences of its batch, and
the product must stay close to the float one it replaces.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from nmt_specdec.decoding.backends.onnxruntime.quantize import (  # noqa: E402
    quantize_rows,
    quantize_sentence,
)
from nmt_specdec.decoding.backends.onnxruntime.graph_session import (  # noqa: E402
    DISABLED_FUSIONS,
    PER_TENSOR_DISABLED_FUSIONS,
)


def _two_products(path, rng) -> dict:
    """x (B, S, 16) -> relu(x @ W1 + b) @ W2, written as Gemm-free MatMul/Add, and
    with a Constant weight (how the exporter writes some)."""
    w1 = rng.standard_normal((16, 32)).astype(np.float32)
    w2 = rng.standard_normal((32, 8)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="first"),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("Constant", [], ["w2"], value=numpy_helper.from_array(w2, "w2")),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="second"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", 8])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(bias, "b")])
    # IR version 8 goes with opset 17; onnx's newest may be newer than the runtime reads.
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return {"w1": w1, "w2": w2, "b": bias}


def _run(path, x: np.ndarray, disabled=DISABLED_FUSIONS) -> np.ndarray:
    """As the backend's sessions run a graph (``disabled``: the fusions left out)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                                   disabled_optimizers=disabled)
    return session.run(None, {"x": x})[0]


def _error(x: np.ndarray, y: np.ndarray, w: dict) -> float:
    exact = np.maximum(x @ w["w1"] + w["b"], 0) @ w["w2"]
    return float(np.abs(y - exact).max() / np.abs(exact).max())


def test_rows_are_quantized_on_their_own_and_stay_close(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "g.onnx"
    w = _two_products(path, rng)
    quantize_rows(path)
    graph = onnx.load(str(path)).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("MatMulInteger") == 2 and "MatMul" not in ops
    # No float weight left behind (the runtime warns of each unused initializer).
    used = {name for n in graph.node for name in n.input}
    assert {t.name for t in graph.initializer} <= used

    # Rows of very different magnitudes: one scale per tensor would flatten the small one.
    x = rng.standard_normal((3, 5, 16)).astype(np.float32)
    x[1] *= 100.0
    x[2, 0] = 0.0  # an all-zero row stays zero (no division by zero)
    y = _run(path, x)
    for b in range(3):
        assert _error(x[b], y[b], w) < 0.05, b
        # Batch invariance: each sentence alone gives the same bits.
        np.testing.assert_array_equal(_run(path, x[b: b + 1])[0], y[b])
    # And each position alone too (the rows of one sentence are independent).
    np.testing.assert_array_equal(_run(path, x[0:1, 2:3])[0, 0], y[0, 2])


def test_8bit_weights_where_the_cpu_has_vnni_are_closer_than_7bit(tmp_path):
    """The eighth bit halves the weights' rounding; without VNNI it overflows the
    runtime's 16-bit pair sums (why 7 bits there), so it is measured only here."""
    from nmt_specdec.cpu_flags import has_vnni

    if not has_vnni():
        pytest.skip("8-bit integer weights overflow the runtime's sums without VNNI")
    errors = []
    for bits in (7, 8):
        rng = np.random.default_rng(3)
        path = tmp_path / f"g{bits}.onnx"
        w = _two_products(path, rng)
        quantize_rows(path, weight_bits=bits)
        x = rng.standard_normal((4, 5, 16)).astype(np.float32)
        errors.append(max(_error(x[b], _run(path, x)[b], w) for b in range(4)))
    assert errors[1] < 0.05 and errors[1] < errors[0]


def test_the_runtime_fusion_left_out_is_still_wrong(tmp_path):
    """Why the sessions disable ``MatMulIntegerToFloatFusion``: with it, onnxruntime
    fuses the per-row products into ``MatMulIntegerToFloat``, which gives wrong
    results (seen with onnxruntime 1.32). When this fails, a newer onnxruntime
    computes the fusion right: measure it, and drop it from ``DISABLED_FUSIONS``
    if faster."""
    rng = np.random.default_rng(1)
    path = tmp_path / "g.onnx"
    w = _two_products(path, rng)
    quantize_rows(path)
    x = rng.standard_normal((1, 5, 16)).astype(np.float32)
    assert _error(x, _run(path, x), w) < 0.05
    others = [name for name in DISABLED_FUSIONS if name != "MatMulIntegerToFloatFusion"]
    assert _error(x, _run(path, x, disabled=others), w) > 0.05


def test_a_sentence_is_quantized_as_one_tensor_in_fused_kernels(tmp_path, caplog):
    """The batch-of-one encoder: one scale per product over the sentence, the
    runtime's fused kernels (its MatMulIntegerToFloat fusion is right here), close
    to the float products, and the quantizer's advice not printed."""
    rng = np.random.default_rng(2)
    path = tmp_path / "g.onnx"
    w = _two_products(path, rng)
    with caplog.at_level("WARNING"):
        quantize_sentence(path)
    assert not caplog.records
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert "MatMul" not in ops and "DynamicQuantizeLinear" in ops
    x = rng.standard_normal((1, 5, 16)).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                                   disabled_optimizers=PER_TENSOR_DISABLED_FUSIONS)
    assert _error(x[0], session.run(None, {"x": x})[0][0], w) < 0.05
    fused = [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert "DynamicQuantizeMatMul" in fused and "MatMulInteger" not in fused
