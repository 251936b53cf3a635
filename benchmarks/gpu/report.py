"""Short summaries for the GPU session's summary.md (benchmarks/gpu/session.sh).

    python3 benchmarks/gpu/report.py junit LOGS/junit.xml   # totals; the gpu tests one by one
    python3 benchmarks/gpu/report.py train LOGS/train_verifier.log   # updates, epochs, valid loss
    python3 benchmarks/gpu/report.py head OUT/report.json    # add-draft-head: tokens/iteration
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter

GPU_FILES = ("test_cuda", "test_evaluation_cuda")  # the CUDA tests (pytest mark gpu)


def junit(path: str) -> str:
    root = ET.parse(path).getroot()
    outcomes: Counter = Counter()
    gpu: list[str] = []
    skip_reasons: Counter = Counter()
    problems: list[str] = []
    for case in root.iter("testcase"):
        kind = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                kind = {"failure": "failed"}.get(child.tag, child.tag)
                text = (child.get("message") or "").splitlines()
                message = text[0][:150] if text else ""
                if kind == "skipped":
                    skip_reasons[message] += 1
                else:
                    test = f"{case.get('classname')}::{case.get('name')}"
                    problems.append(f"{test}: {kind}: {message}")
                break
        outcomes[kind] += 1
        if any(name in (case.get("classname") or "") for name in GPU_FILES):
            name = case.get("name") or ""
            name = name if len(name) <= 90 else name[:87] + "..."
            gpu.append(f"{kind} {name} ({float(case.get('time') or 0):.1f} s)")
    lines = ["", f"Tests ({path.rsplit('/', 1)[-1]}): "
             + (", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())) or "none")]
    if gpu or "gpu" in path.rsplit("/", 1)[-1]:
        lines.append(f"CUDA tests ({', '.join(GPU_FILES)}): " + (
            ", ".join(f"{n} {k}" for k, n in sorted(Counter(g.split()[0] for g in gpu).items()))
            or "none ran"))
        lines += [f"- {g}" for g in gpu]
    if problems:
        lines += ["", "Failures and errors:"] + [f"- {p}" for p in problems[:40]]
    if skip_reasons:
        lines += ["", "Skip reasons:"] + [f"- {n}x {r}" for r, n in skip_reasons.most_common(15)]
    return "\n".join(lines)


def train(path: str) -> str:
    text = open(path, encoding="utf-8", errors="replace").read()
    updates = [int(u) for u in re.findall(r"num_updates[ =](\d+)", text)]
    epochs = re.findall(r"epoch (\d+) \| valid on", text)
    valid = re.findall(r"valid on 'valid' subset \| loss ([0-9.]+) \| nll_loss ([0-9.]+)", text)
    done = re.findall(r"done training in ([0-9.]+) seconds", text)
    wps = re.findall(r"\| wps ([0-9.]+)", text)
    parts = [f"{max(updates) if updates else 0} updates", f"{len(epochs)} epochs validated"]
    if valid:
        parts.append(f"valid loss {valid[-1][0]} nll {valid[-1][1]} (base 2)")
    if done:
        parts.append(f"done in {float(done[-1]):.0f} s")
    if wps:
        parts.append(f"last wps {wps[-1]}")
    if not done:
        tail = [line for line in text.splitlines() if line.strip()][-1:] or ["(empty log)"]
        parts.append("NOT DONE: " + tail[0][:200])
    return "; ".join(parts)


def head(path: str) -> str:
    report = json.load(open(path, encoding="utf-8"))
    rows = report.get("rows", [])
    tpi = " ".join(f"K={r['k']} {r['tokens_per_iteration']:.2f}" for r in rows)
    same = min((r.get("same_as_greedy", 0) for r in rows), default=0)
    train_info = report.get("train", {})
    return (f"{train_info.get('updates', '?')} head updates; valid tokens/iteration (beta=1, "
            f"{report.get('sentences', '?')} sentences): {tpi or '?'}; = greedy: >= {same}")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("junit", "train", "head"):
        print(__doc__, file=sys.stderr)
        return 2
    print({"junit": junit, "train": train, "head": head}[argv[0]](argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
