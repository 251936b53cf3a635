"""Shrink the wheels carried to the GPU machine (64 MiB travel budget), in place.

Usage: ``python benchmarks/gpu/slim_wheels.py DIR [--lzma]``: rewrites every ``*.whl``
in DIR, keeping what the project imports:

* ``strip --strip-debug`` on every shared library (fairseq's and CTranslate2's
  extensions ship their debug info: ``ctranslate2/_ext*.so`` is 69 MB, 1.8 MB
  without it; symbols stay, so nothing that links or loads them changes);
* drops the data files of ``fairseq/examples/`` (sample audio, images, notebooks,
  ``.npy`` arrays; the ``.py`` files stay), which no training or decoding path reads;
* ``--lzma``: stores shared libraries with ZIP_LZMA instead of deflate (about 40%
  smaller for CTranslate2's CUDA kernels). pip extracts wheels with Python's
  ``zipfile``, which reads LZMA members, so the install command is unchanged.

``RECORD`` is rewritten with each changed file's sha256 and size. A wheel that
was already slimmed (``.slim`` marker in its dist-info) is left as it is.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MARKER = ".slim"


def drop(name: str) -> bool:
    """Members left out of the slim wheel."""
    return name.startswith("fairseq/examples/") and not name.endswith(".py")


def strip_debug(data: bytes) -> bytes:
    """``strip --strip-debug`` of one shared library (unchanged if strip fails)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lib.so"
        path.write_bytes(data)
        done = subprocess.run(["strip", "--strip-debug", str(path)], capture_output=True)
        return path.read_bytes() if done.returncode == 0 else data


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def slim(wheel: Path, lzma: bool) -> tuple[int, int]:
    """Rewrites ``wheel``; returns (bytes before, bytes after)."""
    before = wheel.stat().st_size
    with zipfile.ZipFile(wheel) as src:
        names = src.namelist()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        if any(n.endswith(f".dist-info/{MARKER}") for n in names):
            return before, before
        members = {}
        for info in src.infolist():
            if info.is_dir() or info.filename == record or drop(info.filename):
                continue
            data = src.read(info)
            if ".so" in Path(info.filename).name:
                data = strip_debug(data)
            members[info.filename] = (info, data)
    dist_info = record.rsplit("/", 1)[0]
    members[f"{dist_info}/{MARKER}"] = (None, b"slimmed by benchmarks/gpu/slim_wheels.py\n")
    rows = [[name, record_hash(data), str(len(data))] for name, (_, data) in members.items()]
    rows.append([record, "", ""])
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    tmp = wheel.with_suffix(".whl.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        for name, (info, data) in members.items():
            library = ".so" in Path(name).name
            method = zipfile.ZIP_LZMA if (lzma and library) else zipfile.ZIP_DEFLATED
            out = zipfile.ZipInfo(name, info.date_time if info else (2024, 1, 1, 0, 0, 0))
            out.external_attr = info.external_attr if info else 0o644 << 16
            out.compress_type = method
            dst.writestr(out, data)
        dst.writestr(record, text.getvalue())
    shutil.move(tmp, wheel)
    return before, wheel.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--lzma", action="store_true",
                        help="store shared libraries with ZIP_LZMA")
    args = parser.parse_args(argv)
    if shutil.which("strip") is None:
        print("slim_wheels: 'strip' (binutils) not found", file=sys.stderr)
        return 1
    total = [0, 0]
    for wheel in sorted(args.dir.glob("*.whl")):
        before, after = slim(wheel, args.lzma)
        total[0] += before
        total[1] += after
        print(f"{wheel.name}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    print(f"all wheels: {total[0] / 1e6:.1f} MB -> {total[1] / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
