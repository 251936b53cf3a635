"""What an fp32 verify call saves with ONNX Runtime's fused attention: a probe.

Exports the verifier's verify graph (fp32 output projection) twice: as the
engine exports it, and with each layer's self- and cross-attention as one
``com.microsoft.MultiHeadAttention`` node (queries (B, N, C); the keys and
values as the layer has them, (B, H, T, D); the mask as an additive bias,
built once a call). Both run on the inputs of a real verify call (greedy
decoding of the first ``--sentences`` test lines at batch 1; the call with the
longest cache), one thread, alternately in rounds. Prints each graph's nodes,
the largest logit difference and the time per call. The engine does not use
the fused form: docs/results.md says what it would take.

    python benchmarks/fused_attention.py --src-file $T/test.de
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec import logs  # noqa: E402


class _FusedAttention(torch.autograd.Function):
    """softmax(q k^T * scale + bias) v, queries (B, N, C) and keys/values
    (B, H, T, D) -> (B, N, C); exported as ``MultiHeadAttention`` (its optional
    inputs filled in by :func:`_fill_optional_inputs`)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, heads: int, scale: float):  # type: ignore[override]
        rows, new, dim = q.shape
        split = q.reshape(rows, new, heads, -1).transpose(1, 2)
        scores = torch.matmul(split, k.transpose(2, 3)) * scale + bias
        return torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(rows, new, dim)

    @staticmethod
    def symbolic(g, q, k, v, bias, heads, scale):
        out = g.op("com.microsoft::MultiHeadAttention", q, k, v, bias, num_heads_i=heads,
                   scale_f=scale)
        out.setType(q.type())  # (B, N, C), as the queries
        return out


