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

The rest of the loop sees a chain: :func:`~.decision.tree.resolve_tree` returns the flat index
of the input whose scores predicted each step of the accepted path, and the
loop gathers logits and states along it. The cache holds the pass's keys and
values at slots start..start+N-1; a taken leaf's are moved to its depth's slot
(:func:`move_leaf_keys`), everything else rolls back for free as before.

Shapes: B rows, K depth, C candidates per depth, N = 1 + K*C, V vocabulary.
Candidates come (B, C, K), row 0 the chain, so that they flatten in verify order.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import torch
from torch import Tensor

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
