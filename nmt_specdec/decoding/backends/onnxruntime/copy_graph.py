"""The drafting copy's step graph: one input per row through the verifier's
layers, its best candidates out (``--spec-drafter verifier-int4``/``-int8``).

The copy drafts a token a call (:mod:`.verifier_drafter`), so what surrounds its
products is paid K times an iteration. The verify graph it used before does more
than a draft needs: it writes the new keys and values into a copy of the whole
cache (the 8-bit graphs' same-bits layout), appends a query of zeros, and returns
the normaliser and the states. This graph attends to the cache as it is and to
the input's own key apart, needs no transposes (one input per row), and scores
the vocabulary twice: the quantized output projection picks
:data:`CANDIDATES` candidates, and their fp32 rows of the projection score them
again. The quantized projection then decides only which tokens are scored,
so it takes the copy's bits, and the draft is the argmax of the fp32 scores
(docs/results.md, "The copy's step graph").

Shapes: B rows, T cache slots, S source positions, H heads, D head size,
C candidates.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt_specdec.decoding.backends.onnxruntime.graphs import _Reshape, linear, norm_if
from nmt_specdec.decoding.passes.layers import CrossKV, LayerWeights
from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier

CANDIDATES = 16  # scored in fp32 a call: the greedy draft and top-k 10 samples' room


def candidates_for(vocab: int) -> int:
    """C for a vocabulary of ``vocab`` tokens (a tiny one has fewer)."""
    return min(CANDIDATES, vocab)


def _attend_step(q: Tensor, past: tuple, new: tuple, mask: Tensor) -> Tensor:
    """(B, H, 1, D): softmax attention of ``q`` over the cache's ``past`` keys and
    values (B, H, T, D), ``mask`` (B, 1, 1, T) additive, and the ``new`` (B, H, 1, D)
    key and value of the input itself."""
    scores = torch.matmul(q, past[0].transpose(2, 3)) + mask  # (B, H, 1, T)
    own = (q * new[0]).sum(-1, keepdim=True)  # (B, H, 1, 1)
    weights = torch.cat([scores, own], -1).softmax(-1)
    slots = past[0].size(2)
    return torch.matmul(weights[..., :slots], past[1]) + weights[..., slots:] * new[1]


def step_layer(w: LayerWeights, x: Tensor, past: tuple, mask: Tensor, cross: CrossKV,
               dim: int):
    """One decoder layer for (B, C) inputs -> (outputs, (B, H, 1, D) key, value);
    ``mask`` and ``cross.mask`` additive; ``dim`` C, an int (a traced size would
    be a graph value, which a constant shape cannot hold)."""
    pre, heads = w.normalize_before, w.heads
    shape = (-1, heads, 1, dim // heads)
    scale = (dim // heads) ** -0.5
    h = norm_if(pre, x, w.self_norm)
    q, k, v = linear(h, w.self_qkv).split(dim, dim=-1)
    key, value = _Reshape.apply(k, shape), _Reshape.apply(v, shape)
    a = _attend_step(_Reshape.apply(q * scale, shape), past, (key, value), mask)
    x = norm_if(not pre, x + linear(_Reshape.apply(a, (-1, dim)), w.self_out), w.self_norm)
    h = norm_if(pre, x, w.cross_norm)
    q = _Reshape.apply(linear(h, w.cross_q) * scale, shape)
    weights = (torch.matmul(q, cross.key.transpose(2, 3)) + cross.mask).softmax(-1)
    a = _Reshape.apply(torch.matmul(weights, cross.value), (-1, dim))
    x = norm_if(not pre, x + linear(a, w.cross_out), w.cross_norm)
    h = norm_if(pre, x, w.final_norm)
    h = linear(w.activation(linear(h, w.fc1)), w.fc2)
    return norm_if(not pre, x + h, w.final_norm), key, value


def _additive(mask: Tensor) -> Tensor:
    """0 where ``mask`` is True, -inf elsewhere."""
    return torch.zeros_like(mask, dtype=torch.float).masked_fill(~mask, float("-inf"))


class CopyStepGraph(nn.Module):
    """One input per row against the cache -> its candidates and their fp32 scores.

    Inputs: ``tokens`` (B, 1), ``start`` (B,) each input's position,
    ``memory_mask`` (B, 1, 1, S), ``self_mask`` (B, 1, 1, T) the slots before
    ``start`` (the input's own key is attended apart), ``past_key_i``/
    ``past_value_i`` (B, H, T, D), ``cross_key_i``/``cross_value_i`` (B, H, S, D).
    Outputs: ``scores`` (B, C) the fp32 logits of ``candidates`` (B, C), the C best
    tokens of the output projection as the export quantizes it, best first;
    ``new_keys``/``new_values`` (L*B, H, 1, D).
    """

    def __init__(self, verifier: LeanVerifier):
        super().__init__()
        self.verifier = verifier
        # (V, C) fp32 rows: the embedding's own where tied (the export stores it once).
        self.rows = verifier.decoder.output_projection.weight.detach()
        self.candidates = candidates_for(self.rows.size(0))  # an int: the graph's constant

    def forward(self, tokens: Tensor, start: Tensor, memory_mask: Tensor, self_mask: Tensor,
                *kv: Tensor):
        lean = self.verifier
        layers = len(lean.layers)
        past, cross = kv[: 2 * layers], kv[2 * layers:]
        x = _Reshape.apply(lean.embed_inputs(tokens, start.unsqueeze(1)), (-1, lean.dim))
        mask, memory = _additive(self_mask), _additive(memory_mask)
        keys, values = [], []
        for layer, weights in enumerate(lean.layers):
            kv_cross = CrossKV(cross[2 * layer], cross[2 * layer + 1], memory)
            x, key, value = step_layer(weights, x, (past[2 * layer], past[2 * layer + 1]),
                                       mask, kv_cross, lean.dim)
            keys.append(key)
            values.append(value)
        x = norm_if(True, x, lean.final_norm)
        candidates = torch.matmul(x, lean.output_t).topk(self.candidates, -1).indices  # (B, C)
        scores = torch.matmul(self.rows[candidates], x.unsqueeze(-1)).squeeze(-1)
        return scores, candidates, torch.cat(keys), torch.cat(values)
