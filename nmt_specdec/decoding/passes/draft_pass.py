"""The draft head as a lean pass: K+1 positions, bidirectional, no cache (then,
for a head with refinement layers, ``refine_steps`` causal refinement passes).

Same weights and arithmetic as :meth:`nmt_specdec.model.draft_head.DraftHead.forward`
(tested equal), with the encoder keys/values of its layers computed once per
batch and only an argmax over the draft vocabulary at the K slots.

Shapes: B rows, K draft slots, C model dim, V draft vocabulary.
"""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt_specdec.decoding.passes.layers import (
    CrossKV,
    SelfAttention,
    cross_kv,
    keep_cross_rows,
    layer_pass,
    layer_weights,
    transposed,
)
from nmt_specdec.model.positions import PositionTable
from nmt_specdec.decoding.passes.verifier_pass import EncoderOut, encoder_memory
from nmt_specdec.model.draft_head import DraftHead, shortlist_logits


def refine_steps_of(head: DraftHead, asked: Optional[int]) -> int:
    """How many times ``head``'s refinement runs when ``asked`` (None: as the head
    was trained to; a head without refinement layers: never)."""
    if not len(head.refine_layers):
        return 0
    return head.refine_steps if asked is None else asked


def source_layers(head: DraftHead, asked: Optional[int]) -> int:
    """Layers of ``head`` that attend to the source when its refinement runs as
    ``asked`` (see :func:`refine_steps_of`)."""
    return len(head.layers) + (len(head.refine_layers) if refine_steps_of(head, asked) else 0)


def _no_cache(layer: int, key: Tensor, value: Tensor):
    return key, value


class LeanDraftHead:
    """Proposes K drafts per row from the verifier's last state.

    Args:
        head: the model's :class:`DraftHead` (eval mode).
        pad: padding id, never proposed.
        refine_steps: times the refinement layers run (None: the head's own setting;
            0 for a head without them, whatever is asked).
    """

    def __init__(self, head: DraftHead, pad: int, refine_steps: Optional[int] = None):
        self.head = head
        self.refine_steps = refine_steps_of(head, refine_steps)
        verifier = head.verifier
        self.positions = (None if verifier.embed_positions is None else
                          PositionTable(verifier.embed_positions, 2 * verifier.max_positions()))
        # First pass, then refinement: every layer that reads the source, in
        # the order of the encoder's draft keys/values.
        refine = head.refine_layers if self.refine_steps else []
        self.layers = [layer_weights(layer) for layer in (*head.layers, *refine)]
        self.first_layers = len(head.layers)
        self.refine_norm = None if head.refine_norm is None else (
            head.refine_norm.weight.detach(), head.refine_norm.bias.detach(),
            head.refine_norm.eps)
        self.output_w = head.output_weight().detach()  # (V, C)
        self.output_t = transposed(self.output_w)  # (C, V)
        norm = head.layer_norm
        self.final_norm = None if norm is None else (norm.weight.detach(), norm.bias.detach(),
                                                     norm.eps)
        self.pad = pad
        self.cross: List[CrossKV] = []

    def start_batch(self, encoder_out: EncoderOut) -> None:
        states, padding = encoder_memory(encoder_out)
        self.cross = [cross_kv(w, states, padding) for w in self.layers]

    def keep_rows(self, rows: Tensor) -> None:
        self.cross = [keep_cross_rows(kv, rows) for kv in self.cross]

    def start_states(self, batch: int) -> Tensor:
        """(B, C) stand-in for the verifier state before the first token."""
        return self.head.start_state.detach().expand(batch, -1)

    @torch.no_grad()
    def propose(self, states: Tensor, last_tokens: Tensor, positions: Tensor,
                num_slots: int) -> Tensor:
        """(B, K) greedy drafts (see :meth:`DraftHead.block_inputs` for the inputs)."""
        return self.slot_logits(states, last_tokens, positions, num_slots).argmax(dim=-1)

    @torch.no_grad()
    def slot_logits(self, states: Tensor, last_tokens: Tensor, positions: Tensor,
                    num_slots: int) -> Tensor:
        """(B, K, V) the head's logits at the K slots, pad excluded (``-inf``)."""
        x = self.head.block_inputs(states, last_tokens, positions, num_slots, self.positions)
        x = self._layers(x, range(self.first_layers), SelfAttention(_no_cache, None),
                         self.final_norm)
        first = logits = self._project(x)
        head = self.head
        if self.refine_steps:
            block = torch.arange(num_slots + 1, device=x.device)
            causal = SelfAttention(_no_cache, block.view(-1, 1) >= block.view(1, -1))
            shortlist = (first.topk(min(head.refine_shortlist, first.size(-1)), dim=-1).indices
                         if head.refine_shortlist else None)
        for _ in range(self.refine_steps):
            y = head.refine_inputs(x, last_tokens, logits.argmax(dim=-1))
            y = self._layers(y, range(self.first_layers, len(self.layers)), causal,
                             self.refine_norm)
            logits = (self._project(y) if shortlist is None else
                      shortlist_logits(y[:, 1:], self.output_w, shortlist, first))
        return logits

    def _layers(self, x: Tensor, indices: range, attention: SelfAttention, norm) -> Tensor:
        for index in indices:
            x = layer_pass(self.layers[index], index, x, attention, self.cross[index])
        return x if norm is None else F.layer_norm(x, x.shape[-1:], *norm)

    def _project(self, x: Tensor) -> Tensor:
        """(B, K, V) logits of the slot rows of ``x`` (B, K+1, C), pad excluded."""
        slots = x[:, 1:]  # (B, K, C)
        logits = torch.mm(slots.reshape(-1, slots.size(-1)), self.output_t).view(
            *slots.shape[:-1], -1)  # (B, K, V)
        if self.pad < logits.size(-1):
            # The verifier never emits pad; a pad draft would only waste a slot.
            logits[:, :, self.pad] = float("-inf")
        return logits
