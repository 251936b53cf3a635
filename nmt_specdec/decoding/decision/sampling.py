"""Speculative sampling over a chain: the verifier's sampling distribution, exactly.

The target ``p`` at each position is what fairseq's ``--sampling --beam 1``
samples from (``search.Sampling``): the constrained log-probabilities, tempered
before the softmax, cut to the top-k tokens (``--sampling-topk``) or to the
smallest set whose probability reaches ``--sampling-topp``, renormalised. The
draft head proposes each slot from its own distribution ``q`` (its logits
under the same temperature and cut), the slots drawn independently.

The rule (Leviathan et al., 2023; Chen et al., 2023): draft ``x`` at slot i is
accepted with probability ``min(1, p_i(x) / q_i(x))``; at the first rejection
the token is drawn from ``max(0, p_i - q_i)`` renormalised; after K accepted
drafts the bonus token is drawn from ``p_K``. Every committed token is then
distributed as ``p`` given the tokens before it (docs/engine.md gives the
proof and what it needs: a ``q_i`` that does not depend on the other slots'
draws, which holds for the head's slots and its refinement, but not for trees).

Draws come from :mod:`.draws` (one uniform per slot and purpose), so a
sentence's sample does not depend on its batch.

Each step has a tensor form for B rows (:meth:`SamplingRule.distribution`,
:func:`categorical`, :func:`accept_sampled`) and a host form for one row
(:meth:`SamplingRule.support`, :func:`categorical_host`,
:func:`accept_sampled_host`) that holds a distribution as its support: the same
float64 values in the same token order, so both forms draw the same tokens
from the same uniforms (a float64 rounding apart).

Shapes: B rows, K draft slots, V vocabulary, S a support's tokens.
"""

from __future__ import annotations

from typing import List, NamedTuple, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from nmt_specdec.decoding.decision.acceptance import Acceptance
from nmt_specdec.decoding.decision.draws import ACCEPT, RESIDUAL


class SamplingRule(NamedTuple):
    """fairseq's sampling settings (``--sampling-topk``, ``--sampling-topp``;
    ``--temperature`` divides the logits before the rule sees them).

    Attributes:
        topk: sample among the k likeliest tokens (-1: all).
        topp: sample among the smallest set of tokens whose probability reaches
            it (-1: all); takes precedence over ``topk``, as in fairseq.
    """

    topk: int = -1
    topp: float = -1.0

    def distribution(self, lprobs: Tensor) -> Tensor:
        """(..., V) float64 probabilities to sample from, from log-probabilities
        (fairseq: constrained, not renormalised after the constraints)."""
        probs = lprobs.double().exp()
        if self.topp > 0:
            probs = _nucleus(probs, self.topp)
        elif self.topk > 0:
            kth = probs.topk(min(self.topk, probs.size(-1)), dim=-1).values[..., -1:]
            probs = probs.masked_fill(probs < kth, 0.0)
        return probs / probs.sum(-1, keepdim=True)

    def proposal(self, draft_logits: Tensor, temperature: float) -> Tensor:
        """(B, K, V) ``q``: the draft head's logits under the same temperature and cut."""
        return self.distribution(draft_lprobs(draft_logits, temperature))

    def support(self, lprobs: np.ndarray) -> "Support":
        """:meth:`distribution` of one position's (V,) float32 log-probabilities."""
        if self.topp > 0:
            probs = np.exp(lprobs.astype(np.float64))
            order = np.argsort(-probs, kind="stable")
            inside = np.cumsum(probs[order]) < self.topp
            inside[min(int(inside.sum()), probs.size - 1)] = True
            ids = np.sort(order[inside])
        elif 0 < self.topk < lprobs.size:
            kth = np.partition(lprobs, lprobs.size - self.topk)[lprobs.size - self.topk]
            ids = np.flatnonzero(lprobs >= kth)
        else:
            ids = np.arange(lprobs.size)
        probs = np.exp(lprobs[ids].astype(np.float64))
        return Support(ids, probs / probs.sum())


def draft_lprobs(draft_logits: Tensor, temperature: float) -> Tensor:
    """The draft head's (B, K, V) log-probabilities under ``temperature``."""
    return torch.log_softmax(draft_logits.float() / temperature, -1)


class Support(NamedTuple):
    """One position's sampling distribution on the host, where it is not 0.

    Attributes:
        ids: (S,) token ids, increasing.
        probs: (S,) float64 probabilities of ``ids``.
    """

    ids: np.ndarray
    probs: np.ndarray

    def at(self, token: int) -> float:
        """The probability of ``token`` (0 outside the support)."""
        where = int(np.searchsorted(self.ids, token))
        return float(self.probs[where]) if where < self.ids.size and \
            self.ids[where] == token else 0.0


