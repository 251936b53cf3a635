"""Property tests of ``accept_drafts`` over random tables, drafts, beta and tau.

Log-probabilities are drawn from a small set of values (including -inf) so that
ties, fully masked positions and exact margin boundaries are common.
"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt_specdec.decoding.decision.rules import acceptance_rule
from nmt_specdec.decoding.decision.acceptance import accept_drafts

VALUES = (-math.inf, -9.0, -4.0, -2.5, -1.5, -1.0, -0.5, -0.25, 0.0)


@st.composite
def cases(draw):
    batch = draw(st.integers(1, 4))
    k = draw(st.integers(0, 6))
    vocab = draw(st.integers(2, 9))
    flat = draw(st.lists(st.sampled_from(VALUES), min_size=batch * (k + 1) * vocab,
                         max_size=batch * (k + 1) * vocab))
    lprobs = torch.tensor(flat).view(batch, k + 1, vocab)
    # Every position keeps one finite entry, as after constrain_lprobs (EOS).
    lprobs[:, :, 0] = lprobs[:, :, 0].clamp(min=-9.0)
    top1 = lprobs.topk(1, dim=-1).indices[..., 0]  # (B, K+1)
    # Drafts: mostly the verifier's top-1 (so long accepted runs happen), else random.
    drafts = torch.zeros(batch, k, dtype=torch.long)
    for b in range(batch):
        for i in range(k):
            if draw(st.booleans()) or draw(st.booleans()):
                drafts[b, i] = top1[b, i]
            else:
                drafts[b, i] = draw(st.integers(0, vocab - 1))
    beta = draw(st.integers(1, vocab + 2))
    tau = draw(st.sampled_from([0.0, 0.5, 1.0, 1.5, 3.0, math.inf]))
    return lprobs, drafts, beta, tau


def first_best(lprobs_bi) -> int:
    """Greedy's choice: the first index of the best score."""
    values = lprobs_bi.tolist()
    return values.index(max(values))


def passes(lprobs_bi, draft, beta, tau) -> bool:
    """Eq. 4 for one slot, written out independently of the implementation."""
    value = float(lprobs_bi[draft])
    if not math.isfinite(value):
        return False
    if beta == 1:  # greedy's own choice, ties included
        return draft == first_best(lprobs_bi)
    # Inside the top-beta: fewer than beta tokens score strictly higher (ties
    # count in the draft's favour).
    in_top = int((lprobs_bi > value).sum()) < beta
    return in_top and float(lprobs_bi.max()) - value <= tau


@settings(max_examples=200, deadline=None)
@given(cases())
def test_accept_drafts_properties(case):
    lprobs, drafts, beta, tau = case
    batch, k = drafts.shape
    r = accept_drafts(lprobs, drafts, acceptance_rule(beta, tau))
    assert r.accepted.shape == (batch, k)
    for b in range(batch):
        n = int(r.num_accepted[b])
        assert 0 <= n <= k
        # accepted is the all-true prefix of length n
        assert r.accepted[b].tolist() == [i < n for i in range(k)]
        # every accepted draft is finite, within tau and within the top beta
        for i in range(n):
            d = int(drafts[b, i])
            value = float(lprobs[b, i, d])
            assert math.isfinite(value)
            assert float(lprobs[b, i].max()) - value <= tau
            assert int((lprobs[b, i] > value).sum()) < beta
            assert passes(lprobs[b, i], d, beta, tau)
        # the first rejected slot really fails the criterion
        if n < k:
            assert not passes(lprobs[b, n], int(drafts[b, n]), beta, tau)
        # the correction (or bonus) is greedy's choice right after the accepted run
        assert int(r.correction[b]) == first_best(lprobs[b, n])


@settings(max_examples=200, deadline=None)
@given(cases())
def test_beta1_infinite_tau_accepts_exactly_the_greedy_prefix(case):
    lprobs, drafts, _, _ = case
    r = accept_drafts(lprobs, drafts, acceptance_rule(1, math.inf))
    for b in range(drafts.size(0)):
        # Greedy prefix: each draft is greedy's choice (the first of tied tokens).
        matches = [d == first_best(lprobs[b, i]) and math.isfinite(float(lprobs[b, i, d]))
                   for i, d in enumerate(drafts[b].tolist())]
        expected = matches.index(False) if False in matches else len(matches)
        assert int(r.num_accepted[b]) == expected


@settings(max_examples=100, deadline=None)
@given(cases())
def test_relaxing_beta_or_tau_never_accepts_fewer(case):
    lprobs, drafts, beta, tau = case
    base = accept_drafts(lprobs, drafts, acceptance_rule(beta, tau)).num_accepted
    wider = accept_drafts(lprobs, drafts, acceptance_rule(beta + 1, tau)).num_accepted
    looser = accept_drafts(lprobs, drafts, acceptance_rule(beta, tau + 1.0)).num_accepted
    assert (wider >= base).all() and (looser >= base).all()
