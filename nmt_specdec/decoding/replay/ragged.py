"""Ragged-batch bookkeeping for fairseq's incremental state: pure tensor functions.

The fixed-shape replay of :mod:`.determinism` keeps fairseq's
incremental self-attention state, which can be reordered but not cropped; the
plan below crops it to each row's committed entries, left-aligned with a
padding mask, without Python loops over rows. (The decoding engine needs none
of this: its cache is pre-allocated and rolls back by length.)

Shapes: B batch, T time, N new positions.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class CacheCompaction(NamedTuple):
    """Where each row's surviving cache entries come from.

    Attributes:
        index: (B, T') long, source slot of each new slot (0 where padding).
        padding_mask: (B, T') bool, True at slots that hold no valid entry.
    """

    index: Tensor
    padding_mask: Tensor


def compaction_index(cached: Tensor, kept_new: Tensor, old_width: int) -> CacheCompaction:
    """Plans the cache trim after a verification pass.

    Before the pass row b had ``cached[b]`` valid entries in slots
    ``[0, cached[b])`` of a cache ``old_width`` wide; the pass appended N entries
    at ``[old_width, old_width + N)``, of which the first ``kept_new[b]`` belong to
    committed tokens. The plan moves those right after the old entries, so each
    row is again left-aligned and the cache is only as wide as its longest row.

    Args:
        cached: (B,) valid entries per row before the pass.
        kept_new: (B,) appended entries to keep per row.
        old_width: cache width before the pass.

    Returns:
        The :class:`CacheCompaction` plan.
    """
    new_lengths = cached + kept_new  # (B,)
    width = int(new_lengths.max().item())
    slot = torch.arange(width, device=cached.device).unsqueeze(0)  # (1, T')
    from_old = slot < cached.unsqueeze(1)
    from_new = old_width + slot - cached.unsqueeze(1)
    padding_mask = slot >= new_lengths.unsqueeze(1)
    index = torch.where(from_old, slot, from_new).masked_fill(padding_mask, 0)
    return CacheCompaction(index, padding_mask)
