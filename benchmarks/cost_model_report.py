"""The cost model's arithmetic and its outputs (``benchmarks/cost_model.py`` measures).

A greedy step costs ``verify(1) + host(0)`` and commits one token. A SpecDec
iteration at K costs ``verify(K+1) + draft(K) + host(K)`` and commits ``t``
tokens, so SpecDec is cheaper per token exactly when ``t`` exceeds

    break-even(K) = (verify(K+1) + draft(K) + host(K)) / (verify(1) + host(0))

and the predicted speedup over greedy is ``t / break-even(K)``. The encoder runs
once per sentence in both and is left out of both.

This module needs no model: it turns measured milliseconds into rows, a markdown
table, JSON and a plot, and reads what the machine is (processor, ISA flags,
runtime versions) for the header.
"""

from __future__ import annotations

import json
import logging
import platform
from pathlib import Path
from typing import Dict, List, Optional

from nmt_specdec.evaluation.machine import cpu_isa, cpu_model, runtime_versions

RANDOM_LABEL = "random weights: time per token only"

def break_even(verify_1: float, verify_k1: float, draft_k: float, host_greedy: float,
               host_k: Optional[float] = None) -> float:
    """Tokens per iteration at which SpecDec at K costs what greedy costs per token.

    Args:
        verify_1: one verify call at N=1 (a greedy step's model call).
        verify_k1: one verify call at N=K+1.
        draft_k: the draft head's call at K.
        host_greedy: the loop's own work per greedy step.
        host_k: the loop's own work per SpecDec iteration at K (default: ``host_greedy``).
    """
    host_k = host_greedy if host_k is None else host_k
    return (verify_k1 + draft_k + host_k) / (verify_1 + host_greedy)


def predicted_speedup(tokens_per_iteration: Optional[float], even: float) -> Optional[float]:
    """Greedy's time per token over SpecDec's (> 1: drafting pays)."""
    return None if tokens_per_iteration is None else tokens_per_iteration / even


def cost_rows(shape: Dict, batch: int, costs: Dict, tokens: Dict) -> List[Dict]:
    """One row per K of one shape at one batch size.

    Args:
        shape: ``{"name", "random"}`` (a random-weight shape's tokens per iteration
            are the checkpoint's: what a head that accepts as well would get there).
        costs: milliseconds ``{"verify": {N: ms}, "draft": {K: ms}, "host": {K: ms}}``
            (host at K=0: greedy's).
        tokens: ``{"head": {K: tok/iter}, "oracle": {K: tok/iter}}``, possibly empty.
    """
    rows = []
    for k in sorted(costs["draft"]):
        parts = {"verify_1_ms": costs["verify"][1], "verify_k1_ms": costs["verify"][k + 1],
                 "draft_k_ms": costs["draft"][k], "host_greedy_ms": costs["host"][0],
                 "host_k_ms": costs["host"][k]}
        even = break_even(parts["verify_1_ms"], parts["verify_k1_ms"], parts["draft_k_ms"],
                          parts["host_greedy_ms"], parts["host_k_ms"])
        head = tokens.get("head", {}).get(k)
        oracle = tokens.get("oracle", {}).get(k)
        speedup = predicted_speedup(head, even)
        rows.append({"shape": shape["name"], "random_weights": shape["random"],
                     "label": RANDOM_LABEL if shape["random"] else "the checkpoint",
                     "batch": batch, "k": k, **parts, "break_even": even,
                     "head_tokens_per_iteration": head, "oracle_tokens_per_iteration": oracle,
                     "tokens_from": "the checkpoint's head" if shape["random"] else "measured",
                     "pays": None if speedup is None else speedup > 1.0,
                     "speedup_head": speedup,
                     "speedup_oracle": predicted_speedup(oracle, even)})
    return rows


def _num(value: Optional[float], digits: int = 2, hypothetical: bool = False) -> str:
    if value is None:
        return "n/a"
    text = f"{value:.{digits}f}"
    return f"({text})" if hypothetical else text


def _verdict(row: Dict) -> str:
    if row["pays"] is None:
        return "n/a"
    verdict = (f"yes, {row['speedup_head']:.2f}x" if row["pays"]
               else f"no, {row['speedup_head']:.2f}x")
    return f"({verdict})" if row["random_weights"] else verdict


