"""Sampling's two steps of a turn, for the batched loop.

Drafting takes each slot's perturbed argmax under the drafter's own
distribution (a chain drafter's slot by slot, each after the one before), and
deciding is beta = 1's on the verifier's perturbed scores
(:mod:`~..decision.sampling`); the rest of the turn (verify, commit, bookkeep)
is the batched loop's. The noise is keyed by the row's sentence and output
position (:mod:`..decision.draws`), so a row samples the same tokens in any
batch and at any K.

Shapes: B active rows, K draft slots, N verified inputs, V vocabulary.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.backends.base import Verified
from nmt_specdec.decoding.decision.sampling import draft_lprobs
from nmt_specdec.decoding.draft_tree import flatten_candidates
from nmt_specdec.decoding.drafters import DraftRequest, DraftsByChoice
from nmt_specdec.decoding.loops.steps import LoopParts, Rows, inexact_row


def sampled_inputs(parts: LoopParts, request: Optional[DraftRequest], last: Tensor,
                   rows: Rows, candidates: int = 1) -> Tensor:
    """Step 1, draft: the verify inputs (B, N), each slot's ``candidates`` best
    perturbed tokens of the head at the output position the slot proposes (slot
    1: the row's length), the perturbed argmax first: a chain (N = K+1) or a
    chain and its leaves (:mod:`..draft_tree`)."""
    if request is None:
        return last
    if isinstance(parts.drafter, DraftsByChoice):  # a chain: slot after slot
        def choose(logits: Tensor, slot: int) -> Tensor:
            lprobs = draft_lprobs(logits.unsqueeze(1), parts.rules.temperature)
            at = (rows.lengths + slot).unsqueeze(1)
            return parts.sampling.perturbed(lprobs, rows.keys, at).argmax(-1)[:, 0]

        return torch.cat([last, parts.drafter.propose_chosen(request, choose)], 1)
    lprobs = draft_lprobs(parts.drafter.draft_logits(request), parts.rules.temperature)
    slots = torch.arange(request.num_slots, device=last.device)
    perturbed = parts.sampling.perturbed(lprobs, rows.keys, rows.lengths.unsqueeze(1) + slots)
    if candidates == 1:
        return torch.cat([last, perturbed.argmax(-1)], 1)
    best = perturbed.topk(candidates, dim=-1, sorted=True).indices  # (B, K, C)
    return flatten_candidates(last, best.transpose(1, 2))


def sampled_scores(parts: LoopParts, verified: Verified, logits: Tensor, lse: Tensor,
                   rows: Rows, offsets: Tensor) -> Tensor:
    """Step 3's scores: the verifier's constrained ``logits`` (B, N, V),
    ``lse`` their normaliser (B, N), perturbed at the output position each input
    predicts (input j at offset ``offsets[j]`` from the row's length).

    Inexact logits (a ``bound``: an 8-bit projection on the CPU) are decided row by
    row on the host (:meth:`~..decision.sampling.SamplingRule.certified_host`, the
    single-row loop's own form), which writes each sample's exact logit into
    ``logits``."""
    positions = rows.lengths.unsqueeze(1) + offsets
    if verified.bound is None:
        return parts.sampling.perturbed(logits - lse.unsqueeze(-1), rows.keys, positions)
    flat, normaliser = logits.detach().numpy(), lse.detach().numpy()
    out = [parts.sampling.certified_host(flat[row], normaliser[row], inexact_row(
               parts.verifier, verified, row, flat[row], parts.rules), int(key), places)
           for row, (key, places) in enumerate(zip(rows.keys.tolist(), positions.tolist()))]
    return torch.from_numpy(np.stack(out))
