"""What a device ``run`` call would send, against its 64 MiB limit.

Counts, as the device tool does: the tracked files present in the working tree,
untracked files git does not ignore, and the ``carry`` paths. Run it from the
repository root right before a call (others edit this tree: their untracked
files travel too):

    python3 benchmarks/gpu/budget.py --carry .whl gpu_kit/carry

Exit 1 when it does not fit; ``--without PATH`` shows the size with that path
moved out of the tree first.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

LIMIT = 64 * 2**20


def git_files(*args: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", *args], check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p]


def size(path: Path) -> int:
    if path.is_symlink():
        return 0
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(size(p) for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--carry", nargs="*", default=[])
    p.add_argument("--without", nargs="*", default=[],
                   help="paths to count as moved out of the tree")
    args = p.parse_args(argv)
    without = [w.rstrip("/") + "/" for w in args.without]

    def kept(name: str) -> bool:
        return not any((name + "/").startswith(w) for w in without)

    groups: dict[str, int] = {}
    listed = (("tracked", git_files()), ("untracked", git_files("-o", "--exclude-standard")))
    for label, names in listed:
        for name in filter(kept, names):
            top = name.split("/")[0] if label == "tracked" else "untracked"
            if name.startswith("models/"):
                top = "/".join(name.split("/")[:2])
            groups[f"{label}: {top}"] = groups.get(f"{label}: {top}", 0) + size(Path(name))
    for path in args.carry:
        groups[f"carry: {path}"] = size(Path(path))
    total = sum(groups.values())
    for name, value in sorted(groups.items(), key=lambda kv: -kv[1]):
        if value >= 100_000:
            print(f"{value / 2**20:8.2f} MiB  {name}")
    verdict = "fits" if total <= LIMIT else "DOES NOT FIT"
    print(f"{total / 2**20:8.2f} MiB  total ({total:,} bytes) of {LIMIT / 2**20:.0f} MiB: "
          f"{verdict}, {(LIMIT - total) / 2**20:+.2f} MiB left")
    if without:
        print("  (counted without: " + " ".join(args.without) + ")")
    return 0 if total <= LIMIT else 1


if __name__ == "__main__":
    os.chdir(subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True,
                            capture_output=True, text=True).stdout.strip())
    sys.exit(main())
