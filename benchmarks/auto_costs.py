"""What ``--spec-k auto`` believes a K costs and commits, against what a fixed K does: a probe.

Auto chooses K from two estimates (:mod:`nmt_specdec.decoding.k_policy`): the
seconds of an iteration at each K (:class:`~nmt_specdec.decoding.cost_table.CostTable`)
and the tokens it commits (:class:`~nmt_specdec.decoding.k_policy.AcceptanceEstimate`).
This decodes the sentences once with auto, then once with each ``--fixed-k``, at
batch 1, and prints per K:

- auto's estimates at the end of its pass (ms per iteration in the last
  sentence's source-length context, tokens per iteration, ms per token) and how many iterations of its own it timed at that K;
- the fixed K's pass: its iterations' mean and median ms (a sentence's first
  iteration left out, as auto leaves it out), tokens per iteration, ms per token;
- the fixed K's median ms over the same sentences as auto's readings at that K,
  and auto's readings over it (what auto's timing adds, against where it timed).

Where auto's ms per token order the K otherwise than the fixed passes do, auto
drafts the wrong K. It takes ``nmt-specdec-evaluate``'s options (checkpoint, test
set, lengths, ``--backend``, ``--int8``, ``--threads``)::

    python benchmarks/auto_costs.py --checkpoint $M/model.pt --data $M --spm-model $M/spm.model \\
        --src-file $T/test.de --ref-file $T/test.en --first-sentences 200 --max-len-a 1.2 \\
        --max-len-b 10 --batch-sizes 1 --backend onnxruntime --threads 1 --out /tmp/ac \\
        --drafter verifier-int4 --fixed-k 0 2 4 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec import logs  # noqa: E402
from nmt_specdec.decoding.build import largest_k  # noqa: E402
from nmt_specdec.decoding.options import DRAFTERS  # noqa: E402
from nmt_specdec.evaluation import cli  # noqa: E402


class Turn(NamedTuple):
    sentence: int
    first: bool  # a sentence's first iteration (auto does not time it)
    k: int
    seconds: float
    tokens: int  # committed by the row
    source: int = 0  # the sentence's source tokens
    position: int = 0  # target tokens committed before this iteration


def decode(task, model, generator, batches) -> List[Turn]:
    """Every iteration of one pass at batch 1, read from the policy's ``observe``."""
    turns: List[Turn] = []
    for index, batch in enumerate(batches):
        turns += sentence_turns(task, model, generator, index, batch)
    return turns


def sentence_turns(task, model, generator, index: int, batch) -> List[Turn]:
    """The iterations of one sentence: the policy's ``observe`` wrapped for it alone
    (a fixed K's policy reads no counts: it is asked to, so that its turns count)."""
    policy, turns = generator.k_policy, []
    source = batch.sample["net_input"]["src_tokens"].size(1)
    observe, position = type(policy).observe, 0

    def record(accepted, k, seconds):
        nonlocal position
        tokens = (accepted or [0])[0] + 1
        turns.append(Turn(index, not turns, k, seconds, tokens, source, position))
        position += tokens
        observe(policy, accepted, k, seconds)

    fixed_k = not policy.wants_counts
    policy.observe, policy.wants_counts = record, True
    task.inference_step(generator, [model], batch.sample)
    del policy.observe
    if fixed_k:
        del policy.wants_counts
    return turns


def ms(values) -> str:
    values = list(values)
    return f"{1000 * statistics.median(values):.1f}" if values else "-"


