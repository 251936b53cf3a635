"""Spec-Verify acceptance and commit of a chain, in a torch and a host form.

Implements the verification criterion of Xia et al. (2023), "Speculative
Decoding: Exploiting Speculative Execution for Accelerating Seq2seq
Generation", Sec. 3.2 (Spec-Verify, Eq. 4): draft token ``y~_i`` is accepted
while it is among the verifier's top-``beta`` candidates at its position and
its log-probability is within ``tau`` of the verifier's best:

    y~_i in topk_beta(P(.|y_<i, x))  and  log P(y^_i) - log P(y~_i) <= tau

At the first rejection the verifier's top-1 token is taken instead, so every
iteration commits at least one token; if all K drafts pass, the verifier's
prediction after the last draft (the "bonus" token) is appended too.

The draft test itself is a rule of :mod:`.rules`. :func:`accept_drafts` and
:func:`commit_tokens` decide B rows in tensor ops
(the batched loop); the host loops decide one row with
:func:`~.tree.accept_host` (a chain is a tree of one candidate per slot) and
:func:`commit_host`. ``tests/unit/test_decision_forms.py`` holds the forms equal.

Shapes: B batch, K draft length, V vocabulary.
"""

from __future__ import annotations

from typing import List, NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt_specdec.decoding.decision.rules import AcceptanceRule, argmax_last
from nmt_specdec.decoding.decision.tree import Acceptance, resolve_tree


class Commit(NamedTuple):
    """Tokens committed by one iteration.

    Attributes:
        tokens: (B, K+1) long, accepted drafts then the correction, cut after the
            first EOS; ``pad`` beyond ``counts``.
        counts: (B,) long, how many tokens of ``tokens`` are committed (>= 1).
        finished: (B,) bool, True where an EOS was committed.
    """

    tokens: Tensor
    counts: Tensor
    finished: Tensor


def accept_drafts(lprobs: Tensor, drafts: Tensor, rule: AcceptanceRule) -> Acceptance:
    """Applies the Spec-Verify criterion (Eq. 4) to a block of drafts.

    Works on log-probabilities or on raw logits alike: ranks and margins do not
    depend on the per-position normaliser. With beta=1 a draft passes only as the
    verifier's argmax (the first index among tied scores), greedy's own choice,
    so an exact tie (common in half precision) never sends beta=1 another way.
    With beta > 1 ties count in the draft's favour: it is inside the top-beta
    when fewer than beta tokens score strictly higher. The correction is the
    verifier's argmax.

    Cost: one max-reduction over the (B, K+1, V) scores, plus ``topk`` for
    beta > 1 and an argmax over one position per row, so the work is a few
    passes over the scores rather than a sort.

    Args:
        lprobs: (B, K+1, V) verifier scores, already constrained (pad,
            min/max length); position i scores the token after draft i-1.
        drafts: (B, K) draft tokens.
        rule: the draft test (:func:`~.rules.acceptance_rule` of ``--spec-beta``
            and ``--spec-tau``; ``ExactGreedy``, beta = 1, is exactly greedy decoding).

    Returns:
        The :class:`Acceptance` of each row.
    """
    num_slots = drafts.size(1)
    if num_slots == 0:  # plain greedy: the top-1 of the one position
        correction = argmax_last(lprobs[:, 0])
        return Acceptance(drafts.new_zeros(drafts.shape, dtype=torch.bool),
                          correction.new_zeros(correction.shape), correction)
    # A chain is a tree of width one; its first input (the last committed token)
    # is not tested.
    return resolve_tree(lprobs, F.pad(drafts, (1, 0)), num_slots, rule).acceptance


def commit_tokens(drafts: Tensor, acceptance: Acceptance, eos: int, pad: int) -> Commit:
    """Builds the committed tokens of one iteration and cuts them at EOS.

    Args:
        drafts: (B, K) draft tokens.
        acceptance: result of :func:`accept_drafts` for these drafts.
        eos: end-of-sentence id (from the target dictionary).
        pad: padding id (from the target dictionary).

    Returns:
        The :class:`Commit` for each row.
    """
    batch, num_slots = drafts.shape
    if num_slots == 0:  # one token per row: the correction
        tokens = acceptance.correction.unsqueeze(1)  # (B, 1)
        finished = acceptance.correction == eos
        return Commit(tokens, torch.ones_like(acceptance.correction), finished)
    slot = torch.arange(num_slots + 1, device=drafts.device).unsqueeze(0)  # (1, K+1)
    tokens = torch.cat([drafts, drafts.new_full((batch, 1), pad)], dim=1)  # (B, K+1)
    tokens = tokens.scatter(1, acceptance.num_accepted.unsqueeze(1), acceptance.correction.unsqueeze(1))
    counts = acceptance.num_accepted + 1
    is_eos = (tokens == eos) & (slot < counts.unsqueeze(1))
    finished = is_eos.any(dim=1)
    # Index of the first EOS (K+1 when there is none) bounds the committed count.
    first_eos = torch.where(is_eos, slot, num_slots + 1).min(dim=1).values
    counts = torch.minimum(counts, first_eos + 1)
    tokens = tokens.masked_fill(slot >= counts.unsqueeze(1), pad)
    return Commit(tokens, counts, finished)


def commit_host(drafts: List[int], num_accepted: int, correction: int,
                eos: int) -> Tuple[List[int], bool]:
    """:func:`commit_tokens` for one row on the host: the committed tokens (the
    accepted drafts, then the correction, cut after the first EOS) and whether
    an EOS was committed."""
    new = drafts[:num_accepted] + [correction]
    if eos in new:
        return new[: new.index(eos) + 1], True
    return new, False


def drafts_before_eos(k: Tensor, num_accepted: Tensor, counts: Tensor,
                      finished: Tensor) -> Tuple[Tensor, Tensor]:
    """Draft slots that count for the statistics, per row-iteration.

    Drafts after a committed EOS are never committed: a row that accepted drafts
    past its EOS must not raise slot acceptance or accepted drafts per iteration.
    Slots up to and including the EOS position count; rows without an EOS count
    all K slots as drafted (slot acceptance is unconditional per slot).

    Args:
        k: (R,) draft slots K of each row-iteration.
        num_accepted: (R,) drafts accepted by :func:`accept_drafts`.
        counts: (R,) committed tokens (:attr:`Commit.counts`, cut after the first EOS).
        finished: (R,) bool, an EOS was committed.

    Returns:
        ``(drafted, accepted)``, both (R,) long: slots proposed at or before the
        committed EOS, and accepted drafts among them (0 <= accepted <= drafted <= K).
    """
    accepted = torch.minimum(num_accepted, counts)  # (R,)
    drafted = torch.where(finished, torch.minimum(counts, k), k)  # (R,)
    return drafted, accepted
