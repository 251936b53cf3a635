"""BLEU versus speedup: one panel per batch size, Pareto front marked and labelled."""

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


def plot_bleu_vs_speedup(rows: List[dict], path: str) -> None:
    """Writes the figure (Agg, no display needed) to ``path``."""
    # fairseq leaves the root logger at DEBUG, where matplotlib logs every font
    # it scores; quieten it before its import (here, not at module import).
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    batch_sizes = sorted({row["batch_size"] for row in rows})
    fig = Figure(figsize=(5.5 * len(batch_sizes), 4.5), constrained_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(batch_sizes), squeeze=False)[0]
    for ax, batch_size in zip(axes, batch_sizes):
        _panel(ax, [row for row in rows if row["batch_size"] == batch_size], batch_size)
    fig.savefig(path, dpi=120)


def _panel(ax, rows: List[dict], batch_size: int) -> None:
    points = [(row["speedup"], row["bleu"]) for row in rows]
    ordered = pareto_front(points)
    front = set(ordered)
    for kind, marker, colour in (
        ("stock", "s", "tab:blue"),
        ("specdec", "o", "tab:orange"),
        ("ct2", "^", "tab:green"),
    ):
        chosen = [p for p, row in zip(points, rows) if row["decoder"] == kind]
        if chosen:
            ax.scatter(
                *zip(*chosen),
                marker=marker,
                color=colour,
                zorder=3,
                label={"stock": "fairseq SequenceGenerator", "specdec": "SpecDec",
                       "ct2": "CTranslate2"}[kind],
            )
    ax.plot(
        [points[i][0] for i in ordered],
        [points[i][1] for i in ordered],
        color="black",
        linewidth=1,
        linestyle="--",
        zorder=2,
        label="Pareto front",
    )
    for i, (point, row) in enumerate(zip(points, rows)):
        on_front = i in front
        if on_front:
            ax.scatter(*point, s=160, facecolors="none", edgecolors="black", zorder=4)
        # Staggered offsets keep the names of near-identical points apart.
        ax.annotate(
            row["name"],
            point,
            textcoords="offset points",
            xytext=(6, 6 - 10 * (i % 3)),
            fontsize=8 if on_front else 7,
            color="black" if on_front else "grey",
            fontweight="bold" if on_front else "normal",
        )
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_title(f"batch size {batch_size}")
    ax.set_xlabel("speedup over stock beam 1 (same batch size)")
    ax.set_ylabel("sacreBLEU")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best", framealpha=0.6)
