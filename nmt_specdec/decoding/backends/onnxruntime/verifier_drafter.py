"""Drafting with a cheaper copy of the verifier itself (``--spec-drafter verifier-int8``).

The draft head guesses K tokens at once from one state, and every slot after
the first guesses blind. The verifier's own 8-bit copy guesses each token from
the tokens before it, as the verifier does, so its drafts are accepted nearly
as often as an oracle's. It costs K calls instead of one draft call, each a
good part of an fp32 verify call of one position (docs/results.md, "Drafting
with the verifier's 8-bit copy" and "The 4-bit copy, then the head"). It needs
no draft head, so any fairseq transformer can draft with it. The fp32 verifier
still decides every token, so beta = 1 output is the fp32 greedy output, as
with any drafter. Under ``--sampling`` it drafts the copy's own sample slot
after slot (each slot's perturbed argmax, chosen by the loop), which the
verifier keeps nearly always, where the head's drafts, each from its own
guess, are kept far less.

``--spec-drafter verifier-int4`` drafts with a 4-bit copy instead: every
product but the output projection in 4 bits (quantize.COPY_BITS), so a call
reads about half the weight bytes of the 8-bit one, for drafts kept a little
less often; the output projection keeps 8 bits, because the draft is its
argmax. Batches of ``session.ROWS_FROM`` rows or more draft with the 8-bit
batch graph in either copy.

The copy keeps no cache of its own: it reads the fp32 encoder's keys and
values and the fp32 verifier's self-attention cache (``DraftRequest.cache``),
whose committed slots are exact, and writes the slots of the tokens it feeds
after them: the last committed token and all drafts but the last. The next
verify call feeds the same positions (the last committed token and K drafts)
and writes every one of them again, so the verifier never reads the copy's
keys and values, nothing is copied back, and no call catches the copy up on
tokens it missed, and its drafts read the prefix's exact keys and values.

Shapes: B active rows, T buffer width, K draft slots, N positions fed.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.backends.base import VerifierCalls
from nmt_specdec.decoding.backends.onnxruntime.quantize import COPY_BITS
from nmt_specdec.decoding.drafters import Choice, DraftRequest, DraftsByChoice

COPY_DRAFTERS = {"verifier-int8": 8, "verifier-int4": COPY_BITS}  # --spec-drafter: its copy's bits


class VerifierDrafter(DraftsByChoice):
    """Drafts, one token a call, from a cheaper copy of the verifier that reads
    the same encoder output (e.g. its int8 ONNX graph) and the verifier's cache:
    its greedy tokens, or under ``--sampling`` each slot's perturbed argmax of the
    copy's own distribution (:meth:`propose_chosen`).

    Args:
        copy: returns the copy's model calls, up to date (called once a batch).
        pad: the padding id (never drafted: a pad draft is never accepted).
    """

    def __init__(self, copy: Callable[[], VerifierCalls], pad: int):
        self.copy, self.pad = copy, pad
        self.verifier: Optional[VerifierCalls] = None
        self.cross: Any = None
        # One row's call inputs, kept: a graph runtime then keeps their bindings.
        self._start = torch.zeros(1, dtype=torch.long)
        self._token = torch.zeros(1, 1, dtype=torch.long)

    def start_batch(self, sample: dict, encoder_out: Any) -> None:
        self.verifier = self.copy()
        self.cross = self.verifier.cross_states(encoder_out)

    def keep_rows(self, rows: Tensor) -> None:
        self.cross = self.verifier.keep_rows(self.cross, rows)

    def propose(self, request: DraftRequest) -> Tensor:
        return self.propose_chosen(request, None)

    def propose_chosen(self, request: DraftRequest, choose: Optional[Choice]) -> Tensor:
        """(B, K) drafts, slot i's ``choose(logits, i)`` of the copy's (B, V)
        logits after the drafts before it (None: their argmax)."""
        if request.cache is None:
            raise ValueError("VerifierDrafter reads the verifier's cache: the loop passes it")
        if request.anchor is not None:
            return self._propose_one(request, choose)
        # Each call feeds one token per row: first the last committed one, at its
        # own position (rows start at different slots), then each draft after it.
        position = request.lengths - 1
        token = request.prefix.gather(1, position.view(-1, 1))
        first_max = int(position.max())  # one host read, not one a call
        drafts = []
        for slot in range(request.num_slots):
            verified = self.verifier.verify(token, position, first_max + slot, request.cache,
                                            self.cross)
            drafts.append(self._best(verified.logits[:, 0], slot, choose))
            token, position = drafts[-1].view(-1, 1), position + 1
        return torch.stack(drafts, 1)

    def _propose_one(self, request: DraftRequest, choose: Optional[Choice]) -> Tensor:
        """:meth:`propose` for one row, deciding with host ints: the calls
        themselves are most of an 8-bit step, so what is around them
        must stay small."""
        position, token, _ = request.anchor
        drafts = []
        for slot in range(request.num_slots):
            self._start[0], self._token[0, 0] = position + slot, token
            verified = self.verifier.verify(self._token, self._start, position + slot,
                                            request.cache, self.cross, True)
            token = self._best_one(verified.logits[0, 0], slot, choose)
            drafts.append(token)
        return torch.tensor([drafts])

    def _best(self, logits: Tensor, slot: int, choose: Optional[Choice]) -> Tensor:
        """(B,) slot ``slot``'s drafts of the copy's (B, V) logits, never pad."""
        logits[:, self.pad] = -torch.inf
        return logits.argmax(-1) if choose is None else torch.as_tensor(choose(logits, slot))

    def _best_one(self, logits: Tensor, slot: int, choose: Optional[Choice]) -> int:
        """:meth:`_best` of one row's (V,) logits, on the host."""
        scores = logits.numpy()
        scores[self.pad] = -np.inf
        if choose is None:
            return int(scores.argmax())
        return int(choose(logits.view(1, -1), slot)[0])
