"""Logs SpecDec decoding statistics once, when a fairseq CLI process ends.

fairseq-generate and fairseq-interactive call no task hook after their last
batch, so :func:`log_stats_at_exit` registers the generator's statistics and
one ``atexit`` handler logs their total as a single ``SpecDec: ...`` line
(mean accepted tokens per iteration, iterations per sentence, acceptance per
draft slot). The hub interface builds a new generator per call; its callers
read the running total with :func:`combined_stats`, and direct users of a
generator read ``generator.stats``.
"""

from __future__ import annotations

import atexit
import logging
from typing import List, TypeVar

from nmt_specdec.decoding.stats import SpecDecStats

logger = logging.getLogger(__name__)

_TRACKED: List[SpecDecStats] = []

Generator = TypeVar("Generator")


def log_stats_at_exit(generator: Generator) -> Generator:
    """Registers the generator's :class:`SpecDecStats` for the end-of-process log.

    Generators without SpecDec statistics (fairseq's own) are passed through.

    Args:
        generator: a freshly built generator.

    Returns:
        The same generator, so that ``build_generator`` can return the call.
    """
    stats = getattr(generator, "stats", None)
    if isinstance(stats, SpecDecStats):
        if not _TRACKED:
            atexit.register(_log_combined_stats)
        _TRACKED.append(stats)
    return generator


def combined_stats() -> SpecDecStats:
    """The statistics of every generator built in this process, summed."""
    total = SpecDecStats()
    for stats in _TRACKED:
        total.sentences += stats.sentences
        total.iterations += stats.iterations
        total.tokens += stats.tokens
        total.accepted_per_slot = _add(total.accepted_per_slot, stats.accepted_per_slot)
        total.drafted_per_slot = _add(total.drafted_per_slot, stats.drafted_per_slot)
        for k, turns in stats.k_chosen.items():
            total.k_chosen[k] = total.k_chosen.get(k, 0) + turns
    return total


def _add(a: List[int], b: List[int]) -> List[int]:
    """Element-wise sum of two per-slot counts of possibly different lengths."""
    longer, shorter = (a, b) if len(a) >= len(b) else (b, a)
    return [x + (shorter[i] if i < len(shorter) else 0) for i, x in enumerate(longer)]


def _log_combined_stats() -> None:
    total = combined_stats()
    if total.sentences:
        logger.info(total.summary())
