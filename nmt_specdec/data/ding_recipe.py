"""The Ding De-En recipe: parse, split, SentencePiece, fairseq binarize.

Output layout under ``--out``::

    raw/{train,valid,test}.{de,en}   cleaned plain text, line-aligned
    DATA_CARD.md                     counts, skip reasons, licence, command
    spm.model, spm.vocab             joint SentencePiece model
    spm/{train,valid,test}.{de,en}   space-separated pieces
    bin/                             fairseq-preprocess output (dict.de.txt ...)

Every step is skipped when its outputs exist and were built with the same
settings, so rerunning the command is cheap. Entry point:
``nmt-specdec-prepare-ding``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from nmt_specdec.data import card, ding, splits, spm
from nmt_specdec.data.steps import (
    LOG,
    OneLineParser,
    RecipeError,
    StepChain,
    report_user_errors,
    setup_logging,
)

LANGS = ("de", "en")
PARSE_KEYS = ("lines", "comment_or_blank", "malformed", "misaligned", "sub_entries",
              "unpaired_alternatives", "fragment", "empty_after_cleaning",
              "unbalanced_brackets", "pairs")
SPLIT_KEYS = ("duplicate_pair", "too_short", "too_long", "train_overlaps_heldout",
              "heldout_not_sentence_like", "train_over_cap")
DEFAULT_CACHE = Path.home() / ".cache" / "nmt_specdec" / "ding"


@dataclass
class DingConfig:
    """Settings of one recipe run (mirrors the command-line flags)."""

    out: Path
    ding_file: Path | None = None
    cache_dir: Path = DEFAULT_CACHE
    vocab_size: int = 8000
    valid_size: int = 1000
    test_size: int = 1000
    min_words: int = 1
    max_words: int = 50
    sentence_min_words: int = 4
    max_train: int | None = None
    seed: int = 1
    workers: int = 2
    model_dir: Path | None = None
    spm_model: Path | None = None
    dict_path: Path | None = None

    def split_config(self) -> splits.SplitConfig:
        """The subset of settings that drives splitting."""
        return splits.SplitConfig(
            valid_size=self.valid_size, test_size=self.test_size,
            min_words=self.min_words, max_words=self.max_words,
            sentence_min_words=self.sentence_min_words,
            max_train=self.max_train, seed=self.seed)

    def given_vocab(self) -> spm.GivenVocab | None:
        """An existing model's vocabulary to encode with (None: train one)."""
        return spm.GivenVocab.from_flags(self.model_dir, self.spm_model,
                                         self.dict_path, LANGS)

    def spm_config(self) -> spm.SpmConfig:
        """The subset of settings that drives SentencePiece."""
        return spm.SpmConfig(vocab_size=self.vocab_size, seed=self.seed,
                             num_threads=self.workers)


def equivalent_command(cfg: DingConfig, corpus: Path) -> str:
    """A command line that rebuilds exactly these outputs (for the data card)."""
    argv = ["nmt-specdec-prepare-ding", "--ding-file", str(corpus),
            "--out", str(cfg.out),
            "--vocab-size", str(cfg.vocab_size), "--valid-size", str(cfg.valid_size),
            "--test-size", str(cfg.test_size), "--min-words", str(cfg.min_words),
            "--max-words", str(cfg.max_words),
            "--sentence-min-words", str(cfg.sentence_min_words),
            "--seed", str(cfg.seed)]
    if cfg.max_train is not None:
        argv += ["--max-train", str(cfg.max_train)]
    argv += card.vocab_argv(cfg.model_dir, cfg.spm_model, cfg.dict_path)
    return card.command_line(argv)


def build_raw(cfg: DingConfig, corpus: Path) -> None:
    """Parse the dictionary, split it and write raw files plus the data card."""
    parse_stats: Counter = Counter()
    pairs = ding.read_ding(corpus, parse_stats)
    LOG.info("parsed %d pairs from %d lines", len(pairs), parse_stats["lines"])
    result = splits.make_splits(pairs, cfg.split_config())
    LOG.info("split: train %d, valid %d, test %d",
             len(result.train), len(result.valid), len(result.test))
    raw_dir = cfg.out / "raw"
    splits.write_splits(result, raw_dir, LANGS)
    header = ding.read_header(corpus)
    meta = {
        "Source": "Ding German-English dictionary by Frank Richter "
                  "(https://dict.tu-chemnitz.de/), Debian package trans-de-en",
        "Corpus file": f"`{corpus}` (version {header.get('Version', 'unknown')})",
        "Licence": "GPL-2.0-or-later (GNU GPL version 2 or later), as stated in the "
                   "file header; every file under this directory is derived from it",
        "Command": f"`{equivalent_command(cfg, corpus)}`",
        "Seed": str(cfg.seed),
    }
    tables = {
        "Parsing (dictionary lines to pairs)": {k: parse_stats[k] for k in PARSE_KEYS},
        "Filtering and splitting": {k: result.stats[k] for k in SPLIT_KEYS},
    }
    lengths = {name: card.LengthStats().add_all(p)
               for name, p in result.as_dict().items()}
    text = card.render_data_card("Ding De-En data card", meta, tables, lengths,
                                 _notes(cfg))
    card.write_data_card(cfg.out / "DATA_CARD.md", text)


