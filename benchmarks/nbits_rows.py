"""Why does drafting pay for the fp32 verifier and not for the 8-bit one? A probe of
what a verify call's products cost per position, on ONNX Runtime, one thread.

A verify call of K drafts multiplies K+1 rows (positions) by every weight of the
decoder; greedy multiplies one. Drafting pays when K+1 rows cost little more than
one. This builds the products of six Transformer-base decoder layers (per layer
the self-attention's four 512x512, the cross-attention's query and output
512x512, and the 512x2048 and 2048x512 feed-forward: 19M weights, random, so
the figures are time only) as one chain of ``MatMul`` nodes, and times it at M
rows in fp32 and as the engine quantizes it: ``MatMulNBits`` with 8-bit weights
in blocks of 64 (the 8-bit verifier) or 4-bit in blocks of 128 (the drafting
copy), each at accuracy level 4 (int8 activations per row and block, the
engine's) and 0 (fp32 arithmetic). Prints milliseconds per call (median of the
rounds) and, per row added, the share of the one-row call it adds.

    python benchmarks/nbits_rows.py [--rows 1 2 3 4 6 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec import logs  # noqa: E402
from nmt_specdec.evaluation.machine import cpu_isa, cpu_model  # noqa: E402

LAYER = [(512, 512)] * 6 + [(512, 2048), (2048, 512)]  # (inputs, outputs) per product
VARIANTS = {"fp32": None, "8-bit, level 4": (8, 64, 4), "8-bit, level 0": (8, 64, 0),
            "4-bit, level 4": (4, 128, 4), "4-bit, level 0": (4, 128, 0)}


def build(directory: Path, layers: int = 6) -> Dict[str, Path]:
    """The chain in fp32 and in each quantized variant: name -> graph file."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    rng = np.random.default_rng(0)
    nodes, weights, x = [], [], "x"
    for i, (k, n) in enumerate(LAYER * layers):
        weights.append(numpy_helper.from_array(
            (rng.standard_normal((k, n)) * 0.05).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"y{i}"]))
        x = f"y{i}"
    graph = helper.make_graph(
        nodes, "products", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", 512])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["M", 512])], weights)
    fp32 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    paths = {}
    for name, quantized in VARIANTS.items():
        paths[name] = directory / f"{len(paths)}.onnx"
        if quantized is None:
            onnx.save(fp32, paths[name])
            continue
        bits, block, level = quantized
        quantizer = MatMulNBitsQuantizer(onnx.ModelProto.FromString(fp32.SerializeToString()),
                                         bits=bits, block_size=block, is_symmetric=True,
                                         accuracy_level=level)
        quantizer.process()
        onnx.save(quantizer.model.model, paths[name])
    return paths


def timings(paths: Dict[str, Path], rows: List[int], rounds: int,
            calls: int = 20) -> Dict[str, Dict[int, float]]:
    """Median milliseconds per call of each graph at each row count, the graphs
    and row counts alternating within every round."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions = {name: ort.InferenceSession(str(path), options,
                                           providers=["CPUExecutionProvider"])
                for name, path in paths.items()}
    rng = np.random.default_rng(1)
    seconds: Dict[str, Dict[int, List[float]]] = {name: {m: [] for m in rows} for name in paths}
    for _ in range(rounds):
        for m in rows:
            inputs = {"x": rng.standard_normal((m, 512)).astype(np.float32)}
            for name, session in sessions.items():
                session.run(None, inputs)
                started = time.perf_counter()
                for _ in range(calls):
                    session.run(None, inputs)
                seconds[name][m].append((time.perf_counter() - started) / calls)
    return {name: {m: 1000 * statistics.median(s) for m, s in by_rows.items()}
            for name, by_rows in seconds.items()}


def main() -> int:
    logs.setup(verbose=False)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if 1 not in args.rows or min(args.rows) < 1:
        print("error: --rows must include 1 (the greedy call) and be positive", file=sys.stderr)
        return 1
    rows = sorted(set(args.rows))
    with tempfile.TemporaryDirectory() as directory:
        ms = timings(build(Path(directory)), rows, args.rounds)
    print(f"six Transformer-base decoder layers' products (random weights: time only), "
          f"ONNX Runtime, 1 thread, {args.rounds} rounds; {cpu_model()} ({cpu_isa()})")
    print("| products | " + " | ".join(f"M={m} ms" for m in rows) + " | per added row |")
    print("|---|" + "---:|" * (len(rows) + 1))
    last = rows[-1]
    for name, by_rows in ms.items():
        per_row = (by_rows[last] - by_rows[1]) / (last - 1) / by_rows[1] if last > 1 else 0.0
        print(f"| {name} | " + " | ".join(f"{by_rows[m]:.2f}" for m in rows)
              + f" | {per_row:.0%} of M=1 |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
