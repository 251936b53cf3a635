"""Replaying draft trees on ranks (``benchmarks/draft_trees.py``), by hand.

Ranks are (L, K): the rank of the greedy token y[p+i] among the head's slot-i
candidates at anchor p (0 = the head's top-1).
"""

import pytest
import torch

from nmt_specdec.errors import UserError
from benchmarks.draft_trees import NEVER, accepted_run, parse_tree, replay, slot1_by_anchor


def test_tree_sizes():
    assert parse_tree("chain4").positions == 5
    assert parse_tree("2,1").positions == 1 + 2 + 2
    assert parse_tree("2,2,1,1").positions == 1 + 2 + 4 + 4 + 4
    assert parse_tree("leaves2x4").positions == 1 + 4 * 2
    with pytest.raises(UserError):
        parse_tree("2,x")
    with pytest.raises(UserError):
        parse_tree("0,1")


@pytest.mark.parametrize("spec, ranks, expected", [
    ("chain3", [0, 0, 1], 2),      # the chain stops at the first non-top-1
    ("chain3", [1, 0, 0], 0),
    ("2,1,1", [1, 0, 0], 3),       # top-2 at slot 1 rescues it, the chain goes on
    ("2,1,1", [0, 1, 0], 1),       # ... but only at slot 1
    ("2,2,1", [1, 1, 0], 3),
    ("leaves2x3", [0, 1, 0], 2),   # a leaf is taken, then the walk stops
    ("leaves2x3", [0, 2, 0], 1),
    ("leaves3x3", [2, 0, 0], 1),
    ("3,1,1", [NEVER, 0, 0], 0),   # a token the head cannot propose
])
def test_accepted_run(spec, ranks, expected):
    assert accepted_run(torch.tensor(ranks), parse_tree(spec), remaining=10) == expected


def test_accepted_run_stops_at_the_end_of_the_output():
    assert accepted_run(torch.tensor([0, 0, 0]), parse_tree("chain3"), remaining=2) == 2


def test_replay_counts_iterations_to_eos():
    # 5 tokens (EOS last). Anchor 0 accepts 2 drafts + correction -> position 3;
    # anchor 3 accepts y4 and y5=EOS with nothing to correct -> done.
    ranks = torch.tensor([[0, 0], [5, 5], [5, 5], [0, 0], [9, 9]])
    assert replay(ranks, parse_tree("chain2")) == 2
    # Without drafts that pay, one token per iteration.
    assert replay(torch.full((5, 2), 3), parse_tree("chain2")) == 5
    # The wider tree takes rank-3 tokens at slot 1: 2 tokens per iteration.
    assert replay(torch.full((5, 2), 3), parse_tree("4,1")) == 3


def test_slot1_by_anchor_sorts_the_walks_anchors():
    # Anchor 0 (start) accepts both drafts -> anchor 3 follows a full chain, rejects
    # slot 1 -> anchor 4 follows a correction and accepts the last token (EOS).
    ranks = torch.tensor([[0, 0], [1, 1], [1, 0], [2, 0], [0, 9]])
    counts = slot1_by_anchor(ranks, parse_tree("chain2"))
    assert counts["start", "anchors"] == 1 and counts["start", "hits"] == 1
    assert counts["after a full chain", "anchors"] == 1
    assert counts["after a full chain", "hits"] == 0
    assert counts["after a correction", "anchors"] == 1
    assert counts["after a correction", "hits"] == 1
    assert counts["every anchor", "anchors"] == 5 and counts["every anchor", "hits"] == 2
