"""The gettext De-En recipe: Debian message catalogs to fairseq data.

Output layout under ``--out``::

    catalogs/<package>/*.mo          German catalogs of each package
    catalogs/<package>/package.json  version, licence, catalog paths
    catalogs/index.json              packages stored, packages unavailable
    raw/{train,valid,test}.{de,en}   clean sentence pairs, line-aligned
    DATA_CARD.md                     counts, rules, per-package table
    spm.model, spm/, bin/            as in the Ding recipe

Every step is reused when its outputs exist and its settings are unchanged;
an interrupted ``catalogs`` step continues with the next package. Entry
point: ``nmt-specdec-prepare-gettext``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from nmt_specdec.data import card, gettext_sources, splits, spm
from nmt_specdec.data.gettext_clean import CLEAN_KEYS, CleanConfig, clean_catalog
from nmt_specdec.data.gettext_packages import PACKAGE_GROUPS, declared_packages
from nmt_specdec.data.gettext_split import (
    SPLIT_KEYS,
    assign_splits,
    split_by_package,
)
from nmt_specdec.data.mo import MoFormatError, parse_mo
from nmt_specdec.data.steps import (
    LOG,
    OneLineParser,
    RecipeError,
    SourceUnavailable,
    StepChain,
    atomic_text,
    report_user_errors,
    setup_logging,
)

LANGS = ("de", "en")
READ_KEYS = ("catalogs", "unreadable_catalogs", "undecodable_entries")
DEFAULT_CACHE = Path.home() / ".cache" / "nmt_specdec" / "gettext"
Pair = tuple[str, str]


@dataclass
class GettextConfig:
    """Settings of one recipe run (mirrors the command-line flags)."""

    out: Path
    deb_dir: Path | None = None
    packages: list[str] | None = None
    cache_dir: Path = DEFAULT_CACHE
    keep_debs: bool = False
    vocab_size: int = 8000
    valid_size: int = 2000
    test_size: int = 2000
    max_words: int = 50
    max_train: int | None = None
    seed: int = 1
    workers: int = 2
    model_dir: Path | None = None
    spm_model: Path | None = None
    dict_path: Path | None = None
    heldout: dict[str, list[str]] | None = None

    def validate(self) -> None:
        """Raise RecipeError naming the first impossible option."""
        if self.valid_size < 0 or self.test_size < 0:
            raise RecipeError("--valid-size and --test-size must be >= 0")
        if self.max_words < 1:
            raise RecipeError("--max-words must be >= 1")
        if self.max_train is not None and self.max_train < 1:
            raise RecipeError("--max-train must be >= 1")
        if self.deb_dir is not None and self.packages:
            raise RecipeError("--packages and --deb-dir exclude each other: "
                              "--deb-dir uses every package in the directory")
        if self.out.exists() and not self.out.is_dir():
            raise RecipeError(f"--out {self.out} exists and is not a directory")
        if self.heldout is not None and set(self.heldout) - {"valid", "test"}:
            raise RecipeError("--heldout-from: only 'valid' and 'test' package lists")

    def package_names(self) -> list[str]:
        """The packages to download: ``--packages`` or the declared list."""
        return list(dict.fromkeys(self.packages or declared_packages()))

    def clean_config(self) -> CleanConfig:
        """The subset of settings that drives cleaning."""
        return CleanConfig(max_words=self.max_words)

    def given_vocab(self) -> spm.GivenVocab | None:
        """An existing model's vocabulary to encode with (None: train one)."""
        return spm.GivenVocab.from_flags(self.model_dir, self.spm_model,
                                         self.dict_path, LANGS)

    def spm_config(self) -> spm.SpmConfig:
        """The subset of settings that drives SentencePiece."""
        return spm.SpmConfig(vocab_size=self.vocab_size, seed=self.seed,
                             num_threads=self.workers)


def _source_params(cfg: GettextConfig) -> dict:
    """Stamp parameters that identify the catalogs' source."""
    if cfg.deb_dir is None:
        return {"apt": cfg.package_names()}
    listing = sorted((p.name, p.stat().st_size, int(p.stat().st_mtime))
                     for p in cfg.deb_dir.rglob("*") if p.is_file())
    return {"deb_dir": str(cfg.deb_dir.resolve()), "files": listing}


