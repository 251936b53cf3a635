"""The engine's docstrings and comments say what the code does and why; the
timings that chose it live in docs/results.md, with their commands, where a
rerun can update them (a timing in code goes stale silently)."""

from __future__ import annotations

import re
from pathlib import Path

DECODING = Path(__file__).resolve().parents[2] / "nmt_specdec" / "decoding"
# "~45 us", "0.3 ms", "1.16x" (a measured ratio); not "1e-3" or "K=2".
TIMING = re.compile(r"\d(\.\d+)?\s?(us|ms|µs)\b|\b\d\.\d+x\b")


def timings(text: str) -> list:
    return [line.strip() for line in text.splitlines() if TIMING.search(line)]


def test_no_timing_in_the_engine():
    found = {str(path.relative_to(DECODING)): timings(path.read_text(encoding="utf-8"))
             for path in sorted(DECODING.rglob("*.py"))}
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_the_rule_sees_a_timing():
    assert timings("x = 1  # took ~45 us\nratio 1.16x faster\nK=2, tol 1e-3, 0.5 ms")
    assert timings("tol 1e-3\nK=2 at batch 32") == []
