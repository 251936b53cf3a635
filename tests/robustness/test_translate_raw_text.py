"""``nmt-specdec-translate`` on hostile raw text: one output line per input line.

In-process (``main`` and :func:`translate_lines`) on random-weight checkpoints
from :mod:`tests.robustness.toy_models`; one test runs the installed console
script on stdin.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest

from nmt_specdec import checkpoints
from nmt_specdec import translate as tr
from nmt_specdec.decoding.options import DecodingOptions
from tests.robustness.toy_models import (
    HOSTILE_INVALID_LINE,
    HOSTILE_LONG_LINE,
    MAX_SOURCE_POSITIONS,
    hostile_lines,
    toy_sentences,
)


def _config(toy, **overrides) -> tr.TranslateConfig:
    values = dict(
        checkpoint=str(toy.specdec),
        spm_model=str(toy.spm_model),
        data=str(toy.data),
        decoding=DecodingOptions(spec_decoding=True),
        max_len_b=6,
        batch_size=4,
        cpu=True,
    )
    values.update(overrides)
    return tr.TranslateConfig(**values)


@pytest.fixture(scope="module")
def translator(raw_text_toy) -> tr.Translator:
    checkpoints.register_plugin()
    return tr.load_translator(_config(raw_text_toy))


def _count_model_rows(monkeypatch, translator) -> list:
    """Records the batch size of every model call."""
    rows = []
    original = translator.task.inference_step

    def counting(generator, models, sample, **kwargs):
        rows.append(sample["net_input"]["src_tokens"].size(0))
        return original(generator, models, sample, **kwargs)

    monkeypatch.setattr(translator.task, "inference_step", counting)
    return rows


def test_hostile_file_gives_one_output_line_per_input_line(
    raw_text_toy, hostile_file: Path, tmp_path: Path, caplog, monkeypatch
) -> None:
    monkeypatch.setattr(tr, "BLOCK_LINES", 4)  # line numbers must count across blocks
    out = tmp_path / "out.txt"
    args = [
        "--checkpoint",
        str(raw_text_toy.specdec),
        "--spm-model",
        str(raw_text_toy.spm_model),
        "--data",
        str(raw_text_toy.data),
        "--cpu",
        "--spec-decoding",
        "--spec-k",
        "2",
        "--max-len-b",
        "6",
        "--batch-size",
        "3",
        "--input",
        str(hostile_file),
        "--output",
        str(out),
    ]
    with caplog.at_level(logging.WARNING):
        assert tr.main(args) == 0

    lines = out.read_bytes().decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) - 1 == len(hostile_lines())
    assert lines[1] == "" and lines[2] == ""  # empty and blank input lines
    for line in lines:
        assert not any(unicodedata.category(ch) == "Cc" for ch in line)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if "invalid UTF-8" in w] == [
        f"input line {HOSTILE_INVALID_LINE}: invalid UTF-8 bytes replaced by U+FFFD"
    ]
    long_warnings = [w for w in warnings if "source positions" in w]
    assert len(long_warnings) == 1 and long_warnings[0].startswith(
        f"input line {HOSTILE_LONG_LINE}:"
    )


def test_empty_lines_never_reach_the_model(translator, monkeypatch) -> None:
    rows = _count_model_rows(monkeypatch, translator)
    lines = ["", "the cat sat.", " \t ", "\x00\x07", "\ufeff", "a dog ran!", ""]

    outputs = tr.translate_lines(lines, translator, batch_size=8)

    assert len(outputs) == len(lines)
    assert [outputs[i] for i in (0, 2, 3, 4, 6)] == [""] * 5
    assert sum(rows) == 2  # only the two real sentences were decoded


def test_batches_restore_input_order(translator) -> None:
    lines = toy_sentences(10, seed=7)
    alone = [tr.translate_lines([line], translator, batch_size=1)[0] for line in lines]

    assert len(set(alone)) >= 5  # the random model's output depends on the input
    assert tr.translate_lines(lines, translator, batch_size=4) == alone
    assert tr.translate_lines(lines, translator, batch_size=32) == alone


def test_long_line_is_split_translated_and_rejoined(translator, monkeypatch) -> None:
    sentence = "the big red dog ran home."
    line = " ".join([sentence] * 6)
    pieces = translator.spm.encode(line, out_type=str)
    chunks = tr.chunk_pieces(pieces, translator.max_source_pieces)
    assert translator.max_source_pieces == MAX_SOURCE_POSITIONS - 1
    assert len(pieces) > translator.max_source_pieces and len(chunks) > 1
    assert all(chunk[-1] == "." for chunk in chunks)  # cut at sentence ends
    rows = _count_model_rows(monkeypatch, translator)

    [joined] = tr.translate_lines([line], translator, batch_size=8)

    assert sum(rows) == len(chunks)
    texts = [translator.spm.decode_pieces(chunk) for chunk in chunks]
    parts = [tr.translate_lines([text], translator, batch_size=1)[0] for text in texts]
    assert joined == " ".join(p for p in parts if p)


def test_stock_beam_search_on_hostile_input(
    raw_text_toy, hostile_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "beam.txt"
    cfg = _config(
        raw_text_toy,
        checkpoint=str(raw_text_toy.stock),
        decoding=DecodingOptions(),
        beam=2,
        input=str(hostile_file),
        output=str(out),
    )

    assert tr.run(cfg) == len(hostile_lines())
    assert out.read_text(encoding="utf-8").count("\n") == len(hostile_lines())


@pytest.mark.parametrize(
    "pieces, limit, expected",
    [
        (list("abcd"), 4, [list("abcd")]),
        (["▁a", "b", ".", "▁c", "d", "▁e"], 4, [["▁a", "b", "."], ["▁c", "d", "▁e"]]),
        (["▁a", "b", "▁c", "d", "e", "▁f"], 4, [["▁a", "b"], ["▁c", "d", "e", "▁f"]]),
        (list("abcdefg"), 3, [list("abc"), list("def"), ["g"]]),
        (["。", "▁x", "▁y", "z"], 2, [["。"], ["▁x"], ["▁y", "z"]]),
    ],
    ids=["fits", "sentence-end", "word-start", "hard", "cjk-stop"],
)
def test_chunk_pieces(pieces, limit, expected) -> None:
    assert tr.chunk_pieces(pieces, limit) == expected


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"", []),
        (b"\n", [b""]),
        (b"a\r\nb", [b"a", b"b"]),
        (b"a\rb\x0bc\x0cd\n\n", [b"a\rb\x0bc\x0cd", b""]),
        ("x\u2028y\u0085z\n".encode(), ["x\u2028y\u0085z".encode()]),
    ],
)
def test_split_lines_splits_at_newline_only(data: bytes, expected) -> None:
    assert tr.split_lines(data) == expected


def test_clean_text_and_decode_lines(caplog) -> None:
    assert tr.clean_text("\ufeff a\x00b\x1b[0m\tc\u2028d\u00a0e  ") == "a b [0m c d e"
    assert (
        tr.clean_text("e\u0301 \U0001f600 \u05e9\u05dc \u4e2d")
        == "e\u0301 \U0001f600 \u05e9\u05dc \u4e2d"
    )
    assert tr.clean_text("a\udcffb") == "a\ufffdb"
    with caplog.at_level(logging.WARNING):
        text = tr.decode_lines([b"ok", b"bad \xff\xfe!", "caf\u00e9".encode()])
    assert text == ["ok", "bad \ufffd\ufffd!", "caf\u00e9"]
    assert [r.getMessage() for r in caplog.records] == [
        "input line 2: invalid UTF-8 bytes replaced by U+FFFD"
    ]


def test_console_script_reads_stdin(raw_text_toy, hostile_file: Path) -> None:
    exe = shutil.which(
        "nmt-specdec-translate", path=str(Path(tr.sys.executable).parent)
    )
    assert exe, "nmt-specdec-translate is not installed: run `make setup`"
    proc = subprocess.run(
        [
            exe,
            "--checkpoint",
            str(raw_text_toy.specdec),
            "--spm-model",
            str(raw_text_toy.spm_model),
            "--data",
            str(raw_text_toy.data),
            "--cpu",
            "--spec-decoding",
            "--max-len-b",
            "6",
        ],
        input=hostile_file.read_bytes(),
        capture_output=True,
        timeout=300,
    )

    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    assert proc.stdout.count(b"\n") == len(hostile_lines())
    assert proc.stdout.split(b"\n")[1:3] == [b"", b""]
    stderr = proc.stderr.decode()
    assert f"input line {HOSTILE_INVALID_LINE}: invalid UTF-8" in stderr
    assert f"input line {HOSTILE_LONG_LINE}:" in stderr and "Traceback" not in stderr
