"""One sentence on the CPU: the batched loop's turn, deciding on the host.

At batch 1 on a CPU, an iteration of the batched loop spends a large share of
its time outside the runtime: ~120 small tensor ops (acceptance, commit, the
EOS cut, per-row writes and gathers) that exist to serve B rows at once, each
a few microseconds of dispatch on tensors of a handful of elements. For one row
the host keeps the committed tokens in a list and decides with Python ints. At
beta = 1 it also decides on numpy views of the verifier's scores
(:func:`accept_host`: a max, an argmax and a gather over the (N, V) block)
instead of tensor ops.

What is not a host decision is the batched loop's own code: the start, K, the
draft, the model calls, the constraints and the scores' certification are the
shared steps of :mod:`.steps`, and the decisions are the host forms of
:mod:`..decision` (:func:`~..decision.tree.accept_host`,
:func:`~..decision.acceptance.commit_host`,
:func:`~..decision.constraints.constrain_host_`).

:func:`~.choose_loop` takes it for a batch of one on the CPU, chains and draft
trees alike. Tested equal to the batched loop token for token, score for
score, iteration for iteration (``tests/integration/test_single_row.py``).

Shapes: K draft slots, C candidates per slot, N verified inputs, V vocabulary.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.backends.base import Verified
from nmt_specdec.decoding.decision.acceptance import commit_host
from nmt_specdec.decoding.decision.constraints import (
    Constraints,
    constrain_host_,
    constrain_logits_,
)
from nmt_specdec.decoding.decision.certified import certified_sample, known_sample
from nmt_specdec.decoding.decision.draws import gumbel_few, gumbel_host
from nmt_specdec.decoding.decision.sampling import draft_lprobs
from nmt_specdec.decoding.decision.scores import normaliser
from nmt_specdec.decoding.decision.tree import Decision, accept_host
from nmt_specdec.decoding.draft_tree import (
    TreeLayout,
    flatten_candidates,
    move_leaf_keys,
    tree_layout,
)
from nmt_specdec.decoding.drafters import DraftRequest, DraftsByChoice
from nmt_specdec.decoding.loops.steps import (
    Batch,
    LoopParts,
    constrained_scores,
    draft_inputs,
    end_turn,
    inexact_row,
    plan_turn,
)
from nmt_specdec.decoding.stats import Turn, tally_host_turns


def decode_single_row(parts: LoopParts, batch: Batch,
                      kept: Optional["RowBuffers"] = None) -> List[tuple]:
    """The loop for a batch of one: ``[(tokens, scores, iterations)]``.

    ``kept``: the buffers of the previous sentence's loop, taken over (default: new)."""
    row, options = _HostRow(batch, kept or RowBuffers()), parts.options
    turns: List[Turn] = []
    finished = False
    while not finished:
        started = time.perf_counter()
        length = len(row.committed)  # BOS included; the last token is not cached yet
        k, checks = plan_turn(parts, batch.k_max, len(turns), length, batch.limits)
        tree = tree_layout(k, options.candidates) if k > 0 and options.candidates > 1 else None
        planned = k  # what the K policy chose; a chain may end sooner (:meth:`_HostRow.draft`)
        tokens, k = row.draft(parts, k, options.candidates if tree is not None else 1, batch.cache)
        row.host_start[0] = length - 1
        verified = parts.verifier.verify(tokens, row.start, length - 1, batch.cache,
                                         batch.cross, True, tree)
        decided, flat, lse = row.decide(parts, verified, tokens, k, tree, checks)
        if decided.leaf:  # a leaf taken: its keys/values move to its depth's slot
            move_leaf_keys(batch.cache, row.start, torch.tensor([decided.path]),
                           torch.tensor([decided.accepted]))
        count, finished = row.commit(decided, flat, lse, parts.rules.eos)
        if batch.k_max:  # the state that predicted the correction: the next draft reads it
            row.states = verified.hidden[:, row.final]
        turns.append(Turn(k, decided.accepted, count, finished))
        end_turn(parts, planned, [count] if parts.k_policy.wants_counts else [], started)
    parts.stats.sentences += 1
    parts.stats.add_tally(*tally_host_turns(turns, batch.k_max))
    return [(torch.tensor(row.committed[1:]),
             torch.tensor(row.scores[1:], dtype=batch.rows.scores.dtype), len(turns))]


class RowBuffers:
    """The tensors a sentence's verify calls bind, and numpy views of what they
    return, kept from sentence to sentence: a graph runtime then keeps their
    bindings, and no view is made again."""

    def __init__(self) -> None:
        self.start = torch.zeros(1, dtype=torch.long)  # (1,) the verify call's first position
        self.host_start = self.start.numpy()
        self.inputs: Dict[int, Tuple[Tensor, np.ndarray]] = {}  # K+1 -> (1, K+1) chain inputs
        self.views: Dict[int, Tuple[Tensor, np.ndarray]] = {}  # see _HostRow._host_view