def _fused_layer(w, x, self_kv, self_mask, cross, attention=None, rows=None):
    """:func:`~nmt_specdec.decoding.backends.onnxruntime.graphs.graph_layer`
    with both attentions fused (``attention`` ignored: the fp32 verify graph's)."""
    from nmt_specdec.decoding.backends.onnxruntime import graphs as g

    pre, heads, dim = w.normalize_before, w.heads, int(w.self_out[1].size(0))
    scale = (dim // heads) ** -0.5  # a Python float: an attribute of the node

    def attend(q, keys, values, mask):
        q = rows.unflatten(q) if rows is not None else q
        out = _FusedAttention.apply(q, keys, values, _bias(mask), heads, scale)
        return rows.flatten(out) if rows is not None else out

    h = g.norm_if(pre, x, w.self_norm)
    q, k, v = g.linear(h, w.self_qkv).split(dim, dim=-1)
    keys, values = self_kv(g.split_heads(k, heads, rows), g.split_heads(v, heads, rows))
    x = g.norm_if(not pre, x + g.linear(attend(q, keys, values, self_mask), w.self_out),
                  w.self_norm)
    h = g.norm_if(pre, x, w.cross_norm)
    a = attend(g.linear(h, w.cross_q), cross.key, cross.value, cross.mask)
    x = g.norm_if(not pre, x + g.linear(a, w.cross_out), w.cross_norm)
    h = g.norm_if(pre, x, w.final_norm)
    h = g.linear(w.activation(g.linear(h, w.fc1)), w.fc2)
    return g.norm_if(not pre, x + h, w.final_norm)


_BIASES: Dict[int, torch.Tensor] = {}  # one additive bias per mask tensor, shared by the layers


def _bias(mask: torch.Tensor) -> torch.Tensor:
    if id(mask) not in _BIASES:
        _BIASES[id(mask)] = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    return _BIASES[id(mask)]


def _fill_optional_inputs(path: Path) -> None:
    """``MultiHeadAttention(q, k, v, bias)`` -> ``(q, k, v, "", "", bias)``: the
    bias is its sixth input, ``attention_bias``."""
    import onnx

    model = onnx.load(str(path))
    for node in model.graph.node:
        if node.op_type == "MultiHeadAttention":
            q, k, v, bias = node.input
            del node.input[:]
            node.input.extend([q, k, v, "", "", bias])
    if not any(opset.domain == "com.microsoft" for opset in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(path))


def export_pair(model, pad: int, out: Path) -> Dict[str, Path]:
    """The verify graph as exported (``engine``) and fused (``fused``), under ``out``."""
    from nmt_specdec.decoding.backends.onnxruntime import graph_files, graphs
    from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier

    verifier = LeanVerifier(model.decoder)
    out.mkdir(parents=True, exist_ok=True)
    memory = graph_files._export_encoder(model, verifier, None, pad, out)
    heads, dim = verifier.heads, verifier.dim // verifier.heads
    past = [torch.zeros(2, heads, 12, dim) for _ in range(2 * len(verifier.layers))]
    paths, layer = {}, graphs.graph_layer
    for name, form in (("engine", layer), ("fused", _fused_layer)):
        (out / name).mkdir(parents=True, exist_ok=True)
        graphs.graph_layer = form
        try:
            graph_files._export_verify(verifier, False, memory, past, out / name, False)
        finally:
            graphs.graph_layer = layer
        paths[name] = out / name / graph_files.VERIFY
    _fill_optional_inputs(paths["fused"])
    return paths


def captured_call(task, model, spm, lines: List[str]) -> Dict[str, np.ndarray]:
    """The inputs of the batch-1 greedy verify call with the longest cache."""
    import sampling_speed as speed
    from fairseq.dataclass.configs import GenerationConfig

    from nmt_specdec.decoding.backends.onnxruntime import graph_session
    from nmt_specdec.decoding.build import build_decoder
    from nmt_specdec.decoding.options import DecodingOptions

    generator = build_decoder(model, task.target_dictionary,
                              DecodingOptions(True, k=0, backend="onnxruntime"),
                              GenerationConfig(beam=1))
    calls, run = [], graph_session.GraphSession.run

    def capture(self, inputs, outputs):
        if "past_key_0" in self.inputs and inputs[0].shape == (1, 1):
            calls.append({n: inputs[i].detach().numpy().copy()
                          for n, i in zip(self.inputs, self.picked)})
        return run(self, inputs, outputs)

    graph_session.GraphSession.run = capture
    try:
        speed.decode(task, model, generator, speed.batches(task, spm, lines, 1))
    finally:
        graph_session.GraphSession.run = run
    return max(calls, key=lambda call: call["past_key_0"].shape[2])


def time_pair(paths: Dict[str, Path], feed: Dict[str, np.ndarray], rounds: int,
              calls: int) -> Dict[str, object]:
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions = {name: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                for name, path in paths.items()}
    feeds = {name: {i.name: feed[i.name] for i in s.get_inputs()} for name, s in sessions.items()}
    logits = {name: s.run(None, feeds[name])[0] for name, s in sessions.items()}
    times: Dict[str, List[float]] = {name: [] for name in sessions}
    for _ in range(rounds):
        for name, session in sessions.items():
            start = time.perf_counter()
            for _ in range(calls):
                session.run(None, feeds[name])
            times[name].append((time.perf_counter() - start) / calls * 1e3)
    return {"nodes": {name: len(onnx.load(str(p)).graph.node) for name, p in paths.items()},
            "difference": float(np.abs(logits["engine"] - logits["fused"]).max()),
            "ms": {name: statistics.median(t) for name, t in times.items()},
            "faster_rounds": sum(f < e for e, f in zip(times["engine"], times["fused"]))}


def main(argv: Optional[List[str]] = None) -> int:
    logs.setup(verbose=False)
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model)
    import sampling_speed as speed

    from nmt_specdec.evaluation.machine import cpu_model

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", default="models/gettext-de-en-base")
    p.add_argument("--src-file", required=True)
    p.add_argument("--sentences", type=int, default=8)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--calls", type=int, default=100, help="calls per graph a round")
    p.add_argument("--out", default="work/fused_attention")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    task, model, spm = speed.load(Path(args.model_dir))
    lines = Path(args.src_file).read_text(encoding="utf-8").splitlines()[: args.sentences]
    feed = captured_call(task, model, spm, lines)
    paths = export_pair(model, task.target_dictionary.pad(), Path(args.out))
    found = time_pair(paths, feed, args.rounds, args.calls)
    print(f"{args.model_dir}, one verify call over {feed['past_key_0'].shape[2]} cached slots, "
          f"1 thread, {cpu_model()}, median of {args.rounds} rounds of {args.calls} calls")
    print("| graph | nodes | ms a call |\n|---|---:|---:|")
    for name in ("engine", "fused"):
        print(f"| {name} | {found['nodes'][name]} | {found['ms'][name]:.3f} |")
    print(f"fused / engine {found['ms']['fused'] / found['ms']['engine']:.3f}; fused faster in "
          f"{found['faster_rounds']} of {args.rounds} rounds; largest logit difference "
          f"{found['difference']:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
