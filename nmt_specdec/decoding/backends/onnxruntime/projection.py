"""The verifier's output projection in 8 bits, with its argmax certified in fp32.

At batch 1 the output projection (C x V fp32 weights, 8.4 MB for the shipped
model) is a third of a verify call and bound by memory on every runtime we
measured. In 8 bits it reads a quarter of the bytes, but
its logits are off by up to a few hundredths, and beta = 1 must reproduce the
fp32 verifier's greedy output. So the graph computes:

1. ``approx``: the logits from 8-bit weights (``MatMulNBits``, blocks of 64
   inputs, activations quantized per row and block; see :mod:`.quantize`);
2. ``upper``: ``approx`` plus a bound on its error, per token (below);
3. the ``CANDIDATES`` tokens with the largest ``upper``, and their logits
   again in fp32 from the fp32 rows of the weights (64 rows, not 8,168);
4. ``logits``: ``approx`` with those exact values written in, and ``bound``
   (B, N): the largest ``upper`` outside the candidates.

No token outside the candidates can score above ``bound``. So where the best
constrained logit of a position exceeds ``bound``, that best token, its value
and every token within ``best - bound`` of it are exact, and the decision is
the fp32 verifier's; the loop checks this after its length constraints
(:func:`~nmt_specdec.decoding.decision.scores.certain`) and recomputes the position in
fp32 where it fails (:meth:`OrtVerifier.exact_logits`; 0.1% of positions on
the shipped model's test sentences). What stays approximate are the scores of
the other tokens, i.e. the normaliser: positional scores move by up to ~3e-3.
Top-k sampling reads more than the best token: where the k best candidates lie
above ``bound`` they are the top k; elsewhere it certifies its sample on the
host from each token's bound and a few exact rows (:class:`ProjectionCheck`,
:mod:`~nmt_specdec.decoding.decision.certified`). Candidates enough for the top
10 of most positions cost the graph little more than the 16 the argmax needs.

The error bound, per token j (h: the final state, w_j: row j of the weights):
8-bit symmetric blocks round each weight by at most ``max|w_j| / 254`` and
each activation by at most ``max|h| / 254``, so
``|approx_j - exact_j| <= max|h| / 254 * |w^_j|_1 + |h|_1 * max|w_j| / 254``
with ``|w^_j|_1 <= |w_j|_1 + C * max|w_j| / 254``. ``SAFETY`` doubles it (an
asymmetric activation grid has up to twice the step; float rounding) and
``FLOOR`` adds an absolute margin. Measured on the shipped model's states, the
largest error is 0.07 where the bound averages 1.3
(``tests/integration/test_certified_projection.py`` checks error <= bound / 2).

Shapes: B rows, N positions, C model dim, V vocabulary.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

CANDIDATES = 64  # docs/results.md: how often the argmax and the top 10 are certified
SAFETY = 2.0
FLOOR = 1e-3
APPROX_SCOPE = "/projection/approx/"  # node names of the product to quantize


class _Approx(nn.Module):
    """Its own module so that the exported ``MatMul`` is named under ``APPROX_SCOPE``
    and its weight is an initializer of its own (quantized; the fp32 rows stay)."""

    def __init__(self, weight_t: Tensor):
        super().__init__()
        self.register_buffer("weight_t", weight_t.detach().clone().contiguous())

    def forward(self, x: Tensor) -> Tensor:
        return torch.matmul(x, self.weight_t)


def error_coefficients(weight: Tensor) -> Tensor:
    """(3, V): token j's error bound is ``[max|h|, |h|_1, 1] . coef[:, j]`` (the
    module doc), one small product per position."""
    weight = weight.detach().float()
    step = weight.abs().amax(dim=1) / 254  # (V,) largest rounding of a weight
    per_max_h = SAFETY * (weight.abs().sum(dim=1) + weight.size(1) * step) / 254
    return torch.stack([per_max_h, SAFETY * step, torch.full_like(step, FLOOR)])


class CertifiedProjection(nn.Module):
    """``x`` (B, N, C) -> ``logits`` (B, N, V), ``bound`` (B, N), ``rounding``
    (B, N) how far the exact logits may lie from their float64 values
    (:func:`rounding_scale`) and ``candidates`` (B, N, M) their ids, the largest
    logit first; see the module doc. The host's top-k sampling reads the last
    two: M scores instead of V, and no pass over the state
    (:func:`~nmt_specdec.decoding.decision.certified.known_sample`).

    Args:
        weight: (V, C) the fp32 output projection (no bias: fairseq's has none).
    """

    def __init__(self, weight: Tensor):
        super().__init__()
        weight = weight.detach().float()
        self.approx = _Approx(weight.t())
        self.register_buffer("rows", weight.clone())
        self.register_buffer("coef", error_coefficients(weight))
        self.count = min(CANDIDATES, weight.size(0) - 1)  # a small vocabulary: all but one
        self.per_norm_h = rounding_scale(weight)

    def forward(self, x: Tensor):
        approx = self.approx(x)  # (B, N, V)
        size = x.abs()
        stats = torch.stack([size.amax(dim=-1), size.sum(dim=-1), torch.ones_like(x[..., 0])],
                            dim=-1)  # (B, N, 3)
        upper = approx + torch.matmul(stats, self.coef)
        top = upper.topk(self.count + 1, dim=-1)
        candidates = top.indices[..., : self.count]  # (B, N, M)
        exact = torch.matmul(F.embedding(candidates, self.rows), x.unsqueeze(-1)).squeeze(-1)
        logits = approx.scatter(-1, candidates, exact)
        ranked = candidates.gather(-1, exact.topk(self.count, dim=-1).indices)  # best first
        rounding = torch.linalg.vector_norm(x, dim=-1) * self.per_norm_h
        return logits, top.values[..., self.count], rounding, ranked


def rounding_scale(weight: Tensor) -> float:
    """How far the fp32 logit of any token may lie from its exact value, per unit
    of ``|h|_2``. A sum of C products in fp32 is off by at most C * 2**-24 times
    the sum of their sizes, at most ``|h|_2 * |w_j|_2`` (Cauchy-Schwarz; several
    times tighter than ``max|h| * |w_j|_1`` where a few components of ``h``
    dominate); doubled, as the bound."""
    longest = float(weight.detach().float().norm(dim=1).max())  # the largest |w_j|_2
    return SAFETY * weight.size(1) * 2.0 ** -24 * longest


class ProjectionCheck:
    """The host's side of the 8-bit projection, for decisions that read more than
    the best token (top-k sampling, :mod:`~nmt_specdec.decoding.decision.certified`):
    each token's error bound, and exact logits of the few tokens a decision needs.

    Args:
        weight: (V, C) the fp32 output projection; read, not copied.
    """

    def __init__(self, weight: Tensor):
        self.rows = weight.detach().float().numpy()  # (V, C)
        self.coef = error_coefficients(weight).numpy()  # (3, V)

    def bounds(self, hidden: np.ndarray) -> np.ndarray:
        """(N, V) float32: how far each 8-bit logit of final states ``hidden`` (N, C)
        may lie from its exact value (the graph's own bound, per token)."""
        size = np.abs(hidden)
        stats = np.stack([size.max(-1), size.sum(-1), np.ones_like(size[:, 0])], -1)
        return stats @ self.coef

    def exact(self, state: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """(M,) float64 logits of tokens ``ids`` from one final state (C,): products
        summed in float64, so any order of summation gives them to ~1e-15."""
        return self.rows[ids].astype(np.float64) @ state.astype(np.float64)
