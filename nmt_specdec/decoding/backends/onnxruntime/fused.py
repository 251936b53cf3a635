"""The draft head inside the verify call (``--fused-draft``): one runtime call per
iteration instead of two (issue #19, item 3; Medusa/EAGLE-style).

Every verified position j of a row yields the token the verifier would commit
there (its top-1, pad excluded) and the state that predicted it: exactly the
anchor the draft head reads when acceptance stops at j. The fused graph drafts
K tokens after each of the N anchors (N blocks per row), so once acceptance has
chosen j the next iteration's drafts are already there: :class:`~.drafters.FusedDrafter`
picks row j of the (B, N, K) drafts. Where the committed token is not the
graph's anchor (a length or unk constraint changed the verifier's choice) or K
changed (``--spec-k auto``), it runs the draft graph as usual. The encoder call
drafts each batch's first block (:class:`FusedEncoderGraph`, with the K of the
previous proposal), so a warm generator makes exactly one call per iteration. The output is the
same either way (beta=1 is exact whatever the drafts); only the cost moves: one
call fewer, N times the draft head's work.

Shapes: B rows, N verified positions, K draft slots, C model dim, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt_specdec.decoding.backends.onnxruntime.graphs import (
    DraftGraph,
    VerifyGraph,
    arange_like,
)
from nmt_specdec.decoding.backends.torch.draft_pass import LeanDraftHead
from nmt_specdec.decoding.backends.torch.verifier_pass import LeanVerifier


class FusedVerifyGraph(nn.Module):
    """:class:`VerifyGraph`, then the draft head after every verified position.

    Inputs: ``tokens``, ``start``, ``memory_mask``, ``slot_offsets`` (K+1,) =
    0..K, the verifier's past and cross keys/values, the draft head's cross
    keys/values. Outputs: VerifyGraph's, ``drafts`` (B, N, K) and ``anchors``
    (B, N).
    """

    def __init__(self, verifier: LeanVerifier, head: LeanDraftHead):
        super().__init__()
        self.verify = VerifyGraph(verifier)
        self.draft = DraftGraph(head)
        self.layers = len(verifier.layers)
        bias = torch.zeros(verifier.output_t.size(1))
        bias[head.pad] = float("-inf")  # as the loop's constraints: never pad
        self.register_buffer("verifier_pad_bias", bias)

    def forward(self, tokens: Tensor, start: Tensor, memory_mask: Tensor,
                slot_offsets: Tensor, *kv: Tensor):
        split = 4 * self.layers
        offsets = arange_like(tokens, 1)  # a chain: positions 0..N-1, causal
        causal = offsets.view(-1, 1) >= offsets.view(1, -1)
        logits, _, hidden, keys, values = self.verify(tokens, start, memory_mask, offsets,
                                                      causal, *kv[:split])
        anchors = (logits + self.verifier_pad_bias).argmax(-1)  # (B, N)
        batch, new = tokens.shape
        positions = start.unsqueeze(1) + arange_like(tokens, 1) + 1  # (B, N) of each anchor

        def per_block(t: Tensor) -> Tensor:  # (B, ...) -> (B*N, ...): one block per anchor
            return t.unsqueeze(1).expand(batch, new, *t.shape[1:]).flatten(0, 1)

        drafts = self.draft.drafts(hidden.flatten(0, 1), anchors.flatten(), positions.flatten(),
                                   slot_offsets.size(0) - 1, per_block(memory_mask),
                                   [per_block(t) for t in kv[split:]])  # (B*N, K)
        return logits, hidden, keys, values, drafts.view(batch, new, -1), anchors


class FusedEncoderGraph(nn.Module):
    """The encoder graph, then the first drafts of the batch (anchor: BOS at
    position 0, ``start_state`` for the verifier's state), so that no iteration
    needs a draft call of its own. Extra input ``slot_offsets`` (K+1,), extra
    output ``first_drafts`` (B, K)."""

    def __init__(self, encoder: nn.Module, head: LeanDraftHead, layers: int, bos: int):
        super().__init__()
        self.encoder, self.draft = encoder, DraftGraph(head)
        self.layers, self.bos = layers, bos

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, slot_offsets: Tensor):
        memory = self.encoder(src_tokens, src_lengths)
        first = src_tokens[:, 0] * 0  # (B,) zeros that keep the batch dimension dynamic
        states = self.draft.head.start_state.unsqueeze(0) + first.unsqueeze(1).float()
        drafts = self.draft.drafts(states, first + self.bos, first, slot_offsets.size(0) - 1,
                                   memory[0], memory[1 + 2 * self.layers:])
        return (*memory, drafts)
