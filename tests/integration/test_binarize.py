"""``nmt-specdec-binarize``: raw parallel text to a fairseq data-bin in the shipped
model's vocabulary, as ``fairseq-generate`` reads it; bad input is one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nmt_specdec.data.binarize import main

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "gettext-de-en-tiny"
PAIRS = [("Die Datei wurde nicht gefunden.", "File not found."),
         ("Änderungen speichern?", "Save changes?"),
         ("Drucken", "Print")]


def _write(prefix: Path, pairs) -> Path:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for index, lang in enumerate(("de", "en")):
        prefix.with_name(f"{prefix.name}.{lang}").write_text(
            "".join(pair[index] + "\n" for pair in pairs), encoding="utf-8")
    return prefix


def _flags(tmp_path: Path, **prefixes) -> list:
    flags = ["-s", "de", "-t", "en", "--spm-model", str(MODEL / "spm.model"),
             "--srcdict", str(MODEL / "dict.de.txt"), "--tgtdict", str(MODEL / "dict.en.txt"),
             "--destdir", str(tmp_path / "bin")]
    for split, prefix in prefixes.items():
        flags += [f"--{split}pref", str(prefix)]
    return flags


def test_the_data_bin_holds_the_model_ids_of_each_line(tmp_path, capsys):
    import sentencepiece
    from fairseq.data import Dictionary, data_utils

    prefix = _write(tmp_path / "raw" / "test", PAIRS)
    assert main(_flags(tmp_path, test=prefix)) == 0
    assert "test 3 pairs" in capsys.readouterr().out
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(MODEL / "spm.model"))
    for index, lang in enumerate(("de", "en")):
        dictionary = Dictionary.load(str(MODEL / f"dict.{lang}.txt"))
        data = data_utils.load_indexed_dataset(str(tmp_path / "bin" / f"test.de-en.{lang}"),
                                               dictionary)
        assert len(data) == len(PAIRS)
        for line, pair in enumerate(PAIRS):
            expected = [dictionary.index(piece) for piece in
                        pieces.encode(pair[index], out_type=str)] + [dictionary.eos()]
            assert data[line].tolist() == expected, (lang, line)
            assert dictionary.unk() not in expected


@pytest.mark.parametrize("breakage, message", [
    ("no split", "give at least one of --trainpref"),
    ("missing side", "test.en: no such file"),
    ("uneven", "has 3 lines"),
    ("empty", "is empty"),
    ("no dictionary", "dict.xx.txt: no such file"),
])
def test_bad_input_is_one_line(tmp_path, breakage, message):
    prefix = _write(tmp_path / "raw" / "test", PAIRS)
    flags = _flags(tmp_path, test=prefix)
    if breakage == "no split":
        flags = _flags(tmp_path)
    elif breakage == "missing side":
        prefix.with_name("test.en").unlink()
    elif breakage == "uneven":
        prefix.with_name("test.en").write_text("one\n", encoding="utf-8")
    elif breakage == "empty":
        _write(prefix, [])
    else:
        flags[flags.index("--srcdict") + 1] = str(tmp_path / "dict.xx.txt")
    done = subprocess.run([sys.executable, "-m", "nmt_specdec.data.binarize", *flags],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
    assert not (tmp_path / "bin").exists()
