"""The WMT14 De-En recipe: download, clean, SentencePiece 32k, fairseq binarize.

Training data are the usual WMT14 corpora of fairseq's
``prepare-wmt14en2de.sh --icml17``: Europarl v7, Common Crawl and News
Commentary v9; newstest2013 is the validation set and newstest2014 (the full
3003-sentence version, as ``sacrebleu -t wmt14 -l de-en``) the test set.

Archives are downloaded into ``--raw-dir`` (default ``{out}/orig``) unless
they are already there under their original names, so users without
internet can copy them in and pass ``--offline``. Output layout under
``--out`` is the one of the Ding recipe: ``raw/``, ``DATA_CARD.md``,
``spm.model``, ``spm/`` and ``bin/``. Entry point:
``nmt-specdec-prepare-wmt14``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import re
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, TextIO

from nmt_specdec.data import card, spm
from nmt_specdec.data.splits import SPLIT_NAMES, split_paths
from nmt_specdec.data.steps import (
    LOG,
    OneLineParser,
    RecipeError,
    StepChain,
    atomic_text,
    report_user_errors,
    setup_logging,
)

LANGS = ("de", "en")
STATMT = "https://www.statmt.org"
# archive file name -> download URL
ARCHIVES = {
    "training-parallel-europarl-v7.tgz":
        f"{STATMT}/wmt13/training-parallel-europarl-v7.tgz",
    "training-parallel-commoncrawl.tgz":
        f"{STATMT}/wmt13/training-parallel-commoncrawl.tgz",
    "training-parallel-nc-v9.tgz": f"{STATMT}/wmt14/training-parallel-nc-v9.tgz",
    "dev.tgz": f"{STATMT}/wmt14/dev.tgz",
    "test-full.tgz": f"{STATMT}/wmt14/test-full.tgz",
}
# (archive, member path without the language suffix)
TRAIN_CORPORA = (
    ("training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en"),
    ("training-parallel-commoncrawl.tgz", "commoncrawl.de-en"),
    ("training-parallel-nc-v9.tgz", "training/news-commentary-v9.de-en"),
)
VALID_MEMBERS = ("dev.tgz", {"de": "dev/newstest2013.de", "en": "dev/newstest2013.en"})
TEST_MEMBERS = ("test-full.tgz", {"de": "test-full/newstest2014-deen-src.de.sgm",
                                  "en": "test-full/newstest2014-deen-ref.en.sgm"})

_SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Wmt14Config:
    """Settings of one recipe run (mirrors the command-line flags).

    Attributes:
        out: Output directory.
        raw_dir: Where the archives are (or are downloaded to); default
            ``{out}/orig``.
        offline: Never download; missing archives are an error.
        vocab_size: Joint SentencePiece vocabulary.
        max_words: Drop training pairs with a longer side (whitespace words).
        max_ratio: Drop training pairs whose longer side has more than this
            many times the words of the shorter (as Moses clean-corpus-n).
        max_train: Optional cap on training pairs (first ones kept).
        spm_sentences: SentencePiece samples at most this many lines.
        seed: Seed of SentencePiece sampling.
        workers: Threads/processes for encoding and fairseq-preprocess.
    """

    out: Path
    raw_dir: Path | None = None
    offline: bool = False
    vocab_size: int = 32000
    max_words: int = 250
    max_ratio: float = 1.5
    max_train: int | None = None
    spm_sentences: int = 2_000_000
    seed: int = 1
    workers: int = 2

    @property
    def archive_dir(self) -> Path:
        return self.raw_dir or self.out / "orig"

    def validate(self) -> None:
        """Raise RecipeError naming the first bad option."""
        if self.max_words < 1 or self.max_ratio < 1:
            raise RecipeError("--max-words must be >= 1 and --max-ratio >= 1")
        if self.max_train is not None and self.max_train < 1:
            raise RecipeError("--max-train must be >= 1")
        if self.raw_dir is not None and not self.raw_dir.is_dir():
            raise RecipeError(f"--raw-dir {self.raw_dir} is not a directory")
        if self.out.exists() and not self.out.is_dir():
            raise RecipeError(f"--out {self.out} exists and is not a directory")


def download(url: str, dest: Path) -> None:
    """Download ``url`` to ``dest`` via a ``.part`` file, with a progress bar."""
    from tqdm import tqdm

    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, \
                open(part, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name) as bar:
                for block in iter(lambda: response.read(1 << 20), b""):
                    out.write(block)
                    bar.update(len(block))
        part.replace(dest)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        part.unlink(missing_ok=True)
        raise RecipeError(f"download of {url} failed ({exc}); download it by hand into "
                          f"{dest.parent} and rerun with --offline") from None


def fetch_archives(cfg: Wmt14Config) -> dict[str, Path]:
    """Make sure every archive is in ``cfg.archive_dir``; returns name -> path."""
    paths = {name: cfg.archive_dir / name for name in ARCHIVES}
    missing = [name for name, path in paths.items() if not path.is_file()]
    if missing and cfg.offline:
        raise RecipeError(f"--offline: missing in {cfg.archive_dir}: "
                          f"{', '.join(missing)}")
    for name in missing:
        download(ARCHIVES[name], paths[name])
    return paths


@contextlib.contextmanager
def open_member(archive: Path, member: str) -> Iterator[TextIO]:
    """Stream one file inside a ``.tgz`` archive as UTF-8 text.

    Lines end at ``\\n`` only: corpora contain stray ``\\r`` and U+2028, which
    ``str.splitlines`` would treat as line breaks and so misalign the sides.
    """
    try:
        tar = tarfile.open(archive, "r:gz")
    except (tarfile.TarError, OSError) as exc:
        raise RecipeError(f"cannot read {archive}: {exc} (delete it to re-download)"
                          ) from None
    with tar:
        try:
            raw = tar.extractfile(member)
        except KeyError:
            raw = None
        if raw is None:
            raise RecipeError(f"{archive.name} has no file {member}")
        yield io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="\n")


def read_member(archive: Path, member: str) -> list[str]:
    """All lines (without newlines) of one file inside a ``.tgz`` archive."""
    with open_member(archive, member) as handle:
        return [line.rstrip("\n") for line in handle]


def sgm_segments(lines: list[str]) -> list[str]:
    """The text of each ``<seg id=..>..</seg>`` of an SGML test file, in order."""
    return [m.group(1) for m in map(_SEG.search, lines) if m]


def normalize(text: str) -> str:
    """Collapse whitespace (incl. tabs and non-breaking spaces) and strip."""
    return _SPACES.sub(" ", text.replace("\u00a0", " ")).strip()


def keep_pair(de: str, en: str, cfg: Wmt14Config, stats: Counter) -> bool:
    """Length and ratio filter of training pairs, counting the reasons."""
    n_de, n_en = len(de.split()), len(en.split())
    if not n_de or not n_en:
        stats["empty"] += 1
    elif max(n_de, n_en) > cfg.max_words:
        stats["too_long"] += 1
    elif max(n_de, n_en) > cfg.max_ratio * min(n_de, n_en) and max(n_de, n_en) > 3:
        # Short pairs are exempt: "Ja ." / "Yes ." style lines have noisy ratios.
        stats["bad_ratio"] += 1
    else:
        return True
    return False


def train_pairs(archives: dict[str, Path],
                stats: Counter) -> Iterator[tuple[str, str, str]]:
    """Yield ``(corpus, de, en)`` from every training corpus in order (streamed)."""
    for archive, stem in TRAIN_CORPORA:
        corpus = stem.rsplit("/", 1)[-1]
        path = archives[archive]
        with open_member(path, f"{stem}.de") as de, \
                open_member(path, f"{stem}.en") as en:
            for de_line, en_line in itertools.zip_longest(de, en):
                if de_line is None or en_line is None:
                    raise RecipeError(f"{archive}: {stem}.de and {stem}.en differ in "
                                      "length; delete the archive to re-download")
                stats[f"lines {corpus}"] += 1
                yield corpus, normalize(de_line), normalize(en_line)


def heldout(archives: dict[str, Path],
            members: tuple[str, dict]) -> list[tuple[str, str]]:
    """newstest pairs (plain text or SGML), whitespace-normalised, none dropped."""
    archive, paths = members
    sides = []
    for lang in LANGS:
        lines = read_member(archives[archive], paths[lang])
        sides.append(sgm_segments(lines) if paths[lang].endswith(".sgm") else lines)
    if len(sides[0]) != len(sides[1]):
        raise RecipeError(f"{archive}: {len(sides[0])} German but {len(sides[1])} "
                          "English test lines")
    return [(normalize(de), normalize(en)) for de, en in zip(*sides)]


def build_raw(cfg: Wmt14Config, archives: dict[str, Path]) -> None:
    """Write cleaned ``raw/{split}.{de,en}`` and the data card."""
    raw = cfg.out / "raw"
    stats: Counter = Counter()
    lengths = {name: card.LengthStats() for name in SPLIT_NAMES}
    kept_per_corpus: Counter = Counter()
    with atomic_text(raw / "train.de") as out_de, \
            atomic_text(raw / "train.en") as out_en:
        for corpus, de, en in train_pairs(archives, stats):
            if cfg.max_train is not None and lengths["train"].count >= cfg.max_train:
                stats["over_max_train"] += 1
                continue
            if keep_pair(de, en, cfg, stats):
                out_de.write(de + "\n")
                out_en.write(en + "\n")
                lengths["train"].add(de, en)
                kept_per_corpus[corpus] += 1
    for name, members in (("valid", VALID_MEMBERS), ("test", TEST_MEMBERS)):
        pairs = heldout(archives, members)
        for side, lang in enumerate(LANGS):
            with atomic_text(raw / f"{name}.{lang}") as handle:
                handle.writelines(pair[side] + "\n" for pair in pairs)
        lengths[name].add_all(pairs)
    LOG.info("train %d pairs (%s), valid %d, test %d", lengths["train"].count,
             dict(kept_per_corpus), lengths["valid"].count, lengths["test"].count)
    _write_card(cfg, stats, kept_per_corpus, lengths)


def _write_card(cfg: Wmt14Config, stats: Counter, kept: Counter, lengths: dict) -> None:
    meta = {
        "Source": "WMT14 De-En: Europarl v7, Common Crawl, News Commentary v9 "
                  "(train), newstest2013 (valid), newstest2014 full (test)",
        "Archives": ", ".join(f"`{name}`" for name in ARCHIVES)
                    + f" in `{cfg.archive_dir}`",
        "Licence": "see https://www.statmt.org/wmt14/translation-task.html (corpora "
                   "have their own terms: Europarl and News Commentary are free for "
                   "research; Common Crawl is web-crawled text)",
        "Command": f"`{card.command_line()}`",
    }
    counts = {**stats, **{f"kept {k}": v for k, v in kept.items()}}
    tables = {"Cleaning of training pairs": counts}
    notes = [
        "Whitespace normalised (tabs, non-breaking spaces); valid/test kept complete.",
        f"Training pairs: 1-{cfg.max_words} whitespace words per side, length "
        f"ratio at most {cfg.max_ratio} for pairs longer than 3 words (Moses "
        "clean-corpus-n style).",
        f"Joint SentencePiece model, vocabulary {cfg.vocab_size}, trained on a "
        f"sample of at most {cfg.spm_sentences} lines of train.de + train.en; "
        "binarized with fairseq-preprocess --joined-dictionary.",
    ]
    text = card.render_data_card("WMT14 De-En data card", meta, tables, lengths, notes)
    card.write_data_card(cfg.out / "DATA_CARD.md", text)


def run(cfg: Wmt14Config) -> dict[str, str]:
    """Run (or reuse) every step of the recipe.

    Returns:
        Step name -> ``"built"`` or ``"reused"``.
    """
    start = time.monotonic()
    cfg.validate()
    archives = fetch_archives(cfg)
    raw_dir, bin_dir = cfg.out / "raw", cfg.out / "bin"
    spm_cfg = spm.SpmConfig(vocab_size=cfg.vocab_size, seed=cfg.seed, shuffle=True,
                            input_sentence_size=cfg.spm_sentences,
                            num_threads=cfg.workers)
    sizes = {name: path.stat().st_size for name, path in archives.items()}
    chain = StepChain(cfg.out)
    chain.run("raw", {"archives": sizes, "max_words": cfg.max_words,
                      "max_ratio": cfg.max_ratio, "max_train": cfg.max_train},
              split_paths(raw_dir, LANGS) + [cfg.out / "DATA_CARD.md"],
              lambda: build_raw(cfg, archives))
    spm.spm_encode_binarize(chain, cfg.out, spm_cfg, LANGS, cfg.workers)
    LOG.info("finished in %.1f s; fairseq data in %s", time.monotonic() - start,
             bin_dir)
    return dict(chain.status)


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags (defaults come from Wmt14Config)."""
    d = Wmt14Config(out=Path("."))
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--raw-dir", type=Path, default=None,
                   help="directory with (or for) the original archives; "
                   "default OUT/orig")
    p.add_argument("--offline", action="store_true",
                   help="never download: every archive must be in --raw-dir")
    p.add_argument("--vocab-size", type=int, default=d.vocab_size)
    p.add_argument("--max-words", type=int, default=d.max_words)
    p.add_argument("--max-ratio", type=float, default=d.max_ratio)
    p.add_argument("--max-train", type=int, default=None, help="cap on training pairs")
    p.add_argument("--spm-sentences", type=int, default=d.spm_sentences)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--workers", type=int, default=d.workers)
    p.add_argument("--quiet", action="store_true", help="only print errors")
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the recipe, turn user errors into exit code 2."""
    args = vars(build_parser().parse_args(argv))
    setup_logging(verbose=not args.pop("quiet"))
    return report_user_errors(lambda: run(Wmt14Config(**args)))


if __name__ == "__main__":  # python -m nmt_specdec.data.wmt14, as the console script
    sys.exit(main())
