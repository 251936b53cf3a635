"""Draft-head training: updates per second with the verifier run in every update,
with its states cached (``nmt-specdec-add-draft-head --state-cache on|off``), and
cached under bfloat16 autocast (``--precision bf16``).

The runs train the same head (``add_draft_head.train_flags``: the command's own
fairseq-train flags) on the same sentences in the same order, one after the
other on this machine, for ``--updates`` updates each, without validation or
checkpoints; the cache is written first and its time and size are reported
apart. Beside the speed, each row gives the draft loss of its last updates, so
that a faster row that learns worse shows. Prints a markdown table (and ``--json``).

    python benchmarks/head_training_speed.py --checkpoint VERIFIER.pt --data BIN \\
        --sentences 4000 --updates 40 --k 6 --out /tmp/head_speed [--baseline REV[:ROW] ...]
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
from nmt_specdec.workflows import add_draft_head, cache_states, verifier_config  # noqa: E402


LAST = 10  # updates whose draft loss a row reports

ROWS = {  # --rows key: (name, state cache, precision)
    "live": ("verifier in every update", False, "fp32"),
    "cached": ("cached states", True, "fp32"),
    "cached-bf16": ("cached states, bf16 autocast", True, "bf16"),
}


def subset(data: Path, out: Path, sentences: int, valid: int) -> Path:
    if not (out / "train.de-en.de.idx").is_file():
        subprocess.run([sys.executable, str(REPO / "benchmarks/gpu/subset_bin.py"), str(data),
                        str(out), "--split", f"train={sentences}", "--split", f"valid={valid}"],
                       check=True)
    return out


def baseline_tree(rev: str, out: Path) -> Path:
    """A checkout of ``rev`` (a git worktree under ``out``) whose code trains the
    baseline row."""
    commit = subprocess.run(["git", "rev-parse", "--verify", rev + "^{commit}"], cwd=REPO,
                            check=True, capture_output=True, text=True).stdout.strip()
    tree = out / f"baseline-{commit[:10]}"
    if not (tree / "fairseq_plugins").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(tree), commit],
                       cwd=REPO, check=True, capture_output=True)
    return tree


def train_seconds(flags, updates: int, threads: int, log: Path, repo: Path = REPO) -> dict:
    """Runs fairseq-train for ``updates`` updates with ``repo``'s code; wall seconds
    after the first logged update (start-up and the first update's warm-up left
    out) and the mean draft loss of the last ``LAST`` updates."""
    if repo != REPO:
        flags = [str(repo / "fairseq_plugins") if f == str(REPO / "fairseq_plugins") else f
                 for f in flags]
    cmd = [sys.executable, "-m", "fairseq_cli.train", *flags, "--max-update", str(updates),
           "--disable-validation", "--no-save", "--log-interval", "1"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    stamps, losses, tokens = [], [], []
    with open(log, "w") as handle:
        process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=env, cwd=repo)
        for line in process.stdout:
            handle.write(line)
            match = re.search(r"num_updates=(\d+)|\| num_updates (\d+)", line)
            if "train_inner" in line and match:
                stamps.append(time.monotonic())
                loss = re.search(r"draft_loss=([0-9.]+)", line)
                losses.append(float(loss.group(1)) if loss else float("nan"))
                words = re.search(r"wpb=([0-9.]+)", line)  # target tokens of the update
                tokens.append(float(words.group(1)) if words else float("nan"))
        if process.wait() != 0:
            raise SystemExit(f"fairseq-train failed; see {log}")
    if len(stamps) < 3:
        raise SystemExit(f"too few logged updates in {log}")
    return {"updates": len(stamps) - 1,
            "seconds": stamps[-1] - stamps[0],
            "updates_per_s": (len(stamps) - 1) / (stamps[-1] - stamps[0]),
            # Updates/s depend on how full the batches are (a larger split fills them
            # more): tokens/s is the rate to compare across data.
            "tokens_per_s": sum(tokens[1:]) / (stamps[-1] - stamps[0]),
            "draft_loss_last": sum(losses[-LAST:]) / len(losses[-LAST:])}


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
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS),
                   help="which trainings to time (default: all)")
    p.add_argument("--baseline", nargs="+", metavar="REV[:ROW]", default=[],
                   help="also train ROW (default: live) with the code of git revision REV "
                   "(e.g. the commit before a change), first")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    # Absolute: a baseline trains in its own checkout's directory.
    args.checkpoint, args.data, args.out = (path.resolve() for path in
                                            (args.checkpoint, args.data, args.out))
    for spec in args.baseline:
        if spec.partition(":")[2] not in ("", *ROWS):
            p.error(f"--baseline {spec}: ROW is one of {', '.join(ROWS)}")
    data = subset(args.data, args.out / "data", args.sentences, 100)
    import torch

    torch.set_num_threads(args.threads)
    started = time.monotonic()
    caches = [cache_states.run(args.checkpoint, data, split, args.out / "states" / split,
                               max_tokens=args.max_tokens * 2) for split in ("train", "valid")]
    cache_s = time.monotonic() - started
    model_args, src, tgt = verifier_config.read_verifier_config(args.checkpoint, data)

    def flags(state_cache: bool, precision: str = "fp32"):
        cfg = add_draft_head.AddHeadConfig(
            checkpoint=args.checkpoint, data=data, out=args.out, k=args.k,
            max_tokens=args.max_tokens, threads=args.threads, state_cache=state_cache,
            precision=precision)
        return add_draft_head.train_flags(cfg, data, model_args, src, tgt, args.out / "ckpt")

    rows = {}
    for spec in args.baseline:
        rev, _, key = spec.partition(":")
        name, state_cache, precision = ROWS[key or "live"]
        rows[f"{name}, code of {rev}"] = train_seconds(
            flags(state_cache, precision), args.updates, args.threads,
            args.out / f"train_baseline_{rev}_{key or 'live'}.log", baseline_tree(rev, args.out))
    for key in args.rows:
        name, state_cache, precision = ROWS[key]
        rows[name] = train_seconds(flags(state_cache, precision), args.updates, args.threads,
                                   args.out / f"train_{key}.log")
    live = next(iter(rows.values()))["updates_per_s"]  # the baseline's, if any
    for row in rows.values():
        row["vs_first_row"] = row["updates_per_s"] / live
    result = {"machine": cpu_model(), "threads": args.threads,
              "sentences": args.sentences, "k": args.k, "max_tokens": args.max_tokens,
              "cache_seconds": cache_s, "cache_bytes": sum(c.disk_bytes() for c in caches),
              "rows": rows}
    print(f"| head training ({args.sentences} sentences, K={args.k}, {args.max_tokens} tokens "
          f"per update, {args.threads} threads, {result['machine']}) | updates | seconds | "
          f"updates/s | tokens/s | x first row | draft loss, last {LAST} updates |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['updates']} | {row['seconds']:.1f} | {row['updates_per_s']:.3f} "
              f"| {row['tokens_per_s']:.0f} | {row['vs_first_row']:.2f}x "
              f"| {row['draft_loss_last']:.3f} |")
    print(f"\nthe cache: {cache_s:.0f} s to write, {result['cache_bytes'] / 2**20:.0f} MiB on disk")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
