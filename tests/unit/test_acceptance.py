"""Spec-Verify acceptance, commit and length constraints on scripted tables.

Vocabulary for every table here (fairseq's layout): 0 <s>, 1 <pad>, 2 </s>,
3 <unk>, 4..9 words. A table is written as a ranking per position: the listed
tokens get the log-probabilities in ``RANK_LPROBS`` in that order, every other
token ``REST``. Gaps: top-1 -> 2nd is exactly 1.0, top-1 -> 3rd exactly 2.5.
"""

from __future__ import annotations

import math

import pytest
import torch

from nmt_specdec.decoding.decision.rules import acceptance_rule
from nmt_specdec.decoding.decision.acceptance import Acceptance, accept_drafts, commit_tokens
from nmt_specdec.decoding.decision.constraints import Constraints, constrain_logits_

BOS, PAD, EOS, UNK = 0, 1, 2, 3
V = 10
RANK_LPROBS = (-0.5, -1.5, -3.0, -4.0)
REST = -20.0
INF = math.inf


def table(rankings) -> torch.Tensor:
    """(B, N, V) log-probs from ``rankings[b][i]`` = tokens best-first at position i."""
    out = torch.full((len(rankings), len(rankings[0]), V), REST)
    for b, row in enumerate(rankings):
        for i, ranked in enumerate(row):
            for value, token in zip(RANK_LPROBS, ranked):
                out[b, i, token] = value
    return out


def greedy_case(batch: int, k: int):
    """Row b drafts the verifier's top-1 for its first ``b % (K+1)`` slots, then
    a wrong token (the 3rd-ranked one) everywhere after: positions rank
    ``(4+i, 9, 5+i)``, so top-1 at position i is ``4+i`` (i <= 4)."""
    tops = [4 + (i % 5) for i in range(k + 1)]
    rankings = [[(tops[i], 9, 4 + ((i + 1) % 5)) for i in range(k + 1)]] * batch
    lprobs = table(rankings)
    drafts = torch.zeros(batch, k, dtype=torch.long)
    expected = []
    for b in range(batch):
        n = b % (k + 1)
        for i in range(k):
            # wrong after the first rejection, but the right token again later:
            # the all-true prefix must still stop at the first wrong slot.
            drafts[b, i] = tops[i] if (i < n or i > n + 1) else 4 + ((i + 1) % 5)
        expected.append(n)
    return lprobs, drafts, expected, tops


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_beta1_is_exact_greedy(batch, k):
    lprobs, drafts, expected, tops = greedy_case(batch, k)
    before = (lprobs.clone(), drafts.clone())
    result = accept_drafts(lprobs, drafts, acceptance_rule(1, INF))
    assert result.num_accepted.tolist() == expected
    # The correction is the verifier's top-1 at the first rejected slot (the
    # bonus token top-1 at position K when all K were accepted).
    assert result.correction.tolist() == [tops[n] for n in expected]
    for b, n in enumerate(expected):
        assert result.accepted[b].tolist() == [i < n for i in range(k)]
    # Pure: inputs untouched.
    assert torch.equal(lprobs, before[0]) and torch.equal(drafts, before[1])


