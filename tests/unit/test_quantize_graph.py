"""The verifier's 8-bit products (``quantize_graph``, ``MatMulNBits``): a row's
result must not depend on how many rows share the call.

The 8-bit verify graph relies on it (``graphs.VerifyGraph``'s ``same_bits``): a
greedy step multiplies one row, a SpecDec step K+1, and beta=1 reproduces the
greedy output only if a position gets the same bits either way. ONNX Runtime
multiplies a single row by another kernel than several when the blocks are
wider than 64 inputs (measured with 128 and 256 on an AMD EPYC): this test
fails there.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from nmt_specdec.decoding.backends.onnxruntime.graph_session import DISABLED_FUSIONS  # noqa: E402
from nmt_specdec.decoding.backends.onnxruntime.quantize import quantize_graph  # noqa: E402


def _product(path, rng, inputs: int, outputs: int) -> np.ndarray:
    weight = (rng.standard_normal((inputs, outputs)) * 0.05).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="product")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n", inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "n", outputs])],
        [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return weight


def _save(path, nodes, inputs: int, outputs: int, weights: dict) -> None:
    """A graph of ``nodes`` from ``x`` (n, inputs) to ``y`` (n, outputs), its
    constant ``weights`` by name, saved at ``path``."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", outputs])],
        [numpy_helper.from_array(w, name) for name, w in weights.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))


@pytest.mark.parametrize("inputs,outputs", [(256, 768), (1024, 256), (256, 4096)])
def test_a_row_gets_the_same_bits_alone_or_beside_others(tmp_path, inputs, outputs):
    rng = np.random.default_rng(0)
    path = tmp_path / "g.onnx"
    weight = _product(path, rng, inputs, outputs)
    quantize_graph(path)
    assert {n.op_type for n in onnx.load(str(path)).graph.node} == {"MatMulNBits"}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                                   disabled_optimizers=DISABLED_FUSIONS)
    x = rng.standard_normal((1, 4, inputs)).astype(np.float32)
    together = session.run(None, {"x": x})[0]
    for rows in (1, 2, 3):
        alone = session.run(None, {"x": x[:, :rows]})[0]
        assert np.array_equal(alone, together[:, :rows]), f"{rows} row(s)"
    # And still the product it replaces, to 8-bit precision.
    exact = x[0] @ weight
    assert np.abs(together[0] - exact).max() < 0.02 * np.abs(exact).max()


def test_biases_fold_into_the_8bit_products(tmp_path):
    """A constant bias after a product becomes the product's bias input: one node
    fewer, the same sums."""
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((64, 16)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    path = tmp_path / "g.onnx"
    _save(path, [helper.make_node("MatMul", ["x", "w"], ["h"], name="product"),
                 helper.make_node("Add", ["h", "b"], ["y"])], 64, 16, {"w": weight, "b": bias})
    x = rng.standard_normal((3, 64)).astype(np.float32)
    quantize_graph(path)
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops == ["MatMulNBits"]
    y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    exact = x @ weight + bias
    assert np.abs(y - exact).max() < 0.05 * np.abs(exact).max()


def test_copies_of_a_weight_are_quantized_once(tmp_path):
    """Two products with equal constant weights (a layer unrolled twice) read one
    quantized weight; a weight that differs keeps its own."""
    rng = np.random.default_rng(5)
    weight = (rng.standard_normal((64, 64)) * 0.05).astype(np.float32)
    other = weight.copy()
    other[0, 0] += 1
    path = tmp_path / "g.onnx"
    _save(path, [helper.make_node("MatMul", [x, w], [y], name=y)
                 for x, w, y in (("x", "w1", "h1"), ("h1", "w2", "h2"), ("h2", "w3", "y"))],
          64, 64, {"w1": weight, "w2": weight.copy(), "w3": other})
    quantize_graph(path)
    products = [n for n in onnx.load(str(path)).graph.node if n.op_type == "MatMulNBits"]
    assert len(products) == 3
    assert products[0].input[1] == products[1].input[1] != products[2].input[1]
    x = rng.standard_normal((3, 64)).astype(np.float32)
    y = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    exact = x @ weight @ weight @ other
    assert np.abs(y - exact).max() < 0.05 * np.abs(exact).max()
