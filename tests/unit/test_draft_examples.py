"""Draft-head training blocks: random cuts, the verifier state before each cut,
the last committed token and the next K target tokens."""

from __future__ import annotations

import pytest
import torch

from nmt_specdec.model.draft_examples import make_draft_cuts, sample_cuts

PAD, EOS = 1, 2
BOS = EOS  # fairseq starts decoding with EOS
C = 3


def targets(batch: int, seed: int = 0) -> torch.Tensor:
    """(B, T) right-padded targets ending in EOS, lengths 1..7 (EOS included)."""
    g = torch.Generator().manual_seed(seed)
    lengths = [1 + (b * 3 + seed) % 7 for b in range(batch)]
    out = torch.full((batch, max(lengths)), PAD)
    for b, n in enumerate(lengths):
        out[b, : n - 1] = torch.randint(4, 30, (n - 1,), generator=g)
        out[b, n - 1] = EOS
    return out


def fake_states(target: torch.Tensor) -> torch.Tensor:
    """(B, T, C) states that name their own (row, input position): easy to check."""
    batch, width = target.shape
    b = torch.arange(batch).view(-1, 1, 1).expand(batch, width, C)
    t = torch.arange(width).view(1, -1, 1).expand(batch, width, C)
    return (100 * b + t).float()


@pytest.mark.parametrize("batch", [1, 4, 16])
@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("cuts", [1, 3])
def test_blocks_are_consistent_with_the_cut(batch, k, cuts):
    target = targets(batch, seed=k)
    g = torch.Generator().manual_seed(k)
    blocks = make_draft_cuts(target, fake_states(target), k, cuts, bos=BOS, pad=PAD,
                             generator=g)
    n = batch * cuts
    assert blocks.target.shape == (n, k) and blocks.states.shape == (n, C)
    assert blocks.rows.tolist() == [b for b in range(batch) for _ in range(cuts)]
    lengths = target.ne(PAD).sum(1).tolist()
    for i in range(n):
        b, m = int(blocks.rows[i]), int(blocks.positions[i])
        gold = target[b, : lengths[b]].tolist()
        assert 0 <= m <= lengths[b] - 1  # at least the EOS is left to draft
        # Last committed token: BOS at cut 0, else the m-th output token.
        assert int(blocks.last_tokens[i]) == (BOS if m == 0 else gold[m - 1])
        assert bool(blocks.has_state[i]) == (m > 0)
        if m > 0:  # the state at input position m-1 predicted gold[m-1]
            assert blocks.states[i].tolist() == [100.0 * b + m - 1] * C
        expected = gold[m: m + k] + [PAD] * max(0, m + k - lengths[b])
        assert blocks.target[i].tolist() == expected
        assert int(blocks.target[i, 0]) != PAD


def test_scripted_single_token_target():
    # A target that is just EOS can only be cut at 0: BOS, no state, slots [EOS, pad, pad].
    target = torch.tensor([[EOS]])
    blocks = make_draft_cuts(target, fake_states(target), 3, 2, bos=BOS, pad=PAD)
    assert blocks.positions.tolist() == [0, 0]
    assert blocks.last_tokens.tolist() == [BOS, BOS]
    assert blocks.target.tolist() == [[EOS, PAD, PAD]] * 2


def test_scripted_cut_from_seeded_uniform():
    # Lengths [4, 2]; the cut is floor(u * len) with u from the generator.
    target = torch.tensor([[7, 8, 9, EOS], [5, EOS, PAD, PAD]])
    u = torch.rand((2, 1), generator=torch.Generator().manual_seed(5))
    c0, c1 = int(u[0, 0] * 4), int(u[1, 0] * 2)
    blocks = make_draft_cuts(target, fake_states(target), 2, 1, bos=BOS, pad=PAD,
                             generator=torch.Generator().manual_seed(5))
    assert blocks.positions.tolist() == [c0, c1]
    assert blocks.target[0].tolist() == ([7, 8, 9, EOS] + [PAD, PAD])[c0: c0 + 2]
    assert blocks.target[1].tolist() == ([5, EOS] + [PAD, PAD])[c1: c1 + 2]


def test_seeded_generator_is_reproducible():
    lengths = targets(32, seed=3).ne(PAD).sum(1)
    a = sample_cuts(lengths, 4, torch.Generator().manual_seed(7))
    b = sample_cuts(lengths, 4, torch.Generator().manual_seed(7))
    c = sample_cuts(lengths, 4, torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_cuts_cover_every_position():
    # Over many draws every cut 0..len-1 of a length-5 target occurs.
    cuts = sample_cuts(torch.tensor([5]), 400, torch.Generator().manual_seed(0))
    assert sorted(set(cuts.view(-1).tolist())) == [0, 1, 2, 3, 4]


def test_input_not_modified():
    target = targets(5)
    states = fake_states(target)
    before = (target.clone(), states.clone())
    make_draft_cuts(target, states, 4, 2, bos=BOS, pad=PAD,
                    generator=torch.Generator().manual_seed(0))
    assert torch.equal(target, before[0]) and torch.equal(states, before[1])


def test_the_soft_targets_read_the_state_that_predicts_each_slot():
    """``--draft-soft-weight``: slot j of a block cut at m is scored by the
    verifier's state at input position m + j (the one that predicts target
    token m + j) through the verifier's output projection."""
    from fairseq_plugins.specdec_criterion import SpecDecJointLoss

    target = targets(6)
    states = fake_states(target)
    cuts = make_draft_cuts(target, states, 3, 2, bos=BOS, pad=PAD,
                           generator=torch.Generator().manual_seed(0))
    weight = torch.randn(5, C, generator=torch.Generator().manual_seed(1))
    head = type("Head", (), {"verifier_output_weight": lambda self: weight})()
    logits = SpecDecJointLoss._teacher_logits(head, states, cuts).view(-1, 3, 5)
    for n in range(cuts.rows.numel()):
        for j in range(3):
            if cuts.target[n, j] != PAD:
                state = states[cuts.rows[n], cuts.positions[n] + j]
                torch.testing.assert_close(logits[n, j], weight @ state)
