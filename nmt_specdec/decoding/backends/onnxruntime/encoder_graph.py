"""The encoder call as a traceable module, for ``torch.onnx.export``.

Source tokens in; the source mask and every decoder layer's encoder keys/values
out (computed once per batch), and with a draft head the encoder's states, from
which :class:`DraftMemoryGraph` makes the head's keys/values only for a batch
that drafts (they were ~10% of an encoder call, paid by greedy batches too).
Written out like the decoder layers of :mod:`.graphs` (:class:`LeanEncoderGraph`),
or fairseq's own encoder traced where it uses options not written out here
(:class:`EncoderGraph`).

Shapes: B rows, S source, H heads, D head dim, C model dim.
"""

from __future__ import annotations

import copy
from typing import Callable, List, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_specdec.decoding.backends.onnxruntime.graphs import (
    Rows,
    attend,
    linear,
    merge_heads,
    norm_if,
    split_heads,
)
from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead
from nmt_specdec.decoding.passes.layers import Norm, cross_kv
from nmt_specdec.model.positions import PositionTable
from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier, encoder_memory


class _EncoderLayer(NamedTuple):
    heads: int
    normalize_before: bool
    activation: Callable[[Tensor], Tensor]
    qkv: tuple  # (bias, W^T) of the fused q/k/v projection
    out: tuple
    self_norm: Norm
    fc1: tuple
    fc2: tuple
    final_norm: Norm


def _bias_weight(*linears: nn.Module) -> tuple:
    weight = torch.cat([m.weight.detach() for m in linears], dim=0)
    return torch.cat([m.bias.detach() for m in linears], dim=0), weight.t().contiguous()


def _norm(module: nn.Module) -> Norm:
    return module.weight.detach(), module.bias.detach(), module.eps


