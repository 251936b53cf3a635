"""Ragged-batch bookkeeping: pure tensor functions.

In a batch, every sentence commits a different number of tokens per iteration.
Hypotheses are kept right-padded, ``(B, T)`` with per-row ``lengths``; the
verifier's self-attention cache is kept left-aligned with a padding mask. These
helpers move between those layouts without Python loops over rows.

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


def append_ragged(buffer: Tensor, lengths: Tensor, new: Tensor, counts: Tensor, fill) -> Tensor:
    """Writes ``new[b, :counts[b]]`` at ``buffer[b, lengths[b]:]`` for every row.

    Args:
        buffer: (B, T) right-padded values (tokens or scores).
        lengths: (B,) used length of each row.
        new: (B, N) values to append; only the first ``counts[b]`` of row b count.
        counts: (B,) how many values to append per row.
        fill: value for unused slots when the buffer has to grow.

    Returns:
        (B, T'') buffer with T'' = max(T, max(lengths + N)); the input is unchanged.
    """
    batch, width = new.shape
    needed = int((lengths + width).max().item()) if batch else 0
    if needed > buffer.size(1):
        grow = buffer.new_full((batch, needed - buffer.size(1)), fill)
        buffer = torch.cat([buffer, grow], dim=1)
    else:
        buffer = buffer.clone()
    slot = torch.arange(width, device=new.device).unsqueeze(0)  # (1, N)
    keep = slot < counts.unsqueeze(1)  # (B, N)
    # Unused values go to a scratch column that is dropped afterwards: routing
    # them to a real slot would race with a kept write there (scatter with
    # duplicate indices keeps an arbitrary one), e.g. at slot 0 when a length is 0.
    scratch = buffer.size(1)
    buffer = torch.cat([buffer, buffer.new_full((batch, 1), fill)], dim=1)  # (B, T''+1)
    target = (lengths.unsqueeze(1) + slot).masked_fill(~keep, scratch)  # (B, N)
    return buffer.scatter(1, target, new)[:, :scratch]


def left_pad(tokens: Tensor, lengths: Tensor, pad: int) -> Tensor:
    """Converts right-padded rows to left-padded rows of width ``max(lengths)``.

    The draft head reads the prefix followed by K mask slots; left padding keeps
    the mask slots of all rows in the same columns.

    Args:
        tokens: (B, T) right-padded.
        lengths: (B,) valid length of each row.
        pad: padding id.

    Returns:
        (B, P) left-padded, P = max(lengths).
    """
    width = int(lengths.max().item())
    column = torch.arange(width, device=tokens.device).unsqueeze(0)  # (1, P)
    shift = (width - lengths).unsqueeze(1)  # (B, 1)
    source = (column - shift).clamp(min=0)  # (B, P)
    gathered = tokens.gather(1, source)
    return gathered.masked_fill(column < shift, pad)


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
