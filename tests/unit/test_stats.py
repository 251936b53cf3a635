"""SpecDecStats: running totals of iterations, tokens and per-slot acceptance."""

from __future__ import annotations

import pytest
import torch

from nmt_specdec.decoding.stats import SpecDecStats, tally_turns


def record(stats: SpecDecStats, accepted: torch.Tensor, counts: torch.Tensor) -> None:
    """One turn of B rows as the batched loop tallies it (:func:`tally_turns`),
    no row finishing: ``accepted`` (B, K) bool, ``counts`` (B,) committed."""
    rows, k = accepted.shape
    stats.add_tally(*tally_turns(torch.full((rows,), k), accepted.long().sum(1), counts,
                                 torch.zeros(rows, dtype=torch.bool), k))


def test_empty_stats():
    s = SpecDecStats()
    assert s.mean_accepted_tokens == 0.0
    assert s.iterations_per_sentence == 0.0
    assert s.slot_acceptance() == []
    assert "0 sentences" in s.summary()


def test_scripted_iterations():
    s = SpecDecStats()
    # Turn 1, B=3, K=3: rows accept 3, 1, 0 drafts and commit 4, 2, 1 tokens.
    record(s, torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]]).bool(), torch.tensor([4, 2, 1]))
    # Turn 2, B=2 (one row finished), K=3: accept 2 and 0.
    record(s, torch.tensor([[1, 1, 0], [0, 0, 0]]).bool(), torch.tensor([3, 1]))
    s.sentences = 3
    assert s.iterations == 5  # 3 + 2 row-iterations
    assert s.tokens == 11  # 4+2+1 + 3+1
    assert s.accepted_per_slot == [3, 2, 1]  # slot 1: rows 0,1 then row 0
    assert s.drafted_per_slot == [5, 5, 5]
    assert s.mean_accepted_tokens == pytest.approx(11 / 5)
    assert s.iterations_per_sentence == pytest.approx(5 / 3)
    assert s.slot_acceptance() == pytest.approx([3 / 5, 2 / 5, 1 / 5])
    text = s.summary()
    assert "3 sentences" in text and "2.20 tokens/iteration" in text
    assert "[0.60 0.40 0.20]" in text


def test_k_changes_between_iterations():
    # K=1 then K=3 then K=0 (at the max length): slots grow, only drafted slots count.
    s = SpecDecStats()
    record(s, torch.tensor([[True], [False]]), torch.tensor([2, 1]))
    record(s, torch.tensor([[True, True, False]]), torch.tensor([3]))
    record(s, torch.zeros(2, 0, dtype=torch.bool), torch.tensor([1, 1]))
    assert s.accepted_per_slot == [2, 1, 0]
    assert s.drafted_per_slot == [3, 1, 1]
    assert s.iterations == 5 and s.tokens == 8


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("k", [1, 3, 10])
def test_invariants_over_random_turns(batch, k):
    g = torch.Generator().manual_seed(batch + k)
    s = SpecDecStats()
    for _ in range(6):
        num = torch.randint(0, k + 1, (batch,), generator=g)
        accepted = torch.arange(k).unsqueeze(0) < num.unsqueeze(1)
        record(s, accepted, num + 1)
    assert s.iterations == 6 * batch
    assert 1.0 <= s.mean_accepted_tokens <= k + 1
    # A slot is accepted only if every earlier one was: counts never increase.
    assert all(a >= b for a, b in zip(s.accepted_per_slot, s.accepted_per_slot[1:]))
    assert all(0.0 <= r <= 1.0 for r in s.slot_acceptance())
    assert len(s.slot_acceptance()) == k
    # More than 8 slots: the summary elides the tail.
    assert ("...]" in s.summary()) == (k > 8)
