"""The draft head's layers as it trains them: fairseq's decoder layer, made cheaper.

Three changes, none to what is computed:

- **Each sentence's source projected once.** Training cuts several blocks from
  every sentence (``--draft-cuts``, 4 by default), and each block attends to its
  sentence's source. Through fairseq's ``TransformerDecoderLayerBase`` every
  block projects the whole source to encoder-attention keys and values again;
  here each layer projects each sentence's source once and every block reads
  its sentence's rows (an ``index_select``, whose backward adds the blocks'
  gradients back onto the one projection).
- **Attention as plain matmuls.** A block is K+1 positions over a short source:
  small products, where ``scaled_dot_product_attention``'s bfloat16 backward
  costs several times more on a CPU than two matmuls and a float32 softmax
  (fairseq's own arithmetic).
- **Dropout masks from random bits** on a CPU (:func:`dropout`): drawing a
  Bernoulli number per element costs more there than the layer's products.

:func:`decoder_layer` is otherwise the fairseq layer's forward: the same
modules, residuals and norms, so it trains the same weights to the same values
up to float rounding and dropout's draws (tested against the fairseq layer,
values and gradients). It covers the plain layer, as the decoding engine's
passes do (:mod:`.layer_options` names the rest); :func:`supports` says whether
a layer is one, and the head falls back to the fairseq layer otherwise.

Shapes: T block positions, B' blocks, B sentences, S source, H heads, D head
dim, C model dim.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_specdec.model.layer_options import unsupported_layer_options


class SourceRows(NamedTuple):
    """One layer's encoder-attention keys and values for every block.

    Attributes:
        key, value: (B', H, S, D), each block's sentence's rows.
        mask: (B', 1, 1, S) added to the scores: -inf at the source's padding, else 0.
    """

    key: Tensor
    value: Tensor
    mask: Tensor


def supports(layer: nn.Module) -> bool:
    """Whether ``layer`` is a plain decoder layer, all :func:`decoder_layer` implements."""
    return not unsupported_layer_options(layer)


def source_rows(layer: nn.Module, encoder_out: Tensor, padding: Optional[Tensor],
                rows: Tensor) -> SourceRows:
    """Projects each sentence's source once for ``layer``'s encoder attention and
    gives every block its sentence's keys and values.

    Args:
        encoder_out: (S, B, C) as fairseq's encoder returns it.
        padding: (B, S) bool, True at padding (or None).
        rows: (B',) the sentence of each block.
    """
    attn = layer.encoder_attn
    memory = encoder_out.transpose(0, 1)  # (B, S, C)
    key = _heads(F.linear(memory, attn.k_proj.weight, attn.k_proj.bias), attn.num_heads)
    value = _heads(F.linear(memory, attn.v_proj.weight, attn.v_proj.bias), attn.num_heads)
    mask = memory.new_zeros(memory.shape[:2])
    if padding is not None:
        mask = mask.masked_fill(padding, float("-inf"))
    return SourceRows(key.index_select(0, rows), value.index_select(0, rows),
                      mask.index_select(0, rows)[:, None, None, :])


def decoder_layer(layer: nn.Module, x: Tensor, source: SourceRows,
                  self_attn_mask: Optional[Tensor] = None) -> Tensor:
    """``layer(x, encoder_out, padding, self_attn_mask=...)[0]`` of a fairseq
    ``TransformerDecoderLayerBase``, the source's keys and values given.

    Args:
        x: (T, B', C) time-major, as fairseq's layers take it.
        source: from :func:`source_rows` for this layer.
        self_attn_mask: (T, T) additive mask of the self-attention (None: none).
    """
    pre = layer.normalize_before
    residual = x
    h = layer.self_attn_layer_norm(x) if pre else x
    h = _self_attention(layer.self_attn, h, self_attn_mask)
    x = layer.residual_connection(_dropout(layer.dropout_module, h), residual)
    x = x if pre else layer.self_attn_layer_norm(x)

    residual = x
    h = layer.encoder_attn_layer_norm(x) if pre else x
    h = _encoder_attention(layer.encoder_attn, h, source)
    x = layer.residual_connection(_dropout(layer.dropout_module, h), residual)
    x = x if pre else layer.encoder_attn_layer_norm(x)

    residual = x
    h = layer.final_layer_norm(x) if pre else x
    h = _dropout(layer.activation_dropout_module, layer.activation_fn(layer.fc1(h)))
    x = layer.residual_connection(_dropout(layer.dropout_module, layer.fc2(h)), residual)
    return x if pre else layer.final_layer_norm(x)


def _self_attention(attn: nn.Module, x: Tensor, mask: Optional[Tensor]) -> Tensor:
    """fairseq ``MultiheadAttention`` over the block itself: (T, B', C) -> (T, B', C)."""
    rows = x.transpose(0, 1)  # (B', T, C)
    key, value = (_heads(F.linear(rows, proj.weight, proj.bias), attn.num_heads)
                  for proj in (attn.k_proj, attn.v_proj))
    return _attend(attn, rows, key, value, mask)


def _encoder_attention(attn: nn.Module, x: Tensor, source: SourceRows) -> Tensor:
    """fairseq ``MultiheadAttention`` over given keys and values: (T, B', C) -> (T, B', C)."""
    return _attend(attn, x.transpose(0, 1), source.key, source.value, source.mask)


def _attend(attn: nn.Module, rows: Tensor, key: Tensor, value: Tensor,
            mask: Optional[Tensor]) -> Tensor:
    """Attention of the (B', T, C) ``rows`` over (B', H, N, D) keys and values,
    ``mask`` added to the scores (None: none): (T, B', C) out.

    As fairseq computes it: the query scaled by D^-0.5, a float32 softmax. The
    products are small (T x N a head), where plain matmuls train several times
    faster on a CPU than scaled_dot_product_attention's bfloat16 backward."""
    query = _heads(F.linear(rows, attn.q_proj.weight, attn.q_proj.bias), attn.num_heads)
    scores = torch.matmul(query * attn.scaling, key.to(query.dtype).transpose(-1, -2))
    if mask is not None:
        scores = scores + mask.to(scores.dtype)
    probs = _dropout(attn.dropout_module, F.softmax(scores.float(), dim=-1).type_as(scores))
    out = torch.matmul(probs, value.to(probs.dtype))  # (B', H, T, D)
    batch, heads, length, head_dim = out.shape
    out = out.transpose(1, 2).reshape(batch, length, heads * head_dim)
    return attn.out_proj(out).transpose(0, 1)


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """``F.dropout(x, p, training)``, with the mask drawn from random bits on a CPU.

    One 64-bit draw makes the mask of four elements (16 bits each: an element
    is dropped with probability round(p * 65536) / 65536, within 1e-5 of p),
    about 3x faster than a Bernoulli draw per element there. Elsewhere (a GPU)
    it is ``F.dropout``."""
    if not training or p == 0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    count = x.numel()
    bits = torch.randint(-2**63, 2**63 - 1, ((count + 3) // 4,), dtype=torch.int64)
    kept = bits.view(torch.int16)[:count].view(x.shape) >= round(p * 65536) - 32768
    return x * (kept.to(x.dtype) * (1.0 / (1.0 - p)))


def _dropout(module: nn.Module, x: Tensor) -> Tensor:
    """:func:`dropout` with the rate and mode of a fairseq ``FairseqDropout``."""
    return dropout(x, module.p, module.training or module.apply_during_inference)


def _heads(x: Tensor, heads: int) -> Tensor:
    """(B, N, C) -> (B, H, N, D)."""
    batch, length, dim = x.shape
    return x.view(batch, length, heads, dim // heads).transpose(1, 2)
