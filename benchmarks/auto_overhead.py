"""What does ``--spec-k auto`` cost where drafting loses?

The main run's "vs engine greedy" for the auto rows is a ratio of medians of a few
passes, and on a shared 2-core machine one pass moves by 10-20%: it cannot tell
0.97 from 1.0. This script measures only that ratio, for each backend (and int8)
and batch size, from many passes of the engine's greedy and of auto over the same
sentences, alternating which goes first, the policy reset before every auto pass
as a fresh run starts it (so every pass pays auto's exploration):

- **pass ratio**: greedy seconds / auto seconds of each pair of passes, median and
  quartiles;
- at batch 1, **per sentence**: each sentence decoded by both, interleaved, the
  fastest of ``--sentence-repeats`` (for auto, of the repeats that drafted in it,
  if any did); auto's extra seconds split between the sentences it drafted in
  (exploration and re-checks) and those it decoded greedily (what a greedy
  sentence of auto costs: the target is nothing). On a shared machine a pass's
  ratio moves by a few percent from pass to pass; the split much less.

It takes the evaluation's options (``nmt-specdec-evaluate --help``: checkpoint,
test set, lengths, ``--batch-sizes``, ``--backend``, ``--int8``, ``--threads``)
beside its own. Example (from the repository root, ``work/gettext-heldout/raw``
from the README's quickstart)::

    python benchmarks/auto_overhead.py --checkpoint models/gettext-de-en-tiny/model.pt \\
        --data models/gettext-de-en-tiny --spm-model models/gettext-de-en-tiny/spm.model \\
        --src-file work/gettext-heldout/raw/test.de --ref-file work/gettext-heldout/raw/test.en \\
        --max-sentences 200 --max-len-a 1.2 --max-len-b 10 --batch-sizes 1 32 \\
        --backend torch onnxruntime --int8 --out /tmp/auto_overhead --passes 8
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec import logs  # noqa: E402
from nmt_specdec.evaluation import cli  # noqa: E402


def quartiles(values: List[float]) -> Tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, median, high = statistics.quantiles(values, n=4, method="inclusive")
    return low, median, high


def drafting_iterations(generator) -> int:
    return sum(count for k, count in generator.stats.k_chosen.items() if k)


def pass_ratios(task, runs: Dict[str, object], device, passes: int) -> List[float]:
    """greedy / auto seconds of ``passes`` pairs of whole passes, alternating the order."""
    from nmt_specdec.evaluation import runner

    ratios = []
    for index in range(passes):
        order = ("greedy", "auto") if index % 2 else ("auto", "greedy")
        seconds = {name: runner.decode_pass(task, runs[name], device).seconds for name in order}
        ratios.append(seconds["greedy"] / seconds["auto"])
    return ratios


def sentence_split(task, runs: Dict[str, object], repeats: int) -> Tuple[int, float, float, float]:
    """Batch 1: (sentences auto drafted in in any repeat, its extra seconds in them, its
    extra seconds in the others, greedy's seconds), each sentence the fastest of
    ``repeats`` pairs. A sentence auto drafted in is timed by the fastest repeat that
    drafted in it: its fastest repeat overall may be one that decoded it greedily,
    which would leave the exploration out of the count."""
    inf = float("inf")
    best = {name: [inf] * len(run.batches) for name, run in runs.items()}
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


def measure(cfg, args) -> List[str]:
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model, the safe loader)
    from nmt_specdec.evaluation import loading, metrics, pipeline, runner
    from nmt_specdec.evaluation.config import specdec
    from nmt_specdec.evaluation.testset import make_batches

    device = pipeline.setup_runtime(cfg)
    model, task = loading.load_checkpoint(cfg, device)
    detokenize = metrics.Detokenizer(task.target_dictionary, cfg.spm_model, cfg.post_process)
    testset = pipeline.load_testset(cfg, task, detokenize)
    engines = [(backend, False) for backend in cfg.backends]
    engines += [("onnxruntime", True)] if cfg.int8 else []
    lines = []
    runner.freeze_heap()
    for backend, int8 in engines:
        specs = {"greedy": specdec(k=0, backend=backend, int8=int8),
                 "auto": specdec(k=model.draft_block_size, auto_k=True, beta=1, tau=0.0,
                                 backend=backend, int8=int8)}
        generators = {name: loading.build_generator(task, model, spec, cfg)
                      for name, spec in specs.items()}
        for batch_size in cfg.batch_sizes:
            batches = make_batches(task, testset.sources, batch_size, device)
            runs = {name: runner.Run(spec, batch_size, generators[name], model, batches)
                    for name, spec in specs.items()}
            for run in runs.values():  # warm-up
                runner.decode_pass(task, run, device)
            low, median, high = quartiles(pass_ratios(task, runs, device, args.passes))
            drafted = drafting_iterations(runs["auto"].generator)
            iterations = sum(runs["auto"].generator.stats.k_chosen.values())
            name = backend + (" int8" if int8 else "")
            row = (f"| {name} | {batch_size} | {median:.3f} ({low:.3f}-{high:.3f}) | "
                   f"{drafted} of {iterations} |")
            if batch_size == 1:
                count, in_drafting, in_greedy, greedy = sentence_split(task, runs,
                                                                       args.sentence_repeats)
                row += (f" {count} of {len(batches)}: {in_drafting / greedy:+.2%} | "
                        f"{in_greedy / greedy:+.2%} |")
            else:
                row += " | |"
            print(row, flush=True)
            lines.append(row)
    return lines


def main() -> int:
    logs.setup(verbose=False)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=8, help="pairs of timed passes")
    parser.add_argument("--sentence-repeats", type=int, default=4,
                        help="batch 1: per-sentence pairs (the fastest is kept)")
    args, evaluate_args = parser.parse_known_args()
    cfg = cli.config_from_args(cli.build_parser().parse_args(evaluate_args), evaluate_args)
    from nmt_specdec.evaluation.machine import cpu_isa, cpu_model

    print(f"{cfg.checkpoint}: auto (K <= the head's block size, beta=1) against the engine's "
          f"greedy, {args.passes} pairs of passes; {cpu_model()} ({cpu_isa()}), "
          f"{cfg.threads} thread(s)")
    print("| backend | batch | greedy s / auto s: median (quartiles) | auto's drafting "
          "iterations (last pass) | batch 1: sentences drafted in, auto's extra time in them "
          "| in the others |")
    print("|---|---:|---:|---:|---:|---:|")
    measure(cfg, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
