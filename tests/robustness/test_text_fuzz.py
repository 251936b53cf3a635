"""Property tests of the raw-text pre- and post-processing on arbitrary input.

* SentencePiece round trip: detokenizing the pieces of any cleaned text gives
  back exactly SentencePiece's normalization of it (unknown symbols keep their
  surface in piece form); decoding the *ids* gives the same up to ``⁇`` for
  each unknown run.
* Line count: any byte string splits into as many lines as it has ``\\n``
  (plus an unterminated last line), and cleaning never creates a line break.
* The whole translate path, with an echo model (its "translation" is its
  source), keeps one output per input line, in order, and loses or reorders
  no content, also when long lines are chunked.
"""

from __future__ import annotations

import io
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nmt_specdec import translate as tr

SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# Any code point, lone surrogates (what surrogateescape makes of bad bytes)
# and U+2581 (SentencePiece's own space symbol) included.
ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=60)
TOY_TEXT = st.text(
    st.sampled_from(
        list("thecatsdogrn .!?")
        + ["\x00", "\t", "\u00e9", "\U0001f600", "\u4e2d", "\r", "\u2028"]
    ),
    max_size=80,
)
LINE_BREAKS = re.compile(r"[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


@pytest.fixture(scope="module")
def spm(raw_text_toy):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=str(raw_text_toy.spm_model))


def _normalized(spm, text: str) -> str:
    """SentencePiece's normalization of ``text``, spaces as spaces, one line."""
    return tr.clean_text(spm.normalize(text).replace(tr.SPIECE_UNDERLINE, " "))


@SETTINGS
@given(ANY_TEXT)
def test_piece_round_trip_equals_normalized_text(spm, text: str) -> None:
    cleaned = tr.clean_text(text)
    pieces = spm.encode(cleaned, out_type=str)

    assert all(piece and " " not in piece for piece in pieces)
    assert tr.detokenize(" ".join(pieces)) == _normalized(spm, cleaned)


@SETTINGS
@given(ANY_TEXT)
def test_id_round_trip_equals_normalized_text_modulo_unk(spm, text: str) -> None:
    cleaned = tr.clean_text(text)
    decoded = spm.decode(spm.encode(cleaned))
    expected = "".join(_normalized(spm, cleaned).split())

    pattern = ".+".join(
        re.escape(part) for part in "".join(decoded.split()).split("\u2047")
    )
    assert re.fullmatch(pattern, expected, flags=re.S), (decoded, expected)


@SETTINGS
@given(st.lists(st.binary(max_size=30), max_size=12), st.booleans(), st.integers(1, 4))
def test_line_count_is_preserved(
    lines: list, terminated: bool, block_size: int
) -> None:
    # A "\r" before "\n" belongs to the terminator ("\r\n"), not to the line.
    lines = [line.replace(b"\n", b"").rstrip(b"\r") for line in lines]
    data = b"".join(line + b"\n" for line in lines)
    if not terminated:
        data = data[:-1]  # an unterminated last line (if empty: no line at all)

    split = tr.split_lines(data)
    blocks = list(tr.read_line_blocks(io.BytesIO(data), block_size))
    text = tr.decode_lines(split)
    cleaned = [tr.clean_text(t) for t in text]

    expected = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    assert len(split) == len(text) == len(cleaned) == expected
    assert [line for block in blocks for line in block] == split
    assert all(0 < len(block) <= block_size for block in blocks)
    if terminated:
        assert split == lines
    for line in cleaned:
        assert not LINE_BREAKS.search(line)
        assert line == line.strip() and "  " not in line


class _EchoTask:
    """A fairseq task stand-in whose model "translates" a sentence into itself."""

    def __init__(self, dictionary):
        self.source_dictionary = self.target_dictionary = dictionary
        self.calls = 0

    def build_dataset_for_inference(self, tokens, lengths):
        from fairseq.data import LanguagePairDataset

        return LanguagePairDataset(tokens, lengths, self.source_dictionary)

    def inference_step(self, generator, models, sample):
        self.calls += 1
        pad = self.source_dictionary.pad()
        return [
            [{"tokens": row[row.ne(pad)]}] for row in sample["net_input"]["src_tokens"]
        ]


@pytest.fixture(scope="module")
def echo(spm):
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for i in range(spm.get_piece_size()):
        if not (spm.is_control(i) or spm.is_unknown(i)):
            dictionary.add_symbol(spm.id_to_piece(i))
    return tr.Translator(_EchoTask(dictionary), None, None, spm, 7, torch.device("cpu"))


@SETTINGS
@given(st.lists(TOY_TEXT, max_size=8), st.integers(1, 5))
def test_translate_path_keeps_every_line_in_order(
    echo, lines: list, batch_size: int
) -> None:
    outputs = tr.translate_lines(lines, echo, batch_size)

    assert len(outputs) == len(lines)
    unk = echo.task.source_dictionary.unk_string()
    for line, output in zip(lines, outputs):
        assert not LINE_BREAKS.search(output)
        pieces = echo.spm.encode(tr.clean_text(line), out_type=str)
        expected = [
            p
            if echo.task.source_dictionary.index(p) != echo.task.source_dictionary.unk()
            else unk
            for p in pieces
        ]
        # Chunks are rejoined with a space, so compare without spaces.
        assert "".join(output.split()) == "".join(
            "".join(expected).replace(tr.SPIECE_UNDERLINE, " ").split()
        )
        if not tr.clean_text(line):
            assert output == ""
