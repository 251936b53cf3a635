"""fairseq's per-step constraints, three ways: :func:`constrain_row_` (one
position on the host, the single-row loop's greedy turn) and :func:`constrain_rows_`
(one position per row on the host, a greedy batch's turn) write what
:func:`constrain_logits_` (tensors, every loop) writes, bit for bit."""

from __future__ import annotations

import itertools

import pytest
import torch

from nmt_specdec.decoding.scoring import (
    Constraints,
    constrain_logits_,
    constrain_row_,
    constrain_rows_,
)


@pytest.mark.parametrize("unk_penalty", [0.0, 1.5, -20.0])
def test_the_host_row_equals_the_tensor_constraints(unk_penalty):
    rules = Constraints(pad=1, eos=2, unk=3, min_len=3, unk_penalty=unk_penalty)
    generator = torch.Generator().manual_seed(0)
    cases = 0
    for step, max_len, check_min, check_max in itertools.product(
            range(6), (4, 9), (False, True), (False, True)):
        logits = torch.randn(1, 1, 50, generator=generator)
        expected = constrain_logits_(logits.clone(), torch.tensor([[step]]),
                                     torch.tensor([max_len]), rules, check_min, check_max)
        row = constrain_row_(logits[0, 0].numpy().copy(), step, max_len, rules, check_min,
                             check_max)
        assert torch.equal(torch.from_numpy(row), expected[0, 0]), (step, max_len)
        cases += 1
    assert cases == 48


def test_the_rules_apply_where_they_should():
    rules = Constraints(pad=1, eos=2, unk=3, min_len=2, unk_penalty=0.5)
    row = constrain_row_(torch.zeros(6).numpy(), step=1, max_len=5, rules=rules)
    assert row[1] == -float("inf") and row[2] == -float("inf") and row[3] == -0.5
    row = constrain_row_(torch.zeros(6).numpy(), step=5, max_len=5, rules=rules)
    assert row[2] == 0.0 and (row[[0, 1, 3, 4, 5]] == -float("inf")).all()


@pytest.mark.parametrize("unk_penalty", [0.0, 1.5, -20.0])
def test_the_host_rows_equal_the_tensor_constraints(unk_penalty):
    """Rows at other steps and limits in one batch (some below min_len, some at max_len)."""
    rules = Constraints(pad=1, eos=2, unk=3, min_len=3, unk_penalty=unk_penalty)
    generator = torch.Generator().manual_seed(1)
    steps, limits = torch.tensor([0, 2, 3, 4, 5, 8]), torch.tensor([4, 9, 3, 4, 9, 8])
    for check_min, check_max in itertools.product((False, True), (False, True)):
        logits = torch.randn(6, 1, 50, generator=generator)
        expected = constrain_logits_(logits.clone(), steps.unsqueeze(1), limits, rules,
                                     check_min, check_max)
        rows = constrain_rows_(logits[:, 0].numpy().copy(), steps.numpy(), limits.numpy(),
                               rules, check_min, check_max)
        assert torch.equal(torch.from_numpy(rows), expected[:, 0]), (check_min, check_max)
