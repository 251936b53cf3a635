"""The decoder calls (verify, draft) as traceable modules, for ``torch.onnx.export``
(the encoder's: :mod:`.encoder_graph`).

Each module reuses the arithmetic of the lean passes (:mod:`nmt_specdec.decoding.passes`:
``layer_pass``, ``LeanVerifier.embed_inputs``, ``DraftHead.block_inputs``) so that
the graphs compute what the torch backend computes. Differences, all for a graph runtime:

- the verifier attends over the whole pre-allocated cache (T slots, masked
  beyond each row's length) instead of the used width: the cache is then one
  contiguous buffer per layer that the runtime reads in place (no slice copy);
  the masked slots add exact zeros;
- it attends over a copy of the cache with the N new keys/values at their own
  slots, and returns them: the loop's cache writes them (a graph cannot update
  an input in place). With :func:`_attend_rows` a position's scores are then
  the same bits whatever the number of positions in the pass;
- which slots each new input sees and where its keys go are inputs, built on
  the host (:mod:`.attention_inputs`): in the graph they took ~45 small ops;
- the draft graph ends with the argmax (only (B, K) ids leave the runtime);
- the decoder layers are written out here (:func:`graph_layer`, the same
  arithmetic as ``passes.layers.layer_pass`` on the same ``LayerWeights``) so
  that the graph has little dynamic-shape plumbing: head splits are one
  ``Reshape`` (to a constant shape, or in the verify graph to a shape built once
  per call, see :class:`Rows`), linears are ``MatMul``s (2-D in the verify graph,
  where the runtime fuses them with their bias), attention is spelled out with a
  constant scale. Traced from the lean pass, Shape/Gather/Unsqueeze/Concat ops for
  every reshape took about as much runtime as the matrix products at this model
  size (ORT profile).

Shapes: B rows, N new positions, T cache slots, S source, L layers, H heads,
D head dim, C model dim, V vocabulary, K draft slots.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt_specdec.decoding.backends.onnxruntime.projection import CertifiedProjection
from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead
from nmt_specdec.decoding.passes.layers import CrossKV, LayerWeights, Norm
from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier
from nmt_specdec.model.draft_head import shortlist_logits


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


class _ScatterND(torch.autograd.Function):
    """``data`` with ``updates`` written at ``indices`` (..., 3) (row, head, slot),
    exported as one ``ScatterND``: a (D,) run per index, as fast as a ``Concat``
    (``ScatterElements``, one index per element, took twice as long)."""

    @staticmethod
    def forward(ctx, data: Tensor, indices: Tensor, updates: Tensor) -> Tensor:  # type: ignore[override]
        out = data.clone()
        out[indices[..., 0], indices[..., 1], indices[..., 2]] = updates
        return out

    @staticmethod
    def symbolic(g, data, indices, updates):
        return g.op("ScatterND", data, indices, updates)


class _ReshapeTo(torch.autograd.Function):
    """``x`` reshaped to ``shape``, a 1-D tensor computed in the graph (one
    ``Reshape``)."""

    @staticmethod
    def forward(ctx, x: Tensor, shape: Tensor) -> Tensor:  # type: ignore[override]
        return x.reshape([int(size) for size in shape])

    @staticmethod
    def symbolic(g, x, shape):
        return g.op("Reshape", x, shape)


class Rows:
    """A (B, N, C) activation as its (B*N, C) rows, through a call's layers.

    On rows every linear layer is a 2-D product, which the runtime fuses with its
    bias into one ``Gemm`` (and with a ReLU after it); 3-D, each bias was an
    ``Add`` node of its own (8-bit products do not fuse; what it saves:
    docs/results.md).
    Splitting rows into heads needs (B, N): they are read once per graph
    (``Shape``, ``Slice``), and each head count's shape is built once (``Concat``)."""

    def __init__(self, x: Tensor, dim: int):
        self.batch_new = torch._shape_as_tensor(x)[:2]  # (B, N)
        self.dim = dim  # C, an int (a traced size cannot be a constant of the graph)
        self._splits: Dict[int, Tensor] = {}

    def flatten(self, x: Tensor) -> Tensor:
        """(B, N, C) -> (B*N, C)."""
        return _Reshape.apply(x, (-1, self.dim))

    def unflatten(self, x: Tensor) -> Tensor:
        """(B*N, C') -> (B, N, C')."""
        return _ReshapeTo.apply(x, self._shape(-1))

    def split_shape(self, heads: int) -> Tensor:
        """(B, N, H, -1), for :func:`split_heads`."""
        if heads not in self._splits:
            self._splits[heads] = self._shape(heads, -1)
        return self._splits[heads]

    def _shape(self, *tail: int) -> Tensor:
        return torch.cat([self.batch_new, torch.tensor(tail, dtype=self.batch_new.dtype)])


