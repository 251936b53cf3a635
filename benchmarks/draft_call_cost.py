"""What a draft call adds to an iteration, for draft heads of other shapes.

A draft call reads the head's weights from memory anew each iteration: the
verify call before it sweeps them out of the caches, so a draft call costs more
inside the loop than alone. This times the exported ONNX graphs as the engine
runs them at batch 1 on a CPU (the fp32 verifier with its certified output
projection, or with ``--int8`` the 8-bit one; the engine's 4-bit draft graph):
a verify call over K+1 positions alone, and
followed by each head's draft call, alternating in rounds; the difference is
what the head adds to an iteration. Heads other than the checkpoint's have
random weights: their time only (a head's cost does not depend on its values).

Example (the base model's verifier and its shipped head, from the repository root)::

    python benchmarks/draft_call_cost.py --checkpoint models/gettext-de-en-base/model.pt \\
        --draft-head models/gettext-de-en-base/head.pt --data work/gettext/bin \\
        --heads 1024:1:2 512:1:2 512:1:1 2048:0:0

``--heads`` takes FFN:REFINE_LAYERS:REFINE_STEPS per head (one first-pass layer
each, the checkpoint's draft vocabulary size); ``--weights`` BITS:BLOCK adds the
checkpoint's head with other draft weights (e.g. ``8:64 4:128``).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.runtimes import add_call_arguments, load_checkpoint  # noqa: E402
from nmt_specdec.errors import UserError  # noqa: E402


def random_head(model, ffn: int, refine_layers: int, refine_steps: int):
    """A draft head of this shape for ``model``'s verifier, random weights."""
    from nmt_specdec.model.draft_head import DraftHead

    config = model.decoder.cfg.decoder
    kept, config.ffn_embed_dim = config.ffn_embed_dim, ffn
    try:
        torch.manual_seed(0)
        head = DraftHead(model.decoder, 1, vocab_size=model.draft_head.vocab_size,
                         refine_layers=refine_layers, refine_steps=max(refine_steps, 1))
    finally:
        config.ffn_embed_dim = kept
    for weight in head.parameters():
        if weight.dim() > 1:
            torch.nn.init.normal_(weight, 0.0, 0.02)
    return head


def export_draft_graphs(model, task, heads: Dict[str, tuple], root: Path) -> Dict[str, Path]:
    """Each head's graph directory (the checkpoint's head as ``checkpoint``)."""
    from nmt_specdec.decoding.backends.onnxruntime import export

    own, dictionary, out = model.draft_head, task.target_dictionary, {}
    for name, shape in heads.items():
        model.draft_head = own if shape is None else random_head(model, *shape)
        steps = None if shape is None else (shape[2] if shape[1] else None)
        out[name] = export.graph_dir(model, dictionary.pad(), dictionary.eos(), False, root=root,
                                     int8_draft=True, certified=True, refine_steps=steps)
    model.draft_head = own
    return out


def requantized_drafts(model, task, specs: List[str], root: Path) -> Dict[str, Path]:
    """The checkpoint's head's draft graph with other weights, BITS:BLOCK each
    (quantized from its fp32 graph as the engine quantizes its own)."""
    from nmt_specdec.decoding.backends.onnxruntime import export
    from nmt_specdec.decoding.backends.onnxruntime.quantize import quantize_graph

    dictionary, out = task.target_dictionary, {}
    fp32 = export.graph_dir(model, dictionary.pad(), dictionary.eos(), False, root=root,
                            certified=True) / "draft.onnx"
    for spec in specs:
        bits, block = (int(value) for value in spec.split(":"))
        path = root / f"draft-{bits}bit-{block}.onnx"
        shutil.copy(fp32, path)
        quantize_graph(path, bits=bits, block=block)
        out[f"checkpoint's head, {bits}-bit weights in blocks of {block}"] = path
    return out


def verify_graph(model, task, root: Path, int8: bool) -> Path:
    """The verify graph the engine runs: fp32 with its certified projection, or 8-bit."""
    from nmt_specdec.decoding.backends.onnxruntime import export

    dictionary = task.target_dictionary
    return export.graph_dir(model, dictionary.pad(), dictionary.eos(), int8, root=root,
                            int8_draft=True, certified=True) / "verify.onnx"


