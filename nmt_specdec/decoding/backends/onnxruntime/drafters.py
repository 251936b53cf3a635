"""The draft head's graph behind the :class:`~nmt_specdec.decoding.drafters.Drafter`
interface: one draft call per iteration (``OrtDrafter``), or none where the
fused verify call already drafted (``FusedDrafter``, ``--fused-draft``).

Shapes: B rows, K draft slots, C' candidates per slot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Tuple

import torch
from torch import Tensor

from nmt_specdec.decoding.drafters import Drafter, DraftRequest

if TYPE_CHECKING:  # the backend imports this module
    from nmt_specdec.decoding.backends.onnxruntime.session import Memory, OrtBackend


_CANDIDATE_SLOTS: Dict[int, Tensor] = {}


def _candidate_slots(count: int) -> Tensor:
    """(C,) 0..C-1: the draft graph returns as many candidates per slot as this is
    long (and 0..K are the block's offsets)."""
    if count not in _CANDIDATE_SLOTS:  # kept: its binding stays put
        _CANDIDATE_SLOTS[count] = torch.arange(count)
    return _CANDIDATE_SLOTS[count]


class OrtDrafter(Drafter):
    """The draft head's graph as a :class:`Drafter`."""

    def __init__(self, start_state: Tensor, backend: "OrtBackend"):
        # The session is read from the backend at each call: it is replaced when
        # the model's weights change (re-export).
        self.start_state, self.backend = start_state, backend
        self.memory: Optional["Memory"] = None
        self._out: Dict[tuple, Tensor] = {}

    def start_batch(self, sample: dict, encoder_out: "Memory") -> None:
        self.memory = encoder_out._replace(cross=[])  # the verifier's keys are not ours

    def keep_rows(self, rows: Tensor) -> None:
        assert self.memory is not None
        self.memory = self.memory.keep_rows(rows)

    def start_states(self, batch: int, like: Tensor) -> Tensor:
        return self.start_state.to(like).expand(batch, -1)

    def propose(self, request: DraftRequest) -> Tensor:
        return self.propose_candidates(request, 1).squeeze(1)

    def propose_candidates(self, request: DraftRequest, count: int) -> Tensor:
        assert self.memory is not None
        self.backend.calls["draft"] += 1
        last = request.lengths - 1  # (B,) position of the last committed token
        last_tokens = request.prefix.gather(1, last.unsqueeze(1)).squeeze(1)  # (B,)
        slots = _candidate_slots(request.num_slots + 1)  # 0..K
        # A kept buffer per shape keeps its binding; the loop consumes it within the iteration.
        shape = (last.numel(), count, request.num_slots)
        drafts = self._out.get(shape)
        if drafts is None:
            drafts = self._out[shape] = torch.empty(shape, dtype=torch.long)
        self.backend.draft_session.run([request.states, last_tokens, last.unsqueeze(1) + slots,
                                        self.memory.mask, _candidate_slots(count),
                                        *self.memory.draft], [drafts])
        return drafts


class FusedDrafter(OrtDrafter):
    """Takes its drafts from the last fused verify call where it can (``--fused-draft``,
    see :mod:`.fused`)."""

    def __init__(self, start_state: Tensor, backend):
        super().__init__(start_state, backend)
        self.k = 0  # the K of the last proposal: the fused graph drafts that many
        self.pending: Optional[Tuple[Tensor, Tensor, Tensor]] = None

    def start_batch(self, sample: dict, encoder_out) -> None:
        super().start_batch(sample, encoder_out)
        self.pending = self.backend.first_drafts  # from the encoder call, if any
        self.backend.fused_drafter = self  # the verifier drafts for this generator now

    def keep_rows(self, rows: Tensor) -> None:
        super().keep_rows(rows)
        if self.pending is not None:
            self.pending = tuple(t.index_select(0, rows) for t in self.pending)  # type: ignore

    def offer(self, drafts: Tensor, anchors: Tensor, start: Tensor) -> None:
        """From the fused call: (B, N, K) drafts, (B, N) anchors, (B,) first position."""
        self.pending = (drafts, anchors, start)

    def propose(self, request: DraftRequest) -> Tensor:
        self.k = self.backend.expected_k = request.num_slots
        pending, self.pending = self.pending, None
        if pending is not None and pending[0].size(2) == request.num_slots:
            drafts, anchors, start = pending
            last = request.lengths - 1  # (B,) position of the committed token
            chosen = (last - 1 - start).view(-1, 1)  # (B, 1) verified position that predicted it
            committed = request.prefix.gather(1, last.unsqueeze(1))  # (B, 1)
            if bool(anchors.gather(1, chosen).eq(committed).all()):
                index = chosen.unsqueeze(2).expand(-1, 1, drafts.size(2))
                return drafts.gather(1, index).squeeze(1)  # (B, K)
        return super().propose(request)
