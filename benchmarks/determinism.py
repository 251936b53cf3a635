"""How batch-dependent is translation, and what does --deterministic cost?

For one checkpoint and a binarized test split, decodes the whole split with
fairseq's own batching (``task.get_batch_iterator``, as ``fairseq-generate``)
at several batch sizes and counts sentences whose tokens differ from the
batch-1 output, for: stock greedy ``SequenceGenerator``, SpecDec beta=1, and
both again with ``--deterministic``. Then times deterministic vs plain at one
batch size (median of repeats) and reports the share of recomputed tokens.
Writes ``determinism.md`` and ``determinism.json`` into ``--out`` and prints the
tables.

Example (from the repository root)::

    python benchmarks/determinism.py --checkpoint work/long/ckpt/checkpoint_last.pt \\
        --data work/ding/bin --split test --first-sentences 100 --out results/determinism
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

import torch
from fairseq.dataclass.configs import GenerationConfig

from nmt_specdec.arguments import add_deprecated_alias
from nmt_specdec.errors import UserError

MODES = {  # name -> (spec_decoding, deterministic)
    "stock greedy": (False, False),
    "SpecDec beta=1": (True, False),
    "stock greedy --deterministic": (False, True),
    "SpecDec beta=1 --deterministic": (True, True),
}


def load(checkpoint: str, data: str, split: str):
    """(model, task) with the split loaded; checkpoints load through the safe loader."""
    import fairseq_plugins  # noqa: F401  (weights-only loading, task registration)
    from fairseq import checkpoint_utils

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides={"data": data})
    task.load_dataset(split)
    return models[0].eval(), task


def build(task, model, mode: str, gen_args: GenerationConfig):
    task.cfg.spec_decoding, task.cfg.deterministic = MODES[mode]
    return task.build_generator([model], gen_args)


def decode(task, model, generator, split: str, batch_size: int,
           max_sentences: int | None = None) -> Dict[int, List[int]]:
    """Sentence id -> output tokens, batched as fairseq-generate batches."""
    dataset = task.dataset(split)
    iterator = task.get_batch_iterator(
        dataset=dataset, max_sentences=batch_size, required_batch_size_multiple=1,
        max_positions=(10 ** 6, 10 ** 6), ignore_invalid_inputs=False, seed=1,
    ).next_epoch_itr(shuffle=False)
    outputs = {}
    for sample in iterator:
        keep = sample["id"] < max_sentences if max_sentences else None
        if keep is not None and not keep.any():
            continue
        hypos = generator.generate([model], sample)
        for sid, hypo in zip(sample["id"].tolist(), hypos):
            if not max_sentences or sid < max_sentences:
                outputs[sid] = hypo[0]["tokens"].tolist()
    return outputs


def count_differences(a: Dict[int, List[int]], b: Dict[int, List[int]]) -> int:
    return sum(a[i] != b[i] for i in a)


def batch_dependence(task, model, gen_args, split: str, batch_sizes: Sequence[int],
                     modes: Sequence[str], max_sentences: int | None) -> List[dict]:
    """Per mode: differing sentences at each batch size vs the first batch size."""
    rows = []
    for mode in modes:
        generator = build(task, model, mode, gen_args)
        runs = {bs: decode(task, model, generator, split, bs, max_sentences)
                for bs in batch_sizes}
        base = runs[batch_sizes[0]]
        rows.append({"mode": mode, "sentences": len(base),
                     "differ": {bs: count_differences(base, runs[bs]) for bs in batch_sizes[1:]}})
    return rows


def overhead(task, model, gen_args, split: str, batch_size: int, repeats: int,
             max_sentences: int | None) -> List[dict]:
    """Median wall time of each deterministic mode relative to its plain fast path."""
    results = []
    for plain, det in ((m, m + " --deterministic") for m in ("stock greedy", "SpecDec beta=1")):
        times = {plain: [], det: []}
        generators = {name: build(task, model, name, gen_args) for name in times}
        for _ in range(repeats + 1):  # the first round warms up
            for name, generator in generators.items():
                start = time.perf_counter()
                decode(task, model, generator, split, batch_size, max_sentences)
                times[name].append(time.perf_counter() - start)
        replay = generators[det].replay.stats
        share = replay.recomputed / max(replay.tokens, 1)
        plain_s, det_s = (statistics.median(times[n][1:]) for n in (plain, det))
        results.append({"mode": det, "batch_size": batch_size, "plain_s": plain_s,
                        "deterministic_s": det_s, "ratio": det_s / plain_s,
                        "recomputed_share": share})
    return results


def markdown(dependence: List[dict], costs: List[dict], batch_sizes: Sequence[int]) -> str:
    head = " | ".join(f"differ @ bs {bs}" for bs in batch_sizes[1:])
    lines = [f"| mode | sentences | {head} |", "|---" * (2 + len(batch_sizes[1:])) + "|"]
    for row in dependence:
        cells = " | ".join(str(row["differ"][bs]) for bs in batch_sizes[1:])
        lines.append(f"| {row['mode']} | {row['sentences']} | {cells} |")
    lines += ["", "| mode | batch | plain s | deterministic s | ratio | recomputed tokens |",
              "|---|---|---|---|---|---|"]
    for c in costs:
        lines.append(f"| {c['mode']} | {c['batch_size']} | {c['plain_s']:.2f} | "
                     f"{c['deterministic_s']:.2f} | {c['ratio']:.2f}x | "
                     f"{100 * c['recomputed_share']:.2f}% |")
    return "\n".join(lines) + "\n"


def gen_config(max_len_a: float, max_len_b: int) -> GenerationConfig:
    return GenerationConfig(beam=1, max_len_a=max_len_a, max_len_b=max_len_b)


def parse_args(argv: List[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, help="binarized data directory")
    p.add_argument("--split", default="test")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--timing-batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    first = p.add_argument("--first-sentences", dest="max_sentences", type=int, default=None,
                           metavar="N", help="first N sentence ids only")
    add_deprecated_alias(p, "--max-sentences", first)
    p.add_argument("--max-len-a", type=float, default=0.0)
    p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("results/determinism"))
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> str:
    """Measures, writes ``--out`` and returns the markdown tables."""
    for path in (args.checkpoint, args.data):
        if not os.path.exists(path):
            raise UserError(f"no such file or directory: {path}")
    torch.set_num_threads(args.threads)
    model, task = load(args.checkpoint, args.data, args.split)
    gen_args = gen_config(args.max_len_a, args.max_len_b)
    # A stock checkpoint has no draft head: only the greedy modes apply.
    modes = list(MODES) if hasattr(model, "draft_head") else [m for m in MODES
                                                              if "SpecDec" not in m]
    dependence = batch_dependence(task, model, gen_args, args.split, args.batch_sizes,
                                  modes, args.max_sentences)
    costs = overhead(task, model, gen_args, args.split, args.timing_batch_size,
                     args.repeats, args.max_sentences)
    table = markdown(dependence, costs, args.batch_sizes)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "determinism.md").write_text(table)
    (args.out / "determinism.json").write_text(json.dumps(
        {"threads": args.threads, "checkpoint": args.checkpoint, "dependence": dependence,
         "overhead": costs}, indent=2))
    return table


def main(argv: List[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        print(run(args))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
