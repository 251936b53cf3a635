"""Statistics count only drafts at or before the committed EOS (issue 20, item 3)."""

from __future__ import annotations

import torch

from nmt_specdec.decoding.decision.acceptance import Acceptance, commit_tokens, drafts_before_eos
from nmt_specdec.decoding.loops.batched import tally_trace
from nmt_specdec.decoding.stats import SpecDecStats, Turn

EOS, PAD = 2, 1


def _commit(drafts, num_accepted, correction):
    drafts = torch.tensor(drafts)
    num = torch.tensor(num_accepted)
    accepted = torch.arange(drafts.size(1)).unsqueeze(0) < num.unsqueeze(1)
    return commit_tokens(drafts, Acceptance(accepted, num, torch.tensor(correction)), EOS, PAD)


def test_drafts_past_the_committed_eos_do_not_count():
    # K=4. Row 0: accepts all 4 drafts, EOS is draft 2 -> commits [7, EOS]:
    #   drafted 2 (slots 1-2), accepted 2 (not 4).
    # Row 1: accepts 1, correction EOS -> commits [7, EOS]: drafted 2, accepted 1.
    # Row 2: accepts 2, no EOS -> commits [7, 8, 9]: drafted 4, accepted 2.
    # Row 3: accepts 0, correction 5 -> commits [5]: drafted 4, accepted 0.
    commit = _commit([[7, EOS, 8, 9], [7, 8, 9, 9], [7, 8, 5, 5], [6, 6, 6, 6]],
                     [4, 1, 2, 0], [9, EOS, 9, 5])
    assert commit.counts.tolist() == [2, 2, 3, 1]
    drafted, accepted = drafts_before_eos(torch.full((4,), 4), torch.tensor([4, 1, 2, 0]),
                                          commit.counts, commit.finished)
    assert drafted.tolist() == [2, 2, 4, 4]
    assert accepted.tolist() == [2, 1, 2, 0]


def test_stats_of_a_batch_ending_in_accepted_eos():
    # Turn 1 (K=3): row 0 accepts 3 drafts [EOS, 5, 5] -> only EOS counts;
    #               row 1 accepts 1 draft, correction 6 (not finished).
    # Turn 2 (K=3): row 1 accepts 3 drafts [4, 4, 4] + bonus.
    c1 = _commit([[EOS, 5, 5], [4, 9, 9]], [3, 1], [5, 6])
    c2 = _commit([[4, 4, 4]], [3], [EOS])
    trace = [Turn(3, torch.tensor([3, 1]), c1.counts, c1.finished),
             Turn(3, torch.tensor([3]), c2.counts, c2.finished)]
    drafted, accepted, iterations, tokens = tally_trace(trace, 3)
    assert drafted == [3, 2, 2]  # row 0 turn 1 drafted slot 1 only (its EOS)
    assert accepted == [3, 1, 1]  # the old count (before the EOS cut) was [3, 2, 2]
    assert (iterations, tokens) == (3, 1 + 2 + 4)
    stats = SpecDecStats()
    stats.add_tally(drafted, accepted, iterations, tokens)
    assert stats.slot_acceptance() == [1.0, 0.5, 0.5]
    assert stats.mean_accepted_tokens == 7 / 3


def test_k0_turns_count_no_slots():
    c = _commit(torch.zeros(2, 0, dtype=torch.long).tolist(), [0, 0], [EOS, 4])
    drafted, accepted, iterations, tokens = tally_trace(
        [Turn(0, torch.tensor([0, 0]), c.counts, c.finished)], 2)
    assert drafted == [0, 0] and accepted == [0, 0] and (iterations, tokens) == (2, 2)


def test_the_host_tally_of_one_row_equals_the_tensor_tally():
    """The single-row loop tallies host ints; it must count what the batched
    loop's tensor tally counts (drafts past a committed EOS excluded)."""
    import random

    from nmt_specdec.decoding.stats import tally_host_turns, tally_turns

    rng = random.Random(0)
    for _ in range(200):
        k_max = rng.randint(1, 5)
        turns = []
        for _ in range(rng.randint(1, 8)):
            k = rng.randint(0, k_max)
            accepted = rng.randint(0, k)
            count = rng.randint(1, accepted + 1)  # cut after an EOS, or all + the correction
            turns.append(Turn(k, accepted, count, count < accepted + 1 or rng.random() < 0.2))
        expected = tally_turns(*map(torch.tensor, zip(*turns)), k_max)
        assert tally_host_turns(turns, k_max) == expected, turns
