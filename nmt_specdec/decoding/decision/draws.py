"""Random draws that depend on what they decide, never on the batch.

Speculative sampling draws three numbers per draft slot: one to sample the
draft, one to accept it, one to sample the verifier's token where it stops.
Each is a hash of (seed, sentence, turn, slot, purpose): the sentence is its
position in the input (fairseq's sample ``id``), the turn is the committed
length it starts from (unique per turn of a row). A sentence's sample then
depends on the seed, the sentence and its position alone: the same bytes at
any batch size, on any device, on a rerun, and two equal lines still draw
independently. A global generator would hand each row whatever the rows before
it left over.

The hash is PCG's output permutation (O'Neill, 2014) on 32-bit words held in
int64 tensors (every product stays below 2**63), chained over the fields; two
words make a 53-bit uniform in float64, strictly inside (0, 1).

Shapes: B rows, S slots.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

# Purposes: what a draw decides (the last field of its key).
DRAFT, ACCEPT, RESIDUAL = 0, 1, 2
_PURPOSES = 3
_WORD = 0xFFFFFFFF


def _permute(x: Tensor) -> Tensor:
    """PCG-RXS-M-XS on 32-bit words (int64 tensor of values in [0, 2**32))."""
    state = (x * 747796405 + 2891336453) & _WORD
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & _WORD
    return ((word >> 22) ^ word) & _WORD


def _fold(hashed: Tensor, field: Tensor) -> Tensor:
    """Hashes ``field`` (any int64) into the running hash, both halves of it."""
    hashed = _permute(hashed ^ (field & _WORD))
    return _permute(hashed ^ ((field >> 32) & _WORD))


def sentence_keys(seed: int, ids: Tensor) -> Tensor:
    """(B,) one key per sentence from the seed and its position in the input."""
    start = torch.full_like(ids, seed & _WORD)
    return _fold(_fold(start, torch.full_like(ids, seed >> 32)), ids)


def _unit(hashed, field):
    """53-bit integers (int64, a tensor or an array) from a row's turn hash and the
    fields of its draws; :func:`uniforms` and :func:`uniforms_host` scale them."""
    hashed = _permute(hashed ^ field)  # a field below 2**32
    high = _permute(hashed ^ 0x9E3779B9) >> 6  # 26 bits
    low = _permute(high ^ hashed) >> 5  # 27 bits
    return high * 2 ** 27 + low


def uniforms(keys: Tensor, turn: Tensor, slots: int) -> Tensor:
    """(B, S, 3) float64 draws strictly inside (0, 1), per row, slot and purpose
    (the last axis: :data:`DRAFT`, :data:`ACCEPT`, :data:`RESIDUAL`).

    Args:
        keys: (B,) :func:`sentence_keys` of the rows.
        turn: (B,) what makes each row's turn unique: its committed length.
        slots: S.
    """
    field = torch.arange(slots * _PURPOSES, device=keys.device).view(1, slots, _PURPOSES)
    hashed = _fold(keys, turn).view(-1, 1, 1)  # (B, 1, 1): the row's turn
    return (_unit(hashed, field).double() + 0.5) / 2 ** 53


def uniforms_host(key: int, turn: int, slots: int) -> np.ndarray:
    """(S, 3) :func:`uniforms` of one row on the host, the same bits (integer
    arithmetic in int64 either way)."""
    field = np.arange(slots * _PURPOSES, dtype=np.int64).reshape(slots, _PURPOSES)
    hashed = _fold(np.int64(key), np.int64(turn))
    return (_unit(hashed, field).astype(np.float64) + 0.5) / 2 ** 53
