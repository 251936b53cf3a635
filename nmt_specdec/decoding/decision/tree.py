"""Acceptance over a draft tree (a chain with leaves), in a torch and a host form.

:func:`resolve_tree` decides B rows in whole-block tensor ops (the batched
loop); :func:`accept_host` decides one row on the host (the single-row loop,
chains and trees alike) with :func:`walk_row`, the same walk. Both test each
node under its parent's scores with the rule of :mod:`.rules` (its torch and
its host form). ``tests/unit/test_decision_forms.py`` holds the forms equal.
The layout of a tree block (positions, attention) is :mod:`..draft_tree`.

Shapes: B rows, K depth, C candidates per depth, N = 1 + K*C, V vocabulary.
"""

from __future__ import annotations

from functools import lru_cache
from typing import List, NamedTuple, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.decision.certified import Inexact
from nmt_specdec.decoding.decision.rules import AcceptanceRule, argmax_last


class Acceptance(NamedTuple):
    """Outcome of verifying one block of drafts.

    Attributes:
        accepted: (B, K) bool, True where draft i passed the criterion *and* every
            draft before it passed (the all-true prefix).
        num_accepted: (B,) long, number of drafts accepted (0..K).
        correction: (B,) long, verifier top-1 at position ``num_accepted``: the
            correction after a rejection, or the bonus token if all K passed.
    """

    accepted: Tensor
    num_accepted: Tensor
    correction: Tensor


class Decision(NamedTuple):
    """One row's decision on the host.

    Attributes:
        accepted: drafts accepted (0..K).
        correction: the verifier's token after them.
        leaf: whether a leaf was taken.
        path: (K+1) the input whose scores predicted each step of the path.
        drafts: (K) the path's tokens.
    """

    accepted: int
    correction: int
    leaf: bool
    path: List[int]
    drafts: List[int]


class TreeOutcome(NamedTuple):
    """What :func:`resolve_tree` decided.

    Attributes:
        acceptance: the :class:`Acceptance` of the accepted path.
        path: (B, K+1) the flat input whose scores predicted each step of the path
            (the correction at ``path[num_accepted]``; 0..K where no leaf was taken).
        drafts: (B, K) the path's tokens (the chain with a taken leaf in place).
    """

    acceptance: Acceptance
    path: Tensor
    drafts: Tensor


def resolve_tree(logits: Tensor, inputs: Tensor, depth: int,
                 rule: AcceptanceRule) -> TreeOutcome:
    """Acceptance over a chain-with-leaves block, in whole-block tensor ops (no
    host read, so the loop keeps its one synchronisation per iteration).

    Every node is checked against the scores of its parent (the input whose
    prediction it is); the chain is accepted up to its first rejection, then the
    first passing leaf at the rejected depth, if any, is taken. The correction is
    the verifier's argmax at the end of the path. A chain is a tree of width one
    (:func:`~.acceptance.accept_drafts` walks it here); :func:`walk_row` is the
    same walk for one row on the host.

    Args:
        logits: (B, N, V) constrained verifier scores of the flat block.
        inputs: (B, N) the block as verified (:func:`flatten_candidates`).
        depth: K.
        rule: the draft test (:mod:`.rules`).
    """
    batch, new, vocab = logits.shape
    width = (new - 1) // depth  # C
    # Node j+1 is tested under its parent input's scores (a chain's: input j).
    passed = (rule.passes(logits[:, :depth], inputs[:, 1:]) if width == 1 else
              rule.passes(logits, inputs[:, 1:], parent_index(depth, width, logits.device)))
    reached = passed[:, :depth].long().cumprod(dim=1).sum(dim=1)  # (B,) chain drafts
    chain = torch.arange(depth + 1, device=logits.device)
    path = chain.expand(batch, -1).clone()  # (B, K+1)
    num_accepted = reached
    if width > 1:  # the first passing leaf at depth reached+1 (none after a whole chain)
        node = (torch.arange(1, width, device=logits.device) * depth).unsqueeze(0) + \
            reached.clamp(max=depth - 1).unsqueeze(1)  # (B, C-1) 0-based node ids
        leaf_pass = passed.gather(1, node) & (reached < depth).unsqueeze(1)
        has_leaf = leaf_pass.any(dim=1)  # (B,)
        leaf = node.gather(1, leaf_pass.long().argmax(dim=1, keepdim=True)) + 1  # (B, 1)
        slot = (reached + 1).clamp(max=depth).unsqueeze(1)  # (B, 1)
        path.scatter_(1, slot, torch.where(has_leaf.unsqueeze(1), leaf, slot))
        num_accepted = reached + has_leaf.long()
    drafts = inputs.gather(1, path[:, 1:])  # (B, K)
    # The top-1 is needed at one position per row only.
    end = path.gather(1, num_accepted.unsqueeze(1))  # (B, 1)
    correction = argmax_last(logits.gather(1, end.unsqueeze(2).expand(-1, 1, vocab)).squeeze(1))
    accepted = chain[:depth] < num_accepted.unsqueeze(1)  # (B, K)
    return TreeOutcome(Acceptance(accepted, num_accepted, correction), path, drafts)


