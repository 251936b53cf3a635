"""Deduplicate, filter and split sentence pairs into train/valid/test.

The split is a pure function of the input pair order, the configuration and
the seed (``random.Random(seed)``, no global state), so the same command
always produces byte-identical files.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from nmt_specdec.data.steps import RecipeError, write_lines

Pair = tuple[str, str]
SPLIT_NAMES = ("train", "valid", "test")

_NON_WORD = re.compile(r"[^\w\s]")


@dataclass(frozen=True)
class SplitConfig:
    """How pairs are filtered and split.

    Attributes:
        valid_size: Pairs in the validation split.
        test_size: Pairs in the test split.
        min_words: Minimum whitespace words on each side.
        max_words: Maximum whitespace words on each side.
        sentence_min_words: Held-out pairs are drawn first from pairs with at
            least this many words on *both* sides (sentence-like entries), so
            that BLEU on valid/test measures translation, not word lookup.
        max_train: Optional cap on training pairs (None keeps all).
        seed: Seed of the deterministic shuffles.
    """

    valid_size: int = 1000
    test_size: int = 1000
    min_words: int = 1
    max_words: int = 50
    sentence_min_words: int = 4
    max_train: int | None = None
    seed: int = 1

    def validate(self) -> None:
        """Raise RecipeError on impossible settings."""
        if self.valid_size < 0 or self.test_size < 0:
            raise RecipeError("--valid-size and --test-size must be >= 0")
        if not 1 <= self.min_words <= self.max_words:
            raise RecipeError("need 1 <= --min-words <= --max-words")
        if self.max_train is not None and self.max_train < 1:
            raise RecipeError("--max-train must be >= 1")


@dataclass
class SplitResult:
    """The three splits plus counts of what was removed and why."""

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    stats: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict[str, list[Pair]]:
        """Splits keyed by name, in train/valid/test order."""
        return {"train": self.train, "valid": self.valid, "test": self.test}


def overlap_key(text: str) -> str:
    """Normalise text for overlap checks: case, punctuation and spacing.

    "Es regnet." and "es regnet" count as the same sentence, so a held-out
    pair is not merely a punctuation variant of a training pair.
    """
    return " ".join(_NON_WORD.sub(" ", text.casefold()).split())


def dedupe(pairs: Iterable[Pair], stats: Counter) -> list[Pair]:
    """Drop exact duplicate pairs, keeping the first occurrence."""
    seen: set[Pair] = set()
    out = []
    for pair in pairs:
        if pair in seen:
            stats["duplicate_pair"] += 1
            continue
        seen.add(pair)
        out.append(pair)
    return out


def length_filter(pairs: Iterable[Pair], cfg: SplitConfig,
                  stats: Counter) -> list[Pair]:
    """Keep pairs whose both sides have ``min_words..max_words`` words."""
    out = []
    for de, en in pairs:
        lengths = (len(de.split()), len(en.split()))
        if min(lengths) < cfg.min_words:
            stats["too_short"] += 1
        elif max(lengths) > cfg.max_words:
            stats["too_long"] += 1
        else:
            out.append((de, en))
    return out


def _take_heldout(
    order: list[int], pairs: list[Pair], wanted: int, used: set[str], taken: set[int]
) -> list[int]:
    """Greedily take up to ``wanted`` indices whose texts are still unused.

    ``used`` holds overlap keys of both languages already held out; this keeps
    valid and test disjoint from each other as well.
    """
    chosen: list[int] = []
    for index in order:
        if len(chosen) == wanted:
            break
        if index in taken:
            continue
        de, en = pairs[index]
        keys = ("de:" + overlap_key(de), "en:" + overlap_key(en))
        if keys[0] in used or keys[1] in used:
            continue
        used.update(keys)
        taken.add(index)
        chosen.append(index)
    return chosen


def select_heldout(
    pairs: list[Pair], cfg: SplitConfig, rng: random.Random, stats: Counter
) -> tuple[list[Pair], list[Pair], set[int]]:
    """Pick valid and test pairs, sentence-like ones first.

    Args:
        pairs: Deduplicated, length-filtered pairs.
        cfg: Split configuration.
        rng: Seeded generator.
        stats: Counter; ``heldout_not_sentence_like`` records fallbacks.

    Returns:
        Valid pairs, test pairs and the set of indices they used.
    """
    def sentence_like(pair: Pair) -> bool:
        return min(len(pair[0].split()), len(pair[1].split())) >= cfg.sentence_min_words

    preferred = [i for i, p in enumerate(pairs) if sentence_like(p)]
    fallback = [i for i, p in enumerate(pairs) if not sentence_like(p)]
    rng.shuffle(preferred)
    rng.shuffle(fallback)
    order = preferred + fallback
    used: set[str] = set()
    taken: set[int] = set()
    valid = _take_heldout(order, pairs, cfg.valid_size, used, taken)
    test = _take_heldout(order, pairs, cfg.test_size, used, taken)
    stats["heldout_not_sentence_like"] += sum(
        not sentence_like(pairs[i]) for i in valid + test)
    if len(valid) < cfg.valid_size or len(test) < cfg.test_size:
        raise RecipeError(
            f"only {len(pairs)} usable pairs: too few for --valid-size "
            f"{cfg.valid_size} and --test-size {cfg.test_size}")
    return [pairs[i] for i in valid], [pairs[i] for i in test], taken


def make_splits(pairs: Iterable[Pair], cfg: SplitConfig) -> SplitResult:
    """Dedupe, filter and split pairs.

    Training pairs sharing a German *or* English text (see ``overlap_key``)
    with any valid/test pair are removed, so held-out sources and references
    are never seen in training.

    Args:
        pairs: Pairs in a deterministic order (e.g. file order).
        cfg: Split configuration.

    Returns:
        The splits; train is shuffled with the seed and optionally capped.
    """
    cfg.validate()
    stats: Counter = Counter()
    pool = length_filter(dedupe(pairs, stats), cfg, stats)
    rng = random.Random(cfg.seed)
    valid, test, taken = select_heldout(pool, cfg, rng, stats)
    heldout_de = {overlap_key(de) for de, _ in valid + test}
    heldout_en = {overlap_key(en) for _, en in valid + test}
    train = []
    for index, (de, en) in enumerate(pool):
        if index in taken:
            continue
        if overlap_key(de) in heldout_de or overlap_key(en) in heldout_en:
            stats["train_overlaps_heldout"] += 1
            continue
        train.append((de, en))
    rng.shuffle(train)
    if cfg.max_train is not None and len(train) > cfg.max_train:
        stats["train_over_cap"] += len(train) - cfg.max_train
        train = train[: cfg.max_train]
    return SplitResult(train, valid, test, stats)


def split_paths(raw_dir: Path, langs: tuple[str, str] = ("de", "en")) -> list[Path]:
    """All text files a split run writes: ``{split}.{lang}``."""
    return [raw_dir / f"{name}.{lang}" for name in SPLIT_NAMES for lang in langs]


def write_splits(
    result: SplitResult, raw_dir: Path, langs: tuple[str, str] = ("de", "en")
) -> None:
    """Write ``{split}.{lang}`` files, one sentence per line, line-aligned."""
    for name, pairs in result.as_dict().items():
        for side, lang in enumerate(langs):
            write_lines(raw_dir / f"{name}.{lang}", (pair[side] for pair in pairs))