def collect(cfg: GettextConfig) -> None:
    """Store every package's German catalogs and write ``catalogs/index.json``."""
    catalogs_dir = cfg.out / "catalogs"
    if cfg.deb_dir is not None:
        names, unavailable = gettext_sources.collect_from_dir(cfg.deb_dir,
                                                              catalogs_dir), []
        origin = f"--deb-dir {cfg.deb_dir}"
    else:
        names = cfg.package_names()
        unavailable = gettext_sources.collect_from_apt(
            names, catalogs_dir, cfg.cache_dir / "debs", cfg.keep_debs)
        names = [n for n in names if n not in unavailable]
        origin = "apt-get download"
    if not names:
        # Every download failed: the archive is out of reach (or apt-get is
        # missing); a network problem, not a bug of the recipe.
        kind = SourceUnavailable if cfg.deb_dir is None else RecipeError
        raise kind("no package could be read; check the package names "
                   "and that 'apt-get download' works (or use --deb-dir)")
    with atomic_text(catalogs_dir / "index.json") as handle:
        json.dump({"origin": origin, "packages": names, "unavailable": unavailable},
                  handle, indent=1)


def read_package(pkg_dir: Path, clean_cfg: CleanConfig, stats: Counter
                 ) -> tuple[gettext_sources.PackageInfo, dict[str, int], list[Pair]]:
    """Parse and clean one stored package.

    Returns:
        Its info, clean pairs per catalog, and its pairs deduplicated.
    """
    info = gettext_sources.load_info(pkg_dir)
    if info is None:
        raise RecipeError(f"{pkg_dir} is incomplete; delete it and rerun")
    per_catalog: dict[str, int] = {}
    pairs: list[Pair] = []
    for name in sorted(info.catalogs):
        stats["catalogs"] += 1
        try:
            catalog = parse_mo((pkg_dir / name).read_bytes())
        except MoFormatError as exc:
            LOG.warning("%s/%s skipped: %s", info.name, name, exc)
            stats["unreadable_catalogs"] += 1
            continue
        stats["undecodable_entries"] += catalog.undecodable
        found = clean_catalog(catalog.messages, clean_cfg, stats)
        per_catalog[name.removesuffix(".mo")] = len(found)
        pairs += found
    return info, per_catalog, splits.dedupe(pairs, Counter())


def build_raw(cfg: GettextConfig) -> None:
    """Clean every package, split by package, write raw files and the card."""
    index = json.loads((cfg.out / "catalogs" / "index.json").read_text("utf-8"))
    stats: Counter = Counter()
    rows, package_pairs = [], {}
    for name in index["packages"]:
        info, per_catalog, pairs = read_package(cfg.out / "catalogs" / name,
                                                cfg.clean_config(), stats)
        package_pairs[name] = pairs
        rows.append((info, per_catalog))
    LOG.info("%d clean pairs from %d packages", sum(map(len, package_pairs.values())),
             len(package_pairs))
    assignment = _assignment(cfg, {n: len(p) for n, p in package_pairs.items()},
                             set(index["unavailable"]))
    result = split_by_package(package_pairs, assignment, cfg.seed, cfg.max_train)
    LOG.info("split: train %d, valid %d, test %d", len(result.train),
             len(result.valid), len(result.test))
    splits.write_splits(result, cfg.out / "raw", LANGS)
    text = render_card(cfg, index, stats, result, rows, assignment,
                       {n: len(p) for n, p in package_pairs.items()})
    card.write_data_card(cfg.out / "DATA_CARD.md", text)


def _assignment(cfg: GettextConfig, sizes: dict[str, int],
                unavailable: set[str]) -> dict[str, str]:
    """Each package's split: chosen by size, or fixed by ``cfg.heldout``.

    A fixed assignment rebuilds a model's valid and test splits from their
    packages alone (the quickstart fetches only those): valid and test are
    pooled, deduplicated and shuffled exactly as in the full recipe, since
    the shuffles of valid and test come before the training split's.
    """
    if cfg.heldout is None:
        return assign_splits(sizes, cfg.valid_size, cfg.test_size, cfg.seed)
    fixed = {name: split for split, names in cfg.heldout.items() for name in names}
    missing = sorted(set(fixed) - set(sizes))
    if missing:
        # A package apt-get could not fetch is the archive's problem; one that
        # was never asked for (or has no catalog) is the caller's.
        kind = SourceUnavailable if set(missing) <= unavailable else RecipeError
        raise kind(f"held-out package(s) not read: {', '.join(missing)}")
    return {name: fixed.get(name, "train") for name in sizes}


