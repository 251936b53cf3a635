"""Draft-head training: updates per second with the verifier run in every update
and with its states cached (``nmt-specdec-add-draft-head --state-cache on|off``).

Both runs train the same head (``add_draft_head.train_flags``: the command's own
fairseq-train flags) on the same sentences, one after the other in this
process's machine, for ``--updates`` updates each, without validation or
checkpoints; the cache is written first and its time and size are reported
apart. Prints a markdown table (and ``--json``).

    python benchmarks/head_training_speed.py --checkpoint VERIFIER.pt --data BIN \\
        --sentences 4000 --updates 40 --k 6 --out /tmp/head_speed
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nmt_specdec.evaluation.machine import cpu_model  # noqa: E402
from nmt_specdec.workflows import add_draft_head, cache_states  # noqa: E402


def subset(data: Path, out: Path, sentences: int, valid: int) -> Path:
    if not (out / "train.de-en.de.idx").is_file():
        subprocess.run([sys.executable, str(REPO / "benchmarks/gpu/subset_bin.py"), str(data),
                        str(out), "--split", f"train={sentences}", "--split", f"valid={valid}"],
                       check=True)
    return out


def train_seconds(flags, updates: int, threads: int, log: Path) -> dict:
    """Runs fairseq-train for ``updates`` updates; wall seconds after the first
    logged update (start-up and the first update's warm-up left out)."""
    cmd = [sys.executable, "-m", "fairseq_cli.train", *flags, "--max-update", str(updates),
           "--disable-validation", "--no-save", "--log-interval", "1"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    stamps = []
    with open(log, "w") as handle:
        process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=env, cwd=REPO)
        for line in process.stdout:
            handle.write(line)
            match = re.search(r"num_updates=(\d+)|\| num_updates (\d+)", line)
            if "train_inner" in line and match:
                stamps.append(time.monotonic())
        if process.wait() != 0:
            raise SystemExit(f"fairseq-train failed; see {log}")
    if len(stamps) < 3:
        raise SystemExit(f"too few logged updates in {log}")
    return {"updates": len(stamps) - 1,
            "seconds": stamps[-1] - stamps[0],
            "updates_per_s": (len(stamps) - 1) / (stamps[-1] - stamps[0])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, required=True, help="stock verifier checkpoint")
    p.add_argument("--data", type=Path, required=True, help="its binarized data")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sentences", type=int, default=4000)
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--k", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    data = subset(args.data, args.out / "data", args.sentences, 100)
    import torch

    torch.set_num_threads(args.threads)
    started = time.monotonic()
    caches = [cache_states.run(args.checkpoint, data, split, args.out / "states" / split,
                               max_tokens=args.max_tokens * 2) for split in ("train", "valid")]
    cache_s = time.monotonic() - started
    model_args, src, tgt = add_draft_head.read_verifier_config(args.checkpoint, data)
    rows = {}
    for state_cache in (False, True):
        cfg = add_draft_head.AddHeadConfig(
            checkpoint=args.checkpoint, data=data, out=args.out, k=args.k,
            max_tokens=args.max_tokens, threads=args.threads, state_cache=state_cache)
        flags = add_draft_head.train_flags(cfg, data, model_args, src, tgt, args.out / "ckpt")
        name = "cached states" if state_cache else "verifier in every update"
        rows[name] = train_seconds(flags, args.updates, args.threads,
                                   args.out / f"train_{int(state_cache)}.log")
    live, cached = rows["verifier in every update"], rows["cached states"]
    result = {"machine": cpu_model(), "threads": args.threads,
              "sentences": args.sentences, "k": args.k, "max_tokens": args.max_tokens,
              "cache_seconds": cache_s, "cache_bytes": sum(c.disk_bytes() for c in caches),
              "rows": rows, "speedup": cached["updates_per_s"] / live["updates_per_s"]}
    print(f"| head training ({args.sentences} sentences, K={args.k}, {args.max_tokens} tokens "
          f"per update, {args.threads} threads, {result['machine']}) | updates | seconds | "
          "updates/s |")
    print("|---|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['updates']} | {row['seconds']:.1f} | {row['updates_per_s']:.3f} |")
    print(f"\ncached / live: {result['speedup']:.2f}x; the cache: {cache_s:.0f} s to write, "
          f"{result['cache_bytes'] / 2**20:.0f} MiB on disk")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