def split_heads(x: Tensor, heads: int, rows: Optional[Rows] = None) -> Tensor:
    """(B, N, C) -> (B, H, N, D); with ``rows``, from (B*N, C) rows."""
    if rows is None:
        return _Reshape.apply(x, (0, 0, heads, -1)).transpose(1, 2)
    return _ReshapeTo.apply(x, rows.split_shape(heads)).transpose(1, 2)


def merge_heads(x: Tensor, rows: Optional[Rows] = None) -> Tensor:
    """(B, H, N, D) -> (B, N, C); with ``rows``, -> (B*N, C)."""
    return _Reshape.apply(x.transpose(1, 2), (0, 0, -1) if rows is None else (-1, rows.dim))


def linear(x: Tensor, bias_weight) -> Tensor:
    bias, weight_t = bias_weight
    return torch.matmul(x, weight_t) + bias


def norm_if(flag: bool, x: Tensor, norm: Optional[Norm]) -> Tensor:
    if not flag or norm is None:
        return x
    weight, bias, eps = norm
    return F.layer_norm(x, [weight.numel()], weight, bias, eps)


def attend(q: Tensor, k: Tensor, v: Tensor, mask, scale: float) -> Tensor:
    """Softmax attention, (B, H, N, D) queries; ``mask`` (B, 1, N, T) bool or None."""
    scores = torch.matmul(q * scale, k.transpose(2, 3))  # (B, H, N, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(scores.softmax(-1), v)


def _attend_rows(q: Tensor, k: Tensor, v: Tensor, mask, scale: float) -> Tensor:
    """:func:`attend` computed so that a query's result does not depend on how
    many queries share the call: the runtime multiplies a single row by another
    kernel than two or more (which round every row alike; linear layers round
    alike even for one), so a query of zeros is appended and dropped.
    With the new keys at their own slots (:class:`VerifyGraph`), a position then
    scores the same bits in a pass over 1 or K+1 positions, and beta=1 is the
    verifier's own greedy output (used by the 8-bit graphs, whose activation
    quantization turned last-bit differences into other tokens).
    ``mask``: shared by the queries, or with a row for the appended one too."""
    return attend(F.pad(q, (0, 0, 0, 1)), k, v, mask, scale)[:, :, :-1]


