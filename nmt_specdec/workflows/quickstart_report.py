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
