"""A fairseq decoder layer as plain tensors, and one pass of it over new positions.

fairseq's ``TransformerDecoderLayerBase`` runs its attention through
``MultiheadAttention`` with per-call dictionaries of incremental state, which
costs more than the arithmetic at the sizes we decode with on a CPU. Here the
same weights are read once (q/k/v fused into one matrix) and a pass is a short,
fixed sequence of tensor ops, batch first. The result equals the fairseq layer
up to float rounding (tested against it).

Shapes: B batch, N new positions, T attended keys, S source, H heads, D head
dim, C model dim.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


Norm = Tuple[Tensor, Tensor, float]  # LayerNorm weight, bias, eps


def transposed(weight: Tensor) -> Tensor:
    """(C_out, C_in) -> (C_in, C_out) for ``x @ W^T``: a contiguous copy on the CPU,
    where MKL multiplies the skinny matrices of decoding (a few rows) about twice as
    fast in that layout; elsewhere a view (cuBLAS reads a transposed operand as it
    is, so a GPU keeps one copy of each weight)."""
    weight = weight.detach()
    return weight.t().contiguous() if weight.device.type == "cpu" else weight.t()


class LayerWeights(NamedTuple):
    """One decoder layer's parameters, each linear as (bias, transposed weight)
    (:func:`transposed`: a copy on the CPU, a view on a GPU).

    Attributes:
        heads: H.
        normalize_before: pre-norm (True) or fairseq's default post-norm.
        activation: the feed-forward activation.
        self_qkv: (3C,) bias and (C, 3C) weight of the fused self-attention q/k/v.
        self_out: self-attention output projection (weight, bias).
        self_norm: self-attention LayerNorm.
        cross_q: encoder-attention query projection.
        cross_kv: the fused encoder-attention k/v, (2C,) and (C, 2C).
        cross_out: encoder-attention output projection.
        cross_norm: encoder-attention LayerNorm.
        fc1, fc2: feed-forward projections.
        final_norm: feed-forward LayerNorm.
    """

    heads: int
    normalize_before: bool
    activation: Callable[[Tensor], Tensor]
    self_qkv: Tuple[Tensor, Tensor]
    self_out: Tuple[Tensor, Tensor]
    self_norm: Norm
    cross_q: Tuple[Tensor, Tensor]
    cross_kv: Tuple[Tensor, Tensor]
    cross_out: Tuple[Tensor, Tensor]
    cross_norm: Norm
    fc1: Tuple[Tensor, Tensor]
    fc2: Tuple[Tensor, Tensor]
    final_norm: Norm


def _linear(module: nn.Linear) -> Tuple[Tensor, Tensor]:
    return module.bias.detach(), transposed(module.weight)


def _norm(module: nn.Module) -> Norm:
    return module.weight.detach(), module.bias.detach(), module.eps


def _fused(*modules: nn.Linear) -> Tuple[Tensor, Tensor]:
    # One matmul instead of two or three (on a GPU, fewer kernel launches): the
    # fused weight is the one copy of these projections this module makes.
    weight = torch.cat([m.weight.detach() for m in modules], dim=0)
    bias = torch.cat([m.bias.detach() for m in modules], dim=0)
    return bias, transposed(weight)


def affine(x: Tensor, bias_weight: Tuple[Tensor, Tensor]) -> Tensor:
    """``x @ W^T + b`` for (..., C_in) ``x`` and a (bias, W^T) pair: one addmm."""
    bias, weight_t = bias_weight
    return torch.addmm(bias, x.reshape(-1, x.size(-1)), weight_t).view(*x.shape[:-1], -1)


def layer_weights(layer: nn.Module) -> LayerWeights:
    """Reads a fairseq ``TransformerDecoderLayerBase`` (with encoder attention).

    The layer's options must have passed :func:`nmt_specdec.decoding.layout.check_supported`.
    """
    attn, cross = layer.self_attn, layer.encoder_attn
    return LayerWeights(
        heads=attn.num_heads,
        normalize_before=layer.normalize_before,
        activation=layer.activation_fn,
        self_qkv=_fused(attn.q_proj, attn.k_proj, attn.v_proj),
        self_out=_linear(attn.out_proj),
        self_norm=_norm(layer.self_attn_layer_norm),
        cross_q=_linear(cross.q_proj),
        cross_kv=_fused(cross.k_proj, cross.v_proj),
        cross_out=_linear(cross.out_proj),
        cross_norm=_norm(layer.encoder_attn_layer_norm),
        fc1=_linear(layer.fc1),
        fc2=_linear(layer.fc2),
        final_norm=_norm(layer.final_layer_norm),
    )


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(B, N, C) -> (B, H, N, D)."""
    batch, length, dim = x.shape
    return x.view(batch, length, heads, dim // heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, N, D) -> (B, N, C)."""
    batch, heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * head_dim)


class CrossKV(NamedTuple):
    """Encoder-attention keys and values of one layer, computed once per batch.

    Attributes:
        key, value: (B, H, S, D).
        mask: (B, 1, 1, S) bool, True where the source position may be attended.
    """

    key: Tensor
    value: Tensor
    mask: Tensor


