"""The decision layer's forms are equal: each rule's host form (numpy, Python
ints: the loops that decide on the host) decides what its torch form (the
batched loop) decides, bit for bit, on random scores, tied scores and -inf
entries; and the fused verify graph's greedy walk (``--fused-draft``) decides
as the host.

- constraints: :func:`constrain_host_` (one sentence with int steps, a batch
  with array steps) and :func:`constrain_logits_`;
- acceptance: :func:`accept_host` and :func:`resolve_tree` (trees) or
  :func:`accept_drafts` (chains);
- commit: :func:`commit_host` and :func:`commit_tokens`.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from nmt_specdec.decoding.decision.rules import acceptance_rule
from nmt_specdec.decoding.decision.acceptance import (
    Acceptance,
    accept_drafts,
    commit_host,
    commit_tokens,
)
from nmt_specdec.decoding.decision.constraints import (
    Constraints,
    constrain_host_,
    constrain_logits_,
)
from nmt_specdec.decoding.decision.tree import accept_host, parent_list, resolve_tree
from nmt_specdec.decoding.draft_tree import flatten_candidates

VOCAB = 12


# --- constraints ---------------------------------------------------------------------------

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
        row = constrain_host_(logits[0].numpy().copy(), step, max_len, rules, check_min,
                              check_max)
        assert torch.equal(torch.from_numpy(row), expected[0]), (step, max_len)
        cases += 1
    assert cases == 48


def test_the_rules_apply_where_they_should():
    rules = Constraints(pad=1, eos=2, unk=3, min_len=2, unk_penalty=0.5)
    row = constrain_host_(torch.zeros(1, 6).numpy(), steps=1, max_len=5, rules=rules)[0]
    assert row[1] == -float("inf") and row[2] == -float("inf") and row[3] == -0.5
    row = constrain_host_(torch.zeros(1, 6).numpy(), steps=5, max_len=5, rules=rules)[0]
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
        rows = constrain_host_(logits[:, 0].numpy().copy(), steps.numpy(), limits.numpy(),
                               rules, check_min, check_max)
        assert torch.equal(torch.from_numpy(rows), expected[:, 0]), (check_min, check_max)


# --- acceptance -----------------------------------------------------------------------------

def shared_decision(logits, inputs, depth, width, beta=1, tau=0.0):
    """(accepted, correction, path, drafts) from the tensor code the batched loop runs."""
    if width > 1:
        outcome = resolve_tree(logits, inputs, depth, acceptance_rule(beta, tau))
        return (int(outcome.acceptance.num_accepted[0]), int(outcome.acceptance.correction[0]),
                outcome.path[0].tolist(), outcome.drafts[0].tolist())
    acceptance = accept_drafts(logits, inputs[:, 1:], acceptance_rule(beta, tau))
    return (int(acceptance.num_accepted[0]), int(acceptance.correction[0]),
            list(range(depth + 1)), inputs[0, 1:].tolist())


def case(seed, depth, width, ties: bool, minus_inf: bool):
    """Scores (1, N, V) whose argmaxes are often the drafts (so paths get long)."""
    generator = torch.Generator().manual_seed(seed)
    candidates = torch.randint(0, VOCAB, (1, width, depth), generator=generator)
    inputs = flatten_candidates(torch.tensor([[3]]), candidates)  # (1, N)
    new = inputs.size(1)
    logits = torch.randn(1, new, VOCAB, generator=generator)
    if ties:  # small integers: many positions share their best score
        logits = torch.randint(0, 3, (1, new, VOCAB), generator=generator).float()
    chain = inputs[0, 1: depth + 1].tolist()
    for position, token in enumerate(chain):  # the chain's drafts mostly win
        if torch.rand(1, generator=generator) < 0.7:
            logits[0, position, token] = logits[0, position].max() + (0 if ties else 1)
    if minus_inf:  # e.g. only EOS allowed at the max length
        logits[0, :, ::2] = -math.inf
    return logits, inputs


@pytest.mark.parametrize("depth,width", [(0, 1), (1, 1), (2, 1), (4, 1), (2, 2), (3, 3)])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("minus_inf", [False, True])
@pytest.mark.parametrize("beta,tau", [(1, 0.0), (3, 1.0), (2, math.inf)])
def test_the_host_acceptance_equals_the_tensor_acceptance(depth, width, ties, minus_inf, beta, tau):
    for seed in range(60):
        logits, inputs = case(seed, depth, width, ties, minus_inf)
        decided = accept_host(logits, logits[0].numpy(), inputs, depth, width,
                                  acceptance_rule(beta, tau))
        assert (decided.accepted, decided.correction, decided.path, decided.drafts) == \
            shared_decision(logits, inputs, depth, width, beta, tau), seed
        assert decided.leaf == (decided.path != list(range(depth + 1)))


@pytest.mark.parametrize("depth,width", [(1, 1), (2, 1), (4, 1), (2, 2), (3, 3)])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("minus_inf", [False, True])
def test_fused_graph_walk_decides_as_the_host(depth, width, ties, minus_inf):
    # greedy_walk is what the fused verify graph computes (--fused-draft); the loop
    # takes its decision instead of its own where the correction's score is untied.
    from nmt_specdec.decoding.backends.onnxruntime.fused import greedy_walk

    for seed in range(60):
        logits, inputs = case(seed, depth, width, ties, minus_inf)
        batch = torch.cat([logits, logits.flip(0)])  # two rows: the walk is per row
        accepted, correction, final, tie = greedy_walk(
            batch, torch.cat([inputs, inputs]), torch.tensor(parent_list(depth, width)),
            depth)[0].tolist()
        host = accept_host(logits, logits[0].numpy(), inputs, depth, width,
                           acceptance_rule(1, 0.0))
        assert (accepted, final) == (host.accepted, host.path[host.accepted]), seed
        assert tie == (int((logits[0, final] == logits[0, final].max()).sum()) > 1), seed
        if not tie:
            assert correction == host.correction, seed


def test_fused_graph_walk_flags_pad():
    # The graph reads unconstrained scores: where pad is a row's argmax or a draft,
    # the loop's pad constraint could change the decision, so the graph defers.
    from nmt_specdec.decoding.backends.onnxruntime.fused import greedy_walk

    logits, inputs = case(3, 2, 2, False, False)
    parents = torch.tensor(parent_list(2, 2))
    assert greedy_walk(logits, inputs, parents, 2)[0, 3] == 0
    top = int(logits[0, 1].argmax())  # pad is the argmax of row 1
    assert greedy_walk(logits, inputs, parents, 2, pad=top)[0, 3] == 1
    draft = int(inputs[0, 2])  # pad is a draft
    assert greedy_walk(logits, inputs, parents, 2, pad=draft)[0, 3] == 1


# --- commit ---------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [0, 1, 3, 5])
def test_the_host_commit_equals_the_tensor_commit(depth):
    """Accepted runs of every length, with EOS among the drafts, as the correction,
    or nowhere: the same tokens, cut after the first EOS, and the same flag."""
    eos, pad = 2, 1
    generator = torch.Generator().manual_seed(depth)
    rows = 64
    drafts = torch.randint(2, 6, (rows, depth), generator=generator)  # EOS is often drafted
    num_accepted = torch.randint(0, depth + 1, (rows,), generator=generator)
    correction = torch.randint(2, 6, (rows,), generator=generator)
    accepted = torch.arange(depth).unsqueeze(0) < num_accepted.unsqueeze(1)
    commit = commit_tokens(drafts, Acceptance(accepted, num_accepted, correction), eos, pad)
    cut = 0
    for row in range(rows):
        tokens, finished = commit_host(drafts[row].tolist(), int(num_accepted[row]),
                                       int(correction[row]), eos)
        count = int(commit.counts[row])
        assert tokens == commit.tokens[row, :count].tolist(), row
        assert finished == bool(commit.finished[row]), row
        assert (commit.tokens[row, count:] == pad).all(), row
        cut += finished and len(tokens) < int(num_accepted[row]) + 1
    assert depth < 2 or cut > 0  # some EOS was drafted before the accepted run ended
