"""How much does a memory-heavy neighbour slow each decoder down?

On a shared machine (a cloud VM beside other tenants, or a second job on the
same box) another process streaming through memory takes shared cache and
memory bandwidth. The ratios of ``nmt-specdec-evaluate`` move from run to run
on such a machine; this script measures how sensitive each greedy decoder is,
at batch 1: whole passes over the same sentences, quiet and with a neighbour
process copying a large array in a loop on another core, the decoders
alternating in every pass pair. It prints each decoder's median seconds quiet
and loaded, and the slowdown.

It takes the evaluation's options (``nmt-specdec-evaluate --help``: checkpoint,
test set, lengths, ``--threads``); rows: the engine's greedy on ONNX Runtime in
fp32 and int8, and CTranslate2 fp32 and int8 when it is installed. Example (from
the repository root, ``work/gettext-heldout/raw`` from the README's quickstart)::

    python benchmarks/neighbour_load.py --checkpoint models/gettext-de-en-tiny/model.pt \\
        --data models/gettext-de-en-tiny --spm-model models/gettext-de-en-tiny/spm.model \\
        --src-file work/gettext-heldout/raw/test.de --ref-file work/gettext-heldout/raw/test.en \\
        --first-sentences 500 --max-len-a 1.2 --max-len-b 10 --threads 1 --out /tmp/neighbour \\
        --passes 4 --neighbour-mib 64

With ``--threads 1`` on a 2-core machine the neighbour has the other core to
itself, so what it takes is cache and memory bandwidth, not CPU time.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec import logs  # noqa: E402
from nmt_specdec.evaluation import cli  # noqa: E402

# Copies one array into another for ever: reads and writes 2 x MIB of memory a round.
NEIGHBOUR = ("import sys, numpy as np\n"
             "a = np.ones(int(sys.argv[1]) << 17); b = np.empty_like(a)\n"
             "while True:\n    np.copyto(b, a)\n")


def start_neighbour(mib: int) -> subprocess.Popen:
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(mib)])
    time.sleep(1.0)  # its arrays allocated and touched before the first timed pass
    return neighbour


def build_runs(cfg) -> tuple:
    """The task, the device and one batch-1 run per decoder."""
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model, the safe loader)
    from nmt_specdec.decoding.options import DecodingOptions
    from nmt_specdec.evaluation import loading, metrics, pipeline, runner
    from nmt_specdec.evaluation.config import DecoderSpec, specdec
    from nmt_specdec.evaluation.ct2 import ct2_supports
    from nmt_specdec.evaluation.testset import make_batches

    device = pipeline.setup_runtime(cfg)
    model, task = loading.load_checkpoint(cfg, device)
    detokenize = metrics.Detokenizer(task.target_dictionary, cfg.spm_model, cfg.post_process)
    testset = pipeline.load_testset(cfg, task, detokenize)
    specs = [specdec(k=0, backend="onnxruntime"), specdec(k=0, backend="onnxruntime", int8=True)]
    ct2 = [DecoderSpec("ct2"), DecoderSpec("ct2", decoding=DecodingOptions(int8=True))]
    specs += [spec for spec in ct2 if ct2_supports(spec, device)]
    batches = make_batches(task, testset.sources, 1, device)
    runs = [runner.Run(spec, 1, loading.build_generator(task, model, spec, cfg), model, batches)
            for spec in specs]
    return task, device, runs


def timed_passes(task, runs, device, passes: int) -> Dict[str, List[float]]:
    """``passes`` rounds of one pass per run, the order reversed every other round."""
    from nmt_specdec.evaluation import runner

    seconds: Dict[str, List[float]] = {run.spec.name: [] for run in runs}
    for index in range(passes):
        for run in (runs if index % 2 == 0 else runs[::-1]):
            seconds[run.spec.name].append(runner.decode_pass(task, run, device).seconds)
    return seconds


def main() -> int:
    logs.setup(verbose=False)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=4, help="timed passes per decoder and state")
    parser.add_argument("--neighbour-mib", type=int, default=64,
                        help="size of each of the neighbour's two arrays (MiB)")
    args, evaluate_args = parser.parse_known_args()
    cfg = cli.config_from_args(cli.build_parser().parse_args(evaluate_args), evaluate_args)
    from nmt_specdec.evaluation import runner
    from nmt_specdec.evaluation.machine import cpu_isa, cpu_model

    task, device, runs = build_runs(cfg)
    runner.freeze_heap()
    for run in runs:  # warm-up
        runner.decode_pass(task, run, device)
    quiet = timed_passes(task, runs, device, args.passes)
    neighbour = start_neighbour(args.neighbour_mib)
    try:
        loaded = timed_passes(task, runs, device, args.passes)
    finally:
        neighbour.kill()
        neighbour.wait()
    after = timed_passes(task, runs, device, args.passes)
    print(f"{cfg.checkpoint}, batch 1, {len(runs[0].batches)} sentences, {args.passes} passes "
          f"each; neighbour: copies {args.neighbour_mib} MiB arrays; {cpu_model()} "
          f"({cpu_isa()}), {cfg.threads} thread(s)")
    print("| decoder | quiet s (median) | with the neighbour s | slowdown | quiet again s |")
    print("|---|---:|---:|---:|---:|")
    for name in quiet:
        before, during = statistics.median(quiet[name]), statistics.median(loaded[name])
        print(f"| {name} | {before:.3f} | {during:.3f} | {during / before:.2f}x | "
              f"{statistics.median(after[name]):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
