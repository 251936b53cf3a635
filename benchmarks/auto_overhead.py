"""What does ``--spec-k auto`` cost against the engine's greedy, and against the best fixed K?

The main run's "vs engine greedy" for the auto rows is a ratio of medians of a few
passes, and on a shared 2-core machine one pass moves by 10-20%: it cannot tell
0.97 from 1.0. This script measures only auto's ratios, for each backend (and
int8) and batch size, from many passes of the engine's greedy, of auto and of
each ``--fixed-k`` over the same sentences, every arm once a round in a rotating
order, the policy reset before every auto pass as a fresh run starts it (so
every pass pays auto's exploration; ``--interleave``: every round decodes the
sentences one batch at a time with each arm in turn, so that the arms share the
machine's drifts, which move whole passes by more than the margins measured):

- **greedy s / auto s** of each round, median and quartiles (where drafting
  loses: the target is >= 0.98);
- **best fixed K s / auto s**, the fixed K with the fewest median seconds
  (where drafting pays: the target is >= 0.97);
- **per batch** (per sentence at batch 1): each batch decoded by greedy and
  auto, interleaved, the fastest of ``--split-repeats`` (for auto, of the
  repeats that drafted in it, if any did); auto's extra seconds split between
  the batches it drafted in (exploration and re-checks) and those it decoded
  greedily (what a greedy batch of auto costs: the target is nothing, >= 0.99).
  A pass's ratio moves by a few percent from pass to pass; the split much less.
- **by source length** (``--by-length``, batch 1): per group of sentences of
  like source length (1, 2, 3-4, 5-8, ... tokens), greedy's seconds and each
  fixed K's ratio to them, each sentence the fastest of ``--split-repeats``,
  and how many of the group's sentences auto drafted in on a pass of its own:
  where drafting pays, and whether auto finds it.

``--drafter verifier-int8`` drafts with the verifier's own 8-bit copy (ONNX
Runtime only); ``--shape base`` (or ``tiny``, ``big``) replaces the checkpoint by a
random-weight model of that shape (:mod:`benchmarks.cost_model`): such a model
does not translate, so its ratios are time per token only. Drafting pays nowhere
on the shipped model on an AMD EPYC; with the 8-bit copy on the base shape it
does, a little.

It takes the evaluation's options (``nmt-specdec-evaluate --help``: checkpoint,
test set, lengths, ``--batch-sizes``, ``--backend``, ``--int8``, ``--threads``)
beside its own. Examples (from the repository root, ``work/gettext-heldout/raw``
from the README's quickstart)::

    python benchmarks/auto_overhead.py --checkpoint models/gettext-de-en-tiny/model.pt \\
        --data models/gettext-de-en-tiny --spm-model models/gettext-de-en-tiny/spm.model \\
        --src-file work/gettext-heldout/raw/test.de --ref-file work/gettext-heldout/raw/test.en \\
        --first-sentences 500 --max-len-a 1.2 --max-len-b 10 --batch-sizes 1 32 \\
        --backend torch onnxruntime --int8 --out /tmp/auto_overhead --passes 8
    # where drafting pays (random weights, time per token only):
    python benchmarks/auto_overhead.py ... --first-sentences 100 --batch-sizes 1 \\
        --backend onnxruntime --shape base --drafter verifier-int8 --fixed-k 3 4 --passes 8
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec import logs  # noqa: E402
from nmt_specdec.decoding.build import largest_k  # noqa: E402
from nmt_specdec.decoding.options import (  # noqa: E402
    DRAFTERS,
    VERIFIER_COPIES,
    VERIFIER_DRAFTER_K,
)
from nmt_specdec.evaluation import cli  # noqa: E402


def quartiles(values: List[float]) -> Tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, median, high = statistics.quantiles(values, n=4, method="inclusive")
    return low, median, high


def drafting_iterations(generator) -> int:
    return sum(count for k, count in generator.stats.k_chosen.items() if k)


def pass_seconds(task, runs: Dict[str, object], device, rounds: int) -> Dict[str, List[float]]:
    """Seconds of ``rounds`` whole passes of every run, each round in another order
    (the runs rotated by one), so that no run always follows the same one."""
    from nmt_specdec.evaluation import runner

    names = list(runs)
    seconds: Dict[str, List[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            seconds[name].append(runner.decode_pass(task, runs[name], device).seconds)
    return seconds


class Ratios(NamedTuple):
    """Round-by-round ratios against auto: (low quartile, median, high quartile)."""

    greedy: Tuple[float, float, float]  # greedy s / auto s
    best_k: Optional[str]  # the fixed K with the fewest median seconds
    best: Optional[Tuple[float, float, float]]  # its s / auto s


def interleaved_seconds(task, runs: Dict[str, object], rounds: int) -> Dict[str, List[float]]:
    """Seconds of ``rounds`` passes of every run, the runs interleaved batch by batch
    (each batch decoded by every run in turn, the order rotated by one a batch), so
    that every run meets the same moments of the machine: on a shared machine whole
    passes drift by 5-10% from one to the next, several times the margins measured.
    Auto's policy is reset before each round and carries over from batch to batch
    as in a pass of its own; its statistics are the last round's (a set of runs
    without auto: fixed ones only)."""
    from nmt_specdec.decoding.stats import SpecDecStats

    names = list(runs)
    seconds: Dict[str, List[float]] = {name: [] for name in names}
    for _ in range(rounds):
        if "auto" in runs:
            runs["auto"].generator.reset_k_policy()
            runs["auto"].generator.stats = SpecDecStats()
        totals = dict.fromkeys(names, 0.0)
        gc.collect()
        gc.disable()
        for index in range(len(runs[names[0]].batches)):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                task.inference_step(runs[name].generator, [runs[name].model],
                                    runs[name].batches[index].sample)
                totals[name] += time.perf_counter() - start
        gc.enable()
        for name in names:
            seconds[name].append(totals[name])
    return seconds


def ratios(seconds: Dict[str, List[float]]) -> Ratios:
    """``seconds``: per run ("greedy", "auto", fixed K runs "K=k"), one entry a round."""
    auto = seconds["auto"]

    def against_auto(name: str) -> Tuple[float, float, float]:
        return quartiles([s / a for s, a in zip(seconds[name], auto)])

    fixed = [name for name in seconds if name.startswith("K=")]
    if not fixed:
        return Ratios(against_auto("greedy"), None, None)
    best = min(fixed, key=lambda name: statistics.median(seconds[name]))
    return Ratios(against_auto("greedy"), best, against_auto(best))


def split_by_drafting(task, runs: Dict[str, object],
                      repeats: int) -> Tuple[int, float, float, float]:
    """(batches auto drafted in in any repeat, its extra seconds in them, its extra
    seconds in the others, greedy's seconds), each batch (a sentence at batch 1) the
    fastest of ``repeats`` pairs. A batch auto drafted in is timed by the fastest
    repeat that drafted in it: its fastest repeat overall may be one that decoded it
    greedily, which would leave the exploration out of the count."""
    inf = float("inf")
    best = {name: [inf] * len(runs[name].batches) for name in ("greedy", "auto")}
    best_drafting = [inf] * len(runs["auto"].batches)
    auto = runs["auto"].generator
    for repeat in range(repeats):
        auto.reset_k_policy()
        gc.collect()
        gc.disable()
        for index, batch in enumerate(runs["auto"].batches):
            for name in ("greedy", "auto") if (index + repeat) % 2 else ("auto", "greedy"):
                before = drafting_iterations(auto)
                start = time.perf_counter()
                task.inference_step(runs[name].generator, [runs[name].model], batch.sample)
                seconds = time.perf_counter() - start
                best[name][index] = min(best[name][index], seconds)
                if name == "auto" and drafting_iterations(auto) > before:
                    best_drafting[index] = min(best_drafting[index], seconds)
        gc.enable()
    drafted = [seconds < inf for seconds in best_drafting]
    auto_seconds = [d if d < inf else a for d, a in zip(best_drafting, best["auto"])]
    extra = [a - g for a, g in zip(auto_seconds, best["greedy"])]
    in_drafting = sum(e for e, d in zip(extra, drafted) if d)
    return sum(drafted), in_drafting, sum(extra) - in_drafting, sum(best["greedy"])


def by_length(task, runs: Dict[str, object], repeats: int) -> List[str]:
    """Table rows: per source length group (powers of two), greedy's seconds and
    each fixed K's ratio to them (each sentence the fastest of ``repeats``, the
    arms interleaved), and the sentences auto drafted in on a pass of its own."""
    from nmt_specdec.decoding.k_policy import CostTable

    fixed = [name for name in runs if name.startswith("K=")]
    batches = runs["greedy"].batches
    best = {name: [float("inf")] * len(batches) for name in ["greedy", *fixed]}
    for repeat in range(repeats):
        for index, batch in enumerate(batches):
            names = ["greedy", *fixed]
            for name in names[repeat % len(names):] + names[:repeat % len(names)]:
                start = time.perf_counter()
                task.inference_step(runs[name].generator, [runs[name].model], batch.sample)
                best[name][index] = min(best[name][index], time.perf_counter() - start)
    auto = runs["auto"].generator
    auto.reset_k_policy()
    drafted = []
    for batch in batches:
        task.inference_step(auto, [runs["auto"].model], batch.sample)
        drafted.append(auto.k_policy.may_draft)
    groups: Dict[int, List[int]] = {}
    for index, batch in enumerate(batches):
        length = batch.sample["net_input"]["src_tokens"].size(1)
        groups.setdefault(CostTable.bucket(length), []).append(index)
    rows = []
    for group, members in sorted(groups.items()):
        greedy = sum(best["greedy"][i] for i in members)
        cells = [f"{greedy / sum(best[name][i] for i in members):.3f}" for name in fixed]
        span = str(group) if group <= 2 else f"{group // 2 + 1}-{group}"
        rows.append(f"| {span} | {len(members)} | {greedy:.2f} | {' | '.join(cells)} | "
                    f"{sum(drafted[i] for i in members)} |")
    speedups = " | ".join(f"{name} speedup" for name in fixed)
    header = (f"| source tokens | sentences | greedy s | {speedups} | auto's drafting sentences |"
              "\n|---|" + "---:|" * (len(fixed) + 3))
    return [header, *rows]


def format_row(name: str, batch_size: int, found: Ratios, drafted: int, iterations: int,
               split: Tuple[int, float, float, float], batches: int) -> str:
    """One table row (see :data:`HEADER`)."""
    low, median, high = found.greedy
    row = f"| {name} | {batch_size} | {median:.3f} ({low:.3f}-{high:.3f}) | "
    if found.best is None:
        row += "| "
    else:
        low, median, high = found.best
        row += f"{found.best_k}: {median:.3f} ({low:.3f}-{high:.3f}) | "
    count, in_drafting, in_greedy, greedy = split
    return (row + f"{drafted} of {iterations} | {count} of {batches}: "
            f"{in_drafting / greedy:+.2%} | {in_greedy / greedy:+.2%} |")


HEADER = ("| backend | batch | greedy s / auto s: median (quartiles) | best fixed K s / auto s "
          "| auto's drafting iterations (last pass) | batches (sentences at batch 1) drafted "
          "in, auto's extra time in them | in the others |\n"
          "|---|---:|---:|---:|---:|---:|---:|")


def load_model(cfg, args, device):
    """(model, task): the checkpoint's, or a random-weight model of ``--shape``."""
    from nmt_specdec.evaluation import loading

    model, task = loading.load_checkpoint(cfg, device)
    if args.shape != "checkpoint":
        from benchmarks.cost_model import SHAPES, random_shape_model

        model = random_shape_model(model, task, SHAPES[args.shape], args.seed).to(device)
    return model, task


