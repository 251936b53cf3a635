"""What a speed target over the engine's greedy needs, from a profiled evaluation.

Reads the ``results.json`` of ``nmt-specdec-evaluate ... --profile`` and, for
each SpecDec row, splits its instrumented pass into milliseconds per iteration
(draft call, verify call, the host's own work) beside a greedy step of the same
precision and batch size, and asks two questions of a target ratio R over that
greedy (the same instrumented pass of each row, so both sides are timed alike):

- needed tok/iter: the tokens per iteration at which this iteration's cost
  reaches R, the encoder's time kept as it is;
- draft+host budget: what the draft call and the host together may cost per
  iteration for R at today's iterations (the verify call kept as it is).

Example (the base model's speed command with ``--profile``, then)::

    python benchmarks/speed_targets.py results/base_profile/results.json \\
        --target 1.35 --target-int8 1.15
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional


def _per_iteration(row: Dict) -> Dict[str, float]:
    """The row's instrumented pass: iterations, and seconds of each part."""
    profile = row["profile"]
    return {"iterations": row["target_tokens"] / row["mean_accepted_tokens"],
            "encoder": profile["encoder_s"],
            "draft": profile["draft_s"], "verify": profile["verify_s"],
            "host": profile["bookkeeping_s"], "total": profile["total_s"]}


def target_rows(rows: List[Dict], target: float, target_int8: float) -> List[Dict]:
    """One dict per profiled SpecDec row (K > 0): its split per iteration (ms),
    the greedy step it is compared with, and what ``target`` needs."""
    greedy = {(r["int8"], r["batch_size"]): _per_iteration(r) for r in rows
              if r["role"] == "engine greedy" and r.get("profile")}
    out = []
    for row in rows:
        base = greedy.get((row["int8"], row["batch_size"]))
        if row["role"] != "specdec" or not row.get("profile") or not row["k"] or base is None:
            continue
        own, ratio = _per_iteration(row), target_int8 if row["int8"] else target
        ms = {part: 1e3 * own[part] / own["iterations"] for part in ("draft", "verify", "host")}
        iteration = sum(ms.values())
        step = 1e3 * (base["verify"] + base["host"]) / base["iterations"]
        decode_budget = base["total"] / ratio - own["encoder"]  # seconds for the loop
        out.append({
            "decoder": row["name"], "ratio": ratio, "tok_per_iter": row["mean_accepted_tokens"],
            **{f"{part}_ms": value for part, value in ms.items()},
            "iteration_ms": iteration, "greedy_step_ms": step,
            "needed_tok_per_iter": row["target_tokens"] / (1e3 * decode_budget / iteration),
            "draft_host_budget_ms": 1e3 * decode_budget / own["iterations"] - ms["verify"],
            "measured_ratio": base["total"] / own["total"],
        })
    return out


def markdown(found: List[Dict]) -> str:
    head = ("| decoder | draft ms | verify ms | host ms | iteration / greedy step | tok/iter "
            "| × greedy (profiled) | target | needed tok/iter | draft+host budget ms (today) |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    return head + "".join(
        f"| {r['decoder']} | {r['draft_ms']:.2f} | {r['verify_ms']:.2f} | {r['host_ms']:.2f} "
        f"| {r['iteration_ms'] / r['greedy_step_ms']:.2f} | {r['tok_per_iter']:.2f} "
        f"| {r['measured_ratio']:.2f}x | {r['ratio']:.2f}x | {r['needed_tok_per_iter']:.2f} "
        f"| {r['draft_host_budget_ms']:.2f} ({r['draft_ms'] + r['host_ms']:.2f}) |\n"
        for r in found)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="results.json of nmt-specdec-evaluate --profile")
    p.add_argument("--target", type=float, default=1.35, help="ratio over fp32 greedy")
    p.add_argument("--target-int8", type=float, default=1.15, help="ratio over int8 greedy")
    args = p.parse_args(argv)
    try:
        rows = json.loads(args.results.read_text())["rows"]
    except (OSError, ValueError, KeyError) as error:
        print(f"speed_targets: cannot read {args.results}: {error}", file=sys.stderr)
        return 2
    found = target_rows(rows, args.target, args.target_int8)
    if not found:
        print(f"speed_targets: no profiled SpecDec row beside a profiled greedy row in "
              f"{args.results} (run nmt-specdec-evaluate with --profile)", file=sys.stderr)
        return 2
    print(markdown(found), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
