"""The verifier (a fairseq ``TransformerDecoderBase``) as a lean multi-position pass.

One pass scores N new inputs per row against the pre-allocated cache and
returns hidden states, not probabilities: the loop projects onto the
vocabulary only at the positions whose scores it uses (:mod:`nmt_specdec.decoding.decision.scores`).

Shapes: B rows, N new positions, C model dim, V vocabulary, S source.
"""

from __future__ import annotations

from typing import Dict, List

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_specdec.decoding.cache import StaticKVCache
from nmt_specdec.decoding.draft_tree import tree_attention_mask
from nmt_specdec.decoding.layout import check_supported
from nmt_specdec.decoding.passes.layers import (
    CrossKV,
    SelfAttention,
    cross_kv,
    keep_cross_rows,
    layer_pass,
    layer_weights,
    one_query_at_a_time,
    transposed,
)
from nmt_specdec.model.positions import PositionTable

EncoderOut = Dict[str, List[Tensor]]


def encoder_memory(encoder_out: EncoderOut):
    """fairseq's encoder output -> ((S, B, C) states, (B, S) padding or None)."""
    states = encoder_out["encoder_out"][0]
    padding = encoder_out["encoder_padding_mask"]
    return states, (padding[0] if padding else None)


class LeanVerifier:
    """Reads a fairseq decoder's weights once; runs cached passes over them.

    Args:
        decoder: a fairseq ``TransformerDecoderBase`` (the verifier), eval mode.
    """

    def __init__(self, decoder: nn.Module):
        check_supported(decoder)
        self.decoder = decoder
        self.layers = [layer_weights(layer) for layer in decoder.layers]
        self.heads = self.layers[0].heads
        self.dim = decoder.embed_tokens.embedding_dim
        self.embed = decoder.embed_tokens.weight.detach()  # (V, C)
        # --quant-noise-pq adds a bias-free (C, C) projection of the embeddings, used
        # in inference too (the noise itself is training-only).
        noise = getattr(decoder, "quant_noise", None)
        self.embed_projection_t = (None if noise is None
                                   else transposed(noise.weight))  # (C, C)
        self.output_t = transposed(decoder.output_projection.weight)  # (C, V)
        norm = decoder.layer_norm
        self.final_norm = None if norm is None else (norm.weight.detach(), norm.bias.detach(),
                                                     norm.eps)
        norm = decoder.layernorm_embedding
        self.embed_norm = None if norm is None else (norm.weight.detach(), norm.bias.detach(),
                                                     norm.eps)
        # Twice the model's positions: drafts past the length limit stay in the table.
        # (The table takes the model's float type: a half model adds half positions.)
        self.positions = (None if decoder.embed_positions is None else
                          PositionTable(decoder.embed_positions, 2 * decoder.max_positions()))

    def cross_states(self, encoder_out: EncoderOut) -> List[CrossKV]:
        """Every layer's encoder keys/values for a batch (computed once)."""
        states, padding = encoder_memory(encoder_out)
        return [cross_kv(w, states, padding) for w in self.layers]

    @staticmethod
    def keep_rows(cross: List[CrossKV], rows: Tensor) -> List[CrossKV]:
        return [keep_cross_rows(kv, rows) for kv in cross]

    def new_cache(self, batch: int, slots: int, fixed: bool = False) -> StaticKVCache:
        """An empty cache (``fixed``: passes attend over all its slots, see :mod:`...cache`)."""
        return StaticKVCache(len(self.layers), batch, self.heads, slots,
                             self.dim // self.heads, like=self.embed, fixed=fixed)

    def embed_inputs(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """(B, N) tokens at (B, N) 0-based positions -> (B, N, C), as fairseq embeds."""
        x = self.decoder.embed_scale * F.embedding(tokens, self.embed)
        if self.embed_projection_t is not None:
            x = torch.matmul(x, self.embed_projection_t)
        if self.positions is not None:
            x = x + self.positions(positions)
        if self.embed_norm is not None:
            x = F.layer_norm(x, x.shape[-1:], *self.embed_norm)
        return x

    def forward(self, tokens: Tensor, start: Tensor, start_max: int, cache: StaticKVCache,
                cross: List[CrossKV], uniform: bool = False, tree=None) -> Tensor:
        """Scores N new inputs per row, writing their keys/values into the cache.

        Args:
            tokens: (B, N) inputs: the last committed token, then the drafts.
            start: (B,) position (= cache slot) of each row's first input.
            start_max: ``max(start)`` as a host int.
            cache: the batch's cache (slots ``< start[b]`` hold row b's prefix).
            cross: per-layer encoder keys/values of the same rows.
            uniform: every row starts at ``start_max`` (see ``StaticKVCache.begin_pass``).
            tree: a :class:`~nmt_specdec.decoding.draft_tree.TreeLayout` for a block
                of drafts with leaves (tree positions and mask); None for a chain.

        Returns:
            (B, N, C) final hidden states: input j's state predicts the token after it.
        """
        new = tokens.size(1)
        mask = cache.begin_pass(start, new, start_max, uniform)
        if tree is None:
            offsets = torch.arange(new, device=tokens.device)
        else:
            offsets = tree.offsets.to(tokens.device)
            if uniform:  # the causal mask of the new block becomes the ancestors
                mask[..., start_max:] = tree.ancestors.to(tokens.device)
            else:
                width = cache.slots if cache.fixed else start_max + new
                mask = tree_attention_mask(start, new, width, tree.ancestors)
        positions = start.unsqueeze(1) + offsets  # (B, N)
        x = self.embed_inputs(tokens, positions)
        widths = None
        if uniform and tree is None and new > 1 and one_query_at_a_time(x):
            widths = [start_max + j + 1 for j in range(new)]  # what greedy's steps attend
        attention = SelfAttention(cache.store, mask, widths)
        for index, weights in enumerate(self.layers):
            x = layer_pass(weights, index, x, attention, cross[index])
        if self.final_norm is not None:
            x = F.layer_norm(x, x.shape[-1:], *self.final_norm)
        return x

    def logits(self, hidden: Tensor) -> Tensor:
        """Full-vocabulary logits (..., V) of hidden states (..., C)."""
        return torch.mm(hidden.reshape(-1, self.dim), self.output_t).view(*hidden.shape[:-1], -1)
