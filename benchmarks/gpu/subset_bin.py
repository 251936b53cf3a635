"""A fairseq data directory holding a random subset of another one's splits.

Used on the GPU machine to give ``nmt-specdec-add-draft-head`` fewer training
sentences to distil (its distillation step translates the whole ``train`` split)
and, in tiny mode, to shrink every split. Sentences are drawn without
replacement with a fixed seed and kept in their original order; both sides of
a pair stay together. The dictionaries are copied.

Usage: ``python3 benchmarks/gpu/subset_bin.py SRC_DIR OUT_DIR --split train=60000
[--split valid=200] [--link valid] [--after 40000 [80000 ...]]`` (``--link`` symlinks a split
unchanged; ``--after N`` draws the train pairs from those that a draw of N with the same seed
left out, so a second subset adds sentences the first one does not hold; ``--after N1 N2`` from
those that neither the first nor the second subset holds, and so on).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

import numpy as np


def chosen(total: int, count: int, seed: int, after: Sequence[int] = ()) -> np.ndarray:
    """Sorted indices of ``count`` random pairs out of ``total``; with ``after``
    (N1, N2, ...), drawn from those that the earlier draws left out: N1 with
    ``seed``, N2 from the rest with ``seed + 1``, ..., this one with
    ``seed + len(after)``."""
    if not after:
        return np.arange(total) if count >= total else np.sort(
            np.random.default_rng(seed).choice(total, size=count, replace=False))
    taken = np.concatenate([chosen(total, after[0], seed)]
                           + [chosen(total, n, seed, after[:i + 1])
                              for i, n in enumerate(after[1:])])
    rest = np.setdiff1d(np.arange(total), taken)
    return rest if count >= len(rest) else np.sort(
        np.random.default_rng(seed + len(after)).choice(rest, size=count, replace=False))


def subset(src: Path, out: Path, split: str, count: int, langs: tuple[str, str], seed: int,
           after: Sequence[int] = ()) -> int:
    """Writes ``count`` random pairs of ``split``; returns how many were written."""
    from fairseq.data import indexed_dataset

    pair = f"{langs[0]}-{langs[1]}"
    datasets = {lang: indexed_dataset.MMapIndexedDataset(str(src / f"{split}.{pair}.{lang}"))
                for lang in langs}
    total = len(datasets[langs[0]])
    if total != len(datasets[langs[1]]):
        raise SystemExit(f"{split}: {langs[0]} and {langs[1]} differ in length")
    keep = chosen(total, count, seed, after)
    for lang, dataset in datasets.items():
        prefix = str(out / f"{split}.{pair}.{lang}")
        builder = indexed_dataset.MMapIndexedDatasetBuilder(
            indexed_dataset.data_file_path(prefix), dtype=dataset._index.dtype)
        for i in keep:
            builder.add_item(dataset[int(i)])
        builder.finalize(indexed_dataset.index_file_path(prefix))
    return len(keep)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--split", action="append", default=[], metavar="NAME=COUNT")
    p.add_argument("--link", action="append", default=[], metavar="NAME")
    p.add_argument("--langs", default="de-en")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--after", type=int, nargs="+", default=[], metavar="N",
                   help="train: skip the pairs that draws of N1, N2, ... (seed, seed + 1, ...) "
                   "picked, each from what the ones before it left")
    args = p.parse_args(argv)
    langs = tuple(args.langs.split("-"))
    args.out.mkdir(parents=True, exist_ok=True)
    for lang in langs:
        shutil.copyfile(args.src / f"dict.{lang}.txt", args.out / f"dict.{lang}.txt")
    for spec in args.split:
        name, _, count = spec.partition("=")
        after = args.after if name == "train" else []
        written = subset(args.src, args.out, name, int(count), langs, args.seed, after)
        print(f"{args.out}: {name} {written} pairs")
    for name in args.link:
        for lang in langs:
            for ext in ("bin", "idx"):
                file = f"{name}.{langs[0]}-{langs[1]}.{lang}.{ext}"
                target = args.out / file
                if target.is_symlink() or target.exists():
                    target.unlink()
                os.symlink((args.src / file).resolve(), target)
        print(f"{args.out}: {name} linked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
