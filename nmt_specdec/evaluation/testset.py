"""Test sentences, their raw references, and length-sorted batches.

Shapes: B sentences in a batch, S source length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, NamedTuple, Optional

import torch
from torch import Tensor

from nmt_specdec.errors import UserError


@dataclass(frozen=True)
class TestSet:
    """Sentences to decode, in file order.

    Attributes:
        sources: one (S,) long tensor per sentence, EOS-terminated (fairseq's format).
        references: raw detokenized reference of each sentence.
        description: where the sentences came from (for the report).
    """

    sources: List[Tensor]
    references: List[str]
    description: str

    def __len__(self) -> int:
        return len(self.sources)


class Batch(NamedTuple):
    """One collated batch.

    Attributes:
        ids: (B,) index of each row in the test set.
        sample: fairseq sample (``net_input`` with src_tokens (B, S), src_lengths (B,)).
    """

    ids: List[int]
    sample: dict


def read_lines(path: str, flag: str) -> List[str]:
    """Lines of a UTF-8 text file without their newline."""
    try:
        with open(path, encoding="utf-8") as handle:
            return [line.rstrip("\n") for line in handle]
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{flag}: cannot read {path}: {err}") from err


def load_binarized(
    task,
    split: str,
    detokenize: Callable[[Tensor], str],
    ref_file: Optional[str],
    limit: Optional[int],
) -> TestSet:
    """A split of the task's binarized data dir.

    Args:
        task: a fairseq translation task whose ``cfg.data`` is the data dir.
        split: split name (``test``).
        detokenize: turns a binarized reference into raw text (without ``ref_file``).
        ref_file: raw references; preferred over decoding the binarized ones.
        limit: keep the first N sentences.
    """
    try:
        task.load_dataset(split)
    except FileNotFoundError as err:
        raise UserError(f"--split {split}: {err}") from err
    dataset = task.dataset(split)
    count = len(dataset) if limit is None else min(limit, len(dataset))
    items = [dataset[i] for i in range(count)]
    sources = [item["source"].long() for item in items]
    if ref_file is not None:
        references = read_lines(ref_file, "--ref-file")
        _check_aligned(references, len(dataset), "--ref-file", f"split {split}")
        references = references[:count]
    elif dataset.tgt is None:
        raise UserError(f"split {split} has no targets: give --ref-file")
    else:
        references = [detokenize(item["target"]) for item in items]
    return TestSet(sources, references, f"{task.cfg.data} split {split}")


def load_raw(
    src_file: str, ref_file: str, encode: Callable[[str], Tensor], limit: Optional[int]
) -> TestSet:
    """Raw source text, encoded with ``encode`` (SentencePiece + source dictionary)."""
    lines = read_lines(src_file, "--src-file")
    references = read_lines(ref_file, "--ref-file")
    _check_aligned(references, len(lines), "--ref-file", "--src-file")
    count = len(lines) if limit is None else min(limit, len(lines))
    sources = [encode(line) for line in lines[:count]]
    return TestSet(sources, references[:count], src_file)


def _check_aligned(references: List[str], expected: int, flag: str, other: str) -> None:
    if len(references) != expected:
        raise UserError(
            f"{flag} has {len(references)} lines but {other} has {expected} "
            "sentences"
        )


def check_lengths(sources: List[Tensor], max_source_positions: int) -> None:
    """Refuses sentences the encoder cannot take (fairseq-generate would fail too)."""
    too_long = [i for i, s in enumerate(sources) if s.numel() > max_source_positions]
    if too_long:
        raise UserError(
            f"{len(too_long)} test sentences (first: line {too_long[0] + 1}) "
            f"are longer than the model's {max_source_positions} source "
            "positions; shorten them or use --first-sentences"
        )
    if not sources:
        raise UserError("the test set is empty")


def sorted_order(lengths: List[int]) -> List[int]:
    """Indices by source length, ties in file order (as fairseq orders a test set)."""
    return sorted(range(len(lengths)), key=lambda i: lengths[i])


def make_batches(
    task, sources: List[Tensor], batch_size: int, device: torch.device
) -> List[Batch]:
    """Length-sorted batches of ``batch_size`` sentences, collated by fairseq.

    fairseq's collater reorders rows within a batch (longest first); ``Batch.ids``
    follows the collated order, so results can be put back in file order.
    """
    lengths = [s.numel() for s in sources]
    dataset = task.build_dataset_for_inference(sources, lengths)
    order = sorted_order(lengths)
    batches = []
    for start in range(0, len(order), batch_size):
        sample = dataset.collater(
            [dataset[i] for i in order[start : start + batch_size]]
        )
        sample = _to_device(sample, device)
        batches.append(Batch(sample["id"].tolist(), sample))
    return batches


def _to_device(sample: dict, device: torch.device) -> dict:
    if isinstance(sample, dict):
        return {key: _to_device(value, device) for key, value in sample.items()}
    if isinstance(sample, Tensor):
        return sample.to(device)
    return sample
