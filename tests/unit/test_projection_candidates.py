"""The certified projection's candidates (``backends/onnxruntime/projection.py``)
on a vocabulary smaller than ``CANDIDATES``: every token but one rescored in fp32,
the last one's upper bound as the call's bound (no token above it is inexact),
and the rescored ids and their fp32 rounding returned beside them."""

from __future__ import annotations

import torch

from nmt_specdec.decoding.backends.onnxruntime.projection import CANDIDATES, CertifiedProjection


def test_a_small_vocabulary_rescores_all_but_one_token():
    torch.manual_seed(0)
    vocab = CANDIDATES // 2
    weight = torch.randn(vocab, 16)
    states = torch.randn(2, 3, 16)
    logits, bound, rounding, candidates = CertifiedProjection(weight)(states)
    exact = states @ weight.t()
    rescored = torch.isclose(logits, exact, atol=1e-5, rtol=0)
    assert logits.shape == (2, 3, vocab) and bound.shape == rounding.shape == (2, 3)
    assert (rescored.sum(-1) >= vocab - 1).all()
    assert not (~rescored & (exact > bound.unsqueeze(-1))).any()
    # Every token above the bound is a candidate; their fp32 logits lie within
    # the rounding of the float64 products.
    assert candidates.shape == (2, 3, vocab - 1)
    listed = torch.zeros_like(rescored).scatter(-1, candidates, True)
    assert not (~listed & (logits > bound.unsqueeze(-1))).any()
    float64 = (states.double() @ weight.t().double()).gather(-1, candidates)
    error = (logits.gather(-1, candidates).double() - float64).abs().amax(-1)
    assert (error <= rounding.double()).all() and (rounding < 1e-3).all()
    ranked = logits.gather(-1, candidates)
    assert (ranked[..., :-1] >= ranked[..., 1:]).all()  # the largest first