def measure(cfg, args) -> List[str]:
    """Prints the main table's rows; returns the ``--by-length`` tables."""
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model, the safe loader)
    from nmt_specdec.evaluation import loading, metrics, pipeline, runner
    from nmt_specdec.evaluation.config import specdec
    from nmt_specdec.evaluation.testset import make_batches

    device = pipeline.setup_runtime(cfg)
    model, task = load_model(cfg, args, device)
    detokenize = metrics.Detokenizer(task.target_dictionary, cfg.spm_model, cfg.post_process)
    testset = pipeline.load_testset(cfg, task, detokenize)
    engines = [(backend, False) for backend in cfg.backends]
    engines += [("onnxruntime", True)] if cfg.int8 else []
    tables = []
    runner.freeze_heap()
    for backend, int8 in engines:
        common = dict(beta=1, tau=0.0, backend=backend, int8=int8, drafter=args.drafter)
        # auto's largest K: a copy's own (it needs no head), else the head's block.
        cap = largest_k(model, args.drafter)
        specs = {"greedy": specdec(k=0, backend=backend, int8=int8),
                 "auto": specdec(k=cap, auto_k=True, **common),
                 **{f"K={k}": specdec(k=k, **common) for k in args.fixed_k}}
        generators = {name: loading.build_generator(task, model, spec, cfg)
                      for name, spec in specs.items()}
        for batch_size in cfg.batch_sizes:
            batches = make_batches(task, testset.sources, batch_size, device)
            runs = {name: runner.Run(spec, batch_size, generators[name], model, batches)
                    for name, spec in specs.items()}
            for run in runs.values():  # warm-up
                runner.decode_pass(task, run, device)
            timed = (interleaved_seconds(task, runs, args.passes) if args.interleave
                     else pass_seconds(task, runs, device, args.passes))
            found = ratios(timed)
            drafted = drafting_iterations(runs["auto"].generator)
            iterations = sum(runs["auto"].generator.stats.k_chosen.values())
            split = split_by_drafting(task, runs, args.split_repeats)
            name = backend + (" int8" if int8 else "")
            row = format_row(name, batch_size, found, drafted, iterations, split, len(batches))
            print(row, flush=True)
            if args.by_length and batch_size == 1:
                tables.append(f"\n{name}, batch 1, by source length:\n"
                              + "\n".join(by_length(task, runs, args.split_repeats)))
    return tables


