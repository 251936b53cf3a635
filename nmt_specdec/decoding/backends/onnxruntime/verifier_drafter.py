"""Drafting with a cheaper copy of the verifier itself (``--spec-drafter verifier-int8``).

The draft head guesses K tokens at once from one state, and every slot after
the first guesses blind. The verifier's own 8-bit copy guesses each token from
the tokens before it, as the verifier does, so its drafts are accepted nearly
as often as an oracle's. It costs K calls instead of one draft call, each a
good part of an fp32 verify call of one position (docs/results.md, "Drafting
with the verifier's 8-bit copy" and "The 4-bit copy, then the head"). It needs
no draft head, so any fairseq transformer can draft with it. The verifier
still decides every token, so beta = 1 output is the verifier's greedy output
(fp32, or 8-bit with ``--int8``), as with any drafter. Under ``--sampling`` it
drafts the copy's own sample slot after slot (each slot's perturbed argmax,
chosen by the loop), which the verifier keeps nearly always, where the head's
drafts, each from its own guess, are kept far less.

``--spec-drafter verifier-int4`` drafts with a 4-bit copy instead, whose call
reads about half the weight bytes of the 8-bit one, for drafts kept a little
less often.

A call is the copy's step graph (:mod:`.copy_graph`): one input per row, its
:data:`~.copy_graph.CANDIDATES` best tokens by the quantized output projection,
scored again in fp32; the draft is the best of them (under ``--sampling``, the
loop's choice from their distribution, every other token left out). Batches of
``session.ROWS_FROM`` rows or more draft with the copy's 8-bit batch graph
instead (the candidates: its logits' best).

The copy keeps no cache of its own: it reads the verifier's encoder keys and
values and its self-attention cache (``DraftRequest.cache``),
whose committed slots are exact, and writes the slots of the tokens it feeds
after them: the last committed token and all drafts but the last. The next
verify call feeds the same positions (the last committed token and K drafts)
and writes every one of them again, so the verifier never reads the copy's
keys and values, nothing is copied back, and no call catches the copy up on
tokens it missed, and its drafts read the prefix's exact keys and values.

Shapes: B active rows, T buffer width, K draft slots, C candidates, V vocabulary.
"""

from __future__ import annotations

from operator import is_
from typing import Any, Callable, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.backends.onnxruntime.copy_graph import candidates_for
from nmt_specdec.decoding.backends.onnxruntime.graph_session import Scratch
from nmt_specdec.decoding.backends.onnxruntime.quantize import COPY_BITS
from nmt_specdec.decoding.cache import StaticKVCache
from nmt_specdec.decoding.drafters import Choice, DraftRequest, DraftsByChoice

COPY_DRAFTERS = {"verifier-int8": 8, "verifier-int4": COPY_BITS}  # --spec-drafter: its copy's bits
# A single row's greedy drafts end after one whose share of its candidates' probability is below this:
# the fastest of 0.1-0.4 on the gettext test sentences (docs/results.md, "A chain ends at its
# first EOS draft").
STOP_BELOW = 0.25


