"""What one SpecDec iteration costs, in stock greedy steps.

For each model shape and batch size, the same sentences are decoded by fairseq's
``SequenceGenerator`` (greedy) and by the engine at several K, interleaved,
``--repeats`` times; the median seconds are divided by loop turns (stock: one
decoding step per turn, i.e. the longest output of each batch; engine: one
draft+verify iteration per turn). A turn's cost is what speed divides by; the
tokens it commits (tok/iter) is what speed multiplies by. ``--backend`` chooses
who runs the engine's model calls (stock greedy is always fairseq's, in torch);
calls/iter counts the backend's runtime calls (verify + draft) per iteration.

Shapes measured: the given checkpoint (e.g. the reference verifier with its
draft head) and, with ``--base-shape``, a random-weight
``specdec_transformer_wmt_en_de`` (Transformer-base, 6+6 layers, d=512) over the
same dictionary: cost does not depend on the weights.

Example (from the repository root; ``work/gettext/bin`` from
``nmt-specdec-prepare-gettext --out work/gettext --model-dir models/gettext-de-en-tiny``)::

    python benchmarks/iteration_cost.py --checkpoint models/gettext-de-en-tiny/model.pt \\
        --data work/gettext/bin --batch-sizes 1 32 --ks 0 2 4 --backend onnxruntime
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Dict, List, Tuple

import torch
from fairseq.sequence_generator import SequenceGenerator

from nmt_specdec.decoding.backends import (
    BACKENDS,
    DEFAULT_BACKEND,
    check_backend,
    make_backend,
)
from nmt_specdec.decoding.generator import SpecDecGenerator
from nmt_specdec.decoding.options import DecodingOptions, LengthRules
from nmt_specdec.errors import UserError

Config = Tuple[str, int]  # ("stock", 0) or ("engine", K)


def _batches(dataset, count: int, size: int) -> List[dict]:
    return [dataset.collater([dataset[i] for i in range(s, min(s + size, count))])
            for s in range(0, count, size)]


Result = Tuple[float, int, float, float]


def _decode(generator, model, batches: List[dict]) -> Result:
    """(seconds, loop turns, committed tokens per iteration, runtime calls per
    iteration) of one pass."""
    backend = getattr(generator, "backend", None)
    calls_before = sum(backend.calls[kind] for kind in ("verify", "draft")) if backend else 0
    turns, start = 0, time.perf_counter()
    with torch.no_grad():
        for batch in batches:
            hyps = generator.generate([model], batch)
            turns += max(len(h[0]["tokens"]) for h in hyps)  # stock: one step per token
    seconds = time.perf_counter() - start
    stats = getattr(generator, "stats", None)
    if stats is None:
        return seconds, turns, 1.0, float("nan")
    iterations = sum(stats.k_chosen.values())
    calls = sum(backend.calls[kind] for kind in ("verify", "draft")) - calls_before
    return seconds, iterations, stats.mean_accepted_tokens, calls / max(1, iterations)


def measure(model, tgt_dict, dataset, sentences: int, batch_size: int, ks: List[int],
            repeats: int, max_len_a: float, max_len_b: int, backend: str = DEFAULT_BACKEND,
            int8: bool = False, fused_draft: bool = False) -> List[Dict]:
    """Rows of one model at one batch size (first row: stock greedy)."""
    runtime = make_backend(backend, model, tgt_dict, int8, fused_draft)  # shared by the rows
    batches = _batches(dataset, min(sentences, len(dataset)), batch_size)
    rules = LengthRules(max_len_a=max_len_a, max_len_b=max_len_b,
                        max_positions=model.max_decoder_positions())
    configs: List[Config] = [("stock", 0)] + [("engine", k) for k in ks]
    generators = {
        ("stock", 0): SequenceGenerator([model], tgt_dict, beam_size=1, max_len_a=max_len_a,
                                        max_len_b=max_len_b),
        **{("engine", k): SpecDecGenerator(model, tgt_dict, DecodingOptions(k=k), rules,
                                           backend=runtime)
           for k in ks},
    }
    results: Dict[Config, List[Result]] = {c: [] for c in configs}
    for config in configs:  # warm-up
        _decode(generators[config], model, batches[:1])
    for repeat in range(repeats):
        for i in range(len(configs)):
            config = configs[(i + repeat) % len(configs)]
            generator = generators[config]
            if config[0] == "engine":
                generator.stats = type(generator.stats)()
            results[config].append(_decode(generator, model, batches))
    stock_turn = statistics.median(r[0] / r[1] for r in results[("stock", 0)])
    label = runtime.name + (" int8" if int8 else "") + (" fused" if fused_draft else "")
    rows = []
    for config in configs:
        seconds = statistics.median(r[0] for r in results[config])
        turn = statistics.median(r[0] / r[1] for r in results[config])
        rows.append({"decoder": ("stock greedy (torch)" if config[0] == "stock"
                                 else f"engine K={config[1]} ({label})"),
                     "calls_per_iteration": results[config][0][3],
                     "batch": batch_size, "seconds": seconds, "ms_per_turn": 1e3 * turn,
                     "turn_over_stock_step": turn / stock_turn,
                     "tokens_per_iteration": results[config][0][2]})
    return rows


def random_base_model(task, seed: int = 1):
    """Transformer-base SpecDec model with random weights over the task's dictionaries."""
    from fairseq import options

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        "x", "--task", "translation_specdec", "--arch", "specdec_transformer_wmt_en_de",
        "--share-all-embeddings", "--cpu", "--criterion", "specdec_joint_loss"])
    torch.manual_seed(seed)
    saved = task.cfg.init_from_ar_checkpoint
    task.cfg.init_from_ar_checkpoint = None  # random weights, not the checkpoint's verifier
    try:
        return task.build_model(args).eval()
    finally:
        task.cfg.init_from_ar_checkpoint = saved


