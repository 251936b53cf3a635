"""BLEU versus speedup: one panel per batch size, Pareto front marked, points numbered
and named in a key beside each panel."""

from __future__ import annotations

import logging
from typing import List, Sequence, Tuple


def pareto_front(points: Sequence[Tuple[float, float]]) -> List[int]:
    """Indices of the points no other point beats on both axes (higher is better).

    Args:
        points: (speedup, BLEU) pairs.

    Returns:
        Indices of the non-dominated points, by increasing speedup.
    """

    def dominated(i: int) -> bool:
        x, y = points[i]
        return any(ox >= x and oy >= y and (ox > x or oy > y) for ox, oy in points)

    front = [i for i in range(len(points)) if not dominated(i)]
    return sorted(front, key=lambda i: points[i])


# Group -> (legend label, marker style). Engine greedy (the SpecDec loop with
# K=0) and drafting rows that drafted nothing are told apart from SpecDec, so the
# plot does not credit the lean loop's gain to drafting.
_GROUPS = {
    "stock": ("fairseq SequenceGenerator", dict(marker="s", color="tab:blue")),
    "engine greedy": ("engine greedy (SpecDec loop, K=0)",
                      dict(marker="^", color="tab:green")),
    "specdec": ("SpecDec (drafting)", dict(marker="o", color="tab:orange")),
    "drafted nothing": ("SpecDec, drafted nothing (1.00 tok/iter)",
                        dict(marker="o", facecolors="none", edgecolors="tab:orange")),
    "ct2": ("CTranslate2 greedy (converted verifier)", dict(marker="D", color="tab:purple")),
    "sampling": ("sampling rows (speedup vs stock sampling)", dict(marker="x", color="tab:gray")),
}


def plot_group(row: dict) -> str:
    """Which legend entry a result row belongs to (a key of ``_GROUPS``)."""
    if row["role"] == "specdec" and "drafted nothing" in row["name"]:
        return "drafted nothing"
    return row["role"]


def plot_bleu_vs_speedup(rows: List[dict], path: str) -> None:
    """Writes the figure (Agg, no display needed) to ``path``."""
    # fairseq leaves the root logger at DEBUG, where matplotlib logs every font
    # it scores; quieten it before its import (here, not at module import).
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    batch_sizes = sorted({row["batch_size"] for row in rows})
    # Each panel is followed by its key (decoder names), as wide as the panel.
    fig = Figure(figsize=(10 * len(batch_sizes), 5), constrained_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(batch_sizes), squeeze=False)[0]
    for ax, batch_size in zip(axes, batch_sizes):
        _panel(ax, [row for row in rows if row["batch_size"] == batch_size], batch_size)
    fig.savefig(path, dpi=120, bbox_inches="tight")


def coinciding(points: List[tuple], within: float = 0.02) -> List[List[int]]:
    """Indices of ``points`` grouped where they lie within ``within`` of the
    plotted ranges of each other (one label each group), in first-index order."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    span_x = (max(xs) - min(xs)) or 1.0
    span_y = (max(ys) - min(ys)) or 1.0
    groups: List[List[int]] = []
    for i, (x, y) in enumerate(points):
        for group in groups:
            gx, gy = points[group[0]]
            if abs(x - gx) <= within * span_x and abs(y - gy) <= within * span_y:
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def _panel(ax, rows: List[dict], batch_size: int) -> None:
    points = [(row["speedup"], row["bleu"]) for row in rows]
    ordered = pareto_front(points)
    front = set(ordered)
    for (x, y), row in zip(points, rows):  # min-max of the per-repeat speedups
        if row.get("speedup_min") is not None:
            ax.errorbar(x, y, xerr=[[x - row["speedup_min"]], [row["speedup_max"] - x]],
                        fmt="none", ecolor="lightgrey", zorder=1)
    groups = [plot_group(row) for row in rows]
    for group, (label, style) in _GROUPS.items():
        chosen = [p for p, g in zip(points, groups) if g == group]
        if chosen:
            ax.scatter(*zip(*chosen), zorder=3, label=label, **style)
    ax.plot(
        [points[i][0] for i in ordered],
        [points[i][1] for i in ordered],
        color="black",
        linewidth=1,
        linestyle="--",
        zorder=2,
        label="Pareto front",
    )
    for i in front:
        ax.scatter(*points[i], s=160, facecolors="none", edgecolors="black", zorder=4)
    # A dozen decoders lie within 0.1 BLEU of each other, where their names
    # overprinted one another: a point carries its number, the key its name, and
    # points that coincide share one label ("6,8"), set clear of the front's rings.
    for group in coinciding(points):
        on_front = any(i in front for i in group)
        ax.annotate(
            ",".join(str(i + 1) for i in group),
            points[group[0]],
            textcoords="offset points",
            xytext=(8, 4),
            fontsize=8,
            color="black" if on_front else "dimgrey",
            fontweight="bold" if on_front else "normal",
        )
    key = [f"{i + 1:>2}{'*' if i in front else ' '} {row['name']}: "
           f"{row['speedup']:.2f}x, BLEU {row['bleu']:.2f}" for i, row in enumerate(rows)]
    ax.text(1.03, 1.0, "\n".join(key + ["", "* on the Pareto front"]), transform=ax.transAxes,
            va="top", ha="left", fontsize=7.5, family="monospace")
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_title(f"batch size {batch_size}")
    ax.set_xlabel("speedup over stock greedy (median of repeats, same batch size)")
    ax.set_ylabel("sacreBLEU")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best", framealpha=0.6)
