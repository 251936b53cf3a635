"""nmt-specdec-binarize: raw parallel text to a fairseq data-bin, in a model's vocabulary.

``fairseq-generate``, ``fairseq-train`` and ``nmt-specdec-add-draft-head`` read
binarized data, and ``fairseq-preprocess`` binarizes text already split into
the model's SentencePiece pieces. This command does both: it encodes
``PREFIX.SRC`` and ``PREFIX.TGT`` of each split with ``--spm-model``, then runs
``fairseq-preprocess`` with the model's dictionaries (``--srcdict``,
``--tgtdict``), so that the ids are the checkpoint's. The flags are
``fairseq-preprocess``'s own names.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from nmt_specdec import logs
from nmt_specdec.arguments import HelpFormatter
from nmt_specdec.data.spm import GivenVocab, binarize, encode_file
from nmt_specdec.data.steps import OneLineParser, count_lines, run_command
from nmt_specdec.errors import UserError

SPLITS = ("train", "valid", "test")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="nmt-specdec-binarize", formatter_class=HelpFormatter,
                      description="Raw parallel text to a fairseq data-bin in a model's "
                      "vocabulary: SentencePiece encoding, then fairseq-preprocess with the "
                      "model's dictionaries.")
    p.add_argument("-s", "--source-lang", required=True, help="source language suffix (de)")
    p.add_argument("-t", "--target-lang", required=True, help="target language suffix (en)")
    p.add_argument("--spm-model", type=Path, required=True,
                   help="the model's SentencePiece model")
    p.add_argument("--srcdict", type=Path, required=True, help="the model's source dictionary")
    p.add_argument("--tgtdict", type=Path, default=None,
                   help="the model's target dictionary (default: --srcdict, a joined one)")
    for split in SPLITS:
        p.add_argument(f"--{split}pref", type=Path, default=None,
                       help=f"{split} split: raw text in PREFIX.SRC and PREFIX.TGT")
    p.add_argument("--destdir", type=Path, required=True, help="the data-bin to write")
    p.add_argument("--workers", type=int, default=2, help="fairseq-preprocess workers")
    logs.add_verbose_flag(p)
    return p


def run(flags: Dict) -> Path:
    """Encodes and binarizes the given splits into ``flags['destdir']``."""
    langs = (flags["source_lang"], flags["target_lang"])
    prefixes = {split: flags[f"{split}pref"] for split in SPLITS if flags[f"{split}pref"]}
    if not prefixes:
        raise UserError("give at least one of --trainpref, --validpref, --testpref")
    vocab = GivenVocab(flags["spm_model"], flags["srcdict"], flags["tgtdict"] or flags["srcdict"])
    for path in (vocab.spm_model, vocab.src_dict, vocab.tgt_dict):
        if not path.is_file():
            raise UserError(f"{path}: no such file")
    pairs = _count_pairs(prefixes, langs)
    with tempfile.TemporaryDirectory(prefix="nmt-specdec-binarize-") as pieces:
        for split, prefix in prefixes.items():
            for lang in langs:
                encode_file(vocab.spm_model, _text(prefix, lang), Path(pieces) / f"{split}.{lang}")
        binarize(Path(pieces), flags["destdir"], langs, tuple(prefixes), flags["workers"], vocab)
    print(f"{flags['destdir']}: " + ", ".join(f"{split} {n} pairs" for split, n in pairs.items()))
    return flags["destdir"]


def _text(prefix: Path, lang: str) -> Path:
    return prefix.with_name(f"{prefix.name}.{lang}")


def _count_pairs(prefixes: Dict[str, Path], langs) -> Dict[str, int]:
    """Each split's pairs, after checking that it has both sides with as many lines
    on each (fairseq pairs them by line)."""
    pairs = {}
    for split, prefix in prefixes.items():
        files = [_text(prefix, lang) for lang in langs]
        for path in files:
            if not path.is_file():
                raise UserError(f"--{split}pref: {path}: no such file")
        counts = [count_lines(path) for path in files]
        if counts[0] != counts[1]:
            raise UserError(f"--{split}pref: {files[0]} has {counts[0]} lines, {files[1]} "
                            f"{counts[1]}: a parallel split needs one line per pair")
        if not counts[0]:
            raise UserError(f"--{split}pref: {files[0]} is empty")
        pairs[split] = counts[0]
    return pairs


def main(argv: Optional[List[str]] = None) -> int:
    return run_command(build_parser(), run, argv)


if __name__ == "__main__":  # python -m nmt_specdec.data.binarize, as the console script
    sys.exit(main())