def format_rows(name: str, rows: List[Dict]) -> str:
    lines = []
    for row in rows:
        lines.append(f"| {name} | {row['batch']} | {row['decoder']} | {row['seconds']:.3f} | "
                     f"{row['ms_per_turn']:.2f} | {row['turn_over_stock_step']:.2f}x | "
                     f"{row['tokens_per_iteration']:.2f} | {_calls(row)} |")
    return "\n".join(lines)


def _calls(row: Dict) -> str:
    calls = row["calls_per_iteration"]
    return "n/a" if calls != calls else f"{calls:.2f}"  # NaN: stock greedy


HEADER = ("| model | batch | decoder | seconds | ms per turn | turn / stock step | tok/iter "
          "| calls/iter |\n|---|---:|---|---:|---:|---:|---:|---:|")


def main(argv: List[str] | None = None) -> int:
    import fairseq_plugins  # noqa: F401  (registers the model; safe loading)

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    p.add_argument("--ks", type=int, nargs="+", default=[0, 4, 10])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--backend", choices=BACKENDS, default=DEFAULT_BACKEND,
                   help="who runs the engine's model calls")
    p.add_argument("--int8", action="store_true",
                   help="with --backend onnxruntime: 8-bit verifier and draft weights")
    p.add_argument("--fused-draft", action="store_true",
                   help="with --backend onnxruntime: draft inside the verify call")
    p.add_argument("--base-shape", action="store_true",
                   help="also measure a random-weight Transformer-base (wmt_en_de shape)")
    args = p.parse_args(argv)
    try:
        check_backend(args.backend, args.int8, args.fused_draft)
        return run(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    """Prints the table for parsed ``main`` arguments."""
    from fairseq import checkpoint_utils

    torch.set_num_threads(args.threads)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [args.checkpoint], arg_overrides={"data": args.data})
    task.load_dataset(args.split)
    shapes = [("checkpoint", models[0].eval())]
    if args.base_shape:
        shapes.append(("transformer-base (random)", random_base_model(task)))
    print(HEADER)
    for name, model in shapes:
        for batch_size in args.batch_sizes:
            rows = measure(model, task.target_dictionary, task.dataset(args.split),
                           args.sentences, batch_size, args.ks, args.repeats,
                           args.max_len_a, args.max_len_b, args.backend, args.int8,
                           args.fused_draft)
            print(format_rows(name, rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
