"""Raw source lines as the model should see them, and translations back to text.

Pure functions, no fairseq: ``nmt-specdec-translate`` (:mod:`nmt_specdec.translate`)
and the fairseq plugin's interactive hooks share them. The behaviour is
described in :mod:`nmt_specdec.translate`.

Shapes: S source pieces.
"""

from __future__ import annotations

import logging
import unicodedata
from contextlib import contextmanager
from typing import BinaryIO, Iterator, List, Sequence

from nmt_specdec.errors import UserError

logger = logging.getLogger(__name__)

SPIECE_UNDERLINE = "\u2581"
# A chunk of an over-long line preferably ends after one of these.
SENTENCE_END = (
    ".",
    "!",
    "?",
    ";",
    ":",
    "\u2026",
    "\u3002",
    "\uff01",
    "\uff1f",
    "\uff1b",
    "\u061f",
    "\u0964",
)


def split_lines(data: bytes) -> List[bytes]:
    """Raw input lines, split at ``\\n`` only, without terminators (``\\r\\n`` too)."""
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def read_line_blocks(stream: BinaryIO, size: int) -> Iterator[List[bytes]]:
    """Lines of a binary stream in blocks of ``size``, split as by :func:`split_lines`.

    Lets a long input be translated and written block by block.
    """
    block: List[bytes] = []
    for line in stream:  # a binary stream splits at b"\n" only
        line = line[:-1] if line.endswith(b"\n") else line
        block.append(line[:-1] if line.endswith(b"\r") else line)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def decode_lines(raw: Sequence[bytes], first_line: int = 1) -> List[str]:
    """UTF-8 text of each line; invalid bytes become U+FFFD, with a warning per line.

    Args:
        raw: undecoded lines.
        first_line: 1-based input line number of ``raw[0]``, for warnings.
    """
    text = []
    for number, line in enumerate(raw, start=first_line):
        try:
            text.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            logger.warning(
                "input line %d: invalid UTF-8 bytes replaced by U+FFFD", number
            )
            text.append(line.decode("utf-8", errors="replace"))
    return text


def clean_text(text: str) -> str:
    """One line of text as the model should see it (see the module docstring).

    Returns:
        ``text`` without control characters, BOMs or lone surrogates, with every
        whitespace run collapsed to one space and no leading/trailing space.
    """
    chars = []
    for ch in text:
        category = unicodedata.category(ch)
        if ch == "\ufeff":
            continue
        if category == "Cs":  # a lone surrogate (e.g. from surrogateescape)
            chars.append("\ufffd")
        elif category in ("Cc", "Zl", "Zp"):
            chars.append(" ")
        else:
            chars.append(ch)
    return " ".join("".join(chars).split())


def chunk_pieces(pieces: Sequence[str], limit: int) -> List[List[str]]:
    """Splits a piece sequence into chunks of at most ``limit`` pieces.

    Each cut is after the last sentence-final piece that fits, else before
    the last word-initial piece (``▁...``) that fits, else at ``limit``.

    Args:
        pieces: (S,) SentencePiece pieces of one line.
        limit: most pieces per chunk (the model's source positions minus EOS).

    Returns:
        Chunks whose concatenation is ``pieces``; one chunk if it fits.
    """
    if limit < 1:
        raise ValueError(f"chunk limit must be >= 1, got {limit}")
    chunks, start = [], 0
    while len(pieces) - start > limit:
        cut = _cut_point(pieces, start, limit)
        chunks.append(list(pieces[start:cut]))
        start = cut
    chunks.append(list(pieces[start:]))
    return chunks


def _cut_point(pieces: Sequence[str], start: int, limit: int) -> int:
    """Index where the chunk starting at ``start`` ends (exclusive)."""
    end = start + limit
    for i in range(end - 1, start - 1, -1):
        if pieces[i].endswith(SENTENCE_END):
            return i + 1
    for i in range(end - 1, start, -1):
        if pieces[i].startswith(SPIECE_UNDERLINE):
            return i
    return end


def detokenize(pieces: str) -> str:
    """Space-separated pieces back to text (fairseq's ``--post-process sentencepiece``).

    Whitespace inside the result is collapsed so that a translation is always
    exactly one line.
    """
    text = "".join(pieces.split(" ")).replace(SPIECE_UNDERLINE, " ")
    return clean_text(text)


@contextmanager
def open_stream(path: str, mode: str, standard: BinaryIO, failure: str) -> Iterator[BinaryIO]:
    """``path`` opened in binary ``mode``, or the standard stream for ``-``."""
    if path == "-":
        yield standard
        return
    try:
        handle = open(path, mode)
    except OSError as err:
        raise UserError(f"{failure} {path}: {err.strerror}") from None
    with handle:
        yield handle
