"""What both quickstart modes share: run the evaluation, render its table."""

from __future__ import annotations

import os
from pathlib import Path


def evaluate(eval_cfg) -> None:
    from nmt_specdec import checkpoints
    from nmt_specdec.evaluation import pipeline

    checkpoints.register_plugin()
    pipeline.run(eval_cfg)



def fmt(value, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else format(value, spec) + unit


def shown(text) -> str:
    """``text`` with the working directory's absolute prefix dropped: paths as a
    user in the checkout types them (``work/...``, not ``/home/.../work/...``)."""
    return str(text).replace(str(Path.cwd().resolve()) + os.sep, "")



def results_table(results: dict) -> list[str]:
    """The decoding rows as markdown lines, with a legend and the signatures."""
    lines = [
        "| decoder | BLEU | chrF | wall s | sent/s | vs stock greedy | vs engine greedy "
        "| tokens/iteration | != greedy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        lines.append(
            f"| {row['name']} | {row['bleu']:.2f} | {row['chrf']:.2f} | "
            f"{row['wall_s_median']:.2f} | {row['sentences_per_s']:.1f} | "
            f"{row['speedup']:.2f}x | {fmt(row.get('speedup_vs_k0'), '.2f', 'x')} | "
            f"{fmt(row['mean_accepted_tokens'], '.2f')} | {row['differs_from_greedy']} |")
    return lines + [
        "",
        "tokens/iteration: tokens committed per verifier call (accepted drafts plus "
        "the verifier's own token); stock decoders commit 1 per step by definition. "
        "engine greedy: our lean decoding loop without drafting (`--spec-k 0`).",
        "",
        f"- BLEU signature: `{results['signatures']['bleu']}`",
        f"- chrF signature: `{results['signatures']['chrf']}`",
    ]


def drafting_summary(results: dict) -> str:
    """The report's first sentence: what drafting (the fastest beta=1 SpecDec row,
    and ``auto``) gained or lost against the engine's greedy in each precision and
    with each drafter, on this machine, and whether its output equals that
    greedy's (an int8 row: int8 greedy's; ``greedy_mismatches`` lists every row
    that does not). Empty when the run has no SpecDec row."""
    parts = []
    mismatched = {found["decoder"] for found in results.get("greedy_mismatches", [])}
    drafting = [row for row in results["rows"] if row["role"] == "specdec"
                and row["beta"] == 1 and row.get("speedup_vs_k0") is not None]
    for precision, drafter in dict.fromkeys((_precision(row), _drafter(row)) for row in drafting):
        rows = [row for row in drafting if (_precision(row), _drafter(row)) == (precision, drafter)]
        fixed = [row for row in rows if not row["auto_k"]]
        if not fixed:
            continue
        best = max(fixed, key=lambda row: row["speedup_vs_k0"])
        verb = "gained" if best["speedup_vs_k0"] >= 1 else "lost"
        same = ("output identical to its greedy" if best["name"] not in mismatched
                else "**output differs from its greedy**")
        who = "" if drafter == "head" else f" with `--spec-drafter {drafter}`"
        text = (f"in {precision} drafting{who} {verb}: K={best['k']} β=1 ran "
                f"**{best['speedup_vs_k0']:.2f}x** the engine's greedy "
                f"({best['mean_accepted_tokens']:.2f} tokens per iteration, {same})")
        auto = [row for row in rows if row["auto_k"]]
        if auto:
            text += f", `--spec-k auto` {auto[0]['speedup_vs_k0']:.2f}x"
        parts.append(text)
    if not parts:
        return ""
    return (f"On this machine ({results['machine'].get('cpu')}, 1 thread, batch 1), "
            + "; ".join(parts) + ".")


def _drafter(row: dict) -> str:
    return row.get("drafter") or "head"


def _precision(row: dict) -> str:
    return "int8" if row.get("int8") else {"float32": "fp32", "float16": "fp16",
                                            "bfloat16": "bf16"}[row.get("dtype", "float32")]
