#!/usr/bin/env python
"""Pastes every command block of the README, in order, into a fresh clone, and
prints a table of how each ended.

The blocks fenced ``bash`` run as one shell session (so ``source .venv/bin/activate``
and ``M=...`` carry on to the next block, as in a user's terminal), ``python``
blocks through the session's ``python``; ``text`` blocks are not commands. The
clone is of the committed ``HEAD`` (uncommitted changes are not in it). The first
block is ``make quickstart`` and ``make test`` (setup ~7 min, the suite ~10-15),
the last the README's main evaluation (~15 min on 2 cores): about an hour in all.

    python benchmarks/readme_blocks.py [--clone DIR] [--log FILE]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, NamedTuple, Optional

REPO = Path(__file__).resolve().parents[1]
MARK = "::readme-block"


class Block(NamedTuple):
    """One fenced block: its language, first line number in the README, and text."""

    language: str
    line: int
    text: str


def command_blocks(readme: str) -> List[Block]:
    """The README's ``bash`` and ``python`` blocks, in order."""
    blocks, language, start, body = [], None, 0, []
    for number, line in enumerate(readme.splitlines(), 1):
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence and language is None:
            language, start, body = fence.group(1), number + 1, []
        elif fence:
            if language in ("bash", "python"):
                blocks.append(Block(language, start, "\n".join(body)))
            language = None
        elif language is not None:
            body.append(line)
    return blocks


def session_script(blocks: List[Block]) -> str:
    """One bash script: each block between a start and an end marker, stopping
    at the first command that fails (as a careful user would)."""
    lines = ["set -eo pipefail"]
    for index, block in enumerate(blocks):
        lines.append(f'echo "{MARK} {index} start $(date +%s.%N)"')
        if block.language == "python":
            lines += ["python - <<'README_PYTHON'", block.text, "README_PYTHON"]
        else:
            lines.append(block.text)
        lines.append(f'echo "{MARK} {index} end $(date +%s.%N)"')
    return "\n".join(lines) + "\n"


def run(clone: Path, log: Path) -> int:
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    blocks = command_blocks((clone / "README.md").read_text(encoding="utf-8"))
    script = clone / ".readme_blocks.sh"
    script.write_text(session_script(blocks), encoding="utf-8")
    print(f"{len(blocks)} command blocks of {clone}/README.md; log: {log}", flush=True)
    started, ended = {}, {}
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(["bash", script.name], cwd=clone, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, errors="replace")
        for line in process.stdout:
            out.write(line)
            if line.startswith(MARK):
                _, index, what, stamp = line.split()
                (started if what == "start" else ended)[int(index)] = float(stamp)
                if what == "start":
                    print(f"block {int(index) + 1} (README line {blocks[int(index)].line}) ...",
                          flush=True)
        status = process.wait()
    _table(blocks, started, ended, status)
    return status


def _table(blocks: List[Block], started: dict, ended: dict, status: int) -> None:
    print("\n| block | README line | first command | minutes | ended |")
    print("|---:|---:|---|---:|---|")
    for index, block in enumerate(blocks):
        first = next((line for line in block.text.splitlines() if line.strip()), "")
        first = first.split()[:2] if block.language == "bash" else ["python"]
        if index in ended:
            outcome, took = "exit 0", ended[index] - started[index]
        elif index in started:
            outcome, took = f"exit {status}", time.time() - started[index]
        else:
            outcome, took = "not reached", None
        minutes = f"{took / 60:.1f}" if took is not None else "-"
        print(f"| {index + 1} | {block.line} | `{' '.join(first)}` | {minutes} | {outcome} |")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clone", type=Path, default=None,
                        help="where to clone (a new directory; default: a temporary one)")
    parser.add_argument("--log", type=Path, default=None,
                        help="the session's output (default: CLONE.log beside the clone)")
    args = parser.parse_args(argv)
    clone = args.clone or Path(tempfile.mkdtemp(prefix="readme-blocks-")) / "nmt-specdec"
    if clone.exists() and any(clone.iterdir()):
        parser.error(f"--clone {clone}: not empty")
    log = args.log or clone.with_name(clone.name + ".log")
    return run(clone, log)


if __name__ == "__main__":
    sys.exit(main())
