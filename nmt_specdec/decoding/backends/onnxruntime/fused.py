"""Accept, then draft, inside the verify call (``--fused-draft``): one runtime call
per iteration instead of two (issue #19, item 3).

At beta = 1 acceptance needs nothing the graph lacks: each draft passes when it
scores its parent input's best (pad excluded, as the loop's constraints), the
walk takes the chain's leading passes and then at most one leaf
(:func:`~nmt_specdec.decoding.draft_tree.walk_row`, here in tensor ops), and the
correction is the argmax at the end of the path. So the fused graph verifies,
walks, and runs the draft head once, on the state and token the walk ends on:
the next iteration's drafts (C' candidates per slot, chains and trees alike)
leave the runtime with this iteration's scores. Its ``decision`` (accepted
drafts, correction, the input the correction came from, a tie flag) saves the
host its own acceptance where no length constraint applies; where one does, or
the correction's best score is tied (the shared code's order decides ties), the
loop decides itself, and :class:`~.drafters.FusedDrafter` uses the drafts only
if its anchor (position, token, state) is the graph's, else it runs the draft
graph. The encoder call drafts each batch's first block
(:class:`FusedEncoderGraph`). The output never depends on which way a draft
came (beta = 1 is exact whatever the drafts).

Shapes: B rows, N verified inputs, K draft slots, C' candidates per slot,
C model dim, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt_specdec.decoding.backends.onnxruntime.graphs import DraftGraph, VerifyGraph
from nmt_specdec.decoding.backends.torch.draft_pass import LeanDraftHead
from nmt_specdec.decoding.backends.torch.verifier_pass import LeanVerifier

DECISION = ("accepted", "correction", "final", "tie")  # the columns of ``decision``


def greedy_walk(scores: Tensor, tokens: Tensor, parents: Tensor, depth: int) -> Tensor:
    """beta = 1 acceptance of a chain or a chain with leaves, in tensor ops.

    Args:
        scores: (B, N, V) constrained verifier scores.
        tokens: (B, N) the verified inputs (last committed token, chain, leaves).
        parents: (N-1,) the input each node is a prediction of.
        depth: K (the chain's drafts are nodes 0..K-1, leaves follow by blocks of K).

    Returns:
        (B, 4) long: accepted drafts, correction, the input whose scores gave the
        correction (``final``), and 1 where another token ties the correction's score.
    """
    batch, new, vocab = scores.shape
    best, top1 = scores.max(dim=-1)  # (B, N); ties: the first index
    drafted = scores.reshape(batch, -1).gather(1, parents * vocab + tokens[:, 1:])  # (B, N-1)
    passes = (drafted >= best.index_select(1, parents)) & torch.isfinite(drafted)
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
    top = best.gather(1, final.unsqueeze(1))  # (B, 1)
    tie = ((row == top).long().sum(dim=1) > 1).long()
    correction = top1.gather(1, final.unsqueeze(1))[:, 0]
    return torch.stack([reached + took.long(), correction, final, tie], dim=1)


class FusedVerifyGraph(nn.Module):
    """:class:`VerifyGraph`, :func:`greedy_walk`, then the draft head once.

    Inputs: VerifyGraph's ``tokens``, ``start``, ``memory_mask``, ``offsets``,
    ``ancestors``; ``parents`` (N-1,), ``slot_offsets`` (K+1,) = 0..K,
    ``candidate_slots`` (C',); the verifier's past and cross keys/values; the
    draft head's cross keys/values. Outputs: VerifyGraph's, ``drafts``
    (B, C', K) after the correction, and ``decision`` (B, 4), see :data:`DECISION`.
    """

    def __init__(self, verifier: LeanVerifier, head: LeanDraftHead):
        super().__init__()
        self.verify = VerifyGraph(verifier)
        self.draft = DraftGraph(head)
        self.layers = len(verifier.layers)
        bias = torch.zeros(verifier.output_t.size(1))
        bias[head.pad] = float("-inf")  # as the loop's constraints: never pad
        self.register_buffer("verifier_pad_bias", bias)

    def forward(self, tokens: Tensor, start: Tensor, memory_mask: Tensor, offsets: Tensor,
                ancestors: Tensor, parents: Tensor, slot_offsets: Tensor,
                candidate_slots: Tensor, *kv: Tensor):
        split = 4 * self.layers
        logits, lse, hidden, keys, values = self.verify(tokens, start, memory_mask, offsets,
                                                        ancestors, *kv[:split])
        decision = greedy_walk(logits + self.verifier_pad_bias, tokens, parents,
                               slot_offsets.size(0) - 1)
        accepted, correction, final = decision[:, 0], decision[:, 1], decision[:, 2]
        state = hidden.gather(1, final.view(-1, 1, 1).expand(-1, 1, hidden.size(2)))[:, 0]
        # The correction sits after the accepted drafts: position start + accepted + 1.
        positions = (start + accepted + 1).unsqueeze(1) + slot_offsets  # (B, K+1)
        drafts = self.draft(state, correction, positions, memory_mask, candidate_slots,
                            *kv[split:])
        return logits, lse, hidden, keys, values, drafts, decision


class FusedEncoderGraph(nn.Module):
    """The encoder graph, then the first drafts of the batch (anchor: BOS at
    position 0, ``start_state`` for the verifier's state), so that no iteration
    needs a draft call of its own. Extra inputs ``slot_offsets`` (K+1,) and
    ``candidate_slots`` (C',), extra output ``first_drafts`` (B, C', K)."""

    def __init__(self, encoder: nn.Module, head: LeanDraftHead, layers: int, bos: int):
        super().__init__()
        self.encoder, self.draft = encoder, DraftGraph(head)
        self.layers, self.bos = layers, bos

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, slot_offsets: Tensor,
                candidate_slots: Tensor):
        memory = self.encoder(src_tokens, src_lengths)
        first = src_tokens[:, 0] * 0  # (B,) zeros that keep the batch dimension dynamic
        states = self.draft.head.start_state.unsqueeze(0) + first.unsqueeze(1).float()
        drafts = self.draft(states, first + self.bos, first.unsqueeze(1) + slot_offsets,
                            memory[0], candidate_slots, *memory[1 + 2 * self.layers:])
        return (*memory, drafts)
