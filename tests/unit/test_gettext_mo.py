""".mo parser on catalogs written here with the stdlib (tests/helpers/mo_writer).

Every string is made up for the test; none comes from a real catalog.
"""

from __future__ import annotations

import gettext
import io

import pytest

from nmt_specdec.data.mo import Message, MoFormatError, header_charset, parse_mo
from tests.helpers.mo_writer import mo_bytes

ENTRIES = [
    ("Blue door", "Blaue Tür"),
    ("toolbar", "_Close", "_Schließen"),  # msgctxt
    (None, ("%d green apple", "%d green apples"),
     ("%d grüner Apfel", "%d grüne Äpfel")),  # plural forms
    ("menu", ("One lamp", "%d lamps"), ("Eine Lampe", "%d Lampen")),  # both
    ("Not yet translated", ""),  # empty msgstr (msgfmt drops these; we keep)
]
# Expected messages, in the writer's (= msgfmt's) sorted key order.
EXPECTED = {
    Message(None, "Blue door", "Blaue Tür", False),
    Message("toolbar", "_Close", "_Schließen", False),
    Message(None, "%d green apple", "%d grüner Apfel", True),
    Message("menu", "One lamp", "Eine Lampe", True),
    Message(None, "Not yet translated", "", False),
}


@pytest.mark.parametrize("charset", ["UTF-8", "ISO-8859-1", "ISO-8859-15"])
@pytest.mark.parametrize("big_endian", [False, True])
def test_round_trip(charset: str, big_endian: bool) -> None:
    catalog = parse_mo(mo_bytes(ENTRIES, charset, big_endian))
    assert set(catalog.messages) == EXPECTED
    assert catalog.undecodable == 0
    assert "Project-Id-Version: test 1.0" in catalog.header


def test_non_utf8_charset_really_differs_from_utf8() -> None:
    # "ü" is one byte 0xFC in Latin-1, which would not decode as UTF-8.
    data = mo_bytes([("Green", "Grün")], "ISO-8859-1")
    assert "Grün".encode("latin-1") in data and "Grün".encode("utf-8") not in data
    catalog = parse_mo(data)
    assert catalog.charset == "iso8859-1"
    assert catalog.messages == (Message(None, "Green", "Grün", False),)


def test_writer_agrees_with_python_gettext() -> None:
    # An independent reader of the same bytes: our writer is msgfmt-compatible.
    translations = gettext.GNUTranslations(io.BytesIO(mo_bytes(ENTRIES, "ISO-8859-1")))
    assert translations.gettext("Blue door") == "Blaue Tür"
    assert translations.pgettext("toolbar", "_Close") == "_Schließen"
    assert translations.ngettext("%d green apple", "%d green apples", 1) == \
        "%d grüner Apfel"


def test_undecodable_entries_are_counted_not_raised() -> None:
    data = mo_bytes([("Green", "Grün"), ("Red", "Rot")], "ISO-8859-1")
    # Claim UTF-8 in the header: the Latin-1 "ü" no longer decodes.
    data = data.replace(b"charset=ISO-8859-1", b"charset=UTF-8     ")
    catalog = parse_mo(data)
    assert catalog.undecodable == 1
    assert catalog.messages == (Message(None, "Red", "Rot", False),)


@pytest.mark.parametrize("header, expected", [
    ("Content-Type: text/plain; charset=UTF-8\n", "utf-8"),
    ("Content-Type: text/plain; charset=iso-8859-1\n", "iso8859-1"),
    ("Content-Type: text/plain; charset=CHARSET\n", "utf-8"),  # msginit default
    ("Project-Id-Version: x\n", "utf-8"),
])
def test_header_charset(header: str, expected: str) -> None:
    assert header_charset(header) == expected


@pytest.mark.parametrize("data, message", [
    (b"", "too short"),
    (b"\x00" * 28, "magic"),
    (mo_bytes([("Blue", "Blau")])[:40], "beyond the end"),
])
def test_bad_files_raise_mo_format_error(data: bytes, message: str) -> None:
    with pytest.raises(MoFormatError, match=message):
        parse_mo(data)