def equivalent_command(cfg: GettextConfig) -> str:
    """A command line that rebuilds these outputs (for the data card)."""
    argv = ["nmt-specdec-prepare-gettext", "--out", str(cfg.out)]
    if cfg.deb_dir is not None:
        argv += ["--deb-dir", str(cfg.deb_dir)]
    elif cfg.packages:
        argv += ["--packages", *cfg.packages]
    argv += ["--vocab-size", str(cfg.vocab_size), "--valid-size", str(cfg.valid_size),
             "--test-size", str(cfg.test_size), "--max-words", str(cfg.max_words),
             "--seed", str(cfg.seed)]
    if cfg.max_train is not None:
        argv += ["--max-train", str(cfg.max_train)]
    argv += card.vocab_argv(cfg.model_dir, cfg.spm_model, cfg.dict_path)
    return card.command_line(argv)


def render_card(cfg: GettextConfig, index: dict, stats: Counter,
                result: splits.SplitResult, rows: list, assignment: dict,
                sizes: dict) -> str:
    """The data card: summary, counts, rules, then one row per package."""
    meta = {
        "Source": f"German gettext catalogs (`.mo`) of {len(index['packages'])} "
                  f"Debian packages ({index['origin']}); msgstr (German) is the "
                  "source side, msgid (English) the target side",
        "Licence": "each package's own (table below); every line of the output "
                   "is derived from the package it came from and keeps its licence",
        "Unavailable packages": ", ".join(index["unavailable"]) or "none",
        "Command": f"`{equivalent_command(cfg)}`",
        "Seed": str(cfg.seed),
    }
    tables = {
        "Reading catalogs": {k: stats[k] for k in READ_KEYS},
        "Cleaning (catalog entries to pairs)": {k: stats[k] for k in CLEAN_KEYS},
        "Splitting (by package)": {k: result.stats[k] for k in SPLIT_KEYS},
    }
    lengths = {name: card.LengthStats().add_all(p)
               for name, p in result.as_dict().items()}
    text = card.render_data_card("gettext De-En data card", meta, tables, lengths,
                                 _notes(cfg))
    return text + "\n" + _package_table(rows, assignment, sizes)


def _package_table(rows: list, assignment: dict, sizes: dict) -> str:
    """Markdown table: package, version, licence, split, pairs, catalogs."""
    out = ["## Packages", "",
           "pairs: clean pairs unique within the package, before the by-package "
           "split removes pairs shared with held-out packages.", "",
           "| package | version | licence | split | pairs | catalogs (clean pairs) |",
           "|---|---|---|---|---:|---|"]
    for info, per_catalog in rows:
        catalogs = ", ".join(f"{n} ({c})" for n, c in per_catalog.items()) or "-"
        licence = info.licence.replace("|", "/")
        out.append(f"| {info.name} | {info.version} | {licence} | "
                   f"{assignment[info.name]} | {sizes[info.name]} | {catalogs} |")
    return "\n".join(out) + "\n"


def _notes(cfg: GettextConfig) -> list[str]:
    """Processing decisions written to the data card."""
    return [
        "Catalogs: every `de/LC_MESSAGES/*.mo` in a package (also LibreOffice's "
        "`program/resource/de/`); `de_AT`/`de_CH` are not used. Catalogs named "
        "like a program reserved for evaluation are left out.",
        "Plural entries give their singular pair (msgid, msgstr[0]); msgctxt is "
        "dropped after parsing; strings are decoded with the header's charset.",
        "Dropped: translator credits, empty msgstr, sides without a letter once "
        "placeholders and markup are removed, different placeholders on the two "
        "sides or a length ratio above 3 (stale translations), more than "
        f"{cfg.max_words} words, German equal to English.",
        "Whitespace runs become one space; accelerator markers `_`, `&`, `~` are "
        "removed by one rule on both sides; placeholders and markup are kept.",
        f"Split by package (seed {cfg.seed}): valid and test take whole packages of "
        "at most a quarter of their requested size "
        f"({cfg.valid_size}/{cfg.test_size} pairs) until full; the rest is "
        "training. Exact duplicate pairs are removed per split; test pairs sharing "
        "a text with valid and training pairs sharing one with valid/test "
        "(ignoring case and punctuation) are removed.",
        spm.vocab_note(cfg.given_vocab(), cfg.vocab_size),
    ]


