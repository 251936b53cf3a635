"""The three model calls as traceable modules, for ``torch.onnx.export``.

Each module reuses the arithmetic of the lean passes (:mod:`nmt_specdec.decoding.passes`:
``layer_pass``, ``LeanVerifier.embed_inputs``, ``DraftHead.block_inputs``) so that
the graphs compute what the torch backend computes. Differences, all for a graph runtime:

- the verifier attends over the whole pre-allocated cache (T slots, masked
  beyond each row's length) instead of the used width: the cache is then one
  contiguous buffer per layer that the runtime reads in place (no slice copy);
  the masked slots add exact zeros;
- it returns the N new keys/values instead of writing them: the loop's cache
  writes them (a graph cannot update an input in place);
- the encoder graph also projects every decoder and draft layer's encoder
  keys/values (computed once per batch);
- the draft graph ends with the argmax (only (B, K) ids leave the runtime);
- the decoder layers are written out here (:func:`graph_layer`, the same
  arithmetic as ``passes.layers.layer_pass`` on the same ``LayerWeights``) so
  that the graph has no dynamic-shape plumbing: head splits are one ``Reshape``
  with a constant shape (0 = keep that dimension), linears are 3-D ``MatMul``s,
  attention is spelled out with a constant scale. Traced from the lean pass,
  Shape/Gather/Unsqueeze/Concat ops for every reshape took about as much runtime
  as the matrix products at this model size (ORT profile).

Shapes: B rows, N new positions, T cache slots, S source, L layers, H heads,
D head dim, C model dim, V vocabulary, K draft slots.
"""

from __future__ import annotations

import copy
from typing import Callable, List, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_specdec.decoding.backends.onnxruntime.projection import CertifiedProjection
from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead
from nmt_specdec.decoding.passes.layers import CrossKV, LayerWeights, Norm, cross_kv
from nmt_specdec.decoding.passes.positions import PositionTable
from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier, encoder_memory
from nmt_specdec.draft_head import shortlist_logits