def lean_encoder_layers(encoder: nn.Module) -> Optional[List[_EncoderLayer]]:
    """A fairseq ``TransformerEncoderBase``'s layers as plain tensors, or None when
    it uses options written out here for no one (quant-noise, NormFormer, ...)."""
    plain = (getattr(encoder, "quant_noise", None) is None
             and getattr(encoder, "embed_positions", None) is not None
             and all(getattr(layer, "return_fc", False) is False
                     and getattr(layer, "quant_noise", 0) in (0, None)
                     and hasattr(layer, "fc1") and hasattr(layer, "self_attn")
                     for layer in encoder.layers))
    if not plain:
        return None
    return [_EncoderLayer(
        heads=layer.self_attn.num_heads, normalize_before=layer.normalize_before,
        activation=layer.activation_fn,
        qkv=_bias_weight(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
        out=_bias_weight(layer.self_attn.out_proj), self_norm=_norm(layer.self_attn_layer_norm),
        fc1=_bias_weight(layer.fc1), fc2=_bias_weight(layer.fc2),
        final_norm=_norm(layer.final_layer_norm)) for layer in encoder.layers]


class LeanEncoderGraph(nn.Module):
    """fairseq's encoder (eval mode) written out like :func:`~.graphs.graph_layer`; outputs as
    :class:`EncoderGraph`. Tested equal to fairseq's encoder through the backend."""

    def __init__(self, encoder: nn.Module, layers: List[_EncoderLayer],
                 verifier: LeanVerifier, head: LeanDraftHead | None, pack: bool = True):
        super().__init__()
        self.pack = pack  # see _Packing: for batches; one sentence has no padding
        self.pad = encoder.padding_idx
        self.embed_scale = encoder.embed_scale
        self.embed = encoder.embed_tokens.weight.detach()
        self.dim = self.embed.size(1)  # an int here, a traced size in forward
        self.positions = PositionTable(encoder.embed_positions, 2 * encoder.max_positions())
        self.embed_norm = (None if encoder.layernorm_embedding is None
                           else _norm(encoder.layernorm_embedding))
        self.final_norm = None if encoder.layer_norm is None else _norm(encoder.layer_norm)
        self.layers = layers
        self.cross = list(verifier.layers)
        self.states = head is not None

    def forward(self, src_tokens: Tensor, src_lengths: Tensor):
        keep = src_tokens.ne(self.pad)  # (B, S)
        # fairseq numbers positions by counting non-pad tokens (left padding).
        positions = (keep.long().cumsum(1) - 1).clamp(min=0)
        x = self.embed_scale * F.embedding(src_tokens, self.embed) + self.positions(positions)
        x = norm_if(True, x, self.embed_norm)
        x = x * keep.unsqueeze(-1).to(x.dtype)  # (B, S, C), pads zeroed as fairseq does
        mask = keep[:, None, None, :]  # (B, 1, 1, S)
        rows = Rows(x, self.dim)
        packed = _Packing(keep) if self.pack else _NoPacking()
        x = packed.pack(rows.flatten(x))  # (T, C): the real tokens' rows, see _Packing
        for w in self.layers:
            scale = (w.out[1].size(0) // w.heads) ** -0.5
            h = norm_if(w.normalize_before, x, w.self_norm)
            dim = w.out[1].size(0)  # constant split sizes (chunk() computes them in the graph)
            q, k, v = (split_heads(t, w.heads, rows)
                       for t in packed.unpack(linear(h, w.qkv)).split(dim, dim=-1))
            a = packed.pack(merge_heads(attend(q, k, v, mask, scale), rows))
            x = norm_if(not w.normalize_before, x + linear(a, w.out), w.self_norm)
            h = norm_if(w.normalize_before, x, w.final_norm)
            h = linear(w.activation(linear(h, w.fc1)), w.fc2)
            x = norm_if(not w.normalize_before, x + h, w.final_norm)
        x = norm_if(True, x, self.final_norm)
        states = [rows.unflatten(packed.unpack(x))] if self.states else []
        return (mask, *memory_kv(self.cross, x, rows, packed.unpack), *states)


class _Packing:
    """The real tokens' rows of a left-padded batch, and back.

    Every product but attention reads one row at a time, so it runs on the T real
    tokens' rows only (``pack``): a batch of 32 sentences pads ~25% of its rows,
    the last and longest batch of the test set half. Attention needs (B, S) rows
    again (``unpack``): a pad position takes the row of some real token there; as
    a key it is masked and as a query its result is dropped, so it only needs to
    be finite.
    """

    def __init__(self, keep: Tensor):
        flat = keep.reshape(-1)
        self.real = flat.nonzero().squeeze(1)  # (T,) positions in the (B*S) rows
        # The real row at or before each position (a pad before the first: row 0).
        self.source = (flat.long().cumsum(0) - 1).clamp(min=0)  # (B*S,)

    def pack(self, x: Tensor) -> Tensor:
        """(B*S, C') -> (T, C')."""
        return x.index_select(0, self.real)

    def unpack(self, x: Tensor) -> Tensor:
        """(T, C') -> (B*S, C')."""
        return x.index_select(0, self.source)


class _NoPacking:
    """:class:`_Packing`'s interface for a graph of one sentence (no pad rows: the
    index ops would only add ~5% to its encoder call)."""

    @staticmethod
    def pack(x: Tensor) -> Tensor:
        return x

    unpack = pack


def memory_kv(layers: List, states: Tensor, rows: Rows,
              unpack: Callable[[Tensor], Tensor] = lambda x: x) -> List[Tensor]:
    """Each layer's encoder keys and values, (B, H, S, D), from the (B*S, C)
    ``rows`` of the encoder's states (as
    :func:`~nmt_specdec.decoding.passes.layers.cross_kv`); with ``unpack``, from
    the real tokens' rows (:class:`_Packing`)."""
    outputs = []
    for w in layers:
        kv = unpack(linear(states, w.cross_kv))
        key, value = kv.split(w.cross_kv[1].size(1) // 2, dim=-1)
        outputs += [split_heads(key, w.heads, rows), split_heads(value, w.heads, rows)]
    return outputs


class DraftMemoryGraph(nn.Module):
    """The encoder's ``states`` (B, S, C) -> ``draft_key_j``/``draft_value_j``
    (B, H, S, D) of the draft head's layers."""

    def __init__(self, head: LeanDraftHead):
        super().__init__()
        self.layers = list(head.layers)
        self.dim = self.layers[0].cross_kv[1].size(0)  # C, an int here

    def forward(self, states: Tensor):
        rows = Rows(states, self.dim)
        return tuple(memory_kv(self.layers, rows.flatten(states), rows))


class EncoderGraph(nn.Module):
    """Source tokens -> source mask and every layer's encoder keys/values
    (fairseq's own encoder, traced: for encoders :func:`lean_encoder_layers` refuses).

    Outputs: ``memory_mask`` (B, 1, 1, S) bool (True: attend), then
    ``cross_key_i``/``cross_value_i`` (B, H, S, D) of the verifier's layers and,
    with a draft head, ``states`` (B, S, C) for :class:`DraftMemoryGraph`.
    """

    def __init__(self, encoder: nn.Module, verifier: LeanVerifier,
                 head: LeanDraftHead | None):
        super().__init__()
        self.encoder = copy.deepcopy(encoder)  # the export switches modify it
        for module in self.encoder.modules():
            if module is not self.encoder and hasattr(module, "prepare_for_onnx_export_"):
                module.prepare_for_onnx_export_()
        self.layers = list(verifier.layers)
        self.states = head is not None

    def forward(self, src_tokens: Tensor, src_lengths: Tensor):
        out = self.encoder(src_tokens, src_lengths=src_lengths)
        states, padding = encoder_memory(out)
        cross = [cross_kv(w, states, padding) for w in self.layers]
        return (cross[0].mask, *[t for kv in cross for t in (kv.key, kv.value)],
                *([states.transpose(0, 1)] if self.states else []))
