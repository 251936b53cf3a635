"""The single-row loop's host acceptance decides what the batched loop's tensor
code decides: ``resolve_tree`` for trees, ``accept_drafts`` for chains; at
beta = 1 (numpy) and for top-beta with tau (the shared tensor criterion), on
random scores, on scores with ties, and with -inf drafts."""

from __future__ import annotations

import math

import pytest
import torch

from nmt_specdec.decoding.acceptance import accept_drafts
from nmt_specdec.decoding.draft_tree import flatten_candidates, resolve_tree
from nmt_specdec.decoding.single_row import host_accept

VOCAB = 12


def shared_decision(logits, inputs, depth, width, beta=1, tau=0.0):
    """(accepted, correction, path, drafts) from the tensor code the batched loop runs."""
    if width > 1:
        outcome = resolve_tree(logits, inputs, depth, beta, tau)
        return (int(outcome.acceptance.num_accepted[0]), int(outcome.acceptance.correction[0]),
                outcome.path[0].tolist(), outcome.drafts[0].tolist())
    acceptance = accept_drafts(logits, inputs[:, 1:], beta, tau)
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
def test_host_accept_decides_as_the_shared_code(depth, width, ties, minus_inf, beta, tau):
    for seed in range(60):
        logits, inputs = case(seed, depth, width, ties, minus_inf)
        accepted, correction, leaf, path, drafts = host_accept(
            logits, logits[0].numpy(), inputs, depth, width, beta, tau)
        assert (accepted, correction, path, drafts) == shared_decision(
            logits, inputs, depth, width, beta, tau), seed
        assert leaf == (path != list(range(depth + 1)))


@pytest.mark.parametrize("depth,width", [(1, 1), (2, 1), (4, 1), (2, 2), (3, 3)])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("minus_inf", [False, True])
def test_fused_graph_walk_decides_as_the_host(depth, width, ties, minus_inf):
    # greedy_walk is what the fused verify graph computes (--fused-draft); the loop
    # takes its decision instead of its own where the correction's score is untied.
    from nmt_specdec.decoding.backends.onnxruntime.fused import greedy_walk
    from nmt_specdec.decoding.draft_tree import parent_list

    for seed in range(60):
        logits, inputs = case(seed, depth, width, ties, minus_inf)
        batch = torch.cat([logits, logits.flip(0)])  # two rows: the walk is per row
        accepted, correction, final, tie = greedy_walk(
            batch, torch.cat([inputs, inputs]), torch.tensor(parent_list(depth, width)),
            depth)[0].tolist()
        host = host_accept(logits, logits[0].numpy(), inputs, depth, width, 1, 0.0)
        assert (accepted, final) == (host[0], host[3][host[0]]), seed
        assert tie == (int((logits[0, final] == logits[0, final].max()).sum()) > 1), seed
        if not tie:
            assert correction == host[1], seed


def test_fused_graph_walk_flags_pad():
    # The graph reads unconstrained scores: where pad is a row's argmax or a draft,
    # the loop's pad constraint could change the decision, so the graph defers.
    from nmt_specdec.decoding.backends.onnxruntime.fused import greedy_walk
    from nmt_specdec.decoding.draft_tree import parent_list

    logits, inputs = case(3, 2, 2, False, False)
    parents = torch.tensor(parent_list(2, 2))
    assert greedy_walk(logits, inputs, parents, 2)[0, 3] == 0
    top = int(logits[0, 1].argmax())  # pad is the argmax of row 1
    assert greedy_walk(logits, inputs, parents, 2, pad=top)[0, 3] == 1
    draft = int(inputs[0, 2])  # pad is a draft
    assert greedy_walk(logits, inputs, parents, 2, pad=draft)[0, 3] == 1
