"""Drafters: what proposes the K tokens that the verifier checks.

The generator only sees the :class:`Drafter` interface (compare Hugging Face's
``CandidateGenerator``), so the NAR draft head, a test oracle and an
always-wrong stub are interchangeable.

Shapes: B active rows, T buffer width, K draft slots, C model dim.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from nmt_specdec.decoding.draft_pass import LeanDraftHead
from nmt_specdec.decoding.layers import weights_key
from nmt_specdec.decoding.verifier_pass import EncoderOut


class DraftRequest(NamedTuple):
    """What a drafter may look at.

    Attributes:
        prefix: (B, T) committed tokens (BOS first), right-padded with ``pad``.
            A view of the engine's buffer: read it, don't keep it.
        lengths: (B,) committed tokens per row, BOS included.
        states: (B, C) the verifier's top-layer state that predicted each row's
            last committed token.
        rows: (B,) index of each active row in the input batch.
        num_slots: K for this iteration.
    """

    prefix: Tensor
    lengths: Tensor
    states: Tensor
    rows: Tensor
    num_slots: int


class Drafter:
    """Interface: propose K tokens for every active row."""

    def propose(self, request: DraftRequest) -> Tensor:
        """Returns (B, K) long draft tokens."""
        raise NotImplementedError

    def start_batch(self, sample: dict, encoder_out: EncoderOut) -> None:
        """Called once per batch before drafting; default: nothing to prepare."""

    def keep_rows(self, rows: Tensor) -> None:
        """Finished rows left the batch; ``rows`` (B',) are the survivors' old indices."""

    def start_states(self, batch: int, like: Tensor) -> Tensor:
        """(B, C) state that stands for the verifier's before the first token."""
        return like.new_zeros(batch, like.size(-1))


class DraftHeadDrafter(Drafter):
    """Greedy drafts from the model's NAR draft head (one lean pass per iteration)."""

    def __init__(self, draft_head, pad: int):
        self.draft_head, self.pad = draft_head, pad
        self.lean = LeanDraftHead(draft_head, pad)
        self._key = weights_key(draft_head)

    def start_batch(self, sample: dict, encoder_out: EncoderOut) -> None:
        key = weights_key(self.draft_head)
        if key != self._key:  # trained or moved since: re-read the weights
            self.lean, self._key = LeanDraftHead(self.draft_head, self.pad), key
        self.lean.start_batch(encoder_out)

    def keep_rows(self, rows: Tensor) -> None:
        self.lean.keep_rows(rows)

    def start_states(self, batch: int, like: Tensor) -> Tensor:
        return self.lean.start_states(batch).to(like)

    def propose(self, request: DraftRequest) -> Tensor:
        last = request.lengths - 1  # (B,) position of the last committed token
        last_tokens = request.prefix.gather(1, last.unsqueeze(1)).squeeze(1)
        return self.lean.propose(request.states, last_tokens, last, request.num_slots)
