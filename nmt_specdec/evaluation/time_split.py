"""Where a token's time goes: ``nmt-specdec-evaluate --profile`` as a table and a plot.

Each profiled SpecDec row (one extra, instrumented pass; see :mod:`.profiling`)
is split into encoder, draft, verify and bookkeeping milliseconds per output
token; on ONNX Runtime, how much of it was spent inside the runtime's run calls
(the rest is our Python). Beside them stand the timed milliseconds per token of every row of the
same batch size, stock fairseq and CTranslate2 included, so that one of our
model calls can be held against a competitor's whole token (e.g. whether our
verify calls alone already cost more than CTranslate2's greedy).
"""

from __future__ import annotations

import logging
from typing import Dict, List, Optional

PARTS = ("encoder", "draft", "verify", "bookkeeping")
_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:grey")
_RUNTIME_LABEL = "time inside ONNX Runtime (the rest: our Python)"


def timed_ms_per_token(row: dict) -> float:
    """The row's median timed pass, in milliseconds per output token."""
    return 1000 * row["wall_s_median"] / max(row["target_tokens"], 1)


def split_ms_per_token(row: dict) -> Optional[Dict[str, float]]:
    """The profiled pass's ``total`` and each part, in ms per output token (None:
    the row was not profiled)."""
    prof = row["profile"]
    if not prof:
        return None
    tokens = max(row["target_tokens"], 1)
    names = ("total", *PARTS, *(["runtime"] if "runtime_s" in prof else []))
    return {name: 1000 * prof[f"{name}_s"] / tokens for name in names}


def _split_rows(rows: List[dict]) -> List[dict]:
    """The rows of every batch size that has a profiled row."""
    sizes = {row["batch_size"] for row in rows if row["profile"]}
    return [row for row in rows if row["batch_size"] in sizes]


def time_split_table(rows: List[dict]) -> str:
    """Markdown: timed and profiled ms per token, the profiled split (each part
    with its share) and the runtime's own part; empty when nothing was profiled."""
    chosen = _split_rows(rows)
    if not chosen:
        return ""
    lines = ["| batch | decoder | ms/token timed | ms/token profiled | "
             + " | ".join(PARTS) + " | in the runtime |",
             "|---|---|---:|---:|" + "---:|" * (len(PARTS) + 1)]
    for row in chosen:
        cells = [f"{timed_ms_per_token(row):.3f}"]
        split = split_ms_per_token(row)
        if split:
            cells.append(f"{split['total']:.3f}")
            cells += [f"{split[p]:.3f} ({100 * split[p] / split['total']:.0f}%)"
                      for p in (*PARTS, "runtime") if p in split]
            cells += [""] * ("runtime" not in split)  # a backend without a graph runtime
        else:
            cells += [""] * (2 + len(PARTS))
        lines.append(f"| {row['batch_size']} | {row['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_time_split(rows: List[dict], path: str) -> bool:
    """Stacked bars of the profiled split, one bar per row (rows without a split:
    their timed total), CTranslate2's rows as vertical lines. False (and no file)
    when nothing was profiled."""
    chosen = _split_rows(rows)
    if not chosen:
        return False
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # see plot.py
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig = Figure(figsize=(10, 0.45 * len(chosen) + 1.6), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    labels = [f"bs{row['batch_size']} {row['name']}" for row in chosen]
    ys = list(range(len(chosen)))[::-1]  # the table's order, top down
    for y, row in zip(ys, chosen):
        split = split_ms_per_token(row)
        if split is None:
            ax.barh(y, timed_ms_per_token(row), color="lightgrey", edgecolor="grey")
            continue
        left = 0.0
        for part, colour in zip(PARTS, _COLOURS):
            ax.barh(y, split[part], left=left, color=colour, label=part)
            left += split[part]
        if "runtime" in split:  # the runtime's own time, wherever in the bar it was spent
            ax.plot(split["runtime"], y, marker="|", markersize=16, markeredgewidth=2,
                    color="black", linestyle="none", label=_RUNTIME_LABEL)
    ct2 = [timed_ms_per_token(row) for row in chosen if row["role"] == "ct2"]
    for x in ct2:
        ax.axvline(x, color="tab:purple", linestyle="--", linewidth=1)
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles))  # one entry per part
    if any(split_ms_per_token(row) is None for row in chosen):
        unique["timed total (not profiled)"] = Patch(facecolor="lightgrey", edgecolor="grey")
    if ct2:
        unique["CTranslate2, whole token"] = Line2D([], [], color="tab:purple", linestyle="--")
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="lower right")
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_xlabel("milliseconds per output token")
    ax.set_title("Where a token's time goes")
    ax.grid(axis="x", alpha=0.3)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return True
