"""Split gettext pairs into train/valid/test by package.

A program's messages share vocabulary, style and many near-identical strings
("Open file", "Open files"), so a random pair-level split would test on
programs seen in training. Here every package goes whole into one split.
Strings common to many programs ("Cancel") still occur in several packages;
training pairs sharing a German or English text with valid/test are removed
(as in the Ding recipe), and test pairs sharing one with valid.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from typing import Mapping

from nmt_specdec.data.splits import SPLIT_NAMES, SplitResult, dedupe, overlap_key
from nmt_specdec.data.steps import RecipeError

Pair = tuple[str, str]
SPLIT_KEYS = ("duplicate_pair", "test_overlaps_valid", "train_overlaps_heldout",
              "train_over_cap")
# A held-out package may fill at most this share of its split, so valid and
# test each hold at least four programs.
HELDOUT_MAX_SHARE = 0.25


def package_order(names: list[str], seed: int) -> list[str]:
    """Packages in a seeded order that does not depend on the other names.

    Ordering by a hash of (seed, name) rather than shuffling the list keeps a
    package in its split when other packages are added to or removed from
    the list, so extending the list never moves test data into training.
    """
    return sorted(names, key=lambda n: hashlib.sha256(f"{seed}\0{n}".encode()).digest())


def assign_splits(sizes: Mapping[str, int], valid_size: int, test_size: int,
                  seed: int) -> dict[str, str]:
    """Choose each package's split.

    Packages are visited in :func:`package_order`; one goes to valid or test
    (whichever is emptier) when its pair count fits the room left there and
    is at most ``HELDOUT_MAX_SHARE`` of the requested size. All other
    packages are for training.

    Args:
        sizes: Package -> number of clean, unique pairs.
        valid_size: Requested valid pairs (an upper bound: packages are whole).
        test_size: Requested test pairs.
        seed: Seed of the package order.

    Returns:
        Package -> ``train``, ``valid`` or ``test``.

    Raises:
        RecipeError: No package is small enough for a non-empty held-out split.
    """
    targets = {"valid": valid_size, "test": test_size}
    room = dict(targets)
    caps = {s: max(1, int(t * HELDOUT_MAX_SHARE)) for s, t in targets.items()}
    assignment: dict[str, str] = {}
    for name in package_order(list(sizes), seed):
        fits = [s for s in targets if 0 < sizes[name] <= min(room[s], caps[s])]
        if fits:  # the emptier split first, so valid and test fill alike
            split = max(fits, key=lambda s: room[s] / targets[s])
            assignment[name] = split
            room[split] -= sizes[name]
    for split, target in targets.items():
        if target > 0 and room[split] == target:
            raise RecipeError(f"no package has between 1 and {caps[split]} pairs "
                              f"left for --{split}-size {target}; add packages or "
                              f"raise --{split}-size")
    return {name: assignment.get(name, "train") for name in sizes}


def _drop_overlap(pairs: list[Pair], heldout: list[Pair], stats: Counter,
                  key: str) -> list[Pair]:
    """Pairs whose German and English texts both differ from ``heldout``'s."""
    seen_de = {overlap_key(de) for de, _ in heldout}
    seen_en = {overlap_key(en) for _, en in heldout}
    kept = [(de, en) for de, en in pairs
            if overlap_key(de) not in seen_de and overlap_key(en) not in seen_en]
    stats[key] += len(pairs) - len(kept)
    return kept


def split_by_package(package_pairs: Mapping[str, list[Pair]],
                     assignment: Mapping[str, str], seed: int,
                     max_train: int | None = None) -> SplitResult:
    """Pool each split's packages, dedupe, remove overlaps, shuffle.

    Args:
        package_pairs: Package -> its clean pairs.
        assignment: Package -> split (from :func:`assign_splits`).
        seed: Seed of the shuffles (valid/test are shuffled too, so their
            first lines mix programs).
        max_train: Optional cap on training pairs.

    Returns:
        The splits and counts of removed pairs (``SPLIT_KEYS``).
    """
    stats: Counter = Counter()
    pooled: dict[str, list[Pair]] = {name: [] for name in SPLIT_NAMES}
    for package in sorted(package_pairs):
        pooled[assignment[package]].extend(package_pairs[package])
    valid = dedupe(pooled["valid"], stats)
    test = _drop_overlap(dedupe(pooled["test"], stats), valid, stats,
                         "test_overlaps_valid")
    train = _drop_overlap(dedupe(pooled["train"], stats), valid + test, stats,
                          "train_overlaps_heldout")
    rng = random.Random(seed)
    for pairs in (valid, test, train):
        rng.shuffle(pairs)
    if max_train is not None and len(train) > max_train:
        stats["train_over_cap"] += len(train) - max_train
        train = train[:max_train]
    return SplitResult(train, valid, test, stats)
