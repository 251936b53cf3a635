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

:func:`accept_drafts` and :func:`commit_tokens` decide B rows in tensor ops
(the batched loop); the host loops decide one row with
:func:`~.tree.accept_host` (a chain is a tree of one candidate per slot) and
:func:`commit_host`. ``tests/unit/test_decision_forms.py`` holds the forms equal.

Shapes: B batch, K draft length, V vocabulary.
"""

from __future__ import annotations

from typing import List, NamedTuple, Tuple

import torch
from torch import Tensor


class Acceptance(NamedTuple):
    """Outcome of verifying one block of drafts.

    Attributes:
        accepted: (B, K) bool, True where draft i passed the criterion *and* every
            draft before it passed (the all-true prefix).
        num_accepted: (B,) long, number of drafts accepted (0..K).
        correction: (B,) long, verifier top-1 at position ``num_accepted``: the
            correction after a rejection, or the bonus token if all K passed.
    """

    accepted: Tensor
    num_accepted: Tensor
    correction: Tensor


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


def accept_drafts(lprobs: Tensor, drafts: Tensor, beta: int, tau: float) -> Acceptance:
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
        beta: top-beta width (>= 1). ``beta=1`` is exactly greedy decoding.
        tau: log-probability margin to the top-1 (>= 0; ``math.inf`` disables it).

    Returns:
        The :class:`Acceptance` of each row.
    """
    if beta < 1:
        raise ValueError(f"beta must be >= 1, got {beta}")
    if tau < 0:
        raise ValueError(f"tau must be >= 0, got {tau}")
    num_slots = drafts.size(1)
    if num_slots == 0:  # plain greedy: the top-1 of the one position
        correction = argmax_last(lprobs[:, 0])
        return Acceptance(drafts.new_zeros(drafts.shape, dtype=torch.bool),
                          correction.new_zeros(correction.shape), correction)
    passed = drafts_pass(lprobs[:, :num_slots], drafts, beta, tau)  # (B, K)
    accepted = passed.long().cumprod(dim=1).bool()  # all-true prefix, (B, K)
    num_accepted = accepted.long().sum(dim=1)  # (B,)
    # The top-1 is needed at one position per row only.
    index = num_accepted.view(-1, 1, 1).expand(-1, 1, lprobs.size(-1))
    at_correction = lprobs.gather(1, index).squeeze(1)  # (B, V)
    correction = argmax_last(at_correction)
    return Acceptance(accepted, num_accepted, correction)


def argmax_last(scores: Tensor) -> Tensor:
    """``scores.argmax(dim=-1)`` (the first index among ties), through numpy for
    float32 scores on the CPU, where numpy's argmax is an order of magnitude
    faster than torch's over a batch's scores."""
    if scores.device.type == "cpu" and scores.dtype == torch.float32 \
            and not scores.requires_grad:
        return torch.from_numpy(scores.numpy().argmax(-1))
    return scores.argmax(dim=-1)


def drafts_pass(scored: Tensor, drafts: Tensor, beta: int, tau: float) -> Tensor:
    """The criterion (Eq. 4) for each draft on its own: (B, K) bool.

    Args:
        scored: (B, K, V) verifier scores at the positions that predict the drafts.
        drafts: (B, K) draft tokens.
        beta, tau: as in :func:`accept_drafts` (already validated).
    """
    draft_scores = scored.gather(-1, drafts.unsqueeze(-1)).squeeze(-1)  # (B, K)
    if beta == 1:  # greedy's choice, ties included
        passed = drafts == argmax_last(scored)
    else:
        best = scored.amax(dim=-1)  # (B, K)
        # beta >= V admits the whole vocabulary (topk itself would raise).
        kth = scored.topk(min(beta, scored.size(-1)), dim=-1).values[..., -1]  # (B, K)
        passed = (draft_scores >= kth) & (best - draft_scores <= tau)
    # A -inf draft is never accepted, even when beta exceeds the finite entries
    # (e.g. at the max length only EOS is allowed).
    return passed & torch.isfinite(draft_scores)


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
