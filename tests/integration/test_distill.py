"""Sequence-level distillation: line count, order, resume, and a real checkpoint.

Order and resume use a stub translator whose output is a known function of
the source (its reversal), so every line can be checked exactly; one run with
the session's tiny fairseq checkpoint checks the real generator path and that
the output loads as ``--distill-data``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fairseq.data import Dictionary, data_utils

from nmt_specdec.workflows import distill
from nmt_specdec.data.steps import RecipeError


def _reverse_stub(calls: list[int]):
    """A Translate that returns each source reversed (EOS dropped)."""
    def translate(batch: list[list[int]]) -> list[list[int]]:
        calls.append(len(batch))
        return [list(reversed(ids[:-1])) for ids in batch]
    return translate


def _cfg(data: Path, ckpt: Path, out: Path, **kw) -> distill.DistillConfig:
    return distill.DistillConfig(data=data, checkpoint=ckpt, out=out, split="valid",
                                 cpu=True, threads=1, **kw)


def _source_lines(data: Path) -> list[list[int]]:
    dictionary = Dictionary.load(str(data / "dict.src.txt"))
    prefix = str(data / "valid.src-tgt.src")
    dataset = data_utils.load_indexed_dataset(prefix, dictionary)
    return [dataset[i].tolist() for i in range(len(dataset))]


def _targets(out: Path) -> tuple[Dictionary, list[list[int]]]:
    dictionary = Dictionary.load(str(out / "dict.tgt.txt"))
    prefix = str(out / "valid.src-tgt.tgt")
    dataset = data_utils.load_indexed_dataset(prefix, dictionary)
    assert dataset is not None
    return dictionary, [dataset[i].tolist() for i in range(len(dataset))]


@pytest.mark.parametrize("n, size, expected", [
    (0, 4, []), (3, 4, [(0, 3)]), (8, 4, [(0, 4), (4, 8)]),
    (9, 4, [(0, 4), (4, 8), (8, 9)]),
])
def test_chunk_ranges(n: int, size: int, expected: list) -> None:
    assert distill.chunk_ranges(n, size) == expected


def test_batches_respect_limits_and_cover_all() -> None:
    lengths = {i: length for i, length in enumerate([5, 1, 9, 3, 3, 7, 20])}
    batches = list(distill.make_batches(lengths, range(7), max_tokens=12, batch_size=2))
    assert sorted(i for b in batches for i in b) == list(range(7))
    for batch in batches:
        assert len(batch) <= 2
        # padded size; the 20-token sentence alone exceeds the budget, as allowed
        assert len(batch) == 1 or max(lengths[i] for i in batch) * len(batch) <= 12
    assert batches[0] == [6]  # longest first


def test_order_resume_and_layout(toy_data_bin: Path, tiny_transformer_ckpt: Path,
                                 tmp_path: Path) -> None:
    out = tmp_path / "distilled"
    cfg = _cfg(toy_data_bin, tiny_transformer_ckpt, out, chunk_size=16, batch_size=5)
    sources = _source_lines(toy_data_bin)
    calls: list[int] = []
    distill.run(cfg, translate=_reverse_stub(calls))
    assert sum(calls) == len(sources) > 16
    dictionary, targets = _targets(out)
    assert len(targets) == len(sources)
    for src, tgt in zip(sources, targets):  # line i is the translation of source i
        assert tgt == list(reversed(src[:-1])) + [dictionary.eos()]
    # a complete data directory: dictionaries and the source side next to it
    for name in ("dict.src.txt", "dict.tgt.txt", "valid.src-tgt.src.bin",
                 "valid.src-tgt.src.idx", "valid.src-tgt.tgt.bin"):
        assert (out / name).is_file(), name
    chunks = sorted((out / "chunks").glob("*.txt"))
    assert [c.name for c in chunks][:2] == ["000000000-000000016.txt",
                                            "000000016-000000032.txt"]

    # resume: only the missing chunk is translated again
    chunks[1].unlink()
    calls.clear()
    distill.run(cfg, translate=_reverse_stub(calls))
    assert sum(calls) == 16
    assert _targets(out)[1] == targets

    # finished run: nothing left to translate
    calls.clear()
    distill.run(cfg, translate=_reverse_stub(calls))
    assert calls == []

    # other settings: old chunks are not reused
    distill.run(_cfg(toy_data_bin, tiny_transformer_ckpt, out, chunk_size=16, beam=2),
                translate=_reverse_stub(calls))
    assert sum(calls) == len(sources)


def test_real_checkpoint_beam_search(toy_data_bin: Path, tiny_transformer_ckpt: Path,
                                     tmp_path: Path) -> None:
    out = tmp_path / "real"
    # Two different batchings of the same sentences must agree line by line.
    distill.run(_cfg(toy_data_bin, tiny_transformer_ckpt, out, beam=2, chunk_size=20,
                     batch_size=7))
    _, batched = _targets(out)
    distill.run(_cfg(toy_data_bin, tiny_transformer_ckpt, tmp_path / "one", beam=2,
                     chunk_size=1000, batch_size=1))
    dictionary, single = _targets(tmp_path / "one")
    sources = _source_lines(toy_data_bin)
    assert len(batched) == len(single) == len(sources)
    assert all(t[-1] == dictionary.eos() and len(t) >= 1 for t in batched)
    agree = sum(a == b for a, b in zip(batched, single))
    assert agree >= 0.9 * len(sources), f"only {agree}/{len(sources)} lines agree"


def test_user_errors(toy_data_bin: Path, tiny_transformer_ckpt: Path,
                     tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="--checkpoint"):
        distill.run(_cfg(toy_data_bin, tmp_path / "none.pt", tmp_path / "o"))
    with pytest.raises(RecipeError, match="--beam"):
        distill.run(_cfg(toy_data_bin, tiny_transformer_ckpt, tmp_path / "o", beam=0))
    with pytest.raises(RecipeError, match="no binarized source"):
        distill.run(distill.DistillConfig(toy_data_bin, tiny_transformer_ckpt,
                                          tmp_path / "o", split="nosuch", cpu=True))
    # The console script pip installed beside this Python.
    proc = subprocess.run([str(Path(sys.executable).with_name("nmt-specdec-distill")),
                           "--data", str(toy_data_bin), "--checkpoint",
                           str(tmp_path / "none.pt"), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: --checkpoint {tmp_path / 'none.pt'} does not exist"]
