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

from nmt_specdec.decoding.acceptance import Acceptance
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
def tree_layout(depth: int, candidates: int) -> TreeLayout:
    """The layout for K = ``depth`` and C = ``candidates`` (cached: built once)."""
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
            (the correction at ``path[num_accepted]``).
        drafts: (B, K) the path's tokens (the chain with a taken leaf in place).
        leaf_taken: whether any row took a leaf (else ``path`` is 0..K: the
            caller may slice instead of gathering, and no keys need moving).
    """

    acceptance: Acceptance
    path: Tensor
    drafts: Tensor
    leaf_taken: bool


def resolve_tree(logits: Tensor, inputs: Tensor, depth: int, beta: int,
                 tau: float) -> TreeOutcome:
    """Acceptance over a chain-with-leaves block.

    Every node is checked against the scores of its parent (the input whose
    prediction it is) with a few whole-block tensor ops; the walk itself (first
    rejection on the chain, then at most one leaf) runs on the host over one small
    read-back, which costs less than the dozens of tiny tensor ops it replaces
    (on a GPU it is a second synchronisation per iteration). The correction is
    the verifier's argmax at the end of the path.

    Args:
        logits: (B, N, V) constrained verifier scores of the flat block.
        inputs: (B, N) the block as verified (:func:`flatten_candidates`).
        depth: K.
        beta, tau: the acceptance criterion (see :func:`~.acceptance.accept_drafts`).
    """
    batch, new, vocab = logits.shape
    width = (new - 1) // depth  # C
    parent = parent_index(depth, width, logits.device)  # (N-1,): node j+1's parent input
    scores = logits.view(batch, -1).gather(1, parent * vocab + inputs[:, 1:])  # (B, N-1)
    best, top1 = logits.max(dim=-1)  # (B, N)
    if beta == 1:  # a -inf draft never reaches a finite best
        passed = scores >= best.index_select(1, parent)
    else:
        kth = logits.topk(min(beta, vocab), dim=-1).values[..., -1].index_select(1, parent)
        passed = (scores >= kth) & (best.index_select(1, parent) - scores <= tau)
        passed &= torch.isfinite(scores)  # never a -inf draft (e.g. forced EOS)
    rows = torch.cat([passed.long(), top1, inputs], dim=1).tolist()  # the one read-back
    decided = [walk_row(row, depth, width, new) for row in rows]
    table = torch.tensor(decided, dtype=torch.long, device=logits.device)  # (B, 3+2K)
    num_accepted, correction = table[:, 0], table[:, 1]
    path, drafts = table[:, 3: 4 + depth], table[:, 4 + depth:]
    accepted = torch.arange(depth, device=logits.device) < num_accepted.unsqueeze(1)
    return TreeOutcome(Acceptance(accepted, num_accepted, correction), path, drafts,
                       any(row[2] for row in decided))


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