def _notes(cfg: DingConfig) -> list[str]:
    """Processing decisions written to the data card."""
    return [
        "Sub-entries (`|`) are aligned by position; lines whose two sides have a "
        "different number of sub-entries are skipped (`misaligned`).",
        "Synonyms (`;`): equal counts are paired by position, otherwise only the "
        "first German synonym is paired with the first English one.",
        "Removed annotations: `{...}` grammar, `[...]` usage labels, `<...>` search "
        "keys, `(...)` glosses, `/ABBR/` abbreviations, `~word` cross-references.",
        "Slash alternatives such as `sheer/pure` are kept as written.",
        "Entries with an ellipsis (`Abbau…`) are fragments and are dropped.",
        f"Length filter: {cfg.min_words}-{cfg.max_words} whitespace words per side; "
        "exact duplicate pairs removed.",
        f"valid/test are drawn (seed {cfg.seed}) first from pairs with at least "
        f"{cfg.sentence_min_words} words on both sides; training pairs sharing a "
        "German or English text with valid/test (ignoring case and punctuation) are "
        "removed.",
        spm.vocab_note(cfg.given_vocab(), cfg.vocab_size),
    ]


def run(cfg: DingConfig, raw_only: bool = False) -> dict[str, str]:
    """Run (or reuse) every step of the recipe.

    Args:
        cfg: Recipe settings.
        raw_only: stop after the cleaned, split plain text (``raw/``), e.g. to
            decode the test split with a model that brings its own
            SentencePiece model and dictionaries.

    Returns:
        Step name -> ``"built"`` or ``"reused"``.

    Raises:
        RecipeError: A problem the user can fix.
    """
    start = time.monotonic()
    cfg.split_config().validate()
    cfg.given_vocab()  # a bad --model-dir fails now, not after the parse
    if cfg.out.exists() and not cfg.out.is_dir():
        raise RecipeError(f"--out {cfg.out} exists and is not a directory")
    corpus = ding.locate_ding(cfg.ding_file, cfg.cache_dir)
    LOG.info("corpus: %s", corpus)
    raw_dir, bin_dir = cfg.out / "raw", cfg.out / "bin"
    stat = corpus.stat()
    chain = StepChain(cfg.out)
    chain.run("raw", {"corpus": str(corpus.resolve()), "size": stat.st_size,
                      "mtime": int(stat.st_mtime), **asdict(cfg.split_config())},
              splits.split_paths(raw_dir, LANGS) + [cfg.out / "DATA_CARD.md"],
              lambda: build_raw(cfg, corpus))
    if raw_only:
        return dict(chain.status)
    spm.spm_encode_binarize(chain, cfg.out, cfg.spm_config(), LANGS, cfg.workers,
                            cfg.given_vocab())
    LOG.info("finished in %.1f s; fairseq data in %s", time.monotonic() - start,
             bin_dir)
    return dict(chain.status)


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags (defaults come from DingConfig)."""
    d = DingConfig(out=Path("."))
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--ding-file", type=Path,
                   help="Ding de-en file; default: the installed "
                   "/usr/share/trans/de-en, else apt-get download trans-de-en")
    p.add_argument("--cache-dir", type=Path, default=d.cache_dir,
                   help="where a downloaded Debian package is kept "
                   "(default %(default)s)")
    p.add_argument("--vocab-size", type=int, default=d.vocab_size)
    p.add_argument("--valid-size", type=int, default=d.valid_size)
    p.add_argument("--test-size", type=int, default=d.test_size)
    p.add_argument("--min-words", type=int, default=d.min_words)
    p.add_argument("--max-words", type=int, default=d.max_words)
    p.add_argument("--sentence-min-words", type=int, default=d.sentence_min_words,
                   help="valid/test prefer pairs with at least this many words "
                   "per side")
    p.add_argument("--max-train", type=int, default=None, help="cap on training pairs")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--workers", type=int, default=d.workers)
    spm.add_vocab_flags(p)
    p.add_argument("--quiet", action="store_true", help="only print errors")
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the recipe, turn user errors into exit code 2."""
    args = vars(build_parser().parse_args(argv))
    setup_logging(verbose=not args.pop("quiet"))
    return report_user_errors(lambda: run(DingConfig(**args)))


if __name__ == "__main__":  # python -m nmt_specdec.data.ding_recipe, as the console script
    sys.exit(main())