def kv_names(prefix: str, layers: int) -> List[str]:
    """``prefix_key_0, prefix_value_0, prefix_key_1, ...``: one input per layer, so
    that each binds a contiguous (B, H, T, D) buffer."""
    return [f"{prefix}_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]


def arange_like(size_of: Tensor, dim: int) -> Tensor:
    """``arange(size_of.size(dim))`` that the tracer keeps dynamic."""
    return torch.arange(size_of.size(dim), device=size_of.device)


class _Reshape(torch.autograd.Function):
    """``x`` reshaped to ``shape`` (0 keeps that dimension, -1 is inferred),
    exported as a single ``Reshape`` with a constant shape."""

    @staticmethod
    def forward(ctx, x: Tensor, shape: tuple) -> Tensor:  # type: ignore[override]
        return x.reshape([x.size(i) if size == 0 else size for i, size in enumerate(shape)])

    @staticmethod
    def symbolic(g, x, shape):
        return g.op("Reshape", x, g.op("Constant", value_t=torch.tensor(shape)))


def _split_heads(x: Tensor, heads: int) -> Tensor:
    """(B, N, C) -> (B, H, N, D)."""
    return _Reshape.apply(x, (0, 0, heads, -1)).transpose(1, 2)


def _merge_heads(x: Tensor) -> Tensor:
    """(B, H, N, D) -> (B, N, C)."""
    return _Reshape.apply(x.transpose(1, 2), (0, 0, -1))


def _linear(x: Tensor, bias_weight) -> Tensor:
    bias, weight_t = bias_weight
    return torch.matmul(x, weight_t) + bias


def _norm_if(flag: bool, x: Tensor, norm: Optional[Norm]) -> Tensor:
    if not flag or norm is None:
        return x
    weight, bias, eps = norm
    return F.layer_norm(x, [weight.numel()], weight, bias, eps)


def _attend(q: Tensor, k: Tensor, v: Tensor, mask, scale: float) -> Tensor:
    """Softmax attention, (B, H, N, D) queries; ``mask`` (B, 1, N, T) bool or None."""
    scores = torch.matmul(q * scale, k.transpose(2, 3))  # (B, H, N, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(scores.softmax(-1), v)


def graph_layer(w: LayerWeights, x: Tensor, self_kv, self_mask, cross: CrossKV) -> Tensor:
    """One decoder layer, as :func:`~nmt_specdec.decoding.passes.layers.layer_pass`,
    without dynamic shapes.

    Args:
        w: the layer's weights.
        x: (B, N, C).
        self_kv: ``(key, value) -> (keys, values)`` to attend to, given the new
            (B, H, N, D) keys and values.
        self_mask: (B, 1, N, T) bool or None.
        cross: encoder keys/values (B, H, S, D) and mask (B, 1, 1, S).
    """
    pre, heads = w.normalize_before, w.heads
    scale = (w.self_out[1].size(0) // heads) ** -0.5  # 1/sqrt(D), a constant
    h = _norm_if(pre, x, w.self_norm)
    q, k, v = _linear(h, w.self_qkv).chunk(3, dim=-1)
    keys, values = self_kv(_split_heads(k, heads), _split_heads(v, heads))
    a = _attend(_split_heads(q, heads), keys, values, self_mask, scale)
    x = _norm_if(not pre, x + _linear(_merge_heads(a), w.self_out), w.self_norm)
    h = _norm_if(pre, x, w.cross_norm)
    q = _split_heads(_linear(h, w.cross_q), heads)
    a = _attend(q, cross.key, cross.value, cross.mask, scale)
    x = _norm_if(not pre, x + _linear(_merge_heads(a), w.cross_out), w.cross_norm)
    h = _norm_if(pre, x, w.final_norm)
    h = _linear(w.activation(_linear(h, w.fc1)), w.fc2)
    return _norm_if(not pre, x + h, w.final_norm)


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
    """fairseq's encoder (eval mode) written out like :func:`graph_layer`; outputs as
    :class:`EncoderGraph`. Tested equal to fairseq's encoder through the backend."""

    def __init__(self, encoder: nn.Module, layers: List[_EncoderLayer],
                 verifier: LeanVerifier, head: LeanDraftHead | None):
        super().__init__()
        self.pad = encoder.padding_idx
        self.embed_scale = encoder.embed_scale
        self.embed = encoder.embed_tokens.weight.detach()
        self.positions = PositionTable(encoder.embed_positions, 2 * encoder.max_positions())
        self.embed_norm = (None if encoder.layernorm_embedding is None
                           else _norm(encoder.layernorm_embedding))
        self.final_norm = None if encoder.layer_norm is None else _norm(encoder.layer_norm)
        self.layers = layers
        self.cross = list(verifier.layers) + (list(head.layers) if head else [])

    def forward(self, src_tokens: Tensor, src_lengths: Tensor):
        keep = src_tokens.ne(self.pad)  # (B, S)
        # fairseq numbers positions by counting non-pad tokens (left padding).
        positions = (keep.long().cumsum(1) - 1).clamp(min=0)
        x = self.embed_scale * F.embedding(src_tokens, self.embed) + self.positions(positions)
        x = _norm_if(True, x, self.embed_norm)
        x = x * keep.unsqueeze(-1).to(x.dtype)  # (B, S, C), pads zeroed as fairseq does
        mask = keep[:, None, None, :]  # (B, 1, 1, S)
        for w in self.layers:
            scale = (w.out[1].size(0) // w.heads) ** -0.5
            h = _norm_if(w.normalize_before, x, w.self_norm)
            q, k, v = (_split_heads(t, w.heads) for t in _linear(h, w.qkv).chunk(3, dim=-1))
            a = _attend(q, k, v, mask, scale)
            x = _norm_if(not w.normalize_before, x + _linear(_merge_heads(a), w.out), w.self_norm)
            h = _norm_if(w.normalize_before, x, w.final_norm)
            h = _linear(w.activation(_linear(h, w.fc1)), w.fc2)
            x = _norm_if(not w.normalize_before, x + h, w.final_norm)
        x = _norm_if(True, x, self.final_norm)
        outputs = []
        for w in self.cross:  # as layers.cross_kv, batch first
            key, value = _linear(x, w.cross_kv).chunk(2, dim=-1)
            outputs += [_split_heads(key, w.heads), _split_heads(value, w.heads)]
        return (mask, *outputs)


class EncoderGraph(nn.Module):
    """Source tokens -> source mask and every layer's encoder keys/values
    (fairseq's own encoder, traced: for encoders :func:`lean_encoder_layers` refuses).

    Outputs: ``memory_mask`` (B, 1, 1, S) bool (True: attend), then
    ``cross_key_i``/``cross_value_i`` (B, H, S, D) of the verifier's layers and
    ``draft_key_j``/``draft_value_j`` of the draft head's layers.
    """

    def __init__(self, encoder: nn.Module, verifier: LeanVerifier,
                 head: LeanDraftHead | None):
        super().__init__()
        self.encoder = copy.deepcopy(encoder)  # the export switches modify it
        for module in self.encoder.modules():
            if module is not self.encoder and hasattr(module, "prepare_for_onnx_export_"):
                module.prepare_for_onnx_export_()
        self.layers = list(verifier.layers) + (list(head.layers) if head else [])

    def forward(self, src_tokens: Tensor, src_lengths: Tensor):
        out = self.encoder(src_tokens, src_lengths=src_lengths)
        states, padding = encoder_memory(out)
        cross = [cross_kv(w, states, padding) for w in self.layers]
        return (cross[0].mask, *[t for kv in cross for t in (kv.key, kv.value)])


class VerifyGraph(nn.Module):
    """N new inputs per row against the full cache -> logits, states, new keys/values.

    Inputs: ``tokens`` (B, N), ``start`` (B,) first position of each row,
    ``memory_mask`` (B, 1, 1, S), ``offsets`` (N,) each input's position after
    ``start``, ``ancestors`` (N, N) bool, which new inputs each may attend to
    (0..N-1 and causal for a chain; tree positions and ancestors for drafts with
    leaves, see :mod:`nmt_specdec.decoding.draft_tree`), ``past_key_i``/
    ``past_value_i`` (B, H, T, D), ``cross_key_i``/``cross_value_i`` (B, H, S, D).
    Outputs: ``logits`` (B, N, V), ``normaliser`` (B, N) their ``logsumexp``
    (fairseq's scores are log-probabilities: computed in the graph it costs
    ~12 us, in torch after the call ~60 us an iteration on logits that had just
    left the runtime), ``hidden`` (B, N, C), ``new_keys`` and ``new_values``
    (L, B, H, N, D); with ``certified``, ``bound`` (B, N) too: the logits come
    from the 8-bit projection of :mod:`.projection`, exact only above ``bound``.
    """

    def __init__(self, verifier: LeanVerifier, certified: bool = False):
        super().__init__()
        self.verifier = verifier
        self.projection = (CertifiedProjection(verifier.output_t.t()) if certified
                           else None)

    def forward(self, tokens: Tensor, start: Tensor, memory_mask: Tensor, offsets: Tensor,
                ancestors: Tensor, *kv: Tensor):
        lean = self.verifier
        layers = len(lean.layers)
        past, cross = kv[: 2 * layers], kv[2 * layers:]
        x = lean.embed_inputs(tokens, start.unsqueeze(1) + offsets)  # (B, N, C)
        slots = arange_like(past[0], 2)  # (T,)
        batch, new = tokens.shape
        old = (slots.view(1, 1, -1) < start.view(-1, 1, 1)).expand(batch, new, -1)  # (B, N, T)
        mask = torch.cat([old, ancestors.expand(batch, new, new)], dim=2).unsqueeze(1)
        new_keys: List[Tensor] = []
        new_values: List[Tensor] = []
        for index, weights in enumerate(lean.layers):

            def store(key: Tensor, value: Tensor, index: int = index):
                new_keys.append(key)
                new_values.append(value)
                return (torch.cat([past[2 * index], key], dim=2),
                        torch.cat([past[2 * index + 1], value], dim=2))

            memory = CrossKV(cross[2 * index], cross[2 * index + 1], memory_mask)
            x = graph_layer(weights, x, store, mask, memory)
        x = _norm_if(True, x, lean.final_norm)
        if self.projection is None:
            logits, bound = torch.matmul(x, lean.output_t), None  # (B, N, V)
        else:
            logits, bound = self.projection(x)
        # Spelled out: ONNX Runtime's ReduceLogSumExp took 110 us here, these 12 us.
        best = logits.amax(dim=-1, keepdim=True)
        lse = (best + (logits - best).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)
        outputs = (logits, lse, x, torch.stack(new_keys), torch.stack(new_values))
        return outputs if bound is None else (*outputs, bound)


class DraftGraph(nn.Module):
    """The draft head's pass -> (B, C', K) candidates per slot, best first.

    Inputs: ``states`` (B, C), ``last_tokens`` (B,), ``block_positions`` (B, K+1)
    (the last token's position, then the K slots'), ``memory_mask``,
    ``candidate_slots`` (C',) whose length is the candidates wanted (1: the
    greedy drafts), and ``draft_key_j``/``draft_value_j`` (B, H, S, D). Output:
    ``drafts`` (B, C', K), row 0 the argmax.
    """

    def __init__(self, head: LeanDraftHead):
        super().__init__()
        self.lean = head
        self.head = head.head  # registers state_proj, mask_embedding (initialisers)
        vocab = head.output_t.size(1)
        # The verifier never emits pad, so a pad draft only wastes a slot.
        bias = torch.zeros(vocab)
        if head.pad < vocab:
            bias[head.pad] = float("-inf")
        self.register_buffer("pad_bias", bias)

    def forward(self, states: Tensor, last_tokens: Tensor, block_positions: Tensor,
                memory_mask: Tensor, candidate_slots: Tensor, *cross: Tensor):
        logits = self.slot_logits(states, last_tokens, block_positions[:, 0],
                                  block_positions.size(1) - 1, memory_mask, cross)
        others = logits.topk(candidate_slots.size(0), dim=-1).indices[..., 1:]
        best_first = torch.cat([logits.argmax(dim=-1, keepdim=True), others], dim=-1)
        return best_first.transpose(1, 2)  # (B, C', K): flat in verify order

    def drafts(self, states: Tensor, last_tokens: Tensor, positions: Tensor, num_slots,
               memory_mask: Tensor, cross) -> Tensor:
        """(B, K) drafts after ``last_tokens`` (B,) at ``positions`` (B,)."""
        return self.slot_logits(states, last_tokens, positions, num_slots, memory_mask,
                                cross).argmax(dim=-1)

    def slot_logits(self, states: Tensor, last_tokens: Tensor, positions: Tensor, num_slots,
                    memory_mask: Tensor, cross) -> Tensor:
        """(B, K, V) the head's logits at the K slots, pad excluded."""
        lean = self.lean
        x = self.head.block_inputs(states, last_tokens, positions, num_slots, lean.positions)
        x = self._layers(x, range(lean.first_layers), None, lean.final_norm, memory_mask, cross)
        first = logits = torch.matmul(x[:, 1:], lean.output_t) + self.pad_bias  # (B, K, V)
        head = self.head
        if head.refine_steps:
            block = arange_like(x, 1)
            causal = block.view(-1, 1) >= block.view(1, -1)  # (K+1, K+1)
            shortlist = (first.topk(min(head.refine_shortlist, first.size(-1)), dim=-1).indices
                         if head.refine_shortlist else None)
        for _ in range(head.refine_steps):  # unrolled: one call either way
            y = head.refine_inputs(x, last_tokens, logits.argmax(dim=-1))
            y = self._layers(y, range(lean.first_layers, len(lean.layers)), causal,
                             lean.refine_norm, memory_mask, cross)
            logits = (torch.matmul(y[:, 1:], lean.output_t) + self.pad_bias
                      if shortlist is None else
                      shortlist_logits(y[:, 1:], lean.output_w, shortlist, first))
        return logits

    def _layers(self, x: Tensor, indices: range, mask, norm, memory_mask: Tensor,
                cross) -> Tensor:
        for index in indices:
            memory = CrossKV(cross[2 * index], cross[2 * index + 1], memory_mask)
            x = graph_layer(self.lean.layers[index], x, _no_cache, mask, memory)
        return _norm_if(True, x, norm)


def _no_cache(key: Tensor, value: Tensor):
    return key, value