def rows(auto_turns: List[Turn], policy, fixed: Dict[int, List[Turn]]) -> List[str]:
    """One table row per fixed K (see :data:`HEADER`)."""
    limit = max(fixed)
    costs = policy.table.estimates(limit, 1)
    tokens = policy.acceptance.expected_tokens()
    out = []
    for k, turns in sorted(fixed.items()):
        later = [t for t in turns if not t.first]
        mine = [t for t in auto_turns if t.k == k and not t.first]
        by_sentence: Dict[int, List[float]] = {}
        for t in later:
            by_sentence.setdefault(t.sentence, []).append(t.seconds)
        there = [s for t in mine for s in by_sentence.get(t.sentence, [])]
        ratio = [t.seconds / statistics.median(by_sentence[t.sentence])
                 for t in mine if t.sentence in by_sentence]
        made = sum(t.tokens for t in turns) / len(turns)
        mean = statistics.mean(t.seconds for t in later) if later else float("nan")
        cost = costs[k] if k < len(costs) else None
        believed = (f"{1000 * cost:.1f} | {tokens[k]:.2f} | {1000 * cost / tokens[k]:.2f}"
                    if cost is not None and k < len(tokens) else "- | - | -")
        out.append(f"| {k} | {believed} | {len(mine)} | {1000 * mean:.1f} | {ms(t.seconds for t in later)}"
                   f" | {made:.2f} | {1000 * mean / made:.2f} | {ms(there)} | "
                   f"{statistics.median(ratio) if ratio else float('nan'):.2f} |")
    return out


HEADER = ("| K | auto: ms/iteration | tokens/iteration | ms/token | its readings | fixed K: mean ms "
          "| median ms | tokens/iteration | ms/token | median ms where auto read | auto's reading / it |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def main() -> int:
    logs.setup(verbose=False)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drafter", choices=DRAFTERS, default="head")
    parser.add_argument("--fixed-k", type=int, nargs="+", default=[0, 2, 4])
    parser.add_argument("--turns-json", type=Path, help="also write every iteration here")
    args, evaluate_args = parser.parse_known_args()
    cfg = cli.config_from_args(cli.build_parser().parse_args(evaluate_args), evaluate_args)
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model, the safe loader)
    from nmt_specdec.evaluation import loading, metrics, pipeline
    from nmt_specdec.evaluation.config import specdec
    from nmt_specdec.evaluation.machine import cpu_isa, cpu_model
    from nmt_specdec.evaluation.testset import make_batches

    device = pipeline.setup_runtime(cfg)
    model, task = loading.load_checkpoint(cfg, device)
    detokenize = metrics.Detokenizer(task.target_dictionary, cfg.spm_model, cfg.post_process)
    testset = pipeline.load_testset(cfg, task, detokenize)
    batches = make_batches(task, testset.sources, 1, device)
    backend = cfg.backends[0]
    cap = largest_k(model, args.drafter)
    if cap is None:
        parser.error("the head drafts: --draft-head HEAD.pt, or a checkpoint with a head")
    common = dict(beta=1, tau=0.0, backend=backend, int8=cfg.int8, drafter=args.drafter)

    def generator(k: int, **spec):
        chosen = specdec(k=0, backend=backend, int8=cfg.int8) if k == 0 else specdec(k=k, **common, **spec)
        built = loading.build_generator(task, model, chosen, cfg)
        decode(task, model, built, batches[:10])  # warm-up: sessions, first shapes
        return built

    auto = generator(k=cap, auto_k=True)
    auto.reset_k_policy()
    auto_turns = decode(task, model, auto, batches)
    fixed = {k: decode(task, model, generator(k=k), batches) for k in args.fixed_k}
    print(f"{cfg.checkpoint}: auto (K <= {cap}, drafter {args.drafter}) against fixed K, "
          f"{len(batches)} sentences at batch 1, {backend}{' int8' if cfg.int8 else ''}; "
          f"{cpu_model()} ({cpu_isa()}), {cfg.threads} thread(s)")
    print(HEADER)
    print("\n".join(rows(auto_turns, auto.k_policy, fixed)))
    chosen = Counter(turn.k for turn in auto_turns)
    print(f"auto's iterations by K: {dict(sorted(chosen.items()))}")
    if args.turns_json:
        args.turns_json.write_text(json.dumps({"auto": [t._asdict() for t in auto_turns], "fixed": {
            k: [t._asdict() for t in turns] for k, turns in fixed.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
