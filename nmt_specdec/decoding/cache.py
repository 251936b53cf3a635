"""The verifier's self-attention cache, pre-allocated per batch (cf. HF's StaticCache).

Slot t of a row holds the keys and values of the decoder input at position t
(BOS is position 0), so writing a pass's N new inputs means writing slots
``start[b] .. start[b]+N-1`` and rolling back rejected drafts means nothing at
all: a row's valid length is its committed length, kept by the loop, and slots
past it are masked out and overwritten by the next pass. Committed entries are
never moved or copied; finished rows leave with one gather over the used width.

A *fixed* cache (``fixed=True``, the static loop's) holds all its slots from the
start and every pass attends over all of them, masked by each row's length: the
shapes of a pass never change from turn to turn, so a pass can be captured as a
CUDA graph and replayed (cf. gpt-fast's and HF's static caches).

Shapes: L layers, B rows, H heads, T slots, D head dim, N new positions.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor


class StaticKVCache:
    """Keys and values of every layer, (L, B, H, T, D) each.

    Args:
        layers, batch, heads, slots, head_dim: the shape (``slots``: the most
            a batch may need).
        like: a tensor whose dtype and device the cache takes.
        grow_by: allocate slots in chunks of this many as passes need them
            (a backend whose graph attends over the whole buffer pays for every
            slot); 0: all ``slots`` at once.
        spare: the first buffers of a finished batch's cache, taken over (zeroed)
            where they have this cache's first shape (see :meth:`first_buffers`).
        fixed: every pass attends over all ``slots`` (see the module's docstring);
            ``grow_by`` is then ignored.
    """

    def __init__(self, layers: int, batch: int, heads: int, slots: int, head_dim: int,
                 like: Tensor, grow_by: int = 0, spare: Optional[Tuple[Tensor, Tensor]] = None,
                 fixed: bool = False):
        grow_by = 0 if fixed else grow_by
        self.max_slots, self.grow_by, self.fixed = slots, grow_by, fixed
        shape = (layers, batch, heads, min(slots, grow_by) if grow_by else slots, head_dim)
        # Zeros, not empty: masked slots still enter the attention arithmetic
        # (weight 0 times a stale value), and uninitialised memory may hold NaN.
        if (spare is not None and spare[0].shape == shape and spare[0].dtype == like.dtype
                and spare[0].device == like.device):
            self.key, self.value = spare[0].zero_(), spare[1].zero_()
        else:
            self.key, self.value = like.new_zeros(shape), like.new_zeros(shape)
        self.first_buffers = (self.key, self.value)  # what a later cache may take over
        self.width = 0  # slots written so far by the longest row (a host int)
        self._rows = torch.arange(batch, device=like.device).unsqueeze(1)  # (B, 1)
        self._pass_width = 0  # T' of the current pass
        self._slots: Tensor = self._rows  # (B, N) slot of each new position
        self._uniform_start: Optional[int] = None  # set when every row starts there
        self._host_views: Optional[tuple] = None  # see _host
        self._new_views: Optional[tuple] = None  # see _host_new
        # A fixed cache's slot numbers 0..T-1 (also a pass's new-position offsets), made once.
        self._key_slots = torch.arange(slots, device=like.device) if fixed else None

    def reserve(self, width: int) -> None:
        """Makes room for ``width`` slots (growing by whole chunks; the written
        slots are copied, the rest are zeros)."""
        if width <= self.key.size(3):
            return
        slots = width
        if self.grow_by:  # up to a whole chunk, never past what the batch may need
            slots = max(width, min(self.max_slots, -(-width // self.grow_by) * self.grow_by))
        for name in ("key", "value"):
            old = getattr(self, name)
            new = old.new_zeros((*old.shape[:3], slots, old.size(4)))
            new[:, :, :, : self.width] = old[:, :, :, : self.width]
            setattr(self, name, new)

    def rows(self, batch: int) -> Tensor:
        """(B,) 0..B-1, kept (a pass's row index)."""
        return self._rows[:batch, 0]

    @property
    def slots(self) -> int:
        return self.key.size(3)

    def begin_pass(self, start: Tensor, new: int, start_max: int,
                   uniform: bool = False, mask: bool = True) -> Optional[Tensor]:
        """Prepares a pass that writes ``new`` inputs per row from slot ``start[b]``.

        Args:
            start: (B,) first slot to write per row (its committed inputs so far).
            new: N.
            start_max: ``max(start)`` as a host int (the loop knows it without a sync).
            uniform: every row starts at ``start_max`` (batch 1, or greedy steps):
                writes become one slice copy and the mask is shared by all rows.
            mask: False when the caller builds its own (a graph backend): a
                uniform pass then costs no tensor op here.

        Returns:
            (B or 1, 1, N, T') bool attention mask, T' = start_max + N: new input j
            of row b sees slots ``<= start[b] + j``; None when nothing is masked
            (one new position at a uniform start, or ``mask`` False). A fixed
            cache ignores ``start_max`` and ``uniform`` and always returns the
            (B, 1, N, T) mask over all its slots.
        """
        if self.fixed:
            self._uniform_start, self._pass_width = None, self.slots
            self._slots = start.unsqueeze(1) + self._key_slots[:new]  # (B, N)
            return (self._key_slots <= self._slots.unsqueeze(2)).unsqueeze(1)
        self._pass_width = start_max + new
        self.reserve(self._pass_width)
        self.width = max(self.width, self._pass_width)
        if uniform:
            self._uniform_start = start_max
            if new == 1 or not mask:
                return None
            key_slot = torch.arange(self._pass_width, device=start.device)
            query_slot = torch.arange(start_max, self._pass_width, device=start.device)
            return (key_slot <= query_slot.unsqueeze(1))[None, None]  # (1, 1, N, T')
        self._uniform_start = None
        offsets = torch.arange(new, device=start.device)
        self._slots = start.unsqueeze(1) + offsets  # (B, N)
        key_slot = torch.arange(self._pass_width, device=start.device)
        return (key_slot <= self._slots.unsqueeze(2)).unsqueeze(1)  # (B, 1, N, T')

    def store(self, layer: int, key: Tensor, value: Tensor) -> Tuple[Tensor, Tensor]:
        """Writes one layer's new (B, H, N, D) keys/values; returns its (B, H, T', D) view."""
        used = self._pass_width
        if self._uniform_start is not None:
            start = self._uniform_start
            self.key[layer, :, :, start:used] = key
            self.value[layer, :, :, start:used] = value
            return self.key[layer, :, :, :used], self.value[layer, :, :, :used]
        rows = self._rows[: key.size(0)]
        # Advanced indices (B, N) around a slice put (B, N) first: (B, N, H, D).
        self.key[layer][rows, :, self._slots] = key.transpose(1, 2)
        self.value[layer][rows, :, self._slots] = value.transpose(1, 2)
        return self.key[layer, :, :, :used], self.value[layer, :, :, :used]

    def store_all(self, keys: Tensor, values: Tensor) -> None:
        """Writes every layer's new (L, B, H, N, D) keys/values at once (a backend
        whose pass returns them all, instead of calling :meth:`store` per layer)."""
        used = self._pass_width
        if self._uniform_start is not None:
            start = self._uniform_start
            new = self._host_new(keys, values)
            if new is not None:  # through numpy: half a tensor write's dispatch
                key, value = self._host()
                key[:, :, :, start:used] = new[0]
                value[:, :, :, start:used] = new[1]
            else:
                self.key[:, :, :, start:used] = keys
                self.value[:, :, :, start:used] = values
            return
        rows = self._rows[: keys.size(1)]
        # Advanced indices (B, N) around slices put (B, N) first: (B, N, L, H, D).
        self.key[:, rows, :, self._slots] = keys.permute(1, 3, 0, 2, 4)
        self.value[:, rows, :, self._slots] = values.permute(1, 3, 0, 2, 4)

    def _host_new(self, keys: Tensor, values: Tensor) -> Optional[Tuple]:
        """Numpy views of a pass's new keys and values where the cache can take them
        through numpy (float32, on the CPU), else None; kept for the same tensors
        (a graph backend returns the same buffers pass after pass)."""
        kept = self._new_views
        if kept is None or kept[0] is not keys or kept[1] is not values:
            host = (keys.dtype == values.dtype == self.key.dtype == torch.float32
                    and keys.device.type == "cpu")
            kept = self._new_views = (keys, values,
                                      (keys.numpy(), values.numpy()) if host else None)
        return kept[2]

    def _host(self) -> Tuple:
        """Numpy views of the key and value buffers (on the CPU), made once per buffer."""
        views = self._host_views
        if views is None or views[0] is not self.key or views[1] is not self.value:
            views = self._host_views = (self.key, self.value, self.key.numpy(),
                                        self.value.numpy())
        return views[2:]

    def keep_rows(self, rows: Tensor) -> None:
        """Keeps only ``rows`` (B',), in that order; slots past the used width are
        zeroed. One gather of the whole width: gathering the used width into a
        zeroed buffer took 6x as long (20 of 20 rows, 152 slots; AMD EPYC)."""
        used = self.width
        for name in ("key", "value"):
            new = getattr(self, name).index_select(1, rows)
            new[:, :, :, used:] = 0
            setattr(self, name, new)
        self._rows = self._rows[: rows.numel()]