TABLE_HEADER = ("| shape | batch | K | verify N=1 ms | verify N=K+1 ms | draft K ms | host greedy ms "
                "| host K ms | break-even tok/iter | head tok/iter | oracle tok/iter "
                "| drafting pays? (speedup) | oracle speedup |\n"
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")


def format_table(rows: List[Dict]) -> str:
    """The markdown table; a random-weight shape's tok/iter and verdicts are in
    parentheses: they are the checkpoint head's, not measured on that shape."""
    lines = [TABLE_HEADER]
    for row in rows:
        hyp = row["random_weights"]
        lines.append(
            f"| {row['shape']} | {row['batch']} | {row['k']} | {row['verify_1_ms']:.3f} | "
            f"{row['verify_k1_ms']:.3f} | {row['draft_k_ms']:.3f} | "
            f"{row['host_greedy_ms']:.3f} | {row['host_k_ms']:.3f} | "
            f"{row['break_even']:.2f} | "
            f"{_num(row['head_tokens_per_iteration'], hypothetical=hyp)} | "
            f"{_num(row['oracle_tokens_per_iteration'], hypothetical=hyp)} | "
            f"{_verdict(row)} | {_num(row['speedup_oracle'], hypothetical=hyp)} |")
    return "\n".join(lines)


def verdicts(rows: List[Dict]) -> List[str]:
    """One line per shape and batch size: the fastest K and whether it beats greedy."""
    groups: Dict[tuple, List[Dict]] = {}
    for row in rows:
        groups.setdefault((row["shape"], row["batch"]), []).append(row)
    lines = []
    for (shape, batch), group in groups.items():
        judged = [row for row in group if row["speedup_head"] is not None]
        if not judged:
            lines.append(f"{shape}, batch {batch}: no tokens per iteration to compare")
            continue
        best = max(judged, key=lambda row: row["speedup_head"])
        paying = [str(row["k"]) for row in judged if row["pays"]]
        borrowed = " (with the checkpoint head's tok/iter)" if best["random_weights"] else ""
        lines.append(
            f"{shape}, batch {batch}{borrowed}: "
            + (f"drafting pays at K={','.join(paying)}" if paying else "greedy is faster at every K")
            + f"; best K={best['k']}, predicted {best['speedup_head']:.2f}x greedy's speed")
    return lines


NOTES = (
    "break-even = (verify(K+1) + draft(K) + host(K)) / (verify(1) + host(0)): drafting pays "
    "where the tokens per iteration exceed it; speedup = tok/iter / break-even.",
    f"Shapes marked '{RANDOM_LABEL}' have random weights (they do not translate): only "
    "their costs are measured; their tok/iter (in parentheses) are the checkpoint head's "
    "and the oracle's, i.e. what a head of that shape accepting as well would get.",
    "host: the loop's own time per iteration (decode time minus the model calls), "
    "measured in the checkpoint's decode; the loop's work depends on K and the "
    "vocabulary, which every shape shares.",
)


def machine_header(threads: int, backend: str) -> Dict:
    """Processor, ISA flags and runtime versions: what the timings depend on."""
    import torch

    return {"cpu": cpu_model(), "isa": cpu_isa().split(), "torch": torch.__version__,
            "onnxruntime": runtime_versions()["onnxruntime"] or "not installed",
            "python": platform.python_version(), "threads": threads, "backend": backend}


def format_header(header: Dict) -> str:
    return (f"processor: {header['cpu']}\nISA: {' '.join(header['isa'])}\n"
            f"torch {header['torch']}, onnxruntime {header['onnxruntime']}, "
            f"python {header['python']}; backend {header['backend']}, "
            f"{header['threads']} thread(s)")


def report_markdown(header: Dict, rows: List[Dict], settings: Dict) -> str:
    """The whole report: machine, settings, the table and how to read it."""
    described = ", ".join(f"{key} {value}" for key, value in settings.items())
    notes = "\n".join(f"- {note}" for note in NOTES)
    summary = "\n".join(f"- {line}" for line in verdicts(rows))
    return (f"# SpecDec cost model\n\n{format_header(header)}\n\nsettings: {described}\n\n"
            f"{format_table(rows)}\n\n{summary}\n\n{notes}\n")


def write_outputs(out: Path, header: Dict, rows: List[Dict], settings: Dict) -> List[Path]:
    """``cost_model.md``, ``cost_model.json`` and ``cost_model.png`` in ``out``."""
    from nmt_specdec.data.steps import atomic_text

    paths = [out / "cost_model.md", out / "cost_model.json", out / "cost_model.png"]
    with atomic_text(paths[0]) as handle:
        handle.write(report_markdown(header, rows, settings))
    with atomic_text(paths[1]) as handle:
        json.dump({"machine": header, "settings": settings, "notes": list(NOTES),
                   "rows": rows}, handle, indent=1)
    plot_break_even(rows, paths[2])
    return paths


def plot_break_even(rows: List[Dict], path: Path) -> None:
    """Break-even tok/iter against K, one line per shape and batch, beside the
    checkpoint head's measured tok/iter and the oracle's: drafting pays at a K
    where a tok/iter line runs above a break-even line."""
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # font-cache chatter
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    curves: Dict[tuple, List[Dict]] = {}
    for row in rows:
        curves.setdefault((row["shape"], row["batch"]), []).append(row)
    fig = Figure(figsize=(8, 5 + 0.18 * len(curves)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    colours = {shape: f"C{i}" for i, shape in enumerate(dict.fromkeys(s for s, _ in curves))}
    styles = {batch: style for batch, style in zip(sorted({b for _, b in curves}),
                                                    ("-", "--", ":", "-."))}
    for (shape, batch), group in curves.items():
        ax.plot([row["k"] for row in group], [row["break_even"] for row in group],
                styles.get(batch, "-"), color=colours[shape], marker="o",
                label=f"break-even: {shape}, batch {batch}")
    # Tokens per iteration do not depend on the shape: the checkpoint's, per batch size.
    tokens = {(row["batch"], row["k"]): row for row in rows}
    ks = sorted({k for _, k in tokens})
    for batch, style in styles.items():
        for key, label, marker in (("head_tokens_per_iteration", "checkpoint head", "s"),
                                   ("oracle_tokens_per_iteration", "oracle (ceiling)", "^")):
            values = [tokens[batch, k][key] for k in ks]
            if all(value is not None for value in values):
                ax.plot(ks, values, style, color="black", marker=marker, linewidth=2,
                        label=f"tok/iter: {label}, batch {batch}")
    ax.set_xticks(ks)
    ax.set_xlabel("K (draft slots)")
    ax.set_ylabel("tokens per iteration")
    ax.set_title("Drafting pays where tokens/iteration run above break-even")
    ax.grid(alpha=0.3)
    fig.legend(fontsize=7, loc="outside lower center", ncols=1)
    fig.savefig(path, dpi=120)