def test_scripted_table_beta1():
    # K=3, B=2. Position rankings (best first):
    #   pos0: 4, 5, 6    pos1: 7, 8, 9    pos2: 5, 4, 6    pos3: 2(EOS), 9, 4
    rankings = [[(4, 5, 6), (7, 8, 9), (5, 4, 6), (EOS, 9, 4)]] * 2
    lprobs = table(rankings)
    drafts = torch.tensor([
        [4, 7, 5],  # all three are the top-1 -> accept 3, bonus = EOS (pos3 top-1)
        [4, 8, 5],  # 8 is only 2nd at pos1 -> accept 1, correction = 7
    ])
    result = accept_drafts(lprobs, drafts, acceptance_rule(1, 0.0))
    assert result.num_accepted.tolist() == [3, 1]
    assert result.correction.tolist() == [EOS, 7]
    assert result.accepted.tolist() == [[True, True, True], [True, False, False]]


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("k", [2, 4])
def test_beta_greater_than_one_accepts_within_top_beta(batch, k):
    # Every position ranks (4, 5, 6): 5 is 2nd (gap 1.0), 6 is 3rd (gap 2.5).
    lprobs = table([[(4, 5, 6)] * (k + 1)] * batch)
    second = torch.full((batch, k), 5)
    third = torch.full((batch, k), 6)
    # beta=2, no margin: the 2nd-best passes everywhere -> all K accepted,
    # bonus = top-1 of the last position = 4.
    r = accept_drafts(lprobs, second, acceptance_rule(2, INF))
    assert r.num_accepted.tolist() == [k] * batch
    assert r.correction.tolist() == [4] * batch
    # beta=2: the 3rd-best is outside the top-2 -> rejected at slot 1.
    r = accept_drafts(lprobs, third, acceptance_rule(2, INF))
    assert r.num_accepted.tolist() == [0] * batch
    assert r.correction.tolist() == [4] * batch
    # beta=3 admits the 3rd-best.
    r = accept_drafts(lprobs, third, acceptance_rule(3, INF))
    assert r.num_accepted.tolist() == [k] * batch
    # beta=1 is greedy again: the 2nd-best is rejected.
    r = accept_drafts(lprobs, second, acceptance_rule(1, INF))
    assert r.num_accepted.tolist() == [0] * batch


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("k", [1, 3])
def test_tau_margin(batch, k):
    # Every position ranks (4, 5, 6): gap to 5 is 1.0, gap to 6 is 2.5.
    lprobs = table([[(4, 5, 6)] * (k + 1)] * batch)
    second = torch.full((batch, k), 5)
    third = torch.full((batch, k), 6)
    # Eq. 4 uses "<= tau": a gap equal to tau passes.
    assert accept_drafts(lprobs, second, acceptance_rule(3, 1.0)).num_accepted.tolist() == [k] * batch
    assert accept_drafts(lprobs, second, acceptance_rule(3, 0.99)).num_accepted.tolist() == [0] * batch
    # In the top-3 but 2.5 below the best: the margin rejects it.
    assert accept_drafts(lprobs, third, acceptance_rule(3, 2.0)).num_accepted.tolist() == [0] * batch
    assert accept_drafts(lprobs, third, acceptance_rule(3, 2.5)).num_accepted.tolist() == [k] * batch
    # tau=0 admits only the top-1 whatever beta is.
    top = torch.full((batch, k), 4)
    assert accept_drafts(lprobs, top, acceptance_rule(5, 0.0)).num_accepted.tolist() == [k] * batch
    assert accept_drafts(lprobs, second, acceptance_rule(5, 0.0)).num_accepted.tolist() == [0] * batch


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("k", [1, 3])
def test_minus_inf_draft_never_accepted_even_with_large_beta(batch, k):
    # Every position allows only EOS (as at the max length): all else -inf, so
    # topk(beta=V) fills the top-V list with -inf tokens; a -inf draft must
    # still be rejected, even with an infinite margin.
    lprobs = torch.full((batch, k + 1, V), -INF)
    lprobs[:, :, EOS] = -0.1
    drafts = torch.full((batch, k), 7)
    r = accept_drafts(lprobs, drafts, acceptance_rule(V, INF))
    assert r.num_accepted.tolist() == [0] * batch
    assert r.correction.tolist() == [EOS] * batch
    # Draft slot 1 right, slot 2 a -inf token: exactly one accepted.
    if k > 1:
        drafts[:, 0] = EOS
        r = accept_drafts(lprobs, drafts, acceptance_rule(V, INF))
        assert r.num_accepted.tolist() == [1] * batch


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("k", [1, 2, 6])
def test_all_accepted_gives_bonus_token(batch, k):
    # Position i's top-1 is 4 + i % 5; position K (after the last draft) ranks
    # 9 first: that is the bonus token.
    rankings = [[(4 + i % 5, 3) for i in range(k)] + [(9, 4)]] * batch
    drafts = torch.tensor([[4 + i % 5 for i in range(k)]] * batch)
    r = accept_drafts(table(rankings), drafts, acceptance_rule(1, 0.0))
    assert r.num_accepted.tolist() == [k] * batch
    assert r.accepted.all()
    assert r.correction.tolist() == [9] * batch


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("k", [1, 4])
def test_first_slot_reject_gives_verifier_top1(batch, k):
    # pos0 ranks (8, 4); drafts all 4 (top-1 at every later position): the
    # first slot fails, so nothing is accepted and the correction is 8.
    rankings = [[(8, 4)] + [(4, 8)] * k] * batch
    drafts = torch.full((batch, k), 4)
    r = accept_drafts(table(rankings), drafts, acceptance_rule(1, 0.0))
    assert r.num_accepted.tolist() == [0] * batch
    assert not r.accepted.any()
    assert r.correction.tolist() == [8] * batch


