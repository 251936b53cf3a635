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
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Tuple

import torch
from torch import Tensor

from nmt_specdec.decoding.acceptance import Acceptance, accept_drafts, drafts_pass
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
    """(B, 1) last tokens and (B, K, C) candidates -> (B, N) verify inputs."""
    return torch.cat([last, candidates.transpose(1, 2).reshape(last.size(0), -1)], dim=1)


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


def resolve_tree(logits: Tensor, candidates: Tensor, beta: int,
                 tau: float) -> Tuple[Acceptance, Tensor, Tensor]:
    """Acceptance over a chain-with-leaves block.

    Args:
        logits: (B, N, V) constrained verifier scores of the flat block.
        candidates: (B, K, C) the drafter's candidates, column 0 the chain.
        beta, tau: the acceptance criterion.

    Returns:
        ``(acceptance, path, drafts)``: the :class:`Acceptance` of the accepted
        path; ``path`` (B, K+1), the flat input whose scores predicted each step
        of it (the correction at ``path[num_accepted]``); ``drafts`` (B, K), the
        path's tokens (the chain with the taken leaf in place).
    """
    batch, depth, count = candidates.shape
    chain = candidates[:, :, 0]
    walk = accept_drafts(logits[:, : depth + 1], chain, beta, tau)
    reached = walk.num_accepted  # (B,) depth j of the last accepted chain draft
    open_depth = reached.clamp(max=depth - 1)  # leaves at depth j+1 (0-based j)
    at = logits.gather(1, reached.view(-1, 1, 1).expand(-1, 1, logits.size(2)))  # (B, 1, V)
    leaves = candidates[:, :, 1:].gather(
        1, open_depth.view(-1, 1, 1).expand(-1, 1, count - 1))  # (B, 1, C-1)
    passing = drafts_pass(at.expand(-1, count - 1, -1), leaves.squeeze(1), beta, tau)
    passing &= (reached < depth).unsqueeze(1)  # (B, C-1)
    taken = passing.any(dim=1)  # (B,)
    choice = passing.long().argmax(dim=1)  # first passing leaf (0-based among leaves)
    # Flat index of that leaf: after the chain, (choice) blocks of K, then its depth.
    leaf_index = depth + 1 + choice * depth + open_depth  # (B,)
    steps = torch.arange(depth + 1, device=logits.device).expand(batch, -1)
    path = torch.where(taken.unsqueeze(1) & (steps == (reached + 1).unsqueeze(1)),
                       leaf_index.unsqueeze(1), steps)  # (B, K+1)
    leaf_token = leaves.squeeze(1).gather(1, choice.unsqueeze(1)).squeeze(1)  # (B,)
    drafts = chain.scatter(1, open_depth.unsqueeze(1),
                           torch.where(taken, leaf_token, chain.gather(
                               1, open_depth.unsqueeze(1)).squeeze(1)).unsqueeze(1))
    num_accepted = reached + taken.long()
    accepted = torch.arange(depth, device=logits.device).unsqueeze(0) < num_accepted.unsqueeze(1)
    final = path.gather(1, num_accepted.unsqueeze(1))  # (B, 1)
    correction = logits.gather(1, final.unsqueeze(2).expand(-1, 1, logits.size(2))).squeeze(
        1).topk(1, dim=-1).indices.squeeze(1)
    return Acceptance(accepted, num_accepted, correction), path, drafts


def move_leaf_keys(cache: StaticKVCache, start: Tensor, path: Tensor,
                   num_accepted: Tensor) -> None:
    """Puts a taken leaf's keys/values at its depth's slot.

    The pass wrote input i at slot ``start + i``; the accepted path's inputs must
    sit at ``start + step``. Chain inputs already do (input i is step i); a leaf
    taken at step s was input ``path[s] > s``. Rows without a leaf copy a slot
    onto itself.
    """
    step = num_accepted.clamp(min=1)  # a leaf is at step num_accepted (>= 1)
    source = start + path.gather(1, step.unsqueeze(1)).squeeze(1)  # (B,)
    target = start + step
    rows = torch.arange(start.numel(), device=start.device)
    for buffer in (cache.key, cache.value):
        buffer[:, rows, :, target] = buffer[:, rows, :, source]