def session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def verify_feeds(model, new: int, past: int, source: int,
                 same_bits: bool = False) -> Dict[str, np.ndarray]:
    """One verify call's inputs: ``new`` positions after ``past`` cached ones
    (``same_bits``: the 8-bit graph's attention layout, which reads ``slot_index``)."""
    from nmt_specdec.decoding.backends.onnxruntime.attention_inputs import example_inputs

    heads = model.decoder.layers[0].self_attn.num_heads
    dim = model.decoder.embed_tokens.embedding_dim // heads
    slots, chain = past + new + 4, torch.arange(new)
    mask, index = example_inputs(heads, same_bits, torch.tensor([past]), slots,
                                 chain.view(-1, 1) >= chain.view(1, -1))
    feeds = {"tokens": np.full((1, new), 20), "start": np.array([past]),
             "memory_mask": np.ones((1, 1, 1, source), bool), "offsets": np.arange(new),
             "self_mask": mask.numpy()}
    if same_bits:
        feeds["slot_index"] = index.numpy()
    rng = np.random.default_rng(0)
    for layer in range(len(model.decoder.layers)):
        for kind, length in (("past", slots), ("cross", source)):
            for part in ("key", "value"):
                feeds[f"{kind}_{part}_{layer}"] = rng.standard_normal(
                    (1, heads, length, dim)).astype(np.float32)
    return feeds


def draft_feeds(draft, k: int, past: int, source: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    dim = next(i.shape[1] for i in draft.get_inputs() if i.name == "states")
    feeds = {"states": rng.standard_normal((1, dim)).astype(np.float32),
             "last_tokens": np.array([15]), "block_positions": np.arange(past, past + k + 1)[None],
             "memory_mask": np.ones((1, 1, 1, source), bool), "candidate_slots": np.array([0])}
    for graph_input in draft.get_inputs():
        if graph_input.name.startswith("draft_"):
            shape = [1] + [d if isinstance(d, int) else source for d in graph_input.shape[1:]]
            feeds[graph_input.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def time_pairs(verify, verify_in, drafts: Dict[str, tuple], rounds: int,
               calls: int) -> Dict[str, float]:
    """Median ms of a verify call followed by each draft call (None: alone)."""
    seconds: Dict[str, List[float]] = {name: [] for name in drafts}
    for _ in range(rounds):
        for name, pair in drafts.items():
            start = time.perf_counter()
            for _ in range(calls):
                verify.run(None, verify_in)
                if pair is not None:
                    pair[0].run(None, pair[1])
            seconds[name].append(1e3 * (time.perf_counter() - start) / calls)
    return {name: statistics.median(values) for name, values in seconds.items()}


def main(argv: Optional[List[str]] = None) -> int:
    import fairseq_plugins  # noqa: F401  (the SpecDec model, the safe loader)

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_call_arguments(p)
    p.add_argument("--draft-head", help="a head file for a stock verifier checkpoint")
    p.add_argument("--heads", nargs="*", default=[], help="FFN:REFINE_LAYERS:REFINE_STEPS each")
    p.add_argument("--weights", nargs="*", default=[],
                   help="BITS:BLOCK each: the checkpoint's head with these draft weights too")
    p.add_argument("--int8", action="store_true", help="after the 8-bit verify call (--int8)")
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--calls", type=int, default=40)
    args = p.parse_args(argv)
    try:
        from nmt_specdec.model.head_file import attach_head_file

        model, task = load_checkpoint(args.checkpoint, args.data)
        if args.draft_head:
            attach_head_file(model, Path(args.draft_head))
        if not hasattr(model, "draft_head"):
            raise UserError("the checkpoint has no draft head: pass --draft-head")
        heads = {"checkpoint's head": None}
        heads.update({f"ffn {f}, refine {r}x{s}": (int(f), int(r), int(s))
                      for f, r, s in (spec.split(":") for spec in args.heads)})
        with tempfile.TemporaryDirectory() as root:
            paths = {name: directory / "draft.onnx" for name, directory
                     in export_draft_graphs(model, task, heads, Path(root)).items()}
            paths.update(requantized_drafts(model, task, args.weights, Path(root)))
            verify = session(verify_graph(model, task, Path(root), args.int8), args.threads)
            drafts = {"(verify alone)": None}
            for name, path in paths.items():
                draft = session(path, args.threads)
                drafts[name] = (draft, draft_feeds(draft, args.k, args.past, args.source))
            feeds = verify_feeds(model, args.k + 1, args.past, args.source, args.int8)
            ms = time_pairs(verify, feeds, drafts, args.rounds, args.calls)
            sizes = {name: path.stat().st_size / 1e6 for name, path in paths.items()}
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    alone = ms.pop("(verify alone)")
    print(f"{'8-bit' if args.int8 else 'fp32'} verify call over {args.k + 1} positions alone: "
          f"{alone:.3f} ms (median of "
          f"{args.rounds} rounds of {args.calls})\n")
    print("| draft head | MB of draft graph | verify + draft ms | the draft call adds |")
    print("|---|---:|---:|---:|")
    for name, value in ms.items():
        print(f"| {name} | {sizes[name]:.1f} | {value:.3f} | {value - alone:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
