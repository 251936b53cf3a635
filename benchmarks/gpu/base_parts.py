"""The base model in parts that fit the device calls: ``gpu_kit/base1`` ... ``baseN``.

``../shared/models/gettext-base/model.pt`` (114 MB) does not fit a call's 64 MiB
beside the tree. It goes xz-compressed (LZMA preset 6: 102 MB) in one part per
call, the first call's part smaller (that call carries the wheels too); the
last part's folder holds ``manifest.json`` (the parts and the sha256 of the
model), which ``session.sh static`` checks after joining them on the machine.

    python3 benchmarks/gpu/base_parts.py ../shared/models/gettext-base/model.pt \\
        --sizes-mib 22 38 --out gpu_kit

Ignored by git (``.git/info/exclude``, as ``prepare.sh`` sets); rerun it only when
the model changes (it skips the compression when the parts match the model).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import shutil
import sys
from pathlib import Path

MIB = 2**20


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_parts(model: Path, out: Path, sizes_mib: list[float]) -> dict:
    """Compresses ``model`` and cuts it: parts of ``sizes_mib`` each, then the rest."""
    packed = out / "base_model.pt.xz"
    with model.open("rb") as src, lzma.open(packed, "wb", preset=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    data, parts, start = packed.read_bytes(), [], 0
    for index, size in enumerate([*sizes_mib, None], start=1):
        end = len(data) if size is None else min(len(data), start + int(size * MIB))
        folder = out / f"base{index}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        (folder / f"part.{index}").write_bytes(data[start:end])
        parts.append({"folder": folder.name, "file": f"part.{index}", "bytes": end - start})
        start = end
    packed.unlink()
    manifest = {"model_sha256": sha256(model), "model_bytes": model.stat().st_size,
                "source": str(model), "parts": parts}
    (out / f"base{len(parts)}" / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=Path)
    p.add_argument("--sizes-mib", type=float, nargs="+", default=[22.0, 38.0],
                   help="every part but the last (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("gpu_kit"))
    args = p.parse_args(argv)
    last = args.out / f"base{len(args.sizes_mib) + 1}" / "manifest.json"
    if last.is_file():
        kept = json.loads(last.read_text())
        if kept["model_sha256"] == sha256(args.model) and all(
                (args.out / part["folder"] / part["file"]).is_file() for part in kept["parts"]):
            print(f"{last}: parts up to date")
            return 0
    manifest = write_parts(args.model, args.out, args.sizes_mib)
    for part in manifest["parts"]:
        print(f"{args.out / part['folder']}: {part['bytes'] / MIB:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