class _HostRow:
    """One sentence's committed tokens and scores as host lists. The drafter reads
    the batch's buffers, which the host writes through numpy views (a scalar
    write, no tensor op); tensors the verify call binds are kept between turns
    (a graph runtime then keeps its bindings)."""

    def __init__(self, batch: Batch, kept: RowBuffers):
        self.rows = batch.rows
        self.prefix = self.rows.tokens[:, :-1]  # the drafter's view of the committed tokens
        self.host_tokens, self.host_length = self.rows.tokens.numpy(), self.rows.lengths.numpy()
        self.committed, self.scores = [int(self.host_tokens[0, 0])], [0.0]
        self.limit = batch.limits[0]  # the output step at which EOS is forced
        self.states = self.rows.states  # (1, C) the state that predicted the last token
        self.final = -1  # the verify input whose state ``states`` is (-1: the start)
        self.start, self.host_start = kept.start, kept.host_start
        self.host_start[0] = 0
        self.inputs, self._views = kept.inputs, kept.views
        self.offsets = torch.arange(batch.k_max + 1)
        self.key = int(self.rows.keys[0])  # the sentence's sampling key

    def draft(self, parts: LoopParts, k: int, candidates: int, cache) -> Tuple[Tensor, int]:
        """Step 1: the (1, N) verify inputs (``cache``: the verifier's, which a
        drafter may read) and K. A chain ends at its first EOS draft: nothing after
        it is ever committed, so verifying it (and, for a drafter that pays per
        token, drafting it) is time for nothing; K is then the drafts before it
        and the EOS (or fewer, where the drafter stopped sooner: ``DraftRequest.eos``).
        The verifier decides the same tokens either way."""
        if k == 0:
            return self._inputs(0)[0], 0
        anchor = (len(self.committed) - 1, self.committed[-1], self.final)
        request = DraftRequest(self.prefix, self.rows.lengths, self.states, self.rows.index,
                               k, anchor, cache, None if candidates > 1 else parts.rules.eos)
        if parts.sampling is not None:
            drafts = self._sample_drafts(parts, request, k, candidates)  # (C, K)
            if candidates > 1:
                last = self._inputs(0)[0]
                return flatten_candidates(last, torch.from_numpy(drafts)[None]), k
            drafts = drafts[0]
        elif candidates > 1:
            return draft_inputs(parts.drafter, request, self._inputs(0)[0], candidates), k
        else:
            drafts = parts.drafter.propose(request)[0].numpy()
        ends = np.flatnonzero(drafts == parts.rules.eos)
        k = int(ends[0]) + 1 if ends.size else len(drafts)
        tokens, host = self._inputs(k)
        host[0, 1:] = drafts[:k]
        return tokens, k

    def _inputs(self, k: int) -> Tuple[Tensor, np.ndarray]:
        """The kept (1, K+1) verify inputs and their numpy view, the last committed
        token written in column 0."""
        kept = self.inputs.get(k + 1)
        if kept is None:
            tensor = self.rows.lengths.new_zeros(1, k + 1)
            kept = self.inputs[k + 1] = (tensor, tensor.numpy())
        kept[1][0, 0] = self.committed[-1]  # a numpy scalar write: a tenth of a tensor's
        return kept

    def _sample_drafts(self, parts: LoopParts, request: DraftRequest, k: int,
                       candidates: int) -> np.ndarray:
        """Step 1 under sampling (:mod:`.sampled`'s, on the host): (C, K) each
        slot's C best perturbed tokens of the drafter at the output position the
        slot proposes, the perturbed argmax first (a chain drafter: C = 1)."""
        length = len(self.committed)
        if isinstance(parts.drafter, DraftsByChoice):  # a chain: slot after slot
            def choose(logits: Tensor, slot: int) -> np.ndarray:
                lprobs = draft_lprobs(logits, parts.rules.temperature).numpy()
                return parts.sampling.perturbed_host(lprobs, self.key, [length + slot]).argmax(1)

            return parts.drafter.propose_chosen(request, choose).numpy()
        lprobs = draft_lprobs(parts.drafter.draft_logits(request), parts.rules.temperature)
        perturbed = parts.sampling.perturbed_host(lprobs[0].numpy(), self.key,
                                                  range(length, length + k))
        if candidates == 1:
            return perturbed.argmax(axis=1)[None]
        return np.argsort(-perturbed, axis=1, kind="stable")[:, :candidates].T.copy()

    def decide(self, parts: LoopParts, verified: Verified, tokens: Tensor, k: int,
               tree: Optional[TreeLayout], checks: tuple
               ) -> Tuple[Decision, np.ndarray, np.ndarray]:
        """Step 3, accept: the decision, the (N, V) scores it read and the (N,)
        normaliser, all on the host."""
        options, rules = parts.options, parts.rules
        if k == 0 and verified.decision is None:
            quick = (self._greedy(verified, rules, checks, options.acceptance.margin)
                     if parts.sampling is None else self._sampled(parts, verified, checks))
            if quick is not None:
                return quick
        # Beyond "never pad" (the call's own decision reads untempered raw scores).
        constrained = any(checks) or bool(rules.unk_penalty) or rules.temperature != 1
        exact = options.acceptance.exact
        # The call certifies beta = 1's scores; sampling and beta > 1 certify their own.
        certify = exact and parts.sampling is None
        decided = _fused_decision(verified.decision, exact and not constrained,
                                  tokens, k)
        if decided is not None:  # the call's own, on raw scores
            logits = verified.logits.float()  # (1, N, V): numpy has no bfloat16
            lse = verified.normaliser if verified.normaliser is not None else normaliser(logits)
        else:
            logits, lse = constrained_scores(parts.verifier, verified,
                                             self._constraint(rules, k, tree, checks),
                                             options.acceptance.margin,
                                             on_host=True, temperature=rules.temperature,
                                             certify=certify)
        flat = logits.detach().numpy()[0]  # (N, V), the same memory as ``logits``
        lse = lse.detach().numpy()[0]
        if decided is None:
            width = 1 if tree is None else options.candidates
            # A sampled turn decides on perturbed scores; the commit reads ``flat``.
            decided_on = flat if parts.sampling is None else self._perturbed(
                parts, verified, flat, lse, k, tree)
            inexact = None
            if not certify and parts.sampling is None and verified.bound is not None:
                inexact = inexact_row(parts.verifier, verified, 0, flat, rules)
            decided = accept_host(logits, decided_on, tokens, k, width, options.acceptance,
                                  inexact)
        return decided, flat, lse

    def _constraint(self, rules: Constraints, k: int, tree: Optional[TreeLayout],
                    checks: tuple):
        """Applies fairseq's constraints to this turn's (1, N, V) logits in place."""
        if any(checks) or rules.unk_penalty:
            offsets = self.offsets[: k + 1] if tree is None else tree.offsets
            return partial(constrain_logits_, steps=self.start.unsqueeze(1) + offsets,
                           max_len=self.rows.max_len, rules=rules,
                           check_min_len=checks[0], check_max_len=checks[1])
        return partial(_constrain_on_host, rules=rules)  # never pad, as a column write

    def _perturbed(self, parts: LoopParts, verified: Verified, flat: np.ndarray,
                   lse: np.ndarray, k: int, tree: Optional[TreeLayout]) -> np.ndarray:
        """Under sampling, the (N, V) scores step 3 decides on: the constrained
        log-probabilities perturbed at the output position each input predicts
        (:meth:`~..decision.sampling.SamplingRule.perturbed_host`; on inexact
        logits, :meth:`~..decision.sampling.SamplingRule.certified_host`)."""
        offsets = range(k + 1) if tree is None else tree.offsets.tolist()
        length = len(self.committed)
        positions = [length + offset for offset in offsets]
        if verified.bound is not None:
            inexact = inexact_row(parts.verifier, verified, 0, flat, parts.rules)
            return parts.sampling.certified_host(flat, lse, inexact, self.key, positions)
        return parts.sampling.perturbed_host(flat - lse[:, None], self.key, positions)

    def _greedy(self, verified: Verified, rules: Constraints, checks: tuple, margin: float
                ) -> Optional[Tuple[Decision, np.ndarray, np.ndarray]]:
        """A greedy turn's :meth:`decide` read straight from the call's buffers:
        the same decision (fairseq's constraints as column writes on the one row,
        the best score certified against the bound as
        :func:`~.steps.constrained_scores` does), in less than half its host
        time. None where the general path must decide: scores other than
        float32, no normaliser from the call, a best score not certified, or an
        unk penalty with a bound (the general path constrains the same buffer
        again: the column writes below repeat harmlessly, a penalty would not)."""
        if (verified.logits.dtype is not torch.float32 or verified.normaliser is None
                or (rules.unk_penalty and verified.bound is not None) or rules.temperature != 1):
            return None
        flat = self._host_view(verified.logits)[0]  # (1, V)
        # The output step this position predicts: its committed tokens but BOS.
        row = constrain_host_(flat, len(self.committed) - 1, self.limit, rules, *checks)[0]
        token = int(row.argmax())
        if verified.bound is not None:
            # (1,) arrays: float32 arithmetic, as certain() computes it.
            above = self._host_view(verified.bound)[0] + margin
            if not row[token] > above[0]:
                return None
        return (Decision(0, token, False, [0], []), flat,
                self._host_view(verified.normaliser)[0])

    def _sampled(self, parts: LoopParts, verified: Verified, checks: tuple
                 ) -> Optional[Tuple[Decision, np.ndarray, np.ndarray]]:
        """A sampled turn's :meth:`decide` (K = 0) read straight from the call's
        buffers: the token of :mod:`~..decision.certified` (from the call's
        candidates where they settle the top k, else from the checks), its logit
        (exact to fp32's rounding) written into the scores the commit reads. None where the general
        path must decide: no certified projection, a temperature or an unk
        penalty (they move the scores and the ceiling), or a cut other than top-k."""
        rules, check = parts.rules, parts.verifier.projection_check
        if (verified.bound is None or check is None or not parts.sampling.certifiable
                or rules.temperature != 1 or rules.unk_penalty
                or verified.logits.dtype is not torch.float32 or verified.normaliser is None):
            return None
        view = self._host_view
        flat = view(verified.logits)[0]  # (1, V)
        row = constrain_host_(flat, len(self.committed) - 1, self.limit, rules, *checks)[0]
        position, topk = np.int64(len(self.committed)), parts.sampling.topk
        noise = partial(gumbel_host, self.key, position)
        found = known_sample(row, view(verified.candidates)[0, 0], float(view(verified.bound)[0, 0]),
                             float(view(verified.rounding)[0, 0]),
                             partial(check.exact, view(verified.hidden)[0, 0]), noise, topk,
                             near=partial(gumbel_few, self.key, position))
        if found is None:
            inexact = inexact_row(parts.verifier, verified, 0, flat, rules)
            found = certified_sample(row, inexact.bounds[0], partial(inexact.exact, 0), noise, topk)
        row[found[0]] = found[1]
        return Decision(0, found[0], False, [0], []), flat, view(verified.normaliser)[0]

    def _host_view(self, tensor: Tensor) -> np.ndarray:
        """``tensor``'s numpy view, made once per buffer: a graph backend returns
        the same view objects turn after turn."""
        kept = self._views.get(id(tensor))
        if kept is None or kept[0] is not tensor:
            if len(self._views) > 16:  # a backend that returns new tensors each turn
                self._views.clear()
            kept = self._views[id(tensor)] = (tensor, tensor.detach().numpy())
        return kept[1]

    def commit(self, decided: Decision, flat: np.ndarray, lse: np.ndarray,
               eos: int) -> Tuple[int, bool]:
        """Commits the accepted drafts and the correction, cut after the first EOS
        as the batched loop cuts them; returns (tokens committed, finished)."""
        self.final = decided.path[decided.accepted]
        new, finished = commit_host(decided.drafts, decided.accepted, decided.correction, eos)
        count, length = len(new), len(self.committed)
        # The flat input whose scores predicted each committed token (a chain: 0..).
        where = decided.path[:count]
        # Committed tokens are never pad: where the call decided (raw scores), their
        # raw scores are the constrained ones.
        if count == 1:  # numpy scalars (fancy indexing costs more): the same float32
            self.scores.append(float(flat[where[0], new[0]] - lse[where[0]]))
            self.host_tokens[0, length] = new[0]
        else:
            self.scores += (flat[where, new] - lse[where]).tolist()
            self.host_tokens[0, length: length + count] = new
        self.committed += new
        self.host_length[0] = length + count
        return count, finished


def _constrain_on_host(logits: Tensor, rules: Constraints) -> None:
    """(1, N, V) logits under the rules that need no step: never pad (no unk
    penalty, no length rule applies: :meth:`_HostRow.decide` checks)."""
    constrain_host_(logits.detach().numpy()[0], 0, 0, rules, False, False)


def _fused_decision(decision: Optional[Tensor], usable: bool, tokens: Tensor,
                    k: int) -> Optional[Decision]:
    """The verify call's own beta = 1 decision (``--fused-draft``) as
    :func:`accept_host` returns it, or None: no decision, a length or unk
    constraint applies (``usable`` False), or the graph flagged it (the
    correction's score is tied: the shared code orders ties; or pad is a row's
    argmax or a draft: the graph reads unconstrained scores)."""
    if decision is None or not usable:
        return None
    accepted, correction, final, tie = decision[0].tolist()
    if tie:
        return None
    path = list(range(k + 1))
    if final > k:  # a leaf (leaves follow the chain's K+1 inputs)
        path[accepted] = final
    inputs = tokens[0].tolist()
    return Decision(accepted, correction, final > k, path, [inputs[i] for i in path[1:]])
