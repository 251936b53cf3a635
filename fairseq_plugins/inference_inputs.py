"""Glue: hostile raw input for ``fairseq-interactive`` with ``translation_specdec``.

Stock ``fairseq-interactive`` aborts the whole run on a line longer than the
model's source positions ("Size of sample #N is invalid"; with
``--skip-invalid-size-inputs-valid-test`` it drops the line and so shifts the
output), dies on invalid UTF-8 on stdin, and lets control characters reach the
tokenizer. The task's inference hooks call the helpers here instead:

* :func:`interactive_tokens` (``get_interactive_tokens_and_lengths``) cleans
  each line with :func:`nmt_specdec.raw_text.clean_text` (control characters
  to spaces, lone surrogates to U+FFFD) and warns, naming the line, when a line
  held undecodable bytes.
* :func:`inference_dataset` (``build_dataset_for_inference``) returns a
  dataset that *truncates* a line longer than the resolved max positions to
  its first ``max - 1`` tokens plus EOS, with a warning naming the line,
  instead of failing or dropping it. Splitting would need several hypotheses
  per input id, which fairseq-interactive cannot print; ``nmt-specdec-translate``
  splits instead.
* :func:`tolerate_invalid_stdin` (``setup_task``) makes stdin decode invalid
  UTF-8 as surrogate escapes, which the cleaning then turns into U+FFFD.
  ``--input FILE`` is opened by fairseq itself with strict UTF-8 and cannot be
  made tolerant from a plugin: pipe such files through stdin.

Line numbers in warnings count from 1 over everything this task has read.
Empty lines need nothing: they become an EOS-only source and get a hypothesis.
"""

from __future__ import annotations

import logging
import sys
import weakref
from typing import Any, List, Sequence, Tuple

import numpy as np
import torch
from fairseq.data import LanguagePairDataset

from nmt_specdec.raw_text import clean_text

logger = logging.getLogger(__name__)

# task -> number of inference lines it has batched so far (for line numbers).
_LINES_SEEN: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def tolerate_invalid_stdin() -> None:
    """Decodes invalid UTF-8 on stdin as surrogate escapes instead of raising."""
    stdin = sys.stdin
    if stdin is None or getattr(stdin, "errors", None) != "strict":
        return
    try:
        stdin.reconfigure(errors="surrogateescape")
    except (
        AttributeError,
        ValueError,
        OSError,
    ):  # not a TextIOWrapper, or already read
        pass


def interactive_tokens(
    task, lines: Sequence[str], encode_fn
) -> Tuple[List[torch.Tensor], List[int]]:
    """fairseq's ``get_interactive_tokens_and_lengths``, on cleaned lines.

    Returns:
        One (S,) long tensor per line (EOS-terminated) and their lengths.
    """
    first = _LINES_SEEN.get(task, 0) + 1
    tokens = []
    for number, line in enumerate(lines, start=first):
        # surrogateescape turns each undecodable byte into a lone surrogate.
        if any(0xD800 <= ord(ch) <= 0xDFFF for ch in line):
            logger.warning(
                "input line %d: invalid UTF-8 bytes replaced by U+FFFD", number
            )
        text = clean_text(line)
        tokens.append(
            task.source_dictionary.encode_line(
                encode_fn(text) if text else "", add_if_not_exist=False
            ).long()
        )
    return tokens, [t.numel() for t in tokens]


class TruncatingInferenceDataset(LanguagePairDataset):
    """A source-only LanguagePairDataset that truncates instead of rejecting.

    fairseq's batch iterator asks the dataset to filter indices by the
    resolved max positions; this dataset shortens the over-long sources there
    (keeping EOS last) and rejects none.

    Args:
        first_line: 1-based input line number of item 0, for warnings.
        (others): as :class:`~fairseq.data.LanguagePairDataset`.
    """

    def __init__(
        self,
        src: List[torch.Tensor],
        src_sizes,
        src_dict,
        tgt_dict,
        constraints,
        first_line: int,
    ):
        super().__init__(
            list(src),
            np.array([int(size) for size in src_sizes], dtype=np.int64),  # tensors or ints
            src_dict,
            tgt_dict=tgt_dict,
            constraints=constraints,
        )
        self.first_line = first_line

    def filter_indices_by_size(self, indices, max_sizes):
        limit = _source_limit(max_sizes)
        if limit is not None:
            for index in sorted(indices):  # warnings in input order
                if self.src_sizes[index] > limit:
                    self._truncate(int(index), limit)
        return super().filter_indices_by_size(indices, max_sizes)

    def _truncate(self, index: int, limit: int) -> None:
        source = self.src[index]
        logger.warning(
            "input line %d: %d tokens exceed the model's %d source positions; "
            "truncated to the first %d",
            self.first_line + index,
            source.numel(),
            limit,
            limit - 1,
        )
        self.src[index] = torch.cat([source[: limit - 1], source[-1:]])  # (limit,)
        self.src_sizes[index] = limit


def _source_limit(max_sizes) -> Any:
    """The source part of fairseq's max positions (an int, a pair, or None)."""
    if isinstance(max_sizes, (tuple, list)):
        max_sizes = max_sizes[0]
    return None if max_sizes is None else int(max_sizes)


def inference_dataset(task, src_tokens, src_lengths, constraints=None):
    """fairseq's ``build_dataset_for_inference`` with line numbers and truncation."""
    first = _LINES_SEEN.get(task, 0) + 1
    _LINES_SEEN[task] = first - 1 + len(src_tokens)
    return TruncatingInferenceDataset(
        src_tokens,
        src_lengths,
        task.source_dictionary,
        task.target_dictionary,
        constraints,
        first,
    )
