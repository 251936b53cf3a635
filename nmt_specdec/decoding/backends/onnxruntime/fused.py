"""Accept, then draft, inside the verify call (``--fused-draft``): one runtime call
per iteration instead of two.

At beta = 1 acceptance needs nothing the graph lacks: each draft passes when it
is its parent input's argmax (pad excluded, as the loop's constraints), the
walk takes the chain's leading passes and then at most one leaf
(:func:`~nmt_specdec.decoding.decision.tree.walk_row`, here in tensor ops), and the
correction is the argmax at the end of the path. So the fused graph verifies,
walks, and runs the draft head once, on the state and token the walk ends on:
the next iteration's drafts (C' candidates per slot, chains and trees alike)
leave the runtime with this iteration's scores. Its ``decision`` (accepted
drafts, correction, the input the correction came from, a tie flag) saves the
host its own acceptance where no length constraint applies; where one does, or
the correction's best score is tied (the shared code's order decides ties), the
loop decides itself, and :class:`~.drafters.FusedDrafter` uses the drafts only
if its anchor (position, token, state) is the graph's, else it runs the draft
graph (as for each batch's first block: drafting it in the encoder call cost
more than the draft call it saved). The output never depends on which way a
draft came (beta = 1 is exact whatever the drafts).

The walk reads the raw logits: adding the pad constraint as a bias over the
(N, V) block costs a pass over it, so instead a decision in which pad is some row's
argmax or a draft is unusable (flagged as a tie) and the loop decides.

Shapes: B rows, N verified inputs, K draft slots, C' candidates per slot,
C model dim, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt_specdec.decoding.backends.onnxruntime.graphs import DraftGraph, VerifyGraph
from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead
from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier

DECISION = ("accepted", "correction", "final", "tie")  # the columns of ``decision``


def greedy_walk(scores: Tensor, tokens: Tensor, parents: Tensor, depth: int,
                pad: int = -1) -> Tensor:
    """beta = 1 acceptance of a chain or a chain with leaves, in tensor ops.

    Args:
        scores: (B, N, V) verifier scores (constrained, or raw with ``pad`` given).
        tokens: (B, N) the verified inputs (last committed token, chain, leaves).
        parents: (N-1,) the input each node is a prediction of.
        depth: K (the chain's drafts are nodes 0..K-1, leaves follow by blocks of K).
        pad: with raw scores, the id the loop forbids: where it is any row's
            argmax or any draft, the constraint could change the decision, and
            the row is flagged like a tie.

    Returns:
        (B, 4) long: accepted drafts, correction, the input whose scores gave the
        correction (``final``), and 1 where another token ties the correction's
        score (or ``pad`` is involved): the loop then decides itself.
    """
    batch, new, vocab = scores.shape
    # keepdim: the same ReduceMax as the normaliser's, which the runtime computes once.
    best = scores.amax(dim=-1, keepdim=True)[:, :, 0]  # (B, N)
    drafted = scores.reshape(batch, -1).gather(1, parents * vocab + tokens[:, 1:])  # (B, N-1)
    # A draft passes only as its parent's argmax: greedy's tie-break, as the loop's.
    top1 = scores.argmax(dim=-1)  # (B, N)
    passes = (tokens[:, 1:] == top1.index_select(1, parents)) & torch.isfinite(drafted)
    reached = (torch.cumsum((~passes[:, :depth]).long(), dim=1) == 0).long().sum(dim=1)  # (B,)
    # Leaves: block b's node at the depth where the chain stopped, if it stopped.
    leaves = passes[:, depth:].reshape(batch, -1, depth)  # (B, C-1, K)
    at = reached.clamp(max=depth - 1).view(-1, 1, 1).expand(-1, leaves.size(1), 1)
    leaf = leaves.gather(2, at)[:, :, 0] & (reached < depth).unsqueeze(1)  # (B, C-1)
    leaf = torch.cat([leaf, leaf.new_zeros(batch, 1)], dim=1)  # a column that never passes
    took = leaf.any(dim=1)  # (B,)
    first = leaf.long().argmax(dim=1)  # the first passing leaf block
    final = torch.where(took, 1 + depth + first * depth + reached, reached)  # (B,)
    # (Indexing, not squeeze: a squeezed dynamic dimension exports as an If node.)
    row = scores.gather(1, final.view(-1, 1, 1).expand(-1, 1, vocab))[:, 0]  # (B, V)
    correction = row.argmax(dim=1)  # the argmax of one row only; ties: the first index
    unsure = (row == best.gather(1, final.unsqueeze(1))).long().sum(dim=1) > 1
    if pad >= 0:  # pad at some row's best, or drafted
        unsure = (unsure | (scores[:, :, pad] >= best).any(dim=1)
                  | (tokens[:, 1:] == pad).any(dim=1))
    return torch.stack([reached + took.long(), correction, final, unsure.long()], dim=1)


class FusedVerifyGraph(nn.Module):
    """:class:`VerifyGraph`, :func:`greedy_walk`, then the draft head once.

    Inputs: VerifyGraph's ``tokens``, ``start``, ``memory_mask``, ``offsets``,
    ``self_mask``, ``slot_index``; ``parents`` (N-1,), ``slot_offsets`` (K+1,) = 0..K,
    ``candidate_slots`` (C',); the verifier's past and cross keys/values; the
    draft head's cross keys/values. Outputs: VerifyGraph's, ``drafts``
    (B, C', K) after the correction, and ``decision`` (B, 4), see :data:`DECISION`.
    """

    def __init__(self, verifier: LeanVerifier, head: LeanDraftHead, same_bits: bool = False):
        super().__init__()
        self.verify = VerifyGraph(verifier, same_bits=same_bits)
        self.draft = DraftGraph(head)
        self.layers, self.pad = len(verifier.layers), head.pad

    def forward(self, tokens: Tensor, start: Tensor, memory_mask: Tensor, offsets: Tensor,
                self_mask: Tensor, slot_index: Tensor, parents: Tensor, slot_offsets: Tensor,
                candidate_slots: Tensor, *kv: Tensor):
        split = 4 * self.layers
        logits, lse, hidden, keys, values = self.verify(tokens, start, memory_mask, offsets,
                                                        self_mask, slot_index, *kv[:split])
        decision = greedy_walk(logits, tokens, parents, slot_offsets.size(0) - 1, self.pad)
        accepted, correction, final = decision[:, 0], decision[:, 1], decision[:, 2]
        state = hidden.gather(1, final.view(-1, 1, 1).expand(-1, 1, hidden.size(2)))[:, 0]
        # The correction sits after the accepted drafts: position start + accepted + 1.
        positions = (start + accepted + 1).unsqueeze(1) + slot_offsets  # (B, K+1)
        drafts = self.draft(state, correction, positions, memory_mask, candidate_slots,
                            *kv[split:])
        return logits, lse, hidden, keys, values, drafts, decision
