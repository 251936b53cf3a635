"""Drafting with a cheaper copy of the verifier itself (``--spec-drafter verifier-int8``).

The draft head guesses K tokens at once from one state, and every slot after
the first guesses blind (the shipped head: 1.95 tokens per iteration at K=2,
2.10 at K=4, against an oracle's 2.69 and 4.19 on the gettext test sentences).
The verifier's own 8-bit copy guesses each token from the tokens before it, as
the verifier does, so its drafts are accepted nearly as often as the oracle's
(2.68 and 4.16 on the same sentences). It costs K 8-bit calls instead of one
draft call, each a good part of an fp32 verify call of one position, so on a
small model a drafted token costs about what it saves (docs/results.md,
"Drafting with the verifier's 8-bit copy"). It needs no draft head, so any
fairseq transformer can draft with it. The fp32 verifier still decides every
token, so beta = 1 output is the fp32 greedy output, as with any drafter.
Under ``--sampling`` it drafts the copy's own sample slot after slot (each
slot's perturbed argmax, chosen by the loop), which the verifier keeps nearly
always, where the head's drafts, each from its own guess, are kept far less.

``--spec-drafter verifier-int4`` drafts with a 4-bit copy instead: every
product but the output projection in 4 bits (quantize.COPY_BITS), so a call
reads about half the weight bytes of the 8-bit one, for drafts kept a little
less often; the output projection keeps 8 bits, because the draft is its
argmax. Batches of ``session.ROWS_FROM`` rows or more draft with the 8-bit
batch graph in either copy.

The copy keeps its own self-attention cache and reads the fp32 encoder's keys
and values (the same source memory the verifier reads; the 8-bit copy has no
encoder call of its own). Its cache follows the committed tokens: a slot is
valid while the token fed there is still the committed one, so rejected
drafts are overwritten by the next call and nothing is copied.

Shapes: B active rows, T buffer width, K draft slots, N positions fed.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.backends.base import VerifierCalls
from nmt_specdec.decoding.backends.onnxruntime.quantize import COPY_BITS
from nmt_specdec.decoding.cache import StaticKVCache
from nmt_specdec.decoding.drafters import Choice, DraftRequest, DraftsByChoice

COPY_DRAFTERS = {"verifier-int8": 8, "verifier-int4": COPY_BITS}  # --spec-drafter: its copy's bits


class VerifierDrafter(DraftsByChoice):
    """Drafts, one token a call, from a cheaper copy of the verifier that reads
    the same encoder output (e.g. its int8 ONNX graph): its greedy tokens, or
    under ``--sampling`` each slot's perturbed argmax of the copy's own
    distribution (:meth:`propose_chosen`).

    Args:
        copy: returns the copy's model calls, up to date (called once a batch).
        pad: the padding id (never drafted: a pad draft is never accepted).
    """

    def __init__(self, copy: Callable[[], VerifierCalls], pad: int):
        self.copy, self.pad = copy, pad
        self.verifier: Optional[VerifierCalls] = None
        self.cross: Any = None
        self.cache: Optional[StaticKVCache] = None
        # (B,) per row, how many leading positions of the cache hold committed
        # tokens, and the drafts of the last proposal fed after them (B, K-1).
        self.valid: Optional[Tensor] = None
        self.fed: Optional[Tensor] = None
        self.fed_from: Optional[Tensor] = None
        self._host: Optional[tuple] = None  # one row: (position, drafts) fed last

    def start_batch(self, sample: dict, encoder_out: Any) -> None:
        self.verifier = self.copy()
        self.cross = self.verifier.cross_states(encoder_out)
        self.cache = None  # made at the first proposal, when the width is known
        self.fed = self._host = None

    def keep_rows(self, rows: Tensor) -> None:
        if self.cache is None:
            return
        self.cross = self.verifier.keep_rows(self.cross, rows)
        self.cache.keep_rows(rows)
        self.valid = self.valid.index_select(0, rows)
        if self.fed is not None:
            self.fed = self.fed.index_select(0, rows)
            self.fed_from = self.fed_from.index_select(0, rows)

    def propose(self, request: DraftRequest) -> Tensor:
        return self.propose_chosen(request, None)

    def propose_chosen(self, request: DraftRequest, choose: Optional[Choice]) -> Tensor:
        """(B, K) drafts, slot i's ``choose(logits, i)`` of the copy's (B, V)
        logits after the drafts before it (None: their argmax)."""
        if request.anchor is not None:
            return self._propose_one(request, choose)
        prefix, lengths, k = request.prefix, request.lengths, request.num_slots
        batch = lengths.numel()
        if self.cache is None:
            self.cache = self.verifier.new_cache(batch, prefix.size(1) + 1)
            self.valid = lengths.new_zeros(batch)
        self._follow(prefix, lengths)
        # 1. every committed token the cache lacks, in one call (one or two
        # tokens after an iteration: the correction, and the last draft when all
        # were accepted; more after turns that drafted nothing).
        new = int((lengths - self.valid).max())
        start = (lengths - new).clamp(min=0)  # rows that lack fewer re-feed cached ones
        columns = start.unsqueeze(1) + torch.arange(new)
        tokens = prefix.gather(1, columns.clamp(max=prefix.size(1) - 1))
        verified = self.verifier.verify(tokens, start, int(start.max()), self.cache, self.cross)
        last = (lengths - 1 - start).view(-1, 1, 1).expand(-1, 1, verified.logits.size(2))
        drafts = [self._best(verified.logits.gather(1, last)[:, 0], 0, choose)]
        self.valid = lengths.clone()
        # 2. each further draft from the one before it.
        position = lengths.clone()
        for slot in range(1, k):
            verified = self.verifier.verify(drafts[-1].view(-1, 1), position,
                                            int(position.max()), self.cache, self.cross)
            drafts.append(self._best(verified.logits[:, 0], slot, choose))
            position = position + 1
        proposal = torch.stack(drafts, 1)  # (B, K)
        self.fed, self.fed_from = proposal[:, : k - 1], lengths.clone()
        return proposal

    def _propose_one(self, request: DraftRequest, choose: Optional[Choice]) -> Tensor:
        """:meth:`propose` for one row, deciding with host ints: the calls
        themselves are most of an 8-bit step, so what is around them
        must stay small."""
        length, k = request.anchor[0] + 1, request.num_slots
        committed = request.prefix[0].numpy()
        if self.cache is None:
            self.cache = self.verifier.new_cache(1, committed.size + 1)
            self.valid = 0
            self._start, self._token = torch.zeros(1, dtype=torch.long), torch.zeros(
                1, 1, dtype=torch.long)
        if self._host is not None:  # the drafts of the last proposal that were committed
            since, fed = self._host
            same = 0
            while same < len(fed) and committed[since + same] == fed[same]:
                same += 1
            self.valid = min(since + same, length - 1)
        start = self.valid
        self._start[0] = start
        verified = self.verifier.verify(request.prefix[:, start:length], self._start, start,
                                        self.cache, self.cross, True)
        drafts = [self._best_one(verified.logits[0, length - 1 - start], 0, choose)]
        for position in range(length, length + k - 1):
            self._start[0], self._token[0, 0] = position, drafts[-1]
            verified = self.verifier.verify(self._token, self._start, position, self.cache,
                                            self.cross, True)
            drafts.append(self._best_one(verified.logits[0, 0], position - length + 1, choose))
        self.valid, self._host = length, (length, drafts[:-1])
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

    def _follow(self, prefix: Tensor, lengths: Tensor) -> None:
        """Moves ``valid`` past the last proposal's drafts that were committed."""
        if self.fed is None or self.fed.size(1) == 0:
            self.fed = None
            return
        width = self.fed.size(1)
        columns = (self.fed_from.unsqueeze(1) + torch.arange(width)).clamp(max=prefix.size(1) - 1)
        same = prefix.gather(1, columns).eq(self.fed).long().cumprod(1).sum(1)  # (B,)
        # Never past the last committed token (its own cache slot is fed next call).
        self.valid = torch.minimum(self.fed_from + same, lengths - 1)
        self.fed = None
