"""The draft head's graph behind the :class:`~nmt_specdec.decoding.drafters.Drafter`
interface: one draft call per iteration (``OrtDrafter``), or none where the
fused verify call already drafted after the token the loop committed
(``FusedDrafter``, ``--fused-draft``).

Shapes: B rows, K draft slots, C' candidates per slot.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, NamedTuple, Optional, Protocol

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.drafters import DraftRequest, GivesDistribution, ProposesCandidates

_CANDIDATE_SLOTS: Dict[int, Tensor] = {}


# What the drafters use of the backend (``session.OrtBackend``) and of its
# encoder output (``memory.Memory``), as protocols: the backend module
# imports this one, so importing it back would make an import cycle.
class DraftGraphs(Protocol):
    calls: Counter  # runtime calls by kind
    draft_session: Any  # the draft graph's session, replaced on re-export
    draft_logits_session: Any  # the draft head's logits (for --sampling), the same
    fused_drafter: Optional["FusedDrafter"]  # who drafts from fused calls this batch

    def draft_memory(self, memory: Any) -> Any: ...  # memory with the head's keys/values


class DraftMemory(Protocol):
    mask: Tensor  # (B, 1, 1, S)
    draft: List[Tensor]  # the draft head's keys and values

    def keep_rows(self, rows: Tensor) -> "DraftMemory": ...

    def _replace(self, **fields: Any) -> "DraftMemory": ...


class Pending(NamedTuple):
    """Drafts a fused call made, and after what.

    Attributes:
        drafts: (B, C', K) candidates per slot, best first.
        decision: (B, 4) the call's acceptance (see :data:`.fused.DECISION`).
        position: (B,) position of the token the drafts follow.
        hidden: (B, N, C) the call's states (the drafts read row ``final``'s).
    """

    drafts: Tensor
    decision: Tensor
    position: Tensor
    hidden: Tensor


def candidate_slots(count: int) -> Tensor:
    """(C,) 0..C-1: the draft graph returns as many candidates per slot as this is
    long (and 0..K are the block's offsets)."""
    if count not in _CANDIDATE_SLOTS:  # kept: its binding stays put
        _CANDIDATE_SLOTS[count] = torch.arange(count)
    return _CANDIDATE_SLOTS[count]


class OrtDrafter(ProposesCandidates, GivesDistribution):
    """The draft head's graph as a :class:`Drafter`."""

    def __init__(self, start_state: Tensor, backend: DraftGraphs):
        # The session is read from the backend at each call: it is replaced when
        # the model's weights change (re-export).
        self.start_state, self.backend = start_state, backend
        self.memory: Optional[DraftMemory] = None
        self._out: Dict[tuple, Tensor] = {}
        # One row's last token and block positions per K, written from the request's
        # host ints: no tensor op, and the call keeps their bindings.
        self._row_inputs: Dict[int, tuple] = {}

    def start_batch(self, sample: dict, encoder_out: DraftMemory) -> None:
        # The verifier's keys are not ours; the head's are made for drafting batches only.
        self.memory = self.backend.draft_memory(encoder_out)._replace(cross=[], states=None)

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
        last_tokens, positions = self._last_tokens_and_positions(request)
        # A kept buffer per shape keeps its binding; the loop consumes it within the iteration.
        shape = (last_tokens.numel(), count, request.num_slots)
        drafts = self._out.get(shape)
        if drafts is None:
            drafts = self._out[shape] = torch.empty(shape, dtype=torch.long)
        self.backend.draft_session.run([request.states, last_tokens, positions,
                                        self.memory.mask, candidate_slots(count),
                                        *self.memory.draft], [drafts])
        return drafts

    def draft_logits(self, request: DraftRequest) -> Tensor:
        """The head's logits, one call for the batch (a row's may differ in its
        last bits beside others: the sample does not read them, see
        :mod:`~nmt_specdec.decoding.decision.sampling`). The buffer is kept
        (its binding stays) and valid until the next call."""
        assert self.memory is not None
        self.backend.calls["draft"] += 1
        last_tokens, positions = self._last_tokens_and_positions(request)
        session = self.backend.draft_logits_session
        shape = (last_tokens.numel(), request.num_slots,
                 session.session.get_outputs()[0].shape[-1])
        logits = self._out.get(("logits", *shape))
        if logits is None:
            logits = self._out[("logits", *shape)] = torch.empty(shape)
        session.run([request.states, last_tokens, positions, self.memory.mask,
                     *self.memory.draft], [logits])
        return logits

    def _last_tokens_and_positions(self, request: DraftRequest):
        """(B,) each row's last committed token, (B, K+1) its position and the K slots'."""
        slots = candidate_slots(request.num_slots + 1)  # 0..K
        if request.anchor is None:
            last = request.lengths - 1  # (B,) position of the last committed token
            return (request.prefix.gather(1, last.unsqueeze(1)).squeeze(1),
                    last.unsqueeze(1) + slots)
        kept = self._row_inputs.get(request.num_slots)
        if kept is None:
            tokens, positions = torch.zeros(1, dtype=torch.long), slots.unsqueeze(0).clone()
            kept = self._row_inputs[request.num_slots] = (
                tokens, positions, tokens.numpy(), positions.numpy(), slots.numpy())
        position, token, _ = request.anchor
        kept[2][0] = token
        np.add(kept[4], position, out=kept[3][0])
        return kept[0], kept[1]


class FusedDrafter(OrtDrafter):
    """Takes its drafts from the last fused call where they follow what the loop
    committed (``--fused-draft``, see :mod:`.fused`): the same position, token
    and state (the loop decided as the graph did). Otherwise (a length
    constraint changed the decision, or K or C' changed) it runs the draft graph."""

    def __init__(self, start_state: Tensor, backend: DraftGraphs):
        super().__init__(start_state, backend)
        self.k, self.count = 0, 1  # K and C' of the last proposal: the fused call drafts as many
        self.pending: Optional[Pending] = None

    def start_batch(self, sample: dict, encoder_out: DraftMemory) -> None:
        super().start_batch(sample, encoder_out)
        self.pending = None  # the batch's first block comes from the draft graph
        self.backend.fused_drafter = self  # the verifier drafts for this generator now

    def keep_rows(self, rows: Tensor) -> None:
        super().keep_rows(rows)
        if self.pending is not None:
            self.pending = Pending(*(t.index_select(0, rows) for t in self.pending))

    def offer(self, drafts: Tensor, decision: Tensor, start: Tensor, hidden: Tensor) -> None:
        """From a fused call: drafts after ``decision``'s correction, which sits at
        ``start + accepted + 1``."""
        self.pending = Pending(drafts, decision, start + decision[:, 0] + 1, hidden)

    def propose(self, request: DraftRequest) -> Tensor:
        return self.propose_candidates(request, 1).squeeze(1)

    def propose_candidates(self, request: DraftRequest, count: int) -> Tensor:
        self.k, self.count = request.num_slots, count
        pending, self.pending = self.pending, None
        if (pending is not None and pending.drafts.shape[1:] == (count, request.num_slots)
                and _follows(pending, request)):
            return pending.drafts.clone()  # the next fused call writes its buffer
        return super().propose_candidates(request, count)


def _follows(pending: Pending, request: DraftRequest) -> bool:
    """Whether ``pending``'s drafts follow the request's last token and state."""
    if request.anchor is not None:  # one row, as host ints
        _, correction, final, _ = pending.decision[0].tolist()
        return request.anchor == (int(pending.position[0]), correction, final)
    last = request.lengths - 1  # (B,) position of the committed token
    final = pending.decision[:, 2]
    states = pending.hidden.gather(1, final.view(-1, 1, 1).expand(
        -1, 1, pending.hidden.size(2))).squeeze(1)
    return (torch.equal(last, pending.position)
            and torch.equal(request.prefix.gather(1, last.unsqueeze(1)).squeeze(1),
                            pending.decision[:, 1])
            and torch.equal(request.states, states))
