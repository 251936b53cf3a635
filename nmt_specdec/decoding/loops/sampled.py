"""Speculative sampling's two steps of a turn, for the batched loop.

Drafting draws each slot from the head's own distribution (``q``) and
deciding applies :func:`~..decision.sampling.accept_sampled` to the verifier's
sampling distribution (``p``); the rest of the turn (verify, commit, bookkeep)
is the batched loop's. Every draw is keyed by the row's sentence and turn
(:mod:`..decision.draws`), so a row samples the same tokens in any batch.

Shapes: B active rows, K draft slots, V vocabulary.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from nmt_specdec.decoding.decision.acceptance import Acceptance
from nmt_specdec.decoding.decision.draws import ACCEPT, DRAFT, RESIDUAL, uniforms
from nmt_specdec.decoding.decision.sampling import SamplingRule, accept_sampled, categorical
from nmt_specdec.decoding.drafters import DraftRequest
from nmt_specdec.decoding.loops.steps import LoopParts, Rows


class Proposal(NamedTuple):
    """What a sampled turn drafted from.

    Attributes:
        q: (B, K, V') the drafts' distribution (K = 0: nothing drafted).
        draws: (B, K+1, 3) the turn's uniforms (:func:`~..decision.draws.uniforms`).
    """

    q: Tensor
    draws: Tensor


def sampled_inputs(parts: LoopParts, request: Optional[DraftRequest], last: Tensor,
                   rows: Rows) -> Tuple[Tensor, Proposal]:
    """Step 1, draft by sampling: the verify inputs (B, K+1) and the :class:`Proposal`."""
    num_slots = 0 if request is None else request.num_slots
    draws = uniforms(rows.keys, rows.lengths, num_slots + 1)
    if request is None:
        return last, Proposal(draws.new_zeros(last.size(0), 0, 0), draws)
    rule: SamplingRule = parts.sampling
    q = rule.proposal(parts.drafter.draft_logits(request), parts.rules.temperature)
    drafts = categorical(q, draws[:, :num_slots, DRAFT])
    return torch.cat([last, drafts], 1), Proposal(q, draws)


def sampled_acceptance(rule: SamplingRule, logits: Tensor, lse: Tensor, inputs: Tensor,
                       proposal: Proposal) -> Acceptance:
    """Step 3, accept: speculative sampling on the verifier's constrained
    ``logits`` (B, K+1, V), ``lse`` their normaliser (B, K+1)."""
    num_slots = inputs.size(1) - 1
    target = rule.distribution(logits - lse.unsqueeze(-1))
    draws = proposal.draws
    return accept_sampled(target, proposal.q, inputs[:, 1:], draws[:, :num_slots, ACCEPT],
                          draws[:, :, RESIDUAL])
