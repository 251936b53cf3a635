"""The verify graphs' self-attention inputs, built on the host.

Which cache slots each new input may attend to (``self_mask``) and where its keys
and values go (``slot_index``) follow from the rows' starts, the number of new
inputs and their ancestors alone. Computed inside the graph they take ~45 small
ops, a share of a verify call over one position. Here they are a few numpy
writes into buffers kept per shape, which the session then binds once: a chain
at the same start in every row (a greedy step) copies a mask kept per start.

Two layouts, as :class:`~.graphs.VerifyGraph` attends:

- ``same_bits`` (the 8-bit graphs): the new inputs at their own slots of the
  (B, H, T, D) cache. ``self_mask`` (B, 1, N + 1, T): input j of row b sees the
  slots before ``start[b]`` and, in the block, its ancestors; the last row is
  repeated for the query the graph appends (``graphs._attend_rows``).
  ``slot_index`` (B, H, N, 3): (row, head, ``start[b] + j``) of each new key.
- after the cache (fp32): ``self_mask`` (B, 1, N, T + N): the slots before
  ``start[b]``, then the inputs' ancestors.

Shapes: B rows, N new inputs, H heads, T cache slots.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

_KEPT = 64  # buffer shapes kept (a batch's shapes change as rows finish and T grows)


class AttentionInputs:
    """Builds ``(self_mask, slot_index)`` for one verify call; ``slot_index`` is
    None in the after-cache layout. The tensors are valid until the next call
    with the same shapes.

    Args:
        heads: H.
        same_bits: the layout (see the module's docstring).
    """

    def __init__(self, heads: int, same_bits: bool):
        self.heads, self.same_bits = heads, same_bits
        self._buffers: Dict[Tuple[int, int, int], _Buffers] = {}

    def __call__(self, start: Tensor, uniform: bool, slots: int, ancestors: Tensor,
                 chain: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """
        Args:
            start: (B,) each row's first new slot.
            uniform: every row starts at the same slot.
            slots: T.
            ancestors: (N, N) bool, which new inputs each may attend to.
            chain: ``ancestors`` is causal (each input sees itself and those before).
        """
        batch, new = start.size(0), ancestors.size(0)
        kept = self._kept(batch, new, slots)
        first = start.numpy()
        if uniform and (chain or not self.same_bits):
            # Every row the same: one kept table per start, copied (cheaper than
            # building the mask, on the greedy step of one sentence).
            at = int(first[0])
            if self.same_bits:
                np.add(kept.steps, at, out=kept.slot_column)
            np.copyto(kept.mask_rows, kept.table(at))
        elif self.same_bits:
            np.add(first[:, None, None], kept.steps, out=kept.slot_column)
            kept.mask_host[:, 0, :new] = _block_mask(first, ancestors.numpy(), slots)
            kept.mask_host[:, 0, new] = kept.mask_host[:, 0, new - 1]
        else:
            np.less(kept.slot_row, first[:, None, None], out=kept.mask_rows)
        if not self.same_bits and kept.ancestors is not ancestors:
            kept.mask_host[:, 0, :, slots:] = ancestors.numpy()  # chains: the same tensor
            kept.ancestors = ancestors
        return kept.mask, kept.index

    def _kept(self, batch: int, new: int, slots: int) -> "_Buffers":
        """The buffers for these shapes (the index's row and head columns written once)."""
        key = (batch, new, slots)
        kept = self._buffers.get(key)
        if kept is not None:
            return kept
        if len(self._buffers) >= _KEPT:
            self._buffers.clear()
        kept = self._buffers[key] = _Buffers(batch, new, slots, self.heads, self.same_bits)
        return kept


class _Buffers:
    """One shape's input tensors, their numpy views, and the ranges they are built from."""

    def __init__(self, batch: int, new: int, slots: int, heads: int, same_bits: bool):
        self.same_bits = same_bits
        self.slot_row = np.arange(slots)
        self.steps = np.arange(new)
        # Mask rows' last slot offsets: 0..N-1, then N-1 again (the appended query).
        self.rows = np.minimum(np.arange(new + 1), new - 1)[:, None]
        self.ancestors: Optional[Tensor] = None  # written in the after-cache mask
        self.index = self.index_host = self.slot_column = None
        self._tables: Dict[int, np.ndarray] = {}  # start -> one row's mask (see table)
        if same_bits:
            self.mask = torch.empty(batch, 1, new + 1, slots, dtype=torch.bool)
            self.index = torch.empty(batch, heads, new, 3, dtype=torch.long)
            self.index_host = self.index.numpy()
            self.index_host[..., 0] = np.arange(batch)[:, None, None]
            self.index_host[..., 1] = np.arange(heads)[None, :, None]
            self.slot_column = self.index_host[..., 2]  # (B, H, N) the new keys' slots
        else:
            self.mask = torch.empty(batch, 1, new, slots + new, dtype=torch.bool)
            self.slot_row = self.slot_row[None, None, :]
        self.mask_host = self.mask.numpy()
        # (B, N + 1, T) or (B, N, T): what a start decides (the cache's slots).
        self.mask_rows = self.mask_host[:, 0] if same_bits else self.mask_host[:, 0, :, :slots]

    def table(self, start: int) -> np.ndarray:
        """The mask rows of a chain starting at ``start`` in every row, (N + 1, T)
        or (1, T) (after the cache: the slots before it), made once per start."""
        table = self._tables.get(start)
        if table is None:
            table = self._tables[start] = (self.slot_row <= self.rows + start if self.same_bits
                                           else self.slot_row[0] < start)
        return table


def example_inputs(heads: int, same_bits: bool, start: Tensor, slots: int,
                   ancestors: Tensor) -> Tuple[Tensor, Tensor]:
    """An export's example ``(self_mask, slot_index)``; in the after-cache layout,
    which reads no ``slot_index``, a placeholder (the exporter drops the input)."""
    mask, index = AttentionInputs(heads, same_bits)(start, False, slots, ancestors, chain=False)
    return mask.clone(), (torch.zeros(1, 1, 1, 3, dtype=torch.long) if index is None
                          else index.clone())


def _block_mask(first: np.ndarray, ancestors: np.ndarray, slots: int) -> np.ndarray:
    """(B, N, T): slots before each row's start, and in its block the ancestors."""
    new = ancestors.shape[0]
    relative = np.arange(slots)[None, :] - first[:, None]  # (B, T)
    in_block = (relative >= 0) & (relative < new)
    sees = ancestors[:, np.clip(relative, 0, new - 1)].transpose(1, 0, 2)  # (B, N, T)
    return (relative < 0)[:, None, :] | (in_block[:, None, :] & sees)
