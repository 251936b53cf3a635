"""Would the verifier's 4-bit copy drafting the first slot, and the head the rest
from the copy's state, draft faster than either alone? A probe.

The head guesses K tokens from the verifier's state before the token the loop
just committed (slot 1 kept ~70% of the time on the base model); the 4-bit copy
(``--spec-drafter verifier-int4``) guesses each token as the verifier does but
pays a call per drafted token. Here one copy call per iteration drafts slot 1
(feeding the last committed token over the verifier's cache), and the head,
anchored on the copy's state that predicted that draft and on the draft itself
(as it is trained to draft from the verifier's state and last token), drafts
slots 2..K: one copy call and one draft call an iteration. The fp32 verifier
decides every token (beta = 1), so every row must equal greedy.

Rows, interleaved sentence by sentence with the engine's greedy for ``--rounds``
timed rounds (``benchmarks/auto_overhead.py``), one per ``--rows`` entry
``DRAFTER:K:REFINE``: DRAFTER ``head`` (alone), ``copy`` (alone) or ``both`` (the
copy then the head); REFINE the head's refinement runs. Prints
tokens per iteration, acceptance per slot (given the slots before it), whether
the output equals greedy's, and greedy s / row s (median and quartiles of the
rounds). Batch 1, ONNX Runtime, fp32. It takes the evaluation's options::

    M=models/gettext-de-en-base T=work/gettext-heldout/raw
    python benchmarks/copy_then_head.py --checkpoint $M/model.pt --draft-head $M/head.pt \\
        --data $M --spm-model $M/spm.model --src-file $T/test.de --ref-file $T/test.en \\
        --first-sentences 200 --max-len-a 1.2 --max-len-b 10 --threads 1 --out /tmp/cth \\
        --rows head:2:1 head:3:2 copy:3:1 copy:4:1 both:3:1 both:4:1 both:4:2 --rounds 3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.auto_overhead import interleaved_seconds, quartiles  # noqa: E402
from nmt_specdec import logs  # noqa: E402
from nmt_specdec.decoding.drafters import Drafter, DraftRequest  # noqa: E402
from nmt_specdec.errors import UserError  # noqa: E402
from nmt_specdec.evaluation import cli  # noqa: E402

HEADER = ("| drafter | K | refine | tok/iter | acceptance per slot | = greedy | "
          "greedy s / row s |\n|---|---:|---:|---:|---|---:|---:|")
DRAFTERS = {"head": "head", "copy": "verifier-int4", "both": "verifier-int4"}


class CopyThenHead(Drafter):
    """Slot 1 from ``copy`` (a ``VerifierDrafter``), slots 2..K from ``head`` (an
    ``OrtDrafter``) anchored on the copy's draft and the copy's state before it."""

    def __init__(self, copy, head):
        self.copy, self.head = copy, head

    def start_batch(self, sample: dict, encoder_out: Any) -> None:
        self.copy.start_batch(sample, encoder_out)
        self.head.start_batch(sample, encoder_out)
        _record_states(self.copy.verifier)

    def keep_rows(self, rows: Tensor) -> None:
        self.copy.keep_rows(rows)
        self.head.keep_rows(rows)

    def start_states(self, batch: int, like: Tensor) -> Tensor:
        return self.head.start_states(batch, like)

    def propose(self, request: DraftRequest) -> Tensor:
        first = self.copy.propose(request._replace(num_slots=1))  # (B, 1): one copy call
        if request.num_slots == 1:
            return first
        if request.anchor is None:
            raise UserError("copy_then_head.py decodes at batch 1 (the single-row loop)")
        # The copy's one call fed the last committed token: its state predicted the draft.
        position = request.anchor[0]
        after = request._replace(states=self.copy.verifier.last_hidden[:, -1],
                                 num_slots=request.num_slots - 1,
                                 anchor=(position + 1, int(first[0, 0]), -1))
        return torch.cat([first, self.head.propose(after).view(1, -1)], dim=1)


def _record_states(verifier) -> None:
    """Makes the copy's calls keep their (B, N, C) states as ``last_hidden`` (once per
    verifier: generators share the backend's copy)."""
    if hasattr(verifier, "last_hidden"):
        return
    verify = verifier.verify

    def recording(*args):
        verified = verify(*args)
        verifier.last_hidden = verified.hidden
        return verified

    verifier.verify, verifier.last_hidden = recording, None


def hybrid(generator) -> CopyThenHead:
    """The copy-then-head drafter on ``generator``'s ONNX Runtime backend (``generator``
    built for ``--spec-drafter verifier-int4``: its drafter is the copy)."""
    from nmt_specdec.decoding.backends.onnxruntime.drafters import OrtDrafter

    backend = generator.backend
    head = OrtDrafter(backend.model.draft_head.start_state.detach().clone(), backend)
    return CopyThenHead(generator.drafter, head)


def build_runs(cfg, rows: List[str]) -> Dict[str, Any]:
    """The engine's greedy and one run per ``DRAFTER:K:REFINE`` row, batch 1."""
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model, the safe loader)
    from nmt_specdec.evaluation import loading, metrics, pipeline, runner
    from nmt_specdec.evaluation.config import specdec
    from nmt_specdec.evaluation.testset import make_batches

    device = pipeline.setup_runtime(cfg)
    model, task = loading.load_checkpoint(cfg, device)
    detokenize = metrics.Detokenizer(task.target_dictionary, cfg.spm_model, cfg.post_process)
    batches = make_batches(task, pipeline.load_testset(cfg, task, detokenize).sources, 1, device)
    runner.freeze_heap()
    greedy = specdec(k=0, backend="onnxruntime")
    runs = {"greedy": runner.Run(greedy, 1, loading.build_generator(task, model, greedy, cfg),
                                 model, batches)}
    for row in rows:
        drafter, k, refine = row.split(":")
        if drafter not in DRAFTERS:
            raise UserError(f"--rows: DRAFTER must be one of {', '.join(DRAFTERS)}, got {row!r}")
        spec = specdec(k=int(k), beta=1, tau=0.0, backend="onnxruntime",
                       refine_steps=int(refine), drafter=DRAFTERS[drafter])
        generator = loading.build_generator(task, model, spec, cfg)
        if drafter == "both":
            generator.drafter = hybrid(generator)
        runs[row] = runner.Run(spec, 1, generator, model, batches)
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
    parser.add_argument("--rows", nargs="+", default=["head:2:1", "copy:3:1", "both:3:1"],
                        help="DRAFTER:K:REFINE each, DRAFTER head, copy or both")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed rounds, every row interleaved sentence by sentence")
    args, evaluate_args = parser.parse_known_args()
    cfg = cli.config_from_args(cli.build_parser().parse_args(evaluate_args), evaluate_args)
    from nmt_specdec.evaluation.machine import cpu_isa, cpu_model

    try:
        built = build_runs(cfg, args.rows)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    runs = built["runs"]
    seconds = interleaved_seconds(built["task"], runs, args.rounds)
    print(f"{cfg.checkpoint}, head {cfg.draft_head}: beta=1, batch 1, ONNX Runtime fp32, "
          f"{args.rounds} interleaved rounds; {cpu_model()} ({cpu_isa()}), {cfg.threads} "
          f"thread(s)")
    print(HEADER)
    for row in args.rows:
        print(format_row(row, runs[row], runs["greedy"], seconds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
