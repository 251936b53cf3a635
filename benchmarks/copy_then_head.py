"""The draft head and the verifier's 4-bit copy, interleaved sentence by sentence
with the engine's greedy: which drafter, at which K, is fastest? A probe.

The head guesses K tokens from the verifier's state before the token the loop
just committed (slot 1 kept ~70% of the time on the base model); the 4-bit copy
(``--spec-drafter verifier-int4``) guesses each token as the verifier does but
pays a call per drafted token. The fp32 verifier decides every token (beta = 1),
so every row must equal greedy.

Rows, interleaved sentence by sentence with the engine's greedy for ``--rounds``
timed rounds (``benchmarks/auto_overhead.py``), one per ``--rows`` entry
``DRAFTER:K:REFINE``: DRAFTER ``head`` or ``copy``; REFINE the head's refinement
runs. Prints tokens per iteration, acceptance per slot (given the slots before
it), whether the output equals greedy's, and greedy s / row s (median and
quartiles of the rounds). Batch 1, ONNX Runtime, fp32 (``--verifier-int8``: the 8-bit verifier,
greedy's too). It takes the
evaluation's options::

    M=models/gettext-de-en-base T=work/gettext-heldout/raw
    python benchmarks/copy_then_head.py --checkpoint $M/model.pt --draft-head $M/head.pt \\
        --data $M --spm-model $M/spm.model --src-file $T/test.de --ref-file $T/test.en \\
        --first-sentences 200 --max-len-a 1.2 --max-len-b 10 --threads 1 --out /tmp/cth \\
        --rows head:2:1 copy:4:1 copy:5:1 --rounds 3

Until commit 405850e it also had ``both`` rows: one copy call drafting slot 1 and
the head, anchored on the copy's state, the slots after it (docs/results.md, "The
4-bit copy, then the head": never faster than either alone). The copy's step
graph (:mod:`nmt_specdec.decoding.backends.onnxruntime.copy_graph`) returns no
states, so they are gone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.auto_overhead import interleaved_seconds, quartiles  # noqa: E402
from nmt_specdec import logs  # noqa: E402
from nmt_specdec.errors import UserError  # noqa: E402
from nmt_specdec.evaluation import cli  # noqa: E402

HEADER = ("| drafter | K | refine | tok/iter | acceptance per slot | = greedy | "
          "greedy s / row s |\n|---|---:|---:|---:|---|---:|---:|")
DRAFTERS = {"head": "head", "copy": "verifier-int4"}


def build_runs(cfg, rows: List[str], int8: bool = False) -> Dict[str, Any]:
    """The engine's greedy and one run per ``DRAFTER:K:REFINE`` row, batch 1
    (``int8``: the 8-bit verifier in every row, greedy's too)."""
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model, the safe loader)
    from nmt_specdec.evaluation import loading, metrics, pipeline, runner
    from nmt_specdec.evaluation.config import specdec
    from nmt_specdec.evaluation.testset import make_batches

    device = pipeline.setup_runtime(cfg)
    model, task = loading.load_checkpoint(cfg, device)
    detokenize = metrics.Detokenizer(task.target_dictionary, cfg.spm_model, cfg.post_process)
    batches = make_batches(task, pipeline.load_testset(cfg, task, detokenize).sources, 1, device)
    runner.freeze_heap()
    greedy = specdec(k=0, backend="onnxruntime", int8=int8)
    runs = {"greedy": runner.Run(greedy, 1, loading.build_generator(task, model, greedy, cfg),
                                 model, batches)}
    for row in rows:
        drafter, k, refine = row.split(":")
        if drafter not in DRAFTERS:
            raise UserError(f"--rows: DRAFTER must be one of {', '.join(DRAFTERS)}, got {row!r}")
        spec = specdec(k=int(k), beta=1, tau=0.0, backend="onnxruntime", int8=int8,
                       refine_steps=int(refine), drafter=DRAFTERS[drafter])
        runs[row] = runner.Run(spec, 1, loading.build_generator(task, model, spec, cfg), model,
                               batches)
    for run in runs.values():  # the first pass: warm-up, outputs and statistics
        runner.record_outputs(run, runner.decode_pass(task, run, device).hypotheses)
    return {"task": task, "runs": runs}


def format_row(row: str, run, greedy, seconds: Dict[str, List[float]]) -> str:
    from nmt_specdec.evaluation.metrics import count_differences

    stats = run.generator.stats
    same = len(greedy.outputs) - count_differences(run.outputs, greedy.outputs)
    rates = [a / d for a, d in zip(stats.accepted_per_slot, stats.drafted_per_slot) if d]
    low, mid, high = quartiles([g / s for g, s in zip(seconds["greedy"], seconds[row])])
    drafter, k, refine = row.split(":")
    return (f"| {drafter} | {k} | {refine} | {stats.mean_accepted_tokens:.2f} | "
            f"{' '.join(f'{r:.2f}' for r in rates)} | {same}/{len(greedy.outputs)} | "
            f"{mid:.3f} ({low:.3f}-{high:.3f}) |")


def main() -> int:
    logs.setup(verbose=False)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", nargs="+", default=["head:2:1", "copy:4:1", "copy:5:1"],
                        help="DRAFTER:K:REFINE each, DRAFTER head or copy")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed rounds, every row interleaved sentence by sentence")
    parser.add_argument("--verifier-int8", action="store_true",
                        help="the 8-bit verifier in every row (greedy's too) instead of fp32")
    args, evaluate_args = parser.parse_known_args()
    cfg = cli.config_from_args(cli.build_parser().parse_args(evaluate_args), evaluate_args)
    from nmt_specdec.evaluation.machine import cpu_isa, cpu_model

    try:
        built = build_runs(cfg, args.rows, args.verifier_int8)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    runs = built["runs"]
    seconds = interleaved_seconds(built["task"], runs, args.rounds)
    print(f"{cfg.checkpoint}, head {cfg.draft_head}: beta=1, batch 1, ONNX Runtime "
          f"{'int8' if args.verifier_int8 else 'fp32'}, "
          f"{args.rounds} interleaved rounds; {cpu_model()} ({cpu_isa()}), {cfg.threads} "
          f"thread(s)")
    print(HEADER)
    for row in args.rows:
        print(format_row(row, runs[row], runs["greedy"], seconds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
