"""The verify graphs' self-attention inputs, built on the host (attention_inputs):
the greedy step's shortcut equals the general construction, and the mask says
what each new input may see."""

from __future__ import annotations

import pytest
import torch

from nmt_specdec.decoding.backends.onnxruntime.attention_inputs import AttentionInputs
from nmt_specdec.decoding.draft_tree import tree_layout


def _chain(new: int) -> torch.Tensor:
    steps = torch.arange(new)
    return steps.view(-1, 1) >= steps


def _expected_same_bits(start, ancestors, slots):
    """(B, N+1, T) written out slot by slot: before the start, or an ancestor in the block."""
    new = ancestors.size(0)
    rows = []
    for first in start.tolist():
        mask = torch.zeros(new, slots, dtype=torch.bool)
        for j in range(new):
            for t in range(slots):
                mask[j, t] = t < first or (t - first < new and bool(ancestors[j, t - first]))
        rows.append(torch.cat([mask, mask[-1:]]))
    return torch.stack(rows)


def test_same_bits_mask_and_slots_for_chains_and_trees():
    build = AttentionInputs(heads=3, same_bits=True)
    for ancestors, chain in ((_chain(3), True), (tree_layout(2, 2).ancestors, False)):
        start = torch.tensor([0, 4, 2])
        mask, index = build(start, False, 10, ancestors, chain)
        assert torch.equal(mask[:, 0], _expected_same_bits(start, ancestors, 10))
        new = ancestors.size(0)
        for b, first in enumerate(start.tolist()):
            for h in range(3):
                assert index[b, h].tolist() == [[b, h, first + j] for j in range(new)]


@pytest.mark.parametrize("same_bits", [True, False])
def test_the_uniform_chain_shortcut_equals_the_general_mask(same_bits):
    # Starts seen before come from the kept tables: 5 again after 12 and 0.
    shortcut, general = AttentionInputs(2, same_bits), AttentionInputs(2, same_bits)
    for new in (1, 3):
        for first in (0, 5, 12, 0, 5):
            start = torch.full((4,), first)
            fast = [t if t is None else t.clone()
                    for t in shortcut(start, True, 16, _chain(new), chain=True)]
            slow = general(start, False, 16, _chain(new), chain=False)
            assert torch.equal(fast[0], slow[0])
            assert (fast[1] is None) == (slow[1] is None) == (not same_bits)
            assert not same_bits or torch.equal(fast[1], slow[1])


def test_after_cache_mask_and_kept_buffers():
    build = AttentionInputs(heads=2, same_bits=False)
    ancestors = tree_layout(2, 2).ancestors
    start = torch.tensor([3, 0])
    mask, index = build(start, False, 6, ancestors, chain=False)
    assert index is None
    for b, first in enumerate(start.tolist()):
        assert torch.equal(mask[b, 0, :, :6], (torch.arange(6) < first).expand(5, 6))
        assert torch.equal(mask[b, 0, :, 6:], ancestors)
    # The same shapes: the same tensor, rewritten (the session keeps its binding).
    again, _ = build(torch.tensor([1, 1]), True, 6, ancestors, chain=False)
    assert again is mask and again[0, 0, 0, :6].tolist() == [True] + [False] * 5
