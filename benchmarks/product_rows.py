"""What one more row costs each weight product of the ONNX Runtime graphs: a probe.

A verify call of K drafts multiplies K+1 rows by every weight of the verifier,
where greedy multiplies one. The gain of drafting rests on the K extra rows
costing little; this prints, for one 512 x 2048 product (an FFN's first) in each
form the graphs use, the time for 1..16 rows against one row's:

- ``fp32``: ``MatMul`` (the fp32 verifier);
- ``8-bit``: ``MatMulNBits`` with 8 bits in blocks of 64, int8 compute (``--int8``'s
  verifier, batch < 8);
- ``4-bit``: ``MatMulNBits`` with 4 bits in blocks of 128, int8 compute (the draft
  head's graph and the drafting copy);
- ``u8 x s8``: ``MatMulInteger`` (the 8-bit batch graph's products), its input
  quantized by one ``DynamicQuantizeLinear`` (the batch graph quantizes each row
  with graph ops of its own, 12 nodes a product, not timed here).

Each is timed hot (the call before it left its weights in the caches) and cold
(after a sweep of 64 MB, as a verify call between two drafts leaves them), the
median of ``--calls`` calls, 1 thread::

    python benchmarks/product_rows.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROWS = (1, 2, 3, 4, 6, 8, 11, 16)
INNER, OUTER = 512, 2048


def _graph(nodes, initializers, domains=()) -> bytes:
    from onnx import TensorProto, helper

    rows = helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", INNER])
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", OUTER])
    graph = helper.make_graph(nodes, "product", [rows], [out], initializers)
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def fp32_product(rng) -> bytes:
    from onnx import helper, numpy_helper

    weight = numpy_helper.from_array(rng.standard_normal((INNER, OUTER), np.float32), "B")
    return _graph([helper.make_node("MatMul", ["A", "B"], ["Y"])], [weight])


def nbits_product(rng, bits: int, block: int) -> bytes:
    from onnx import helper, numpy_helper

    blocks = INNER // block
    packed = rng.integers(0, 255, (OUTER, blocks, block * bits // 8), dtype=np.uint8)
    scales = rng.random(OUTER * blocks, dtype=np.float32) * 0.01
    node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], domain="com.microsoft",
                            K=INNER, N=OUTER, bits=bits, block_size=block, accuracy_level=4)
    return _graph([node], [numpy_helper.from_array(packed, "B"),
                           numpy_helper.from_array(scales, "S")], ["com.microsoft"])


def integer_product(rng) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    weight = rng.integers(-127, 127, (INNER, OUTER)).astype(np.int8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["A"], ["q", "s", "z"]),
             helper.make_node("MatMulInteger", ["q", "B", "z"], ["Y32"]),
             helper.make_node("Cast", ["Y32"], ["Yf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["Yf", "s"], ["Y"])]
    return _graph(nodes, [numpy_helper.from_array(weight, "B")])


def median_seconds(run: Callable[[], None], calls: int, sweep=None) -> float:
    times = []
    for _ in range(calls):
        if sweep is not None:
            sweep += 1.0  # evicts the weights from the caches
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def time_rows(model: bytes, calls: int, sweep) -> Dict[str, List[float]]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    times: Dict[str, List[float]] = {"hot": [], "cold": []}
    for rows in ROWS:
        feed = {"A": np.random.default_rng(rows).standard_normal((rows, INNER), np.float32)}

        def run() -> None:
            session.run(None, feed)

        run()
        times["hot"].append(median_seconds(run, calls))
        times["cold"].append(median_seconds(run, calls, sweep))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=60, help="timed calls per row count")
    args = parser.parse_args()
    from nmt_specdec.evaluation.machine import cpu_isa, cpu_model

    rng = np.random.default_rng(0)
    sweep = np.zeros(16 * 2 ** 20, np.float32)
    forms = {"fp32": fp32_product(rng), "8-bit": nbits_product(rng, 8, 64),
             "4-bit": nbits_product(rng, 4, 128), "u8 x s8": integer_product(rng)}
    print(f"one {INNER} x {OUTER} product, ONNX Runtime, 1 thread; {cpu_model()} ({cpu_isa()})")
    print("| product | caches | 1 row µs | " + " | ".join(f"{m} rows" for m in ROWS[1:])
          + " |\n|---|---|---:|" + "---:|" * (len(ROWS) - 1))
    for name, model in forms.items():
        for state, seconds in time_rows(model, args.calls, sweep).items():
            ratios = " | ".join(f"{s / seconds[0]:.2f}×" for s in seconds[1:])
            print(f"| {name} | {state} | {seconds[0] * 1e6:.0f} | {ratios} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