def cross_kv(weights: LayerWeights, encoder_out: Tensor, padding: Optional[Tensor]) -> CrossKV:
    """Projects the encoder output for one layer's encoder attention.

    Args:
        encoder_out: (S, B, C) as fairseq's encoder returns it.
        padding: (B, S) bool, True at padding (or None).
    """
    memory = encoder_out.transpose(0, 1)  # (B, S, C)
    key, value = affine(memory, weights.cross_kv).chunk(2, dim=-1)
    if padding is None:
        padding = memory.new_zeros(memory.shape[:2], dtype=torch.bool)
    mask = (~padding)[:, None, None, :]  # (B, 1, 1, S)
    return CrossKV(split_heads(key, weights.heads), split_heads(value, weights.heads), mask)


def keep_cross_rows(kv: CrossKV, rows: Tensor) -> CrossKV:
    return CrossKV(*(t.index_select(0, rows) for t in kv))


def _norm_if(flag: bool, x: Tensor, norm: Norm) -> Tensor:
    return F.layer_norm(x, x.shape[-1:], norm[0], norm[1], norm[2]) if flag else x


class SelfAttention(NamedTuple):
    """Where a layer's self-attention reads and writes keys and values.

    ``store(layer, key, value)`` writes the new (B, H, N, D) keys and values and
    returns the (B, H, T, D) keys and values to attend to; ``mask`` is (B, 1, N, T)
    bool or None (attend to everything). ``widths``: None, or per new position the
    keys it attends (a causal chain whose rows all start at the same slot), to
    attend one position at a time (see :func:`one_query_at_a_time`).
    """

    store: Callable[[int, Tensor, Tensor], Tuple[Tensor, Tensor]]
    mask: Optional[Tensor]
    widths: Optional[Sequence[int]] = None


def one_query_at_a_time(x: Tensor) -> bool:
    """Whether a pass over several positions attends for each on its own, as a pass
    over one position would: in half precision on the CPU. There
    ``scaled_dot_product_attention`` rounds a query's result differently when
    other queries share the call (bf16, some key lengths), so a verify pass over
    K+1 positions could score a position otherwise than greedy's one-position
    step, and a near-tie flip: beta=1 would differ from greedy of the same
    precision. One query per call, over exactly the keys greedy's step sees, is
    the same kernel call as greedy's. Float32 rounds by query count too, but in
    the last float32 bits, which only an exact float32 tie turns into another
    token (500/500 so far), so it keeps one call, as GPUs do (not measured yet)."""
    return x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16)


def _attend(q: Tensor, keys: Tensor, values: Tensor, mask: Optional[Tensor],
            widths: Optional[Sequence[int]]) -> Tensor:
    """(B, H, N, D) attention; with ``widths``, query i alone over ``keys[:widths[i]]``
    (no mask: a causal chain's row i sees exactly those)."""
    if widths is None:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    return torch.cat([F.scaled_dot_product_attention(q[:, :, i: i + 1], keys[:, :, :width],
                                                     values[:, :, :width])
                      for i, width in enumerate(widths)], dim=2)


def _attend_source(q: Tensor, cross: "CrossKV", each: bool) -> Tensor:
    """Encoder attention; ``each``: one query per call (see :func:`one_query_at_a_time`)."""
    if not each or q.size(2) == 1:
        return F.scaled_dot_product_attention(q, cross.key, cross.value, attn_mask=cross.mask)
    return torch.cat([F.scaled_dot_product_attention(q[:, :, i: i + 1], cross.key, cross.value,
                                                     attn_mask=cross.mask)
                      for i in range(q.size(2))], dim=2)


def layer_pass(weights: LayerWeights, index: int, x: Tensor, self_attn: SelfAttention,
               cross: CrossKV) -> Tensor:
    """One decoder layer over N new positions, as fairseq's layer in eval mode.

    Args:
        weights: the layer's weights.
        index: the layer's index (for ``self_attn.store``).
        x: (B, N, C) input states.
        self_attn: cache access and mask for self-attention.
        cross: the layer's encoder keys and values.

    Returns:
        (B, N, C) output states.
    """
    pre = weights.normalize_before
    heads = weights.heads
    h = _norm_if(pre, x, weights.self_norm)
    q, k, v = affine(h, weights.self_qkv).chunk(3, dim=-1)  # 3 x (B, N, C)
    keys, values = self_attn.store(index, split_heads(k, heads), split_heads(v, heads))
    a = _attend(split_heads(q, heads), keys, values, self_attn.mask,
                self_attn.widths)  # (B, H, N, D)
    x = _norm_if(not pre, x + affine(merge_heads(a), weights.self_out), weights.self_norm)

    h = _norm_if(pre, x, weights.cross_norm)
    q = split_heads(affine(h, weights.cross_q), heads)
    a = _attend_source(q, cross, self_attn.widths is not None)
    x = _norm_if(not pre, x + affine(merge_heads(a), weights.cross_out), weights.cross_norm)

    h = _norm_if(pre, x, weights.final_norm)
    h = affine(weights.activation(affine(h, weights.fc1)), weights.fc2)
    return _norm_if(not pre, x + h, weights.final_norm)
