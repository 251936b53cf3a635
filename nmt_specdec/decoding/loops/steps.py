"""The steps of a Spec-Verify turn that every loop of :mod:`.` shares.

Every loop takes the generator's parts as a :class:`LoopParts` and the batch as
a :class:`BatchStart`, so none reaches into the generator or another loop:

- :func:`open_batch`: a loop of dynamic shapes starts the drafter and allocates
  its :class:`Batch` (buffers, cache, encoder keys/values);
- :func:`plan_turn`: K and which length rules may apply, from host ints;
- :func:`draft_inputs`: 1. draft, giving the verify inputs;
- :func:`constrained_scores`: 2. verify's scores, constrained (and exact where an
  8-bit projection could not certify a decision);
- :func:`end_turn`: what the turn tells the statistics and the K policy.

Shapes: B active rows, K draft slots, C candidates per slot, N verify inputs,
T buffer width, V vocabulary.
"""

from __future__ import annotations

import time
from typing import Any, Callable, List, NamedTuple, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.backends.base import Verified, VerifierCalls
from nmt_specdec.decoding.cache import StaticKVCache
from nmt_specdec.decoding.draft_tree import flatten_candidates
from nmt_specdec.decoding.drafters import Drafter, DraftRequest
from nmt_specdec.decoding.k_policy import KPolicy
from nmt_specdec.decoding.options import DecodingOptions
from nmt_specdec.decoding.decision.certified import Inexact
from nmt_specdec.decoding.decision.constraints import Constraints
from nmt_specdec.decoding.decision.sampling import SamplingRule
from nmt_specdec.decoding.decision.scores import certain, normaliser
from nmt_specdec.decoding.decision.tree import parent_list
from nmt_specdec.decoding.stats import SpecDecStats


class LoopParts(NamedTuple):
    """What a loop uses of its generator, handed over for one batch.

    Attributes:
        options: K, beta, tau, candidates.
        rules: fairseq's per-step constraints (special ids from the dictionary).
        drafter: proposes the drafts.
        k_policy: chooses K per turn and learns from what the turns commit.
        stats: the running statistics the loop adds to.
        verifier: the backend's model calls for this batch.
        sampling: speculative sampling's rule (``--sampling``); None: the
            verifier's top tokens decide (Spec-Verify).
    """

    options: DecodingOptions
    rules: Constraints
    drafter: Drafter
    k_policy: KPolicy
    stats: SpecDecStats
    verifier: VerifierCalls
    sampling: Optional[SamplingRule] = None


class Rows(NamedTuple):
    """The active rows. Buffers are (B, T+1): column T is a write-off slot.

    Attributes:
        index: (B,) row in the input batch.
        tokens: (B, T+1) committed tokens (BOS first), ``pad`` beyond ``lengths``.
        scores: (B, T+1) log-probability of each committed token (0 for BOS).
        lengths: (B,) committed tokens, BOS included.
        max_len: (B,) output step at which EOS is forced.
        states: (B, C) verifier state that predicted the last committed token.
        keys: (B,) each row's sentence key, which keys its sampling draws
            (:func:`~..decision.draws.sentence_keys`; 0 where nothing samples).
    """

    index: Tensor
    tokens: Tensor
    scores: Tensor
    lengths: Tensor
    max_len: Tensor
    states: Tensor
    keys: Tensor


class BatchStart(NamedTuple):
    """A batch as the generator hands it to a loop: encoded, its limits known.

    Attributes:
        sample: fairseq's sample (the drafter's :meth:`~..drafters.Drafter.start_batch` reads it).
        encoder_out: the backend's encoder output.
        max_len: (B,) output step at which EOS is forced.
        limits: ``max_len`` on the host.
        bos: the first decoder input.
        k_max: the largest K this batch drafts (0: the K policy will not draft).
        keys: (B,) the rows' sentence keys (:attr:`Rows.keys`; None: 0, nothing samples).
    """

    sample: dict
    encoder_out: Any
    max_len: Tensor
    limits: List[int]
    bos: int
    k_max: int
    keys: Optional[Tensor] = None


