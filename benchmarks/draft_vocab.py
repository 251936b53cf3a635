"""What drafting from more of the vocabulary buys: the same head, other draft vocabularies.

A head tied to the verifier's output projection drafts from its first (most
frequent) ids only, as many as its file names (``vocab_size``; the shipped base
head: 4,000 of 8,164). A token beyond them is never drafted, so every slot whose
greedy token lies there is a rejection whatever the head reads. The head's
weights do not depend on that number (its projection is the verifier's, frozen),
so each ``--vocab-sizes`` (0: the whole vocabulary) decodes with the very same
weights and only the draft graph's projection grows: this measures the trade,
more drafts that can be right against a larger product in every draft call.

Per backend (and ``--int8``), at batch 1: every SpecDec row's tokens per
iteration and acceptance per slot (deterministic, from the first pass), whether
it equals the engine's greedy on every sentence, and its speed from
``--rounds`` rounds interleaved sentence by sentence with the engine's greedy
(each round's greedy s / row s: median and quartiles), and against the first
vocabulary size's row at the same K. It takes the evaluation's options
(``nmt-specdec-evaluate --help``: checkpoint, head, test set, lengths,
``--backend``, ``--int8``, ``--threads``). Example (from the repository root; T
from the README's quickstart)::

    M=models/gettext-de-en-base T=work/gettext-heldout/raw
    python benchmarks/draft_vocab.py --checkpoint $M/model.pt --draft-head $M/head.pt \\
        --data $M --spm-model $M/spm.model --src-file $T/test.de --ref-file $T/test.en \\
        --first-sentences 500 --max-len-a 1.2 --max-len-b 10 --backend onnxruntime --int8 \\
        --threads 1 --vocab-sizes 4000 0 --ks 2 3 --rounds 4
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.auto_overhead import interleaved_seconds, quartiles  # noqa: E402
from nmt_specdec import logs  # noqa: E402
from nmt_specdec.errors import UserError  # noqa: E402
from nmt_specdec.evaluation import cli  # noqa: E402

HEADER = ("| backend | draft ids | K | tok/iter | acceptance per slot | = greedy | "
          "greedy s / row s | first size's row s / row s |\n|---|---:|---:|---:|---|---:|---:|---:|")


def with_draft_vocab(model, size: int):
    """A copy of ``model`` whose head drafts from its first ``size`` ids (0: all)."""
    head = getattr(model, "draft_head", None)
    if head is None:
        raise UserError("draft_vocab.py needs a draft head (--draft-head)")
    if head.output_projection is not None:
        raise UserError("draft_vocab.py needs a head tied to the verifier's output "
                        "projection (an untied head has weights for its own ids only)")
    full = model.decoder.output_projection.out_features
    if not 0 <= size <= full:
        raise UserError(f"--vocab-sizes must be in 0..{full}, got {size}")
    other = copy.deepcopy(model)
    other.draft_head.vocab_size = size or full
    return other


def format_row(name: str, run, greedy_out, seconds: Dict[str, List[float]], first: str) -> str:
    from nmt_specdec.evaluation.metrics import count_differences

    stats = run.generator.stats
    same = len(greedy_out) - count_differences(run.outputs, greedy_out)
    row = seconds[name]
    low, mid, high = quartiles([g / s for g, s in zip(seconds["greedy"], row)])
    against = quartiles([f / s for f, s in zip(seconds[first], row)])
    backend, vocab, k = name.split("|")
    slots = " ".join(f"{a:.2f}" for a in stats.slot_acceptance())
    return (f"| {backend} | {vocab} | {k} | {stats.mean_accepted_tokens:.2f} | {slots} | "
            f"{same}/{len(greedy_out)} | {mid:.3f} ({low:.3f}-{high:.3f}) | "
            f"{against[1]:.3f} ({against[0]:.3f}-{against[2]:.3f}) |")


def measure(cfg, args) -> None:
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model, the safe loader)
    from nmt_specdec.evaluation import loading, metrics, pipeline, runner
    from nmt_specdec.evaluation.config import specdec
    from nmt_specdec.evaluation.testset import make_batches

    device = pipeline.setup_runtime(cfg)
    model, task = loading.load_checkpoint(cfg, device)
    models = {size: with_draft_vocab(model, size) for size in args.vocab_sizes}
    detokenize = metrics.Detokenizer(task.target_dictionary, cfg.spm_model, cfg.post_process)
    testset = pipeline.load_testset(cfg, task, detokenize)
    batches = make_batches(task, testset.sources, 1, device)
    engines = [(backend, False) for backend in cfg.backends]
    engines += [("onnxruntime", True)] if cfg.int8 else []
    runner.freeze_heap()
    for backend, int8 in engines:
        label = backend + (" int8" if int8 else "")
        greedy = specdec(k=0, backend=backend, int8=int8)
        runs = {"greedy": runner.Run(greedy, 1, loading.build_generator(task, model, greedy, cfg),
                                     model, batches)}
        for size in args.vocab_sizes:
            shown = models[size].draft_head.vocab_size
            for k in args.ks:
                spec = specdec(k=k, beta=1, tau=0.0, backend=backend, int8=int8)
                generator = loading.build_generator(task, models[size], spec, cfg)
                runs[f"{label}|{shown}|{k}"] = runner.Run(spec, 1, generator, models[size], batches)
        for run in runs.values():  # the first pass: warm-up, outputs and statistics
            runner.record_outputs(run, runner.decode_pass(task, run, device).hypotheses)
        seconds = interleaved_seconds(task, runs, args.rounds)
        names = [name for name in runs if name != "greedy"]
        for name in names:
            first = names[args.ks.index(int(name.split("|")[2]))]
            print(format_row(name, runs[name], runs["greedy"].outputs, seconds, first), flush=True)


def main() -> int:
    logs.setup(verbose=False)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[4000, 0],
                        help="draft vocabularies (first ids; 0: the whole vocabulary); the "
                             "first is the one the others are compared with")
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--rounds", type=int, default=4,
                        help="timed rounds, every row interleaved sentence by sentence")
    args, evaluate_args = parser.parse_known_args()
    cfg = cli.config_from_args(cli.build_parser().parse_args(evaluate_args), evaluate_args)
    from nmt_specdec.evaluation.machine import cpu_isa, cpu_model

    print(f"{cfg.checkpoint}, head {cfg.draft_head}: draft vocabularies {args.vocab_sizes} "
          f"(0: whole), beta=1, batch 1, {args.rounds} interleaved rounds; {cpu_model()} "
          f"({cpu_isa()}), {cfg.threads} thread(s)")
    print(HEADER)
    try:
        measure(cfg, args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