@pytest.mark.parametrize("batch", [1, 3])
def test_k_zero(batch):
    # No drafts (at the max length): one position, the correction is its top-1.
    lprobs = table([[(6, 4)]] * batch)  # (B, 1, V)
    drafts = torch.zeros(batch, 0, dtype=torch.long)
    r = accept_drafts(lprobs, drafts, acceptance_rule(1, 0.0))
    assert r.accepted.shape == (batch, 0)
    assert r.num_accepted.tolist() == [0] * batch
    assert r.correction.tolist() == [6] * batch


def test_rows_are_independent():
    # Row 0 accepts 2 of 2, row 1 rejects slot 1, row 2 rejects slot 2.
    rankings = [
        [(4, 5), (5, 4), (6, 4)],
        [(4, 5), (5, 4), (7, 4)],
        [(4, 5), (5, 4), (8, 4)],
    ]
    drafts = torch.tensor([[4, 5], [5, 5], [4, 4]])
    r = accept_drafts(table(rankings), drafts, acceptance_rule(1, 0.0))
    assert r.num_accepted.tolist() == [2, 0, 1]
    assert r.correction.tolist() == [6, 4, 5]


def test_beta1_ties_go_to_greedys_argmax():
    # Tokens 5 and 7 tie for the best score. Greedy takes the argmax, the first
    # index (5), so at beta=1 only a draft of 5 passes and a draft of 7 is
    # corrected to 5: beta=1 stays greedy where half precision makes ties common.
    # At beta=2 ties count in the draft's favour: 7 is inside the top 2.
    lprobs = torch.full((1, 2, V), REST)
    lprobs[0, 0, 5] = lprobs[0, 0, 7] = -0.7
    lprobs[0, 1, 4] = -0.1
    r = accept_drafts(lprobs, torch.tensor([[9]]), acceptance_rule(1, 0.0))
    assert r.correction.tolist() == [5]
    r = accept_drafts(lprobs, torch.tensor([[5]]), acceptance_rule(1, 0.0))
    assert (r.num_accepted.tolist(), r.correction.tolist()) == ([1], [4])  # the bonus
    r = accept_drafts(lprobs, torch.tensor([[7]]), acceptance_rule(1, 0.0))
    assert (r.num_accepted.tolist(), r.correction.tolist()) == ([0], [5])
    r = accept_drafts(lprobs, torch.tensor([[7]]), acceptance_rule(2, 0.0))
    assert (r.num_accepted.tolist(), r.correction.tolist()) == ([1], [4])


@pytest.mark.parametrize("beta, tau", [(0, 0.0), (-1, 1.0), (1, -0.1)])
def test_bad_options_raise(beta, tau):
    with pytest.raises(ValueError):
        acceptance_rule(beta, tau)


# --------------------------------------------------------------------------- commit


def acceptance(num_accepted, correction, k) -> Acceptance:
    num = torch.tensor(num_accepted)
    accepted = torch.arange(k).unsqueeze(0) < num.unsqueeze(1)
    return Acceptance(accepted, num, torch.tensor(correction))


def test_commit_scripted():
    P = PAD
    drafts = torch.tensor([
        [5, EOS, 7],  # 3 accepted + bonus 8: cut after the accepted EOS
        [5, 6, 7],  # 1 accepted, correction EOS: EOS is committed, finished
        [5, EOS, 7],  # 1 accepted, correction 9: the rejected EOS does not count
        [5, 6, 7],  # 0 accepted, correction 4
        [5, 6, 7],  # 3 accepted + bonus 8: all four committed
        [EOS, 6, 7],  # 3 accepted: EOS in slot 1 stops right there
    ])
    acc = acceptance([3, 1, 1, 0, 3, 3], [8, EOS, 9, 4, 8, 8], k=3)
    c = commit_tokens(drafts, acc, eos=EOS, pad=PAD)
    assert c.tokens.tolist() == [
        [5, EOS, P, P],
        [5, EOS, P, P],
        [5, 9, P, P],
        [4, P, P, P],
        [5, 6, 7, 8],
        [EOS, P, P, P],
    ]
    assert c.counts.tolist() == [2, 2, 2, 1, 4, 1]
    assert c.finished.tolist() == [True, True, False, False, False, True]


