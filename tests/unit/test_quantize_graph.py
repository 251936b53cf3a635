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
