#!/usr/bin/env python
"""Batch dependence of greedy/SpecDec output and the cost of --deterministic.

Example::

    python scripts/benchmark_determinism.py --checkpoint work/long/ckpt/checkpoint_last.pt \\
        --data work/ding/bin --split test --out results/determinism
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nmt_specdec import determinism_bench as bench  # noqa: E402
from nmt_specdec.errors import UserError  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, help="binarized data directory")
    p.add_argument("--split", default="test")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--timing-batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-sentences", type=int, default=None, help="first N sentence ids only")
    p.add_argument("--max-len-a", type=float, default=0.0)
    p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("results/determinism"))
    args = p.parse_args()
    for path in (args.checkpoint, args.data):
        if not os.path.exists(path):
            raise UserError(f"no such file or directory: {path}")
    bench.set_threads(args.threads)
    model, task = bench.load(args.checkpoint, args.data, args.split)
    gen_args = bench.gen_config(args.max_len_a, args.max_len_b)
    modes = list(bench.MODES) if hasattr(model, "draft_head") else ["stock greedy",
                                                                     "stock greedy --deterministic"]
    dependence = bench.batch_dependence(task, model, gen_args, args.split, args.batch_sizes,
                                        modes, args.max_sentences)
    costs = bench.overhead(task, model, gen_args, args.split, args.timing_batch_size,
                           args.repeats, args.max_sentences)
    table = bench.markdown(dependence, costs, args.batch_sizes)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "determinism.md").write_text(table)
    (args.out / "determinism.json").write_text(json.dumps(
        {"threads": args.threads, "checkpoint": args.checkpoint, "dependence": dependence,
         "overhead": costs}, indent=2))
    print(table)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as err:
        sys.exit(f"error: {err}")