def main() -> int:
    logs.setup(verbose=False)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=8,
                        help="timed rounds (a pass of every arm each)")
    parser.add_argument("--split-repeats", type=int, default=4,
                        help="per-batch pairs (the fastest is kept)")
    parser.add_argument("--fixed-k", type=int, nargs="*", default=[],
                        help="fixed K arms auto is compared with (where drafting pays)")
    parser.add_argument("--interleave", action="store_true",
                        help="each round decodes batch by batch with every arm in turn, "
                             "instead of whole passes one after another")
    parser.add_argument("--by-length", action="store_true",
                        help="also a table by source length (batch 1): fixed K against greedy")
    parser.add_argument("--drafter", choices=DRAFTERS, default="head")
    parser.add_argument("--shape", choices=("checkpoint", "tiny", "base", "big"),
                        default="checkpoint",
                        help="a random-weight model of this shape instead of the checkpoint "
                             "(time per token only)")
    parser.add_argument("--seed", type=int, default=1, help="of the random-weight model")
    args, evaluate_args = parser.parse_known_args()
    cfg = cli.config_from_args(cli.build_parser().parse_args(evaluate_args), evaluate_args)
    from nmt_specdec.evaluation.machine import cpu_isa, cpu_model

    model = ("the checkpoint" if args.shape == "checkpoint" else
             f"a random-weight {args.shape} model (time per token only)")
    cap = (f"K <= {VERIFIER_DRAFTER_K}" if args.drafter in VERIFIER_COPIES
           else "K <= the head's block size")
    print(f"{cfg.checkpoint}, {model}: auto ({cap}, beta=1, drafter {args.drafter}) against "
          f"the engine's greedy and fixed K {args.fixed_k}, {args.passes} rounds of "
          f"{'interleaved ' if args.interleave else ''}passes; {cpu_model()} ({cpu_isa()}), "
          f"{cfg.threads} thread(s)")
    print(HEADER)
    for table in measure(cfg, args):
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
