"""What a draft head reads of its frozen verifier, computed once and kept on disk.

Training a head onto a frozen verifier needs, per sentence, the encoder output
(what the head's layers attend to) and the verifier's teacher-forced decoder
states over the (distilled) target (the state that predicted each committed
token: :mod:`nmt_specdec.model.draft_examples`). They never change while the
head trains, so one pass of the verifier writes them to disk and every later
update reads them instead of running the verifier (Medusa-2 and EAGLE train
their heads from cached hidden states the same way).

Layout of a cache directory, one sub-directory per shard of consecutive
sentences (dataset order)::

    meta.json                 verifier fingerprint, model dim, sentences, shard size
    shard-00000/encoder.npy   (sum of source lengths, C) float16
    shard-00000/states.npy    (sum of target lengths, C) float16
    shard-00000/lengths.npy   (n, 2) int32: source and target length per sentence
    shard-00000/done.json     sentences and rows, written last

A shard is written into a temporary directory and renamed when complete, so an
interrupted pass resumes at the first missing shard. A shard whose files do not
load or do not agree with its ``done.json`` is rebuilt, never trusted. Arrays
load with ``allow_pickle=False`` (nothing pickled runs) and memory-mapped.
"""

from __future__ import annotations

import bisect
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
from torch import Tensor

META = "meta.json"
DONE = "done.json"
FORMAT = 1


@dataclass(frozen=True)
class CacheMeta:
    """What a cache was made from; a cache of other settings is rebuilt.

    Attributes:
        verifier: fingerprint of the verifier (:func:`~.head_file.verifier_fingerprint`).
        data: fingerprint of the split (sentences and their token ids).
        dim: model dimension C.
        sentences: sentences in the split.
        shard_size: sentences per shard.
    """

    verifier: str
    data: str
    dim: int
    sentences: int
    shard_size: int

    def to_json(self) -> Dict:
        return {"format": FORMAT, **self.__dict__}


def shard_dir(root: Path, index: int) -> Path:
    return root / f"shard-{index:05d}"


def num_shards(meta: CacheMeta) -> int:
    return -(-meta.sentences // meta.shard_size)


def prepare(root: Path, meta: CacheMeta) -> None:
    """Makes ``root`` a cache for ``meta``: kept as it is when it already is one,
    emptied first when it holds a cache of anything else."""
    path = root / META
    if path.is_file():
        try:
            if json.loads(path.read_text(encoding="utf-8")) == meta.to_json():
                return
        except ValueError:
            pass
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / META).write_text(json.dumps(meta.to_json(), indent=1), encoding="utf-8")


def write_shard(root: Path, index: int, encoder: List[Tensor], states: List[Tensor]) -> None:
    """Writes shard ``index`` atomically: per sentence its (S, C) encoder output
    and (T, C) decoder states, in dataset order, stored as float16."""
    final = shard_dir(root, index)
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    lengths = np.array([[e.shape[0], s.shape[0]] for e, s in zip(encoder, states)],
                       dtype=np.int32).reshape(-1, 2)
    np.save(partial / "encoder.npy", _stack(encoder))
    np.save(partial / "states.npy", _stack(states))
    np.save(partial / "lengths.npy", lengths)
    done = {"sentences": len(lengths), "rows": [int(lengths[:, 0].sum()),
                                                int(lengths[:, 1].sum())]}
    (partial / DONE).write_text(json.dumps(done), encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)


def _stack(tensors: List[Tensor]) -> np.ndarray:
    return np.concatenate([t.detach().float().cpu().numpy().astype(np.float16)
                           for t in tensors]) if tensors else np.zeros((0, 0), np.float16)


class Shard:
    """One shard, memory-mapped: item i is (encoder (S, C), states (T, C)) as numpy views."""

    def __init__(self, folder: Path, dim: int):
        done = json.loads((folder / DONE).read_text(encoding="utf-8"))
        self.lengths = np.load(folder / "lengths.npy", allow_pickle=False)
        self.encoder = np.load(folder / "encoder.npy", mmap_mode="r", allow_pickle=False)
        self.states = np.load(folder / "states.npy", mmap_mode="r", allow_pickle=False)
        rows = [int(self.lengths[:, 0].sum()), int(self.lengths[:, 1].sum())]
        shapes_fit = (self.encoder.shape == (rows[0], dim) and self.states.shape == (rows[1], dim)
                      and self.encoder.dtype == np.float16 and self.states.dtype == np.float16)
        if len(self.lengths) != done["sentences"] or rows != done["rows"] or not shapes_fit:
            raise ValueError(f"{folder}: its arrays do not agree with {DONE}")
        self.starts = np.zeros((len(self.lengths) + 1, 2), dtype=np.int64)
        np.cumsum(self.lengths, axis=0, out=self.starts[1:])

    def __len__(self) -> int:
        return len(self.lengths)

    def item(self, i: int) -> Tuple[np.ndarray, np.ndarray]:
        (s0, t0), (s1, t1) = self.starts[i], self.starts[i + 1]
        return self.encoder[s0:s1], self.states[t0:t1]


def open_shard(root: Path, index: int, dim: int) -> Optional[Shard]:
    """Shard ``index`` if it is complete and sound; None if it must be (re)built."""
    folder = shard_dir(root, index)
    if not (folder / DONE).is_file():
        return None
    try:
        return Shard(folder, dim)
    except (OSError, ValueError, KeyError):  # truncated, damaged or foreign files
        return None


class StateCache:
    """A complete cache, read by dataset index."""

    def __init__(self, root: Path):
        self.root = root
        try:
            raw = json.loads((root / META).read_text(encoding="utf-8"))
            raw.pop("format")
            self.meta = CacheMeta(**raw)
        except (OSError, ValueError, KeyError, TypeError):
            raise ValueError(f"{root} is not a verifier-state cache (no sound {META})") from None
        self.shards = []
        for index in range(num_shards(self.meta)):
            shard = open_shard(root, index, self.meta.dim)
            if shard is None:
                raise ValueError(f"{root}: shard {index} is missing or damaged (rerun the "
                                 "command that writes the cache: it rebuilds it)")
            self.shards.append(shard)
        self.offsets = [0]
        for shard in self.shards:
            self.offsets.append(self.offsets[-1] + len(shard))

    def __len__(self) -> int:
        return self.offsets[-1]

    def __getitem__(self, index: int) -> Tuple[np.ndarray, np.ndarray]:
        shard = bisect.bisect_right(self.offsets, index) - 1
        return self.shards[shard].item(index - self.offsets[shard])

    def disk_bytes(self) -> int:
        return disk_bytes(self.root)


def disk_bytes(root: Path) -> int:
    """Bytes of the files under ``root``."""
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
