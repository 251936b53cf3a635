"""Random draws that depend on what they decide, never on the batch.

Sampling takes, at each output position, the token whose log-probability plus
Gumbel noise is the largest (the Gumbel-max trick, :mod:`.sampling`). The noise
of token j at output position t of a sentence is a hash of (seed, sentence, t,
j): the sentence is its position in the input (fairseq's sample ``id``), t the
buffer index the token is written to (BOS at 0). So a sentence's sample
depends on the seed, the sentence and its position alone: the same bytes at any
batch size, on a rerun, with or without drafting, and two equal lines still draw
independently (another device may round the logs differently in the last bit,
which changes a sample only where two perturbed scores tie to that bit). A
global generator would hand each row whatever the rows before it left over.

The hash is PCG's output permutation (O'Neill, 2014) on 32-bit words held in
int64 tensors (every product stays below 2**63), chained over the fields; two
words make a 53-bit uniform in float64, strictly inside (0, 1), and
``-log(-log(u))`` a standard Gumbel variate.

Shapes: B rows, N positions, S tokens per position.
"""

from __future__ import annotations

import math
from typing import List, Sequence

import numpy as np
import torch
from torch import Tensor

_WORD = 0xFFFFFFFF
FEW = 32  # up to this many tokens of one position, the host hashes in Python integers
NEAR = 1e-10  # beyond gumbel_few's distance from gumbel_host: the logs differ in their last bits


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
    """53-bit integers (int64, a tensor or an array) from a position's hash and
    the token ids below 2**32; :func:`gumbel` and :func:`gumbel_host` scale them."""
    hashed = _permute(hashed ^ field)
    high = _permute(hashed ^ 0x9E3779B9) >> 6  # 26 bits
    low = _permute(high ^ hashed) >> 5  # 27 bits
    return high * 2 ** 27 + low


def gumbel(keys: Tensor, positions: Tensor, ids: Tensor) -> Tensor:
    """(B, N, S) float64 Gumbel noise of tokens ``ids`` (B, N, S) at output
    ``positions`` (B, N) of the rows with :func:`sentence_keys` ``keys`` (B,)."""
    hashed = _fold(keys.view(-1, 1), positions).unsqueeze(-1)  # (B, N, 1)
    uniform = (_unit(hashed, ids).double() + 0.5) / 2 ** 53
    return _gumbel_of(uniform)


def gumbel_host(key: int, positions: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """:func:`gumbel` of one row on the host, the same integer bits (int64 either
    way): (M,) float64 noise of tokens ``ids`` (M,) at output ``positions`` (M,,
    or one position for all: an integer)."""
    uniform = _uniform_host(key, positions, ids)
    # _gumbel_of in place on the new array: the same torch logs, fewer calls.
    noise = torch.from_numpy(uniform)
    torch.log(noise, out=noise).neg_()
    torch.log(noise, out=noise)
    return np.negative(uniform, out=uniform)


def gumbel_few(key: int, position: int, ids: Sequence[int]) -> List[float]:
    """:func:`gumbel_host` of a few tokens ``ids`` at one output ``position``, as
    Python floats with the ``math`` module's logs: within ``NEAR`` of its values.

    After a runtime call the host's caches are cold, and each numpy or torch call
    costs several times its work; Python integers and floats hash and log a
    handful of tokens in fewer. The logs differ from torch's in the last bits
    only, so an argmax whose best perturbed value leads the next by more than
    ``2 * NEAR`` is the same under either noise."""
    return [-math.log(-math.log((word + 0.5) / 2 ** 53)) for word in _few_words(key, position, ids)]


def _few_words(key: int, position: int, ids: Sequence[int]) -> List[int]:
    """:func:`_unit`'s words of a few tokens at one position in Python integers:
    the same arithmetic as the tensor form (every value stays below 2**63),
    without a numpy call per operation on a handful of values."""
    hashed = _fold(int(key), int(position))
    return [_unit(hashed, int(token)) for token in ids]


def _uniform_host(key: int, positions: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The (M,) float64 uniforms of :func:`gumbel_host`, in a new array."""
    if np.ndim(positions) == 0 and ids.size <= FEW:
        words = np.array(_few_words(key, positions, ids.tolist()), dtype=np.int64)
    else:
        words = _unit(_fold(np.int64(key), np.asarray(positions).astype(np.int64)),
                      ids.astype(np.int64))
    return (words.astype(np.float64) + 0.5) / 2 ** 53


def _gumbel_of(uniform: Tensor) -> Tensor:
    """``-log(-log(u))`` with torch's logs for both forms: numpy's vectorised
    float64 log may round differently from torch's in the last bit on some
    processors, and the host form must draw what the batched form draws."""
    return -torch.log(-torch.log(uniform))