def graph_layer(w: LayerWeights, x: Tensor, self_kv, self_mask, cross: CrossKV,
                attention: Callable = attend, rows: Optional[Rows] = None) -> Tensor:
    """One decoder layer, as :func:`~nmt_specdec.decoding.passes.layers.layer_pass`,
    without dynamic shapes.

    Args:
        w: the layer's weights.
        x: (B, N, C), or with ``rows`` its (B*N, C) rows.
        self_kv: ``(key, value) -> (keys, values)`` to attend to, given the new
            (B, H, N, D) keys and values.
        self_mask: (B, 1, N, T) bool or None ((B, 1, N + 1, T) for
            :func:`_attend_rows`).
        cross: encoder keys/values (B, H, S, D) and mask (B, 1, 1, S).
        attention: :func:`attend`, or :func:`_attend_rows` (the verifier).
    """
    pre, heads = w.normalize_before, w.heads
    scale = (w.self_out[1].size(0) // heads) ** -0.5  # 1/sqrt(D), a constant
    h = norm_if(pre, x, w.self_norm)
    # Constant sizes: chunk() exports six shape ops to compute them.
    q, k, v = linear(h, w.self_qkv).split(w.self_out[1].size(0), dim=-1)
    keys, values = self_kv(split_heads(k, heads, rows), split_heads(v, heads, rows))
    a = attention(split_heads(q, heads, rows), keys, values, self_mask, scale)
    x = norm_if(not pre, x + linear(merge_heads(a, rows), w.self_out), w.self_norm)
    h = norm_if(pre, x, w.cross_norm)
    q = split_heads(linear(h, w.cross_q), heads, rows)
    a = attention(q, cross.key, cross.value, cross.mask, scale)
    x = norm_if(not pre, x + linear(merge_heads(a, rows), w.cross_out), w.cross_norm)
    h = norm_if(pre, x, w.final_norm)
    h = linear(w.activation(linear(h, w.fc1)), w.fc2)
    return norm_if(not pre, x + h, w.final_norm)


class VerifyGraph(nn.Module):
    """N new inputs per row against the full cache -> logits, states, new keys/values.

    Inputs: ``tokens`` (B, N), ``start`` (B,) first position of each row,
    ``memory_mask`` (B, 1, 1, S), ``offsets`` (N,) each input's position after
    ``start`` (0..N-1 for a chain; tree positions for drafts with leaves, see
    :mod:`nmt_specdec.decoding.draft_tree`), ``self_mask`` and ``slot_index``
    (built on the host, see :mod:`.attention_inputs`; ``slot_index`` with
    ``same_bits`` only), ``past_key_i``/``past_value_i`` (B, H, T, D),
    ``cross_key_i``/``cross_value_i`` (B, H, S, D).
    Outputs: ``logits`` (B, N, V), ``normaliser`` (B, N) their ``logsumexp``
    (fairseq's scores are log-probabilities: in the graph it is cheaper than in
    torch after the call, on logits that have just left the runtime),
    ``hidden`` (B, N, C), ``new_keys`` and ``new_values``
    (L, B, H, N, D); with ``certified``, ``bound`` (B, N), ``rounding``
    (B, N) and ``candidates`` (B, N, M) too: the logits come from the 8-bit
    projection of :mod:`.projection`, exact only above ``bound``.
    ``same_bits``: a position scores the same bits in a pass over any number of
    positions (:func:`_attend_rows`; ~15% slower at batch 1 on an AMD EPYC; the
    8-bit graphs, whose activation quantization turns last-bit differences into
    other tokens: fp32's need an exact fp32 tie to).
    """

    def __init__(self, verifier: LeanVerifier, certified: bool = False,
                 same_bits: bool = False):
        super().__init__()
        self.verifier = verifier
        self.projection = (CertifiedProjection(verifier.output_t.t()) if certified
                           else None)
        self.same_bits = same_bits

    def forward(self, tokens: Tensor, start: Tensor, memory_mask: Tensor, offsets: Tensor,
                self_mask: Tensor, slot_index: Tensor, *kv: Tensor):
        lean = self.verifier
        layers = len(lean.layers)
        past, cross = kv[: 2 * layers], kv[2 * layers:]
        x = lean.embed_inputs(tokens, start.unsqueeze(1) + offsets)  # (B, N, C)
        rows = Rows(x, lean.dim)
        x = rows.flatten(x)
        mask = self_mask
        if self.same_bits:  # the new inputs at their own slots, see _attend_rows
            attention = _attend_rows

            def place(cache: Tensor, new: Tensor) -> Tensor:
                return _ScatterND.apply(cache, slot_index, new)
        else:  # after the cache: cheaper, and rounds by the number of positions
            attention = attend

            def place(cache: Tensor, new: Tensor) -> Tensor:
                return torch.cat([cache, new], dim=2)
        new_keys: List[Tensor] = []
        new_values: List[Tensor] = []
        for layer, weights in enumerate(lean.layers):

            def store(key: Tensor, value: Tensor, layer: int = layer):
                new_keys.append(key)
                new_values.append(value)
                return place(past[2 * layer], key), place(past[2 * layer + 1], value)

            memory = CrossKV(cross[2 * layer], cross[2 * layer + 1], memory_mask)
            x = graph_layer(weights, x, store, mask, memory, attention, rows)
        # Back to (B, N, C) before the projection: an output the loop binds that a
        # Reshape makes is copied into the bound buffer (~1 MB of logits at batch 32).
        x = rows.unflatten(norm_if(True, x, lean.final_norm))
        if self.projection is None:
            logits, certified = torch.matmul(x, lean.output_t), ()  # (B, N, V)
        else:
            logits, *certified = self.projection(x)
        # Spelled out: ONNX Runtime's ReduceLogSumExp is several times slower here.
        best = logits.amax(dim=-1, keepdim=True)
        lse = (best + (logits - best).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)
        # (L*B, H, N, D): the memory of (L, B, H, N, D) without L Unsqueeze ops.
        return (logits, lse, x, torch.cat(new_keys), torch.cat(new_values), *certified)


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
        if lean.refine_steps:
            block = arange_like(x, 1)
            causal = block.view(-1, 1) >= block.view(1, -1)  # (K+1, K+1)
            shortlist = (first.topk(min(head.refine_shortlist, first.size(-1)), dim=-1).indices
                         if head.refine_shortlist else None)
        for _ in range(lean.refine_steps):  # unrolled: one call either way
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
        return norm_if(True, x, norm)


class DraftLogitsGraph(DraftGraph):
    """The draft head's pass -> ``logits`` (B, K, V) at the K slots, pad excluded:
    what speculative sampling draws each draft from (``--sampling``). Inputs as
    :class:`DraftGraph`'s, without ``candidate_slots``."""

    def forward(self, states: Tensor, last_tokens: Tensor, block_positions: Tensor,
                memory_mask: Tensor, *cross: Tensor):
        return self.slot_logits(states, last_tokens, block_positions[:, 0],
                                block_positions.size(1) - 1, memory_mask, cross)


def _no_cache(key: Tensor, value: Tensor):
    return key, value
