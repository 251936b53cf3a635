"""The results tables of ``docs/results.md``, rebuilt from an evaluation's ``results.json``.

Every figure in the table comes from the JSON, next to the command that
produced it, so a reader can rerun any row and compare it with its printed
min-max spread. ``scripts/readme_tables.py RESULTS.json`` prints it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

from nmt_specdec.evaluation.report import format_cell, machine_line, timing_line
from nmt_specdec.evaluation.time_split import plot_time_split, time_split_table

# (header, row key, format, spread prefix), as in report._COLUMNS.
README_COLUMNS = (
    ("batch", "batch_size", "{}", None),
    ("decoder", "name", "{}", None),
    ("BLEU", "bleu", "{:.2f}", None),
    ("chrF", "chrf", "{:.2f}", None),
    ("vs stock greedy (median, min–max)", "speedup", "{:.2f}x", "speedup"),
    ("vs engine greedy (median, min–max)", "speedup_vs_k0", "{:.2f}x", "speedup_vs_k0"),
    ("tok/iter", "mean_accepted_tokens", "{:.2f}", None),
    ("!= greedy", "differs_from_greedy", "{}", None),
)


def readme_table(results: dict) -> str:
    """Markdown: the command, how it was timed, the table and the BLEU signature.

    Args:
        results: the contents of an evaluation's ``results.json``.
    """
    lines = ["```", results.get("command") or "(command not recorded)", "```", "",
             f"Timing: {timing_line(results['timing'])}", "",
             "| " + " | ".join(column[0] for column in README_COLUMNS) + " |",
             "|" + "|".join("---" if i < 2 else "---:"
                            for i in range(len(README_COLUMNS))) + "|"]
    for row in results["rows"]:
        lines.append("| " + " | ".join(format_cell(row, *column[1:])
                                       for column in README_COLUMNS) + " |")
    machine = results["machine"]
    # Two lines (one paragraph in Markdown), so neither runs past the docs' line width.
    lines += ["", f"BLEU signature `{results['signatures']['bleu']}`.",
              # processor; versions: two lines within the docs' width
              *machine_line(machine).strip().split("; ", 1),
              f"CPU/wall time of the timed passes {results['timing']['cpu_over_wall']:.2f}."]
    mismatches = results.get("greedy_mismatches") or []
    # (results written before int8 rows got their own reference listed them here too)
    ties = [t for t in mismatches if "logit_gap" in t and "int8" not in t["decoder"]
            and t.get("reference", "stock greedy") == "stock greedy"]
    if ties:
        worst = max(t["logit_gap"] for t in ties)
        lines.append(f"fp32 β=1 outputs that differ from stock greedy: {len(ties)}, largest "
                     f"logit gap at the first difference {worst:.1e}.")
    for t in mismatches:
        if "int8_reference" in t:
            lines.append(f"{t['decoder']} (batch {t['batch_size']}): {t['differs']} "
                         f"sentence(s) differ from {t['int8_reference']}.")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="results.json file(s)")
    parser.add_argument("--time-split", action="store_true",
                        help="print where a token's time goes instead (a run with --profile)")
    parser.add_argument("--plot", type=Path, help="with --time-split: also draw it to this PNG")
    args = parser.parse_args(argv)
    if args.plot and not args.time_split:
        parser.error("--plot draws the time split: add --time-split")
    for path in args.results:
        try:
            _print_one(path, args.time_split, args.plot)
        except OSError as err:  # the results file, or the plot's
            print(f"error: {err.filename or path}: {err.strerror or err}", file=sys.stderr)
            return 2
        except (ValueError, KeyError) as err:  # not JSON, or not an evaluation's
            print(f"error: {path}: {err}", file=sys.stderr)
            return 2
    return 0


def _print_one(path: Path, time_split: bool, plot: Optional[Path]) -> None:
    results = json.loads(path.read_text(encoding="utf-8"))
    if not time_split:
        sys.stdout.write(readme_table(results))
        return
    split = time_split_table(results["rows"])
    if not split:
        raise ValueError("no profiled rows (evaluate with --profile)")
    sys.stdout.write(split + "\n")
    if plot:
        plot_time_split(results["rows"], str(plot))
