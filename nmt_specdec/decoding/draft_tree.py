"""More than one draft per slot: a chain with leaves, verified in one pass.

``--spec-candidates C`` verifies, besides the head's top-1 chain d_1..d_K, its
next C-1 candidates at every depth as *leaves*: leaf l_i hangs off d_{i-1} (the
last token for i=1), i.e. it is an alternative to d_i that is not continued.
Why leaves and not a full product tree: the NAR head's slot-i candidates do not
depend on the earlier slots, so a product tree would repeat the same children
under every branch; on the shipped model a leaf per depth (5 positions at K=2)
commits more tokens than a product tree of the same size
(``scripts/simulate_draft_trees.py``).

One verify pass scores N = 1 + K*C inputs, laid out flat as

    [last, d_1..d_K, leaves of candidate 2 at depths 1..K, candidate 3 ..., ...]

with tree positions (a node at depth i sits at position start+i) and a tree
attention mask (a node sees the committed prefix, its ancestors on the chain
and itself). Acceptance walks the chain as usual; at the first rejected depth
j+1 it may take one leaf there that passes the same criterion, after which it
stops (nothing was drafted after a leaf). At beta=1 a leaf passes only if it is
the verifier's top-1, so the output is still exactly greedy.

The rest of the loop sees a chain: :func:`resolve_tree` returns the flat index
of the input whose scores predicted each step of the accepted path, and the
loop gathers logits and states along it. The cache holds the pass's keys and
values at slots start..start+N-1; a taken leaf's are moved to its depth's slot
(:func:`move_leaf_keys`), everything else rolls back for free as before.

Shapes: B rows, K depth, C candidates per depth, N = 1 + K*C, V vocabulary.
Candidates come (B, C, K), row 0 the chain, so that they flatten in verify order.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Tuple

import torch
from torch import Tensor

from nmt_specdec.decoding.acceptance import Acceptance, argmax_last
from nmt_specdec.decoding.cache import StaticKVCache


class TreeLayout(NamedTuple):
    """The flat layout of a chain-with-leaves block.

    Attributes:
        offsets: (N,) position of each input relative to the last committed token.
        ancestors: (N, N) bool, True where input j may attend to input a (a is j
            or an ancestor of j).
    """

    offsets: Tensor
    ancestors: Tensor


@lru_cache(maxsize=64)
def tree_layout(depth: int, candidates: int, device=None) -> TreeLayout:
    """The layout for K = ``depth`` and C = ``candidates``, on ``device`` (cached:
    built and copied to the device once, not per iteration)."""
    if device is not None:
        return TreeLayout(*(t.to(device) for t in tree_layout(depth, candidates)))
    chain = torch.arange(depth + 1)  # last, d_1..d_K
    depths = torch.arange(1, depth + 1).repeat(candidates - 1)  # each leaf's depth
    offsets = torch.cat([chain, depths])  # (N,)
    new = offsets.numel()
    # A chain input at depth i sees chain inputs 0..i; a leaf at depth i sees chain
    # inputs 0..i-1 and itself.
    index = torch.arange(new)
    is_chain = index <= depth
    sees_chain = (offsets.unsqueeze(1) > index[: depth + 1].unsqueeze(0)) | (
        is_chain.unsqueeze(1) & (offsets.unsqueeze(1) == index[: depth + 1].unsqueeze(0)))
    ancestors = torch.zeros(new, new, dtype=torch.bool)
    ancestors[:, : depth + 1] = sees_chain
    ancestors[index, index] = True
    return TreeLayout(offsets, ancestors)


def flatten_candidates(last: Tensor, candidates: Tensor) -> Tensor:
    """(B, 1) last tokens and (B, C, K) candidates -> (B, N) verify inputs."""
    return torch.cat([last, candidates.reshape(last.size(0), -1)], dim=1)


def tree_attention_mask(start: Tensor, new: int, width: int, ancestors: Tensor) -> Tensor:
    """(B, 1, N, width) bool: input j of row b sees the slots before ``start[b]``
    (its committed prefix) and, of the pass's slots start[b]..start[b]+N-1, those
    of its ancestors."""
    slot = torch.arange(width, device=start.device).unsqueeze(0)  # (1, T')
    relative = slot - start.unsqueeze(1)  # (B, T'): the pass's input at that slot
    inside = (relative >= 0) & (relative < new)
    sees = ancestors.to(start.device)[:, relative.clamp(0, new - 1)]  # (N, B, T')
    mask = (relative < 0).unsqueeze(0) | (inside.unsqueeze(0) & sees)
    return mask.transpose(0, 1).unsqueeze(1)  # (B, 1, N, T')


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


def resolve_tree(logits: Tensor, inputs: Tensor, depth: int, beta: int,
                 tau: float) -> TreeOutcome:
    """Acceptance over a chain-with-leaves block, in whole-block tensor ops (no
    host read, so the loop keeps its one synchronisation per iteration).

    Every node is checked against the scores of its parent (the input whose
    prediction it is); the chain is accepted up to its first rejection, then the
    first passing leaf at the rejected depth, if any, is taken. The correction is
    the verifier's argmax at the end of the path. :func:`walk_row` is the same
    walk for one row on the host.

    Args:
        logits: (B, N, V) constrained verifier scores of the flat block.
        inputs: (B, N) the block as verified (:func:`flatten_candidates`).
        depth: K.
        beta, tau: the acceptance criterion (see :func:`~.acceptance.accept_drafts`).
    """
    batch, new, vocab = logits.shape
    width = (new - 1) // depth  # C
    parent = parent_index(depth, width, logits.device)  # (N-1,): node j+1's parent input
    passed = nodes_pass(logits, inputs, parent, beta, tau)  # (B, N-1)
    top1 = logits.argmax(dim=-1)  # (B, N)
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
    correction = top1.gather(1, path.gather(1, num_accepted.unsqueeze(1))).squeeze(1)
    accepted = chain[:depth] < num_accepted.unsqueeze(1)  # (B, K)
    return TreeOutcome(Acceptance(accepted, num_accepted, correction), path, drafts)


def nodes_pass(logits: Tensor, inputs: Tensor, parent: Tensor, beta: int,
               tau: float) -> Tensor:
    """(B, N-1) bool: each node passes the criterion under its parent's scores. At
    beta = 1 a node passes only as its parent's argmax, greedy's own tie-break."""
    vocab = logits.size(2)
    scores = logits.view(logits.size(0), -1).gather(1, parent * vocab + inputs[:, 1:])
    if beta == 1:
        passed = inputs[:, 1:] == argmax_last(logits).index_select(1, parent)
    else:
        best = logits.amax(dim=-1).index_select(1, parent)
        kth = logits.topk(min(beta, vocab), dim=-1).values[..., -1].index_select(1, parent)
        passed = (scores >= kth) & (best - scores <= tau)
    return passed & torch.isfinite(scores)  # never a -inf draft (e.g. forced EOS)


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
    return tuple(int(o) - 1 for o in tree_layout(depth, candidates).offsets[1:])


def parent_index(depth: int, candidates: int, device=None) -> Tensor:
    """(N-1,) the input each node is a prediction of: depth i's nodes hang off the
    chain input at depth i-1 (kept per shape and device: a graph input bound to it
    stays put)."""
    key = (depth, candidates, device)
    if key not in _PARENTS:
        _PARENTS[key] = torch.tensor(parent_list(depth, candidates), device=device)
    return _PARENTS[key]


_PARENTS: dict = {}  # built once per shape and device (the loop's hot path reads it)


def move_leaf_keys(cache: StaticKVCache, start: Tensor, path: Tensor,
                   num_accepted: Tensor) -> None:
    """Puts a taken leaf's keys/values at its depth's slot.

    The pass wrote input i at slot ``start + i``; the accepted path's inputs must
    sit at ``start + step``. Chain inputs already do (input i is step i); a leaf
    taken as the last accepted step s was input ``path[s] > s``. Rows without a
    leaf copy a slot onto itself.
    """
    source = start + path.gather(1, num_accepted.unsqueeze(1)).squeeze(1)  # (B,)
    target = start + num_accepted
    rows = cache.rows(start.numel())
    for buffer in (cache.key, cache.value):
        buffer[:, rows, :, target] = buffer[:, rows, :, source]
