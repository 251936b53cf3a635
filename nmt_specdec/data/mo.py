"""Read GNU gettext ``.mo`` catalogs with the standard library only.

Layout (GNU gettext manual, "The Format of GNU MO Files"): seven uint32
fields -- magic ``0x950412de`` (its byte order gives the file's), revision,
number of strings N, offset O of the original-string table, offset T of the
translation table, hash table size and offset -- then two tables of N
``(length, offset)`` pairs pointing at NUL-terminated strings. A key may be
``context\\x04msgid`` and, for plural entries, ``msgid\\x00msgid_plural``; the
matching value is then ``msgstr[0]\\x00msgstr[1]...``. The entry with an empty
msgid is the header, whose ``Content-Type`` names the charset of every string.

Python's ``gettext.GNUTranslations`` would do the decoding too, but it drops
contexts into its own keys, merges plural forms and raises on the first bad
string; the corpus recipe needs every entry, with a count of the bad ones.
"""

from __future__ import annotations

import codecs
import re
import struct
from dataclasses import dataclass

MAGIC = 0x950412DE
CONTEXT_SEP = "\x04"
PLURAL_SEP = "\x00"
_HEADER_FIELDS = 7
_CHARSET = re.compile(r"charset=\s*([-\w.:]+)", re.IGNORECASE)


class MoFormatError(ValueError):
    """The bytes are not a readable ``.mo`` catalog."""


@dataclass(frozen=True)
class Message:
    """One catalog entry.

    Attributes:
        context: ``msgctxt`` or None.
        msgid: The original (English) text; for plurals the singular form.
        msgstr: The translation; for plurals ``msgstr[0]``, the singular.
        plural: Whether the entry had plural forms.
    """

    context: str | None
    msgid: str
    msgstr: str
    plural: bool


@dataclass(frozen=True)
class Catalog:
    """A decoded catalog.

    Attributes:
        charset: Charset named in the header (``utf-8`` when none is named).
        header: The header entry's text (``Project-Id-Version: ...``).
        messages: Every non-header entry, in file order (sorted by key).
        undecodable: Entries skipped because they do not decode in ``charset``.
    """

    charset: str
    header: str
    messages: tuple[Message, ...]
    undecodable: int


def _byte_order(data: bytes) -> str:
    """``<`` or ``>`` from the magic number; MoFormatError if neither matches."""
    if len(data) < 4 * _HEADER_FIELDS:
        raise MoFormatError("file too short for a .mo header")
    for order in "<>":
        if struct.unpack_from(order + "I", data)[0] == MAGIC:
            return order
    raise MoFormatError("bad magic number (not a .mo file)")


def _raw_entries(data: bytes) -> list[tuple[bytes, bytes]]:
    """All (key, value) byte strings of the catalog, in table order."""
    order = _byte_order(data)
    _, revision, count, key_table, value_table = struct.unpack_from(
        order + "5I", data)
    if revision >> 16 > 1:  # major revisions 0 and 1 share this layout
        raise MoFormatError(f"unsupported .mo revision {revision >> 16}")
    entries = []
    try:
        for index in range(count):
            key_len, key_off = struct.unpack_from(order + "2I", data,
                                                  key_table + 8 * index)
            val_len, val_off = struct.unpack_from(order + "2I", data,
                                                  value_table + 8 * index)
            if key_off + key_len > len(data) or val_off + val_len > len(data):
                raise MoFormatError("string offset beyond the end of the file")
            entries.append((data[key_off:key_off + key_len],
                            data[val_off:val_off + val_len]))
    except struct.error:
        raise MoFormatError("string table beyond the end of the file") from None
    return entries


def header_charset(header: str) -> str:
    """The ``charset=`` of a header, ``utf-8`` if missing or unknown to Python.

    ``msginit`` writes the placeholder ``CHARSET`` until a translator sets one;
    such catalogs are plain ASCII in practice, and UTF-8 decodes ASCII.
    """
    match = _CHARSET.search(header)
    if not match:
        return "utf-8"
    try:
        return codecs.lookup(match.group(1)).name
    except LookupError:
        return "utf-8"


def _message(key: str, value: str) -> Message:
    """Split context and plural parts of a decoded key/value pair."""
    context, sep, msgid = key.partition(CONTEXT_SEP)
    if not sep:
        context, msgid = None, key
    plural = PLURAL_SEP in msgid
    return Message(context, msgid.split(PLURAL_SEP)[0],
                   value.split(PLURAL_SEP)[0], plural)


def parse_mo(data: bytes) -> Catalog:
    """Decode a ``.mo`` file.

    Args:
        data: The whole file.

    Returns:
        The catalog; entries that fail to decode are counted, not raised.

    Raises:
        MoFormatError: Not a .mo file, or a truncated one.
    """
    entries = _raw_entries(data)
    raw_header = next((v for k, v in entries if k == b""), b"")
    # The header itself is ASCII apart from names; latin-1 never fails.
    header = raw_header.decode("latin-1")
    charset = header_charset(header)
    if charset == "utf-8":
        header = raw_header.decode("utf-8", errors="replace")
    messages, undecodable = [], 0
    for key, value in entries:
        if key == b"":
            continue
        try:
            messages.append(_message(key.decode(charset), value.decode(charset)))
        except UnicodeDecodeError:
            undecodable += 1
    return Catalog(charset, header, tuple(messages), undecodable)
