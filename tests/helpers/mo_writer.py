"""Write GNU ``.mo`` files with the standard library, as ``msgfmt`` lays them out.

Tests build their catalogs from made-up strings with this writer, so no
translation from any real package is copied into the repository.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Sequence, Union

# (msgid, msgstr), or (context, msgid, msgstr), or for plurals
# (context or None, (msgid, msgid_plural), (msgstr0, msgstr1, ...)).
Entry = Union[tuple[str, str], tuple]


def _key_value(entry: Entry) -> tuple[str, str]:
    if len(entry) == 2:
        context, msgid, msgstr = None, entry[0], entry[1]
    else:
        context, msgid, msgstr = entry
    if isinstance(msgid, tuple):
        msgid, msgstr = "\x00".join(msgid), "\x00".join(msgstr)
    key = msgid if context is None else f"{context}\x04{msgid}"
    return key, msgstr


def mo_bytes(entries: Sequence[Entry], charset: str = "UTF-8",
             big_endian: bool = False) -> bytes:
    """Bytes of a .mo catalog holding a header and ``entries``.

    Like msgfmt: keys sorted by their encoded bytes, the tables right after
    the 28-byte header, no hash table, NUL after every string.
    """
    header = (f"Project-Id-Version: test 1.0\nLanguage: de\n"
              f"Content-Type: text/plain; charset={charset}\n"
              "Content-Transfer-Encoding: 8bit\n")
    pairs = [("", header)] + [_key_value(e) for e in entries]
    encoded = sorted((k.encode(charset), v.encode(charset)) for k, v in pairs)
    order = ">" if big_endian else "<"
    count = len(encoded)
    key_table = 28
    value_table = key_table + 8 * count
    offset = value_table + 8 * count
    tables, blob = b"", b""
    for index in (0, 1):
        for pair in encoded:
            tables += struct.pack(order + "2I", len(pair[index]), offset + len(blob))
            blob += pair[index] + b"\x00"
    head = struct.pack(order + "7I", 0x950412DE, 0, count, key_table, value_table,
                       0, offset)
    return head + tables + blob


def write_mo(path: Path, entries: Sequence[Entry], charset: str = "UTF-8") -> Path:
    """Write a catalog to ``path`` (parents created) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(mo_bytes(entries, charset))
    return path