@pytest.mark.parametrize("batch", [1, 4, 7])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_commit_pads_beyond_counts(batch, k):
    # Row b accepts b % (K+1) drafts (tokens 4..), correction 9, no EOS.
    drafts = torch.tensor([[4 + (i % 5) for i in range(k)]] * batch)
    nums = [b % (k + 1) for b in range(batch)]
    c = commit_tokens(drafts, acceptance(nums, [9] * batch, k), eos=EOS, pad=PAD)
    for b, n in enumerate(nums):
        expected = drafts[b, :n].tolist() + [9] + [PAD] * (k - n)
        assert c.tokens[b].tolist() == expected
    assert c.counts.tolist() == [n + 1 for n in nums]
    assert not c.finished.any()
    assert (c.counts >= 1).all()


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("k", [2, 4])
def test_commit_eos_inside_accepted_drafts(batch, k):
    # EOS at draft slot e (row-dependent), all K accepted: commit up to EOS.
    drafts = torch.full((batch, k), 6)
    eos_at = [b % k for b in range(batch)]
    for b, e in enumerate(eos_at):
        drafts[b, e] = EOS
    c = commit_tokens(drafts, acceptance([k] * batch, [8] * batch, k), eos=EOS, pad=PAD)
    for b, e in enumerate(eos_at):
        assert c.tokens[b].tolist() == [6] * e + [EOS] + [PAD] * (k - e)
    assert c.counts.tolist() == [e + 1 for e in eos_at]
    assert c.finished.all()


# ------------------------------------------------------------------ length constraints


def constrain(lprobs, steps, max_len, min_len=1, unk_penalty=0.0):
    """fairseq's rules on a copy of ``lprobs`` (in place on the copy)."""
    return constrain_logits_(lprobs.clone(), steps, max_len,
                             Constraints(PAD, EOS, UNK, min_len, unk_penalty))


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("n", [1, 4])
def test_constrain_pad_forbidden(batch, n):
    lprobs = torch.full((batch, n, V), -2.0)
    steps = torch.arange(n).repeat(batch, 1) + 5  # past min_len, before max_len
    out = constrain(lprobs, steps, torch.full((batch,), 100))
    assert (out[:, :, PAD] == -INF).all()
    # Nothing else changes here.
    others = [t for t in range(V) if t != PAD]
    assert (out[:, :, others] == -2.0).all()


def test_constrain_eos_forbidden_before_min_len():
    # steps 0..3, min_len=2: EOS forbidden at steps 0 and 1 only.
    lprobs = torch.full((2, 4, V), -2.0)
    steps = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    out = constrain(lprobs, steps, torch.tensor([50, 50]), min_len=2)
    assert out[:, :, EOS].tolist() == [[-INF, -INF, -2.0, -2.0], [-INF, -2.0, -2.0, -2.0]]
    assert (out[:, :, 4:] == -2.0).all()


def test_constrain_eos_forced_at_max_len():
    # Row 0: max_len 2 -> steps 2 and 3 allow only EOS. Row 1: max_len 9 -> free.
    lprobs = torch.full((2, 4, V), -2.0)
    steps = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]])
    out = constrain(lprobs, steps, torch.tensor([2, 9]))
    finite = torch.isfinite(out)
    assert finite[0, 2].nonzero().flatten().tolist() == [EOS]
    assert finite[0, 3].nonzero().flatten().tolist() == [EOS]
    assert finite[0, 1].sum() == V - 1  # only pad forbidden
    # Row 1: step 0 also forbids EOS (min_len=1), later steps only pad.
    assert finite[1].sum(-1).tolist() == [V - 2, V - 1, V - 1, V - 1]
    assert out[0, 2, EOS] == -2.0


def test_constrain_unk_penalty():
    lprobs = torch.full((1, 2, V), -2.0)
    out = constrain(lprobs, torch.tensor([[3, 4]]), torch.tensor([10]), unk_penalty=1.5)
    assert out[0, :, UNK].tolist() == [-3.5, -3.5]  # -2.0 - 1.5
    assert (out[0, :, 4:] == -2.0).all()


def test_argmax_last_is_torch_argmax_ties_and_views_included():
    from nmt_specdec.decoding.decision.rules import argmax_last

    torch.manual_seed(0)
    scores = torch.randn(5, 3, 40)
    scores[0, 0, 7] = scores[0, 0, 3] = 9.0  # a tie: the first index wins
    scores[1, 1] = float("-inf")
    scores[1, 1, 12] = 0.0
    scores[2, 2, 5] = float("nan")  # torch and numpy both take a NaN as the max
    for view in (scores, scores[:, 0], scores[:, 1:].transpose(0, 1), scores.half()):
        got = argmax_last(view)
        assert got.dtype == torch.long and torch.equal(got, view.argmax(dim=-1))