class CopyStep:
    """The copy's calls: one input per row over the verifier's cache -> the
    (B, C) candidates, best first, and their (B, C) scores.

    A call whose tensors are those of the call before (a sentence's drafts, slot
    after slot) runs on the bindings as they are, without the Python around them:
    the call is made K times an iteration.

    Args:
        backend: the copy's ``OrtBackend`` (its step graph's session, and its
            verifier, whose batch graph takes ``rows_from`` rows or more).
        rows_from: the batch size from which the batch graph drafts.
    """

    def __init__(self, backend: Any, rows_from: int):
        self.backend, self.rows_from = backend, rows_from
        self.scratch = Scratch()
        self._last: Optional[tuple] = None  # (session, its bindings, the tensors bound)

    def cross_states(self, encoder_out: Any) -> Any:
        return self.backend.verifier().cross_states(encoder_out)

    def keep_rows(self, cross: Any, rows: Tensor) -> Any:
        return self.backend.verifier().keep_rows(cross, rows)

    def __call__(self, tokens: Tensor, start: Tensor, start_max: int, cache: StaticKVCache,
                 cross: Any, uniform: bool = False) -> Tuple[Tensor, Tensor]:
        """(scores, candidates) of ``tokens`` (B, 1) at positions ``start`` (B,),
        ``start_max`` their largest; writes their keys and values into ``cache``."""
        b, batch = self.backend, tokens.size(0)
        if batch >= self.rows_from:
            verified = b.verifier().verify(tokens, start, start_max, cache, cross, uniform)
            return verified.logits[:, 0].topk(candidates_for(b.vocab), -1)
        cache.reserve(start_max + 1)  # before the graph reads the buffers
        scores, candidates, keys, values, mask = self._outputs(batch, cache.slots)
        np.less(np.arange(cache.slots), start.numpy()[:, None], out=mask.numpy()[:, 0, 0])
        session, last = b.copy_step_session, self._last
        bound = (tokens, start, cross, cache.key, cache.value, mask, scores)
        if (last is not None and last[0] is session and last[1] == session.bindings
                and all(map(is_, bound, last[2]))):
            session.run_bound()
        else:
            session.run([tokens, start, cross.mask, mask, *b.verifier().past_views(cache),
                         *cross.cross], [scores, candidates, keys.flatten(0, 1),
                                         values.flatten(0, 1)])
            self._last = (session, session.bindings, bound)
        cache.begin_pass(start, 1, start_max, uniform, mask=False)
        cache.store_all(keys, values)
        return scores, candidates

    def _outputs(self, batch: int, slots: int) -> tuple:
        """The buffers of B rows over T slots: scores, candidates, (L, B, H, 1, D)
        keys and values and the (B, 1, 1, T) mask (the same objects while the
        shapes hold: the call's bindings then hold too)."""
        b, take, width = self.backend, self.scratch.take, candidates_for(self.backend.vocab)
        keys = take("keys", (b.layers, batch, b.heads, 1, b.dim // b.heads))
        return (take("scores", (batch, width)), take("candidates", (batch, width), torch.long),
                keys, take("values", keys.shape), take("self_mask", (batch, 1, 1, slots), torch.bool))


class VerifierDrafter(DraftsByChoice):
    """Drafts, one token a call, from a cheaper copy of the verifier that reads
    the same encoder output and the verifier's cache: the best of its
    candidates, or under ``--sampling`` each slot's perturbed argmax of the
    copy's own distribution over them (:meth:`propose_chosen`).

    Args:
        copy: returns the copy's calls, up to date (called once a batch).
        pad: the padding id (never drafted: a pad draft is never accepted).
        vocab: V, the width of the logits a choice reads.
        stop_below: a single row's greedy drafts end after one whose share of its
            candidates' probability is below this (0: only at an EOS draft).
    """

    def __init__(self, copy: Callable[[], CopyStep], pad: int, vocab: int,
                 stop_below: float = STOP_BELOW):
        self.copy, self.pad, self.vocab, self.stop_below = copy, pad, vocab, stop_below
        self.step: Optional[CopyStep] = None
        self.cross: Any = None
        # One row's call inputs, kept: a graph runtime then keeps their bindings.
        self._start = torch.zeros(1, dtype=torch.long)
        self._token = torch.zeros(1, 1, dtype=torch.long)

    def start_batch(self, sample: dict, encoder_out: Any) -> None:
        self.step = self.copy()
        self.cross = self.step.cross_states(encoder_out)

    def keep_rows(self, rows: Tensor) -> None:
        self.cross = self.step.keep_rows(self.cross, rows)

    def propose(self, request: DraftRequest) -> Tensor:
        return self.propose_chosen(request, None)

    def propose_chosen(self, request: DraftRequest, choose: Optional[Choice]) -> Tensor:
        """(B, K) drafts, slot i's ``choose(logits, i)`` of the copy's (B, V)
        logits after the drafts before it (None: the best candidate)."""
        if request.cache is None:
            raise ValueError("VerifierDrafter reads the verifier's cache: the loop passes it")
        if request.anchor is not None:
            return self._propose_one(request, choose)
        # Each call feeds one token per row: first the last committed one, at its
        # own position (rows start at different slots), then each draft after it.
        position = request.lengths - 1
        token = request.prefix.gather(1, position.view(-1, 1))
        first_max = int(position.max())  # one host read, not one a call
        drafts: List[Tensor] = []
        for slot in range(request.num_slots):
            scores, candidates = self.step(token, position, first_max + slot, request.cache,
                                           self.cross)
            drafts.append(self._best(scores, candidates, slot, choose))
            token, position = drafts[-1].view(-1, 1), position + 1
        return torch.stack(drafts, 1)

    def _propose_one(self, request: DraftRequest, choose: Optional[Choice]) -> Tensor:
        """:meth:`propose` for one row, deciding with host ints: the calls
        themselves are most of a step, so what is around them must stay small.
        Where the loop takes a chain shorter than K (``request.eos`` given), the
        drafts end at an EOS draft (a sentence's last iteration makes no calls
        past its end) or, a best draft, at one whose share of its candidates'
        probability is below ``stop_below`` (the verifier seldom keeps the
        drafts after it).
        Where the drafts end depends on the copy's own scores and drafts alone,
        so the verifier's decision, greedy or sampled, is unchanged."""
        position, token, _ = request.anchor
        drafts = []
        for slot in range(request.num_slots):
            self._start[0], self._token[0, 0] = position + slot, token
            scores, candidates = self.step(self._token, self._start, position + slot,
                                           request.cache, self.cross, True)
            token, share = self._best_one(scores, candidates, slot, choose)
            drafts.append(token)
            if request.eos is not None and (token == request.eos or share < self.stop_below):
                break
        return torch.tensor([drafts])

    def _best(self, scores: Tensor, candidates: Tensor, slot: int,
              choose: Optional[Choice]) -> Tensor:
        """(B,) slot ``slot``'s drafts of the (B, C) candidates, never pad."""
        scores = scores.masked_fill(candidates == self.pad, -torch.inf)
        if choose is None:
            return candidates.gather(1, scores.argmax(-1, keepdim=True))[:, 0]
        return torch.as_tensor(choose(self._logits(scores, candidates), slot))

    def _best_one(self, scores: Tensor, candidates: Tensor, slot: int,
                  choose: Optional[Choice]) -> Tuple[int, float]:
        """:meth:`_best` of one row's (1, C) candidates, on the host, and the best
        draft's share of the candidates' probability. A chosen draft (under
        ``--sampling``) gets 1: a sample's share says little of whether the
        verifier draws the same token (its drafts are kept ~95% of the time at
        any share), so only an EOS ends its chain."""
        if choose is not None:
            return int(self._best(scores, candidates, slot, choose)[0]), 1.0
        ids = candidates.numpy()[0]
        row = np.where(ids == self.pad, -np.inf, scores.numpy()[0])
        best = row.argmax()
        return int(ids[best]), float(1.0 / np.exp(row - row[best]).sum())

    def _logits(self, scores: Tensor, candidates: Tensor) -> Tensor:
        """(B, V): the candidates' scores, every other token -inf."""
        logits = torch.full((scores.size(0), self.vocab), -torch.inf)
        return logits.scatter_(1, candidates, scores)