def _nucleus(probs: Tensor, topp: float) -> Tensor:
    """``probs`` outside fairseq's top-p set zeroed: the likeliest tokens up to and
    including the first whose running sum reaches ``topp`` (``_sample_topp``)."""
    ranked, order = probs.sort(dim=-1, descending=True)
    inside = ranked.cumsum(-1) < topp
    last = inside.sum(-1, keepdim=True).clamp(max=probs.size(-1) - 1)
    inside = inside.scatter(-1, last, True)
    return torch.zeros_like(probs).scatter(-1, order, ranked * inside)


def categorical(probs: Tensor, draws: Tensor) -> Tensor:
    """(...) the token whose cumulative probability first reaches ``draws``:
    a sample from each row of ``probs`` (..., V, summing to 1 or more) given a
    uniform in (0, 1). A zero-probability token is never returned."""
    cumulative = probs.double().cumsum(-1)
    target = draws.unsqueeze(-1) * cumulative[..., -1:]
    return (cumulative < target).sum(-1).clamp(max=probs.size(-1) - 1)


def categorical_host(support: Support, draw: float) -> int:
    """:func:`categorical` on the host: the zero-probability tokens that the
    tensor form skips add exact zeros to its running sum."""
    cumulative = np.cumsum(support.probs)
    index = int(np.count_nonzero(cumulative < draw * cumulative[-1]))
    return int(support.ids[min(index, support.ids.size - 1)])


def accept_sampled_host(targets: List[Support], proposals: List[Support], drafts: List[int],
                        draws: np.ndarray) -> Tuple[int, int]:
    """:func:`accept_sampled` for one row: ``(accepted drafts, token after them)``.

    Args:
        targets: K+1 ``p``, proposals: K ``q``, drafts: the K drafts.
        draws: (K+1, 3) the turn's :func:`~.draws.uniforms_host`.
    """
    accepted = 0
    while accepted < len(drafts) and draws[accepted, ACCEPT] * \
            proposals[accepted].at(drafts[accepted]) < targets[accepted].at(drafts[accepted]):
        accepted += 1
    target = targets[accepted]
    residual = target
    if accepted < len(drafts):
        q = proposals[accepted]
        where = np.searchsorted(q.ids, target.ids).clip(max=max(q.ids.size - 1, 0))
        q_at = np.where(q.ids[where] == target.ids, q.probs[where], 0.0)
        left = np.maximum(target.probs - q_at, 0.0)
        if left.sum() > 0:  # rounding may leave no mass where p == q: p itself then
            residual = Support(target.ids, left)
    return accepted, categorical_host(residual, draws[accepted, RESIDUAL])


def accept_sampled(target: Tensor, proposal: Tensor, drafts: Tensor, accept_draws: Tensor,
                   residual_draws: Tensor) -> Acceptance:
    """Speculative sampling's acceptance of a chain and the token after it.

    Args:
        target: (B, K+1, V) ``p``: position i samples the token after draft i-1.
        proposal: (B, K, V') ``q``: what each draft was drawn from, over the
            first V' <= V ids (a draft vocabulary; 0 beyond).
        drafts: (B, K) the drafts.
        accept_draws: (B, K) uniforms of the acceptance tests.
        residual_draws: (B, K+1) uniforms of the token after the accepted drafts
            (only the one at ``num_accepted`` is read).

    Returns:
        The :class:`Acceptance`: ``correction`` is the residual's sample after a
        rejection, ``p``'s after K accepted drafts.
    """
    num_slots, vocab = drafts.size(1), target.size(-1)
    if proposal.size(-1) < vocab:
        proposal = F.pad(proposal, (0, vocab - proposal.size(-1)))
    p_draft = target[:, :num_slots].gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    q_draft = proposal.gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    passed = accept_draws * q_draft < p_draft  # u < p/q without dividing by 0
    accepted = passed.long().cumprod(dim=1).bool()  # (B, K)
    num_accepted = accepted.long().sum(dim=1)  # (B,)
    at = num_accepted.view(-1, 1, 1).expand(-1, 1, vocab)
    p_stop = target.gather(1, at).squeeze(1)  # (B, V)
    residual = p_stop
    if num_slots:  # q after the last slot is 0: the bonus token samples p itself
        q_stop = proposal.gather(1, at.clamp(max=num_slots - 1)).squeeze(1)
        residual = (p_stop - q_stop * (num_accepted < num_slots).unsqueeze(1)).clamp(min=0.0)
    # Rounding may leave no mass where p == q; p itself is then the residual.
    empty = residual.sum(-1, keepdim=True) <= 0
    residual = torch.where(empty, p_stop, residual)
    draw = residual_draws.gather(1, num_accepted.unsqueeze(1)).squeeze(1)
    return Acceptance(accepted, num_accepted, categorical(residual, draw))