def run(cfg: GettextConfig, raw_only: bool = False) -> dict[str, str]:
    """Run (or reuse) every step of the recipe (``raw_only``: up to the split).

    Returns:
        Step name -> ``"built"`` or ``"reused"``.

    Raises:
        RecipeError: A problem the user can fix.
    """
    start = time.monotonic()
    cfg.validate()
    cfg.given_vocab()  # a bad --model-dir fails now, not after the downloads
    if cfg.deb_dir is not None and not cfg.deb_dir.is_dir():
        raise RecipeError(f"--deb-dir {cfg.deb_dir} is not a directory")
    gettext_sources.refuse_reserved(cfg.packages or [], "--packages")
    chain = StepChain(cfg.out)
    chain.run("catalogs", _source_params(cfg), [cfg.out / "catalogs" / "index.json"],
              lambda: collect(cfg))
    params = {"clean": vars(cfg.clean_config()), "valid_size": cfg.valid_size,
              "test_size": cfg.test_size, "max_train": cfg.max_train,
              "heldout": cfg.heldout,
              "seed": cfg.seed}
    chain.run("raw", params,
              splits.split_paths(cfg.out / "raw", LANGS) + [cfg.out / "DATA_CARD.md"],
              lambda: build_raw(cfg))
    if raw_only:
        return dict(chain.status)
    spm.spm_encode_binarize(chain, cfg.out, cfg.spm_config(), LANGS, cfg.workers,
                            cfg.given_vocab())
    LOG.info("finished in %.1f s; fairseq data in %s", time.monotonic() - start,
             cfg.out / "bin")
    return dict(chain.status)


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags (defaults come from GettextConfig)."""
    d = GettextConfig(out=Path("."))
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--deb-dir", type=Path,
                   help="read *.deb files and directories of .mo files (one per "
                   "package) from here instead of running apt-get download")
    p.add_argument("--packages", nargs="+", metavar="PKG",
                   help=f"download these packages instead of the declared list "
                   f"({len(declared_packages())} packages in "
                   f"{len(PACKAGE_GROUPS)} groups, nmt_specdec/data/"
                   "gettext_packages.py)")
    p.add_argument("--cache-dir", type=Path, default=d.cache_dir,
                   help="where .deb files are downloaded (default %(default)s)")
    p.add_argument("--keep-debs", action="store_true",
                   help="keep downloaded .deb files in --cache-dir")
    p.add_argument("--vocab-size", type=int, default=d.vocab_size)
    p.add_argument("--valid-size", type=int, default=d.valid_size,
                   help="valid pairs wanted (whole packages, so at most this)")
    p.add_argument("--test-size", type=int, default=d.test_size)
    p.add_argument("--max-words", type=int, default=d.max_words,
                   help="drop messages with more words on a side")
    p.add_argument("--max-train", type=int, default=None, help="cap on training pairs")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--workers", type=int, default=d.workers)
    spm.add_vocab_flags(p)
    p.add_argument("--heldout-from", type=Path, dest="heldout",
                   help="JSON {\"valid\": [packages], \"test\": [packages]}: fix the "
                   "held-out splits to these packages (e.g. a model's settings.json "
                   "'gettext_heldout'), so they are the same as that model's")
    p.add_argument("--quiet", action="store_true", help="only print errors")
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the recipe, turn user errors into exit code 2."""
    args = vars(build_parser().parse_args(argv))
    setup_logging(verbose=not args.pop("quiet"))
    return report_user_errors(lambda: run(GettextConfig(**_read_heldout(args))))


def _read_heldout(args: dict) -> dict:
    """``--heldout-from FILE`` -> the package lists (a settings.json may nest them)."""
    path = args.get("heldout")
    if path is None:
        return args
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecipeError(f"--heldout-from {path}: {exc}") from None
    data = data.get("gettext_heldout", data)
    return {**args, "heldout": {k: list(v) for k, v in data.items()}}


if __name__ == "__main__":  # python -m nmt_specdec.data.gettext_recipe, as the console script
    sys.exit(main())
