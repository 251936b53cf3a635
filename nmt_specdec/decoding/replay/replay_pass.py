"""The fixed-shape replay's verifier pass (``--deterministic``, :mod:`.determinism`):
one pass over several new positions on fairseq's own incremental state.

Not part of the :class:`~nmt_specdec.decoding.backends.base.Backend` interface
(the replay always runs in torch), so a new backend does not provide it.
fairseq's incremental decoder scores exactly one new token per call, and its
incremental state can be reordered but not cropped. Spec-Verify needs to score
the last committed token plus K drafts in one pass and then roll the cache back
to the accepted length, so this module drives the decoder's own layers with an
explicit causal mask over the new block and owns the cache roll-back.

Shapes: B batch, N new positions, T cached positions, H heads, D head dim,
C model dim, V vocabulary.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_specdec.model.positions import embed_positions_at
from nmt_specdec.decoding.replay.ragged import CacheCompaction

IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


class KVCache:
    """The verifier's incremental state, with each attention buffer tagged by kind.

    Self-attention buffers grow with the hypothesis and are trimmed after every
    verification; encoder-decoder buffers are computed once from the source and
    only ever follow row removals. The kinds are read off the decoder layers'
    modules, never guessed from buffer names.
    """

    def __init__(self, decoder: nn.Module):
        self.state: IncrementalState = {}
        self.self_attn: List[nn.Module] = [layer.self_attn for layer in decoder.layers]
        self.cross_attn: List[nn.Module] = [
            layer.encoder_attn for layer in decoder.layers if layer.encoder_attn is not None
        ]

    def width(self) -> int:
        """Time slots T of the self-attention cache (0 before the first pass)."""
        buffer = self.self_attn[0]._get_input_buffer(self.state)
        key = buffer.get("prev_key")
        return 0 if key is None else key.size(2)

    def trim(self, plan: CacheCompaction) -> None:
        """Keeps each row's committed entries, left-aligned (see ``compaction_index``)."""
        for module in self.self_attn:
            buffer = module._get_input_buffer(self.state)
            for name in ("prev_key", "prev_value"):
                cached = buffer[name]  # (B, H, T, D)
                index = plan.index[:, None, :, None].expand(
                    -1, cached.size(1), -1, cached.size(3)
                )  # (B, H, T', D)
                buffer[name] = cached.gather(2, index)
            buffer["prev_key_padding_mask"] = plan.padding_mask
            module._set_input_buffer(self.state, buffer)

    def keep_rows(self, rows: Tensor) -> None:
        """Drops finished rows from every buffer of both kinds."""
        for module in self.self_attn + self.cross_attn:
            buffer = module._get_input_buffer(self.state)
            for name, value in buffer.items():
                if value is not None:
                    buffer[name] = value.index_select(0, rows)
            module._set_input_buffer(self.state, buffer)


def block_causal_mask(cached: int, new: int, like: Tensor) -> Tensor:
    """Additive mask (N, T+N): every new position sees the cache and earlier new ones."""
    future = torch.ones(new, new, dtype=torch.bool, device=like.device).triu(1)
    mask = torch.zeros(new, cached + new, dtype=like.dtype, device=like.device)
    mask[:, cached:] = mask[:, cached:].masked_fill(future, float("-inf"))
    return mask


def verify_block(
    decoder: nn.Module,
    tokens: Tensor,
    positions: Tensor,
    encoder_out: Dict[str, List[Tensor]],
    cache: KVCache,
) -> Tensor:
    """Scores N new positions per row in one pass, appending them to the cache.

    Mirrors ``TransformerDecoderBase.extract_features_scriptable`` step by step
    (so that one position per pass reproduces fairseq's incremental decoding),
    with two differences: positions are explicit per row, and the self-attention
    mask is causal within the new block only.

    Args:
        decoder: the verifier (a fairseq ``TransformerDecoderBase``), in eval mode.
        tokens: (B, N) input tokens: the last committed token, then the drafts.
        positions: (B, N) their 0-based positions (BOS is position 0).
        encoder_out: fairseq encoder output for the same B rows.
        cache: the verifier's cache; grows by N slots.

    Returns:
        (B, N, V) float32 log-probabilities of the token after each input.
    """
    x = decoder.embed_scale * decoder.embed_tokens(tokens)  # (B, N, C)
    if getattr(decoder, "quant_noise", None) is not None:  # --quant-noise-pq's projection
        x = decoder.quant_noise(x)
    if decoder.project_in_dim is not None:
        x = decoder.project_in_dim(x)
    if decoder.embed_positions is not None:
        x = x + embed_positions_at(decoder.embed_positions, positions)
    if decoder.layernorm_embedding is not None:
        x = decoder.layernorm_embedding(x)
    x = decoder.dropout_module(x).transpose(0, 1)  # (N, B, C)
    mask = block_causal_mask(cache.width(), tokens.size(1), x)  # (N, T+N)
    enc = encoder_out["encoder_out"][0] if encoder_out["encoder_out"] else None
    enc_pad = (
        encoder_out["encoder_padding_mask"][0] if encoder_out["encoder_padding_mask"] else None
    )
    for layer in decoder.layers:
        x, _, _ = layer(x, enc, enc_pad, cache.state, self_attn_mask=mask)
    if decoder.layer_norm is not None:
        x = decoder.layer_norm(x)
    x = x.transpose(0, 1)  # (B, N, C)
    if decoder.project_out_dim is not None:
        x = decoder.project_out_dim(x)
    return F.log_softmax(decoder.output_layer(x).float(), dim=-1)