def walk_row(row: list, depth: int, width: int, new: int) -> list:
    """One row's walk: ``row`` = node passes (N-1), argmax per input (N), inputs
    (N). Returns [accepted, correction, leaf?, path (K+1), drafts (K)]."""
    passes, top1, inputs = row[: new - 1], row[new - 1: 2 * new - 1], row[2 * new - 1:]
    reached = 0
    while reached < depth and passes[reached]:
        reached += 1
    path, drafts = list(range(depth + 1)), inputs[1: depth + 1]
    final, leaf = reached, 0
    if reached < depth:
        for block in range(1, width):
            node = block * depth + reached  # 0-based among nodes; input node + 1
            if passes[node]:
                final = leaf = node + 1
                path[reached + 1] = leaf
                drafts = drafts[:reached] + [inputs[leaf]] + drafts[reached + 1:]
                break
    accepted = reached + (1 if leaf else 0)
    return [accepted, top1[final], leaf, *path, *drafts]


@lru_cache(maxsize=64)
def parent_list(depth: int, candidates: int) -> Tuple[int, ...]:
    """Node j+1's parent input, for j over the N-1 drafted nodes: the chain's
    depth-i node and every leaf at depth i hang off the chain input at depth i-1."""
    return tuple(range(depth)) * candidates


def parent_index(depth: int, candidates: int, device=None) -> Tensor:
    """(N-1,) the input each node is a prediction of: depth i's nodes hang off the
    chain input at depth i-1 (kept per shape and device: a graph input bound to it
    stays put)."""
    key = (depth, candidates, device)
    if key not in _PARENTS:
        _PARENTS[key] = torch.tensor(parent_list(depth, candidates), device=device)
    return _PARENTS[key]


_PARENTS: dict = {}  # built once per shape and device (the loop's hot path reads it)


def accept_host(logits: Tensor, flat: np.ndarray, tokens: Tensor, depth: int, width: int,
                rule: AcceptanceRule, inexact: Optional[Inexact] = None) -> Decision:
    """One row's acceptance, walked on the host: what :func:`resolve_tree`
    (and, for a chain, :func:`~.acceptance.accept_drafts`) decide.

    Each draft is tested under its parent's scores by the rule's host form
    (:meth:`~.rules.AcceptanceRule.passes_host`); :func:`walk_row` then walks
    the chain and its leaves; the correction is the argmax at the end of the path.

    Args:
        logits: (1, N, V) constrained scores (float32).
        flat: ``logits[0]`` as a numpy view (a sampled turn: its perturbed scores,
            :meth:`~.sampling.SamplingRule.perturbed_host`).
        tokens: (1, N) the verified inputs (last committed token, then the drafts).
        depth, width: K and C (1: a chain).
        rule: the draft test (:mod:`.rules`).
        inexact: where ``flat`` holds inexact scores (:class:`~.certified.Inexact`):
            the rule first writes the exact ones it reads into ``flat``
            (:meth:`~.rules.AcceptanceRule.certify_host`).
    """
    inputs = tokens.tolist()[0]
    parents = parent_list(depth, width)
    if inexact is not None:
        rule.certify_host(flat, inexact, inputs[1:], parents)
    if depth == 0:  # a greedy turn: the argmax, nothing to walk
        return Decision(0, int(flat[0].argmax()), False, [0], [])
    top1 = flat.argmax(axis=1)  # (N,)
    passes = rule.passes_host(flat, inputs[1:], parents)
    decided = walk_row(passes + top1.tolist() + inputs, depth, width, len(inputs))
    accepted, correction, leaf = decided[:3]
    return Decision(accepted, correction, bool(leaf), decided[3: 4 + depth], decided[4 + depth:])
