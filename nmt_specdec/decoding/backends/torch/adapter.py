"""Eager PyTorch model calls: a thin adapter over the lean passes (the GPU path).

:class:`~nmt_specdec.decoding.passes.verifier_pass.LeanVerifier` and
:class:`~nmt_specdec.decoding.passes.draft_pass.LeanDraftHead` do
the arithmetic; this module only puts them behind
:class:`~nmt_specdec.decoding.backends.base.Backend` and counts the calls.
"""

from __future__ import annotations

from typing import List, Optional

from torch import Tensor, nn

from nmt_specdec.decoding.backends.base import Backend, Verified, VerifierCalls
from nmt_specdec.decoding.cache import StaticKVCache
from nmt_specdec.decoding.drafters import (
    DraftRequest,
    GivesDistribution,
    PinsState,
    ProposesCandidates,
)
from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead
from nmt_specdec.decoding.passes.layers import CrossKV
from nmt_specdec.decoding.passes.verifier_pass import EncoderOut, LeanVerifier
from nmt_specdec.decoding.passes.weights_watch import WeightsWatch


class TorchVerifier(VerifierCalls):
    """:class:`LeanVerifier` as :class:`VerifierCalls` (forward + logits in one call)."""

    def __init__(self, decoder: nn.Module, backend: Backend):
        self.lean = LeanVerifier(decoder)
        self.embed = self.lean.embed
        self._backend = backend

    def cross_states(self, encoder_out: EncoderOut) -> List[CrossKV]:
        return self.lean.cross_states(encoder_out)

    def keep_rows(self, cross: List[CrossKV], rows: Tensor) -> List[CrossKV]:
        return self.lean.keep_rows(cross, rows)

    def new_cache(self, batch: int, slots: int, fixed: bool = False) -> StaticKVCache:
        return self.lean.new_cache(batch, slots, fixed)

    def verify(self, tokens: Tensor, start: Tensor, start_max: int, cache: StaticKVCache,
               cross: List[CrossKV], uniform: bool = False, tree=None) -> Verified:
        self._backend.calls["verify"] += 1
        hidden = self.forward(tokens, start, start_max, cache, cross, uniform, tree)
        return Verified(hidden, self.logits(hidden))

    # The two halves stay reachable: tests and the profiler call them.
    def forward(self, *args, **kwargs) -> Tensor:
        return self.lean.forward(*args, **kwargs)

    def logits(self, hidden: Tensor) -> Tensor:
        return self.lean.logits(hidden)


class DraftHeadDrafter(ProposesCandidates, GivesDistribution, PinsState):
    """Greedy drafts from the model's NAR draft head (one lean pass per iteration)."""

    def __init__(self, draft_head: nn.Module, pad: int, backend: Backend,
                 refine_steps: Optional[int] = None):
        self.draft_head, self.pad, self.refine_steps = draft_head, pad, refine_steps
        self.lean = LeanDraftHead(draft_head, pad, refine_steps)
        self._watch = WeightsWatch(draft_head)
        self._backend = backend

    def start_batch(self, sample: dict, encoder_out: EncoderOut) -> None:
        if self._watch.changed():  # trained or moved since: re-read the weights
            self.lean = LeanDraftHead(self.draft_head, self.pad, self.refine_steps)
        self.lean.start_batch(encoder_out)

    def keep_rows(self, rows: Tensor) -> None:
        self.lean.keep_rows(rows)

    def pin_state(self, pin) -> None:
        self.lean.cross = pin("draft_cross", self.lean.cross)

    def start_states(self, batch: int, like: Tensor) -> Tensor:
        return self.lean.start_states(batch).to(like)

    def propose(self, request: DraftRequest) -> Tensor:
        self._backend.calls["draft"] += 1
        return self.lean.propose(*self._inputs(request), request.num_slots)

    def draft_logits(self, request: DraftRequest) -> Tensor:
        self._backend.calls["draft"] += 1
        return self.lean.slot_logits(*self._inputs(request), request.num_slots)

    def propose_candidates(self, request: DraftRequest, count: int) -> Tensor:
        self._backend.calls["draft"] += 1
        logits = self.lean.slot_logits(*self._inputs(request), request.num_slots)
        top = logits.topk(count, dim=-1).indices  # (B, K, C)
        # Column 0 is exactly propose()'s argmax, also where ties would order differently.
        top[:, :, 0] = logits.argmax(dim=-1)
        return top.transpose(1, 2).contiguous()  # (B, C, K): flat in verify order

    @staticmethod
    def _inputs(request: DraftRequest):
        last = request.lengths - 1  # (B,) position of the last committed token
        last_tokens = request.prefix.gather(1, last.unsqueeze(1)).squeeze(1)
        return request.states, last_tokens, last


class TorchBackend(Backend):
    """The model's own weights in eager PyTorch (any device).

    Args:
        model: a fairseq encoder-decoder (with a ``draft_head`` for K > 0).
        refine_steps: the draft head's refinement runs (None: the head's own setting).
    """

    name = "torch"
    static_passes = True

    def __init__(self, model: nn.Module, refine_steps: Optional[int] = None):
        super().__init__()
        self.model, self.refine_steps = model, refine_steps
        self._verifier: Optional[TorchVerifier] = None
        self._watch = WeightsWatch(model)  # a replaced decoder is a change of the model

    def encode(self, net_input: dict) -> EncoderOut:
        self.calls["encode"] += 1
        return self.model.encoder.forward_torchscript(net_input)

    def verifier(self) -> TorchVerifier:
        if self._watch.changed() or self._verifier is None:
            self._verifier = TorchVerifier(self.model.decoder, self)
        return self._verifier

    def drafter(self, pad: int, kind: str = "head") -> DraftHeadDrafter:
        return DraftHeadDrafter(self.model.draft_head, pad, self, self.refine_steps)