class Batch(NamedTuple):
    """A batch ready to decode.

    Attributes:
        rows: every row, nothing committed but BOS.
        cache: the verifier's self-attention cache, empty.
        cross: the verifier's encoder keys/values of the batch.
        limits: ``rows.max_len`` on the host.
        k_max: the largest K this batch drafts (0: the K policy will not draft).
    """

    rows: Rows
    cache: StaticKVCache
    cross: Any
    limits: List[int]
    k_max: int


def open_batch(parts: LoopParts, start: BatchStart) -> Batch:
    """Starts the drafter on a batch that drafts (one that does not reads no draft
    state: the torch drafter's would cost its cross keys/values) and allocates the
    buffers and cache at their largest size."""
    batch, options, verifier = start.max_len.numel(), parts.options, parts.verifier
    if start.k_max:
        parts.drafter.start_batch(start.sample, start.encoder_out)
    # Committed tokens never pass max_len + 1; a pass writes up to K*C inputs after them.
    width = max(start.limits) + start.k_max * options.candidates + 2
    cross = verifier.cross_states(start.encoder_out)
    cache = verifier.new_cache(batch, width)
    tokens = start.max_len.new_full((batch, width + 1), parts.rules.pad)
    tokens[:, 0] = start.bos
    like = verifier.embed
    rows = Rows(
        index=torch.arange(batch, device=start.max_len.device),
        tokens=tokens,
        # Scores stay float32 whatever the model's precision (fairseq's are too).
        scores=torch.zeros(batch, width + 1, device=like.device),
        lengths=start.max_len.new_ones(batch),
        max_len=start.max_len,
        states=parts.drafter.start_states(batch, like),
        keys=torch.zeros_like(start.max_len) if start.keys is None else start.keys,
    )
    return Batch(rows, cache, cross, start.limits, start.k_max)


def plan_turn(parts: LoopParts, k_max: int, turn: int, longest: int,
              limits: List[int]) -> Tuple[int, Tuple[bool, bool]]:
    """K for this turn, and which length rules may apply (host ints: no read).

    Args:
        turn: turns so far. Every row commits at least one token a turn, so no
            row has fewer than ``turn`` output tokens.
        longest: the longest row's committed tokens, BOS included.
        limits: the active rows' ``max_len``.

    Returns:
        ``(K, (check_min_len, check_max_len))`` for
        :func:`~..decision.constraints.constrain_logits_`.
    """
    room = max(0, min(k_max, max(limits) - turn))
    k = parts.k_policy.choose(room, len(limits))
    return k, (turn < parts.rules.min_len, longest - 1 + k >= min(limits))


def draft_inputs(drafter: Drafter, request: Optional[DraftRequest], last: Tensor,
                 candidates: int) -> Tensor:
    """Step 1, draft: the verify inputs, each row's last committed token then its drafts.

    Args:
        request: what the drafter may read; None when K = 0 (nothing to draft).
        last: (B, 1) each row's last committed token.
        candidates: C; above 1 the chain and its leaves, flat in verify order
            (:mod:`.draft_tree`).

    Returns:
        (B, N) inputs: N = K+1 for a chain, 1 + K*C for a tree.
    """
    if request is None:
        return last
    if candidates > 1:
        return flatten_candidates(last, drafter.propose_candidates(request, candidates))
    return torch.cat([last, drafter.propose(request)], 1)


