"""Positional embeddings at explicit positions.

fairseq's positional modules derive positions from padding (full pass) or
from the sequence length (one incremental step). Speculative decoding needs
neither: it scores several new positions per row, at per-row offsets. Both
fairseq kinds number positions from ``padding_idx + 1``; this module applies
that convention to explicit 0-based positions.

Sinusoidal tables are computed in float32 by fairseq; they are cast like the
module's own table (a buffer, which ``model.half()`` and ``.to()`` convert), so a
half-precision model adds half-precision positions and stays half.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from fairseq.modules import LearnedPositionalEmbedding, SinusoidalPositionalEmbedding


def embed_positions_at(module: nn.Module, positions: Tensor) -> Tensor:
    """Embeds 0-based positions with a fairseq positional-embedding module.

    Args:
        module: a ``LearnedPositionalEmbedding`` or ``SinusoidalPositionalEmbedding``.
        positions: (B, T) long, 0 for the BOS slot.

    Returns:
        (B, T, C) embeddings, identical to what the module gives in a full pass.
    """
    index = positions + module.padding_idx + 1  # fairseq's numbering
    if isinstance(module, LearnedPositionalEmbedding):
        return F.embedding(index, module.weight)
    if isinstance(module, SinusoidalPositionalEmbedding):
        needed = int(index.max().item()) + 1
        if needed > module.weights.size(0):
            module.weights = module.get_embedding(
                needed, module.embedding_dim, module.padding_idx
            ).to(module.weights)
        module.weights = module.weights.to(device=index.device)
        return module.weights.index_select(0, index.reshape(-1)).view(
            *index.shape, -1
        ).detach()
    raise TypeError(f"unsupported positional embedding {type(module).__name__}")


class PositionTable:
    """A fairseq positional module's embeddings as one table, looked up by 0-based
    position with a single op (no growth check, hence no host synchronisation).

    Args:
        module: a ``LearnedPositionalEmbedding`` or ``SinusoidalPositionalEmbedding``.
        size: positions 0..size-1 are looked up (learned tables have their own size;
            later positions reuse the last one, as fairseq's max-positions clamp does).
    """

    def __init__(self, module: nn.Module, size: int):
        self.offset = module.padding_idx + 1  # fairseq's numbering
        if isinstance(module, LearnedPositionalEmbedding):
            self.weight = module.weight.detach()
        elif isinstance(module, SinusoidalPositionalEmbedding):
            self.weight = module.get_embedding(size + self.offset, module.embedding_dim,
                                               module.padding_idx).to(module.weights)
        else:
            raise TypeError(f"unsupported positional embedding {type(module).__name__}")
        self.last = self.weight.size(0) - 1 - self.offset

    def __call__(self, positions: Tensor) -> Tensor:
        """(..., ) 0-based positions -> (..., C) embeddings."""
        return F.embedding(positions.clamp(max=self.last) + self.offset, self.weight)

