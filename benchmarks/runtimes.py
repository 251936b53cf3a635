"""One verifier call on each candidate runtime: which CPU runtime should run the engine?

The verify pass of the real checkpoint and the real graphs (N new positions
against a cache of ``--past`` positions and a ``--source``-token memory), timed
on torch eager (the torch backend), torch eager and ``torch.compile`` of the
exported graph module, ONNX Runtime fp32 (every logit in fp32, and the
default: the output projection in 8 bits with its decisions certified in fp32,
see :mod:`~nmt_specdec.decoding.backends.onnxruntime.projection`) and int8 (the
onnxruntime backend's calls, I/O binding included) and OpenVINO (the all-fp32
ONNX graph; skipped when not installed) in three settings: f32 with the dynamic
shapes a decoder needs, f32 reshaped to this call's static shapes, and bf16
(OpenVINO's default precision on CPUs with bf16 units, which silently rounds
the weights: not an fp32 result). Two more rows time the output projection
alone (the (N, C) x (C, V) product every verify call ends with) on torch and on
ONNX Runtime: it is memory-bound (V x C weights read per call), so it costs the
same on every fp32 runtime and sets a floor under a greedy step. Prints ms per
call at N=1 (a greedy step) and N=K+1 (a verification of K drafts), their
ratio, and the speed of N=1 against torch eager.

Example (from the repository root)::

    python benchmarks/runtimes.py --checkpoint models/gettext-de-en-tiny/model.pt \\
        --data models/gettext-de-en-tiny --ks 2 4 6 8 12

Shapes: B rows, N new positions, P past positions, S source, L layers, H heads,
D head dim.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Callable, Dict, List, Optional

import torch

from nmt_specdec.errors import UserError


def _ms(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(max(3, repeats // 10)):  # warm-up
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return 1e3 * (time.perf_counter() - start) / repeats


def _inputs(backend, batch: int, new: int, past: int):
    """tokens, start, cache (past positions filled), encoder memory (torch backend's)."""
    verifier = backend.verifier()
    cache = verifier.new_cache(batch, past + new + 1)
    tokens = torch.randint(10, 100, (batch, new))
    return tokens, torch.full((batch,), past), cache


def probe(model, task, batch: int, ks: List[int], past: int, source: int, repeats: int,
          threads: int) -> List[Dict]:
    from nmt_specdec.decoding.backends import make_backend
    from nmt_specdec.decoding.backends.onnxruntime.attention_inputs import example_inputs
    from nmt_specdec.decoding.backends.onnxruntime.graphs import VerifyGraph
    from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier

    torch.set_num_threads(threads)
    dictionary = task.target_dictionary
    src = torch.randint(10, 100, (batch, source))
    src[:, -1] = dictionary.eos()
    net_input = {"src_tokens": src, "src_lengths": torch.full((batch,), source)}
    rows = []
    for new in sorted({1, *(k + 1 for k in ks)}):
        row: Dict[str, object] = {"N": new}
        for label, name, int8, exact in (
                ("torch eager (backend)", "torch", False, False),
                ("onnxruntime fp32, every logit (--exact-scores)", "onnxruntime", False, True),
                ("onnxruntime fp32, 8-bit projection certified (default)", "onnxruntime",
                 False, False),
                ("onnxruntime int8", "onnxruntime", True, False)):
            backend = make_backend(name, model, dictionary, int8, exact_scores=exact)
            memory = backend.encode(net_input)
            verifier = backend.verifier()
            cross = verifier.cross_states(memory)
            tokens, start, cache = _inputs(backend, batch, new, past)
            with torch.no_grad():
                row[label] = _ms(lambda: verifier.verify(tokens, start, past, cache, cross,
                                                         True), repeats)
        # The all-fp32 graph: the other runtimes run standard ONNX ops only.
        ort = make_backend("onnxruntime", model, dictionary, exact_scores=True)
        memory = ort.encode(net_input)
        tokens, start, cache = _inputs(ort, batch, new, past)
        past_kv = [t[i] for i in range(ort.layers) for t in (cache.key, cache.value)]
        chain = torch.arange(new)
        # The fp32 graph's attention mask (its layout reads no slot index: the
        # exported graph has no such input, the module a placeholder).
        mask, no_index = example_inputs(ort.heads, False, start, cache.slots,
                                        chain.view(-1, 1) >= chain.view(1, -1))
        args = (tokens, start, memory.mask, chain, mask, *past_kv, *memory.cross)
        graph_args = (*args[:5], no_index, *args[5:])
        graph = VerifyGraph(LeanVerifier(model.decoder)).eval()
        with torch.no_grad():
            row["torch eager (graph module)"] = _ms(lambda: graph(*graph_args), repeats)
            row["torch.compile"] = _compiled_ms(graph, graph_args, repeats)
        for label, precision, static in (("openvino f32, dynamic shapes", "f32", False),
                                          ("openvino f32, static shapes", "f32", True),
                                          ("openvino bf16, static shapes", "bf16", True)):
            row[label] = _openvino_ms(ort.directory / "verify.onnx", args, threads, repeats,
                                      precision, static)
        row.update(_projection_ms(model.decoder.output_projection.weight.detach(), new,
                                  threads, repeats))
        rows.append(row)
    return rows


def _compiled_ms(graph, args, repeats: int) -> Optional[float]:
    """``torch.compile`` of the graph module, or None (n/a) where this torch
    cannot compile it (its dynamo traces the shapes the graph builds at run time
    in some versions and not in others): the row says so instead of the whole
    probe stopping."""
    try:
        compiled = torch.compile(graph, dynamic=False)
        return _ms(lambda: compiled(*args), repeats)
    except Exception as err:  # noqa: BLE001 - any compiler failure: the row is n/a
        print(f"torch.compile: n/a ({type(err).__name__})", file=sys.stderr)
        return None


def _projection_ms(weight, new: int, threads: int, repeats: int) -> Dict[str, float]:
    """The output projection of N states, (1, N, C) x (C, V), alone on each runtime."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    weight_t = weight.t().contiguous()  # (C, V), as the graphs hold it
    states = torch.randn(1, new, weight.size(1))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["states", "weight_t"], ["logits"])], "projection",
        [helper.make_tensor_value_info("states", TensorProto.FLOAT, list(states.shape))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight_t.numpy(), "weight_t")])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(),
        options, providers=["CPUExecutionProvider"])
    feeds = {"states": states.numpy()}
    with torch.no_grad():
        return {"output projection alone (torch)": _ms(lambda: torch.matmul(states, weight_t),
                                                       repeats),
                "output projection alone (onnxruntime)": _ms(lambda: session.run(None, feeds),
                                                             repeats)}


def _openvino_ms(path, args, threads: int, repeats: int, precision: str,
                 static: bool) -> Optional[float]:
    """``precision``: OpenVINO's inference precision hint (its CPU default is bf16
    where the CPU has bf16 units, so f32 must be asked for); ``static``: reshape
    the graph to this call's shapes (a decoder's shapes change every step, so
    only the dynamic graph is what a backend could run without recompiling)."""
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    capability = {"f32": "FP32", "bf16": "BF16"}[precision]
    if capability not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        return None  # e.g. bf16 on a CPU without bf16 units
    model = core.read_model(str(path))
    names = [port.get_any_name() for port in model.inputs]
    if static:
        model.reshape({name: list(t.shape) for name, t in zip(names, args)})
    compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                 "INFERENCE_PRECISION_HINT": precision})
    request = compiled.create_infer_request()
    feeds = {name: t.numpy() for name, t in zip(names, args)}
    return _ms(lambda: request.infer(feeds, share_inputs=True), repeats)


def format_rows(rows: List[Dict]) -> str:
    labels = [k for k in rows[0] if k != "N"]
    base = rows[0]["torch eager (backend)"]
    lines = ["| runtime | " + " | ".join(f"N={r['N']} ms" for r in rows)
             + " | largest N / N=1 | N=1 speed vs torch eager |",
             "|---|" + "---:|" * (len(rows) + 2)]
    for label in labels:
        values = [r[label] for r in rows]
        if any(v is None for v in values):
            lines.append(f"| {label} | " + " | ".join("n/a" for _ in rows) + " | n/a | n/a |")
            continue
        lines.append(f"| {label} | " + " | ".join(f"{v:.3f}" for v in values)
                     + f" | {values[-1] / values[0]:.2f} | {base / values[0]:.2f}x |")
    return "\n".join(lines)


def add_call_arguments(p: argparse.ArgumentParser) -> None:
    """The checkpoint and the shape of the timed calls (this probe's and
    ``draft_call_cost.py``'s)."""
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, help="directory with the dictionaries")
    p.add_argument("--past", type=int, default=12, help="cached target positions")
    p.add_argument("--source", type=int, default=12, help="source tokens")
    p.add_argument("--threads", type=int, default=1)


def load_checkpoint(checkpoint: str, data: str):
    """(model in eval mode, task); the root logger back at WARNING (importing
    fairseq leaves it at DEBUG: inductor's lock chatter)."""
    from fairseq import checkpoint_utils

    logging.getLogger().setLevel(logging.WARNING)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides={"data": data})
    return models[0].eval(), task


def main(argv: Optional[List[str]] = None) -> int:
    import fairseq_plugins  # noqa: F401  (registers the model; safe loading)

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_call_arguments(p)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--ks", type=int, nargs="+", default=[4])
    p.add_argument("--repeats", type=int, default=2000)
    args = p.parse_args(argv)
    try:
        model, task = load_checkpoint(args.checkpoint, args.data)
        rows = probe(model, task, args.batch, args.ks, args.past, args.source,
                     args.repeats, args.threads)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
