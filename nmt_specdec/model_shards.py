"""A checkpoint shipped in shards, put together on first use.

Git hosts refuse files over 50 MB, so a larger checkpoint is shipped as byte
shards of itself (``model.pt-00001-of-00003`` ...) beside an index,
``model.pt.index.json``, that gives every shard's size and sha256 and the
whole file's. The shards are cut from the file's bytes, not from its tensors:
joined, they are the very file stock fairseq loads (``fairseq-generate --path``
needs one file).

:func:`materialize` is how every loader meets such a checkpoint: it joins the
shards into the checkpoint's own path (ignored by git) the first time, checking
each shard and the whole against the index, writing to a temporary file that
replaces the target only once the whole is right. A joined file is checked
against the index at every use and rebuilt when it no longer matches: a cache
is never trusted. A missing, truncated or altered shard is one line that names
it, and nothing is left half-written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

from nmt_specdec.errors import CheckpointError
from nmt_specdec.hashing import file_sha256

INDEX_SUFFIX = ".index.json"
FORMAT = "nmt-specdec byte shards 1"
_BLOCK = 1 << 20


def index_path(checkpoint: Path) -> Path:
    """Where the shard index of ``checkpoint`` lives: ``NAME.index.json`` beside it."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + INDEX_SUFFIX)


def is_sharded(checkpoint: Path) -> bool:
    """Whether ``checkpoint`` is shipped as shards (its index exists)."""
    return index_path(checkpoint).is_file()


def split(checkpoint: Path, max_bytes: int) -> Path:
    """Cuts ``checkpoint`` into shards of at most ``max_bytes`` beside it and
    writes their index; returns the index's path. The file itself is left."""
    checkpoint = Path(checkpoint)
    total = checkpoint.stat().st_size
    count = max(1, -(-total // max_bytes))
    shards: List[Dict] = []
    whole = hashlib.sha256()
    with open(checkpoint, "rb") as source:
        for number in range(1, count + 1):
            data = source.read(max_bytes)
            whole.update(data)
            name = f"{checkpoint.name}-{number:05d}-of-{count:05d}"
            (checkpoint.parent / name).write_bytes(data)
            shards.append({"file": name, "bytes": len(data),
                           "sha256": hashlib.sha256(data).hexdigest()})
    index = {"format": FORMAT, "file": checkpoint.name, "bytes": total,
             "sha256": whole.hexdigest(), "shards": shards}
    path = index_path(checkpoint)
    path.write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    return path


def read_index(checkpoint: Path) -> Dict:
    """The index of ``checkpoint``'s shards.

    Raises:
        CheckpointError: the index is not one this module wrote.
    """
    path = index_path(checkpoint)
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
        shards = index["shards"]
        ok = index.get("format") == FORMAT and index["file"] == Path(checkpoint).name and all(
            set(shard) == {"file", "bytes", "sha256"} and "/" not in shard["file"]
            for shard in shards)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path}: not a readable shard index ({err})") from None
    if not ok or not shards:
        raise CheckpointError(f"{path}: not a shard index of {Path(checkpoint).name}")
    return index


def materialize(checkpoint: Path) -> Path:
    """``checkpoint``, joined from its shards first where an index says it is
    shipped so (joined anew when the file on disk does not match the index);
    any other path is returned as it is.

    Raises:
        CheckpointError: a shard is missing, truncated or altered, the index is
            unreadable, or the joined file cannot be written.
    """
    checkpoint = Path(checkpoint)
    if not is_sharded(checkpoint):
        return checkpoint
    index = read_index(checkpoint)
    if _matches(checkpoint, index):
        return checkpoint
    _join(checkpoint, index)
    return checkpoint


def _matches(checkpoint: Path, index: Dict) -> bool:
    return (checkpoint.is_file() and checkpoint.stat().st_size == index["bytes"]
            and file_sha256(checkpoint) == index["sha256"])


def _join(checkpoint: Path, index: Dict) -> None:
    """Writes the shards' bytes to a temporary file, checking each shard and
    the whole, then moves it to ``checkpoint``; on failure removes it."""
    _check_shards(checkpoint.parent, index)
    tmp = checkpoint.with_name(f".{checkpoint.name}.{os.getpid()}.joining")
    whole = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for number, shard in enumerate(index["shards"], 1):
                data = _read_shard(checkpoint.parent / shard["file"], shard,
                                   f"shard {number} of {len(index['shards'])}")
                whole.update(data)
                out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if whole.hexdigest() != index["sha256"]:
            raise CheckpointError(f"{index_path(checkpoint)}: the joined shards do not give the "
                                  "file the index names (sha256 differs)")
        os.replace(tmp, checkpoint)
    except OSError as err:
        raise CheckpointError(f"cannot write {checkpoint} from its shards: "
                              f"{err.strerror or err}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _check_shards(folder: Path, index: Dict) -> None:
    """Every shard present at its size, before anything is written."""
    count = len(index["shards"])
    for number, shard in enumerate(index["shards"], 1):
        path = folder / shard["file"]
        if not path.is_file():
            raise CheckpointError(f"{path}: shard {number} of {count} is missing "
                                  f"({_RESTORE})")
        if path.stat().st_size != shard["bytes"]:
            raise CheckpointError(
                f"{path}: shard {number} of {count} has {path.stat().st_size} bytes, its index "
                f"says {shard['bytes']}: truncated or altered ({_RESTORE})")


def _read_shard(path: Path, shard: Dict, which: str) -> bytes:
    data = path.read_bytes()
    if len(data) != shard["bytes"] or hashlib.sha256(data).hexdigest() != shard["sha256"]:
        raise CheckpointError(f"{path}: {which} does not match its index's sha256: altered "
                              f"({_RESTORE})")
    return data


_RESTORE = "restore it from the repository: git checkout -- FILE, or a fresh clone"


def main(argv: Optional[List[str]] = None) -> int:
    """``nmt-specdec-join-model DIR_OR_CHECKPOINT``: joins a sharded checkpoint
    (a model directory means its ``model.pt``) and prints its path, for the
    tools that need the file (stock ``fairseq-generate --path``)."""
    parser = argparse.ArgumentParser(
        prog="nmt-specdec-join-model",
        description="Join a checkpoint shipped in shards (checked against its index) and "
        "print its path; a checkpoint that is not sharded is printed as it is.")
    parser.add_argument("path", help="a model directory (its model.pt) or a checkpoint")
    args = parser.parse_args(argv)
    checkpoint = Path(args.path)
    if checkpoint.is_dir():
        checkpoint = checkpoint / "model.pt"
    try:
        if not materialize(checkpoint).is_file():
            raise CheckpointError(f"no such checkpoint {checkpoint} (nor its shard index)")
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(checkpoint)
    return 0


if __name__ == "__main__":  # python -m nmt_specdec.model_shards, as the console script
    sys.exit(main())
