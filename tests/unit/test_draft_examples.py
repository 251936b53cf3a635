"""Draft-head training blocks: random cut, left-padded prefix, next-K targets."""

from __future__ import annotations

import pytest
import torch

from nmt_specdec.draft_examples import make_draft_block

PAD, EOS = 1, 2
BOS = EOS  # fairseq starts decoding with EOS


def targets(batch: int, seed: int = 0) -> torch.Tensor:
    """(B, T) right-padded gold targets ending in EOS, lengths 1..7 (EOS included)."""
    g = torch.Generator().manual_seed(seed)
    lengths = [1 + (b * 3 + seed) % 7 for b in range(batch)]
    out = torch.full((batch, max(lengths)), PAD)
    for b, n in enumerate(lengths):
        out[b, : n - 1] = torch.randint(4, 30, (n - 1,), generator=g)
        out[b, n - 1] = EOS
    return out


def cuts_of(prefix: torch.Tensor) -> list[int]:
    """The cut c of each row: the prefix holds BOS plus c gold tokens."""
    return (prefix.ne(PAD).sum(1) - 1).tolist()


@pytest.mark.parametrize("batch", [1, 4, 16])
@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_is_prefix_then_next_k_gold_tokens(batch, k, seed):
    target = targets(batch, seed)
    g = torch.Generator().manual_seed(seed)
    block = make_draft_block(target, k, bos=BOS, pad=PAD, generator=g)
    lengths = target.ne(PAD).sum(1).tolist()
    cuts = cuts_of(block.prefix)
    assert block.prefix.size(1) == max(cuts) + 1  # only as wide as needed
    assert block.target.shape == (batch, k)
    for b in range(batch):
        c, n = cuts[b], lengths[b]
        gold = target[b, :n].tolist()
        # c in [0, len-1]: at least the EOS is left to predict.
        assert 0 <= c <= n - 1
        # Left-padded, starting with BOS, then the first c gold tokens.
        width = block.prefix.size(1)
        assert block.prefix[b].tolist() == [PAD] * (width - c - 1) + [BOS] + gold[:c]
        # Slots: gold tokens c..c+K-1, pad past the EOS.
        expected = gold[c : c + k] + [PAD] * max(0, c + k - n)
        assert block.target[b].tolist() == expected
        assert block.target[b, 0] != PAD  # slot 1 always has a gold token


def test_scripted_single_token_target():
    # A target that is just EOS can only be cut at 0:
    #   prefix [BOS], slots [EOS, pad, pad].
    block = make_draft_block(torch.tensor([[EOS]]), 3, bos=BOS, pad=PAD)
    assert block.prefix.tolist() == [[BOS]]
    assert block.target.tolist() == [[EOS, PAD, PAD]]


def test_scripted_cut_from_seeded_uniform():
    # Lengths [4, 2]; the cut is floor(u * len) with u from the generator.
    target = torch.tensor([[7, 8, 9, EOS], [5, EOS, PAD, PAD]])
    u = torch.rand(2, generator=torch.Generator().manual_seed(5))
    c0, c1 = int(u[0] * 4), int(u[1] * 2)
    block = make_draft_block(target, 2, bos=BOS, pad=PAD,
                             generator=torch.Generator().manual_seed(5))
    assert cuts_of(block.prefix) == [c0, c1]
    assert block.target[0].tolist() == ([7, 8, 9, EOS] + [PAD, PAD])[c0 : c0 + 2]
    assert block.target[1].tolist() == ([5, EOS] + [PAD, PAD])[c1 : c1 + 2]


@pytest.mark.parametrize("k", [2, 5])
def test_seeded_generator_is_reproducible(k):
    target = targets(32, seed=3)
    a = make_draft_block(target, k, bos=BOS, pad=PAD, generator=torch.Generator().manual_seed(7))
    b = make_draft_block(target, k, bos=BOS, pad=PAD, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a.prefix, b.prefix) and torch.equal(a.target, b.target)
    c = make_draft_block(target, k, bos=BOS, pad=PAD, generator=torch.Generator().manual_seed(8))
    assert cuts_of(a.prefix) != cuts_of(c.prefix)  # 32 rows: a different seed differs


def test_cuts_cover_every_position():
    # Over many draws every cut 0..len-1 of a length-5 target occurs.
    target = torch.tensor([[4, 5, 6, 7, EOS]]).repeat(400, 1)
    block = make_draft_block(target, 2, bos=BOS, pad=PAD,
                             generator=torch.Generator().manual_seed(0))
    assert sorted(set(cuts_of(block.prefix))) == [0, 1, 2, 3, 4]


def test_input_not_modified():
    target = targets(5)
    before = target.clone()
    make_draft_block(target, 4, bos=BOS, pad=PAD, generator=torch.Generator().manual_seed(0))
    assert torch.equal(target, before)
