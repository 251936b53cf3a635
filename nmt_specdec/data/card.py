"""Length statistics and the ``DATA_CARD.md`` writer shared by the recipes."""

from __future__ import annotations

import shlex
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from nmt_specdec.data.steps import atomic_text


@dataclass
class LengthStats:
    """Streaming whitespace-word length statistics for a parallel corpus.

    Lengths are small integers, so a histogram gives the exact median without
    keeping every sentence in memory (WMT has millions of lines).
    """

    src_hist: Counter = field(default_factory=Counter)
    tgt_hist: Counter = field(default_factory=Counter)

    def add(self, src: str, tgt: str) -> None:
        """Record one sentence pair."""
        self.src_hist[len(src.split())] += 1
        self.tgt_hist[len(tgt.split())] += 1

    def add_all(self, pairs: Iterable[tuple[str, str]]) -> "LengthStats":
        """Record many pairs and return self for chaining."""
        for src, tgt in pairs:
            self.add(src, tgt)
        return self

    @property
    def count(self) -> int:
        """Number of pairs recorded."""
        return sum(self.src_hist.values())

    def summary(self, side: str) -> str:
        """Format ``mean / median / max`` words for ``side`` (``src``/``tgt``)."""
        hist = self.src_hist if side == "src" else self.tgt_hist
        total = sum(hist.values())
        if not total:
            return "-"
        mean = sum(length * n for length, n in hist.items()) / total
        return f"{mean:.1f} / {_median(hist, total)} / {max(hist)}"


def _median(hist: Counter, total: int) -> int:
    """Lower median of a length histogram."""
    seen = 0
    for length in sorted(hist):
        seen += hist[length]
        if 2 * seen >= total:
            return length
    return 0


def command_line(argv: Sequence[str] | None = None) -> str:
    """Shell-quoted command that reproduces this run (for the data card)."""
    args = list(sys.argv if argv is None else argv)
    args[0] = Path(args[0]).name  # the console script, not its path on this machine
    return " ".join(shlex.quote(a) for a in args)


def vocab_argv(model_dir, spm_model, dict_path) -> list[str]:
    """The ``--model-dir`` / ``--spm-model`` / ``--dict`` part of a command line."""
    if model_dir is not None:
        return ["--model-dir", str(model_dir)]
    if spm_model is not None:
        return ["--spm-model", str(spm_model), "--dict", str(dict_path)]
    return []


def render_data_card(
    title: str,
    meta: Mapping[str, str],
    tables: Mapping[str, Mapping[str, object]],
    splits: Mapping[str, LengthStats],
    notes: Sequence[str],
    langs: tuple[str, str] = ("de", "en"),
) -> str:
    """Render a Markdown data card.

    Args:
        title: Card heading.
        meta: Key facts (source, licence, command, seed ...), in order.
        tables: Section name -> {counter name: value} (e.g. skip reasons).
        splits: Split name -> length statistics of its pairs.
        notes: Free-text processing decisions, one bullet each.
        langs: Source and target language codes for column headers.

    Returns:
        The Markdown text.
    """
    src, tgt = langs
    out = [f"# {title}", ""]
    out += [f"- **{key}**: {value}" for key, value in meta.items()]
    out += ["", "## Splits", "",
            f"| split | pairs | {src} words mean / median / max | "
            f"{tgt} words mean / median / max |", "|---|---:|---|---|"]
    for name, stats in splits.items():
        out.append(f"| {name} | {stats.count} | {stats.summary('src')} | "
                   f"{stats.summary('tgt')} |")
    for section, counts in tables.items():
        out += ["", f"## {section}", "", "| item | count |", "|---|---:|"]
        out += [f"| {key} | {value} |" for key, value in counts.items()]
    if notes:
        out += ["", "## Processing decisions", ""]
        out += [f"- {note}" for note in notes]
    return "\n".join(out) + "\n"


def write_data_card(path: Path, text: str) -> None:
    """Atomically write a rendered data card."""
    with atomic_text(path) as handle:
        handle.write(text)