def constrained_scores(verifier: VerifierCalls, verified: Verified,
                       constrain: Callable[[Tensor], Any], margin: float,
                       on_host: bool = False, temperature: float = 1.0,
                       certify: bool = True) -> Tuple[Tensor, Tensor]:
    """Step 2, verify's scores: float32 logits under fairseq's constraints.

    Where the call's logits are exact only above a bound (an 8-bit projection,
    :class:`~.backends.base.Verified`) and a decision may rest on an inexact one,
    this call's logits are computed again in fp32.

    Args:
        constrain: applies the constraints to (B, N, V) logits in place.
        margin: the acceptance rule's :attr:`~..decision.rules.AcceptanceRule.margin`.
        on_host: read the best logits through numpy (one row on the CPU: no tensor op).
        temperature: the logits are divided by it first, in their own precision,
            as fairseq's ``--temperature``.
        certify: False where the caller certifies its own decision on inexact
            logits (:func:`inexact_row`): they are returned as they are.

    Returns:
        ``(logits, normaliser)``: (B, N, V) constrained logits and the (B, N)
        ``logsumexp`` of the raw ones (fairseq normalises before constraining).
    """
    if temperature != 1.0:
        verified = _tempered(verified, temperature)
    logits = verified.logits.float()  # acceptance and scores read float32
    lse = verified.normaliser if verified.normaliser is not None else normaliser(logits)
    constrain(logits)
    bound = verified.bound
    if bound is None or not certify:
        return logits, lse
    if on_host:
        exact = certain(logits.detach().numpy().max(-1), bound.numpy(), margin)
    else:
        exact = certain(logits.amax(dim=-1), bound, margin)
    if not exact:  # an 8-bit score may matter here: this call's scores again, in fp32
        logits = verifier.exact_logits(verified.hidden)
        logits = (logits if temperature == 1.0 else logits / temperature).float()
        lse = normaliser(logits)
        constrain(logits)
    return logits, lse


def inexact_row(verifier: VerifierCalls, verified: Verified, row: int,
                     scores: np.ndarray, rules: Constraints) -> Inexact:
    """One row's ``scores`` (N, V), constrained and tempered from the call's
    inexact logits, as a decision on the host certifies them
    (:mod:`..decision.certified`): the call's bound as the ceiling (raised by an
    unk reward), each score's error bound, and exact constrained logits (float64)
    of any tokens."""
    check, temperature = verifier.projection_check, rules.temperature
    hidden = verified.hidden[row].detach().float().numpy()  # (N, C)
    ceiling = verified.bound[row].numpy() / temperature + max(0.0, -rules.unk_penalty)

    def exact(position: int, ids: np.ndarray) -> np.ndarray:
        values = check.exact(hidden[position], ids) / temperature
        values[np.isneginf(scores[position, ids])] = -np.inf
        if rules.unk_penalty:
            values[ids == rules.unk] -= rules.unk_penalty
        return values

    # An unk penalty moves one candidate's score: their order no longer holds.
    candidates = None if rules.unk_penalty else verified.candidates[row].numpy()
    return Inexact(ceiling, lambda: check.bounds(hidden) / np.float32(temperature), exact,
                   candidates, verified.rounding[row].numpy() / temperature)


def certify_rows(parts: "LoopParts", verified: Verified, logits: Tensor, inputs: Tensor,
                 depth: int, width: int) -> None:
    """Writes into ``logits`` (B, N, V), inexact, the exact scores the acceptance
    rule and the corrections read, row by row on the host
    (:meth:`~..decision.rules.AcceptanceRule.certify_host`): beta > 1 on an 8-bit
    projection."""
    flat, drafts = logits.detach().numpy(), inputs[:, 1:].tolist()
    parents = parent_list(depth, width)
    for row in range(flat.shape[0]):
        parts.options.acceptance.certify_host(
            flat[row], inexact_row(parts.verifier, verified, row, flat[row], parts.rules),
            drafts[row], parents)


def _tempered(verified: Verified, temperature: float) -> Verified:
    """``verified`` with its logits (and the bound above its inexact ones) divided
    by ``temperature``; the normaliser is then recomputed from them."""
    if verified.bound is not None:
        verified = verified._replace(bound=verified.bound / temperature,
                                     rounding=verified.rounding / temperature)
    return verified._replace(logits=verified.logits / temperature, normaliser=None,
                             decision=None)


def end_turn(parts: LoopParts, k: int, committed: List[int], started: float) -> None:
    """Counts a turn that drafted ``k`` and tells the K policy what it bought: per
    row, the tokens committed beyond one, which an accepted EOS draft makes the
    drafts before it (a sentence's last turn commits no token after its EOS, as a
    rejection at that slot would commit the verifier's).

    Args:
        committed: per row, the tokens the turn committed (0 for a row already
            finished); empty unless ``parts.k_policy.wants_counts``.
        started: ``time.perf_counter()`` at the turn's start.
    """
    parts.stats.k_chosen[k] = parts.stats.k_chosen.get(k, 0) + 1
    parts.k_policy.observe([max(count - 1, 0) for count in committed], k,
                           time.perf_counter() - started)
