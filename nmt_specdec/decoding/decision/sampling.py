"""Sampling as greedy decoding on perturbed scores: the verifier's sampling
distribution, exactly, and the same sample with or without drafts.

The target ``p`` at each position is what fairseq's ``--sampling --beam 1``
samples from (``search.Sampling``): the constrained log-probabilities, tempered
before the softmax, cut to the top-k tokens (``--sampling-topk``) or to the
smallest set whose probability reaches ``--sampling-topp``, renormalised.

The Gumbel-max trick: with independent standard Gumbel noise ``g_j`` per token,
``argmax_j (log p_j + g_j)`` is distributed as ``p``. The noise of a token at an
output position is a hash of the seed, the sentence, the position and the token
(:mod:`.draws`), so the token sampled at a position is a function of the
verifier's scores there and nothing else. :meth:`SamplingRule.perturbed` writes
those perturbed scores (``-inf`` outside the cut), and every decision after it
is beta = 1's: a draft is kept where it is the perturbed argmax, the first
rejection takes the perturbed argmax, after K kept drafts so does the bonus
token (:func:`~.acceptance.accept_drafts`, :func:`~.tree.accept_host`). Each
committed token is then exactly the token the engine's own sampling (K = 0)
draws there, which is distributed as fairseq's sampling: drafts change the
cost, never the sample (docs/engine.md gives the argument).

The drafts are the draft head's perturbed argmax under the same noise
(:func:`draft_lprobs` under the same temperature and cut): where the head's
distribution ``q`` is close to ``p`` the two argmaxes agree, which is what
acceptance needs; any drafter would keep the output exact.

Each step has a tensor form for B rows (:meth:`SamplingRule.perturbed`) and a
host form for one row (:meth:`SamplingRule.perturbed_host`), which write the
same float64 values for the same tokens.

Shapes: B rows, N positions, V vocabulary, S tokens inside a position's cut.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.decision.certified import Inexact, certified_sample, known_sample
from nmt_specdec.decoding.decision.draws import gumbel, gumbel_few, gumbel_host


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

    @property
    def certifiable(self) -> bool:
        """Whether the sample can be certified on inexact logits (:mod:`.certified`):
        a top-k cut, whose sample needs no normaliser."""
        return self.topp <= 0 and self.topk > 0

    def support(self, lprobs: Tensor) -> Tensor:
        """(..., V) bool: the tokens inside the cut of (..., V) log-probabilities
        (fairseq: constrained, not renormalised after the constraints); ties
        with the k-th likeliest are inside."""
        if self.topp > 0:
            return _nucleus(lprobs.double().exp(), self.topp)
        if 0 < self.topk < lprobs.size(-1):
            kth = lprobs.topk(self.topk, dim=-1).values[..., -1:]
            return lprobs >= kth
        return torch.ones_like(lprobs, dtype=torch.bool)

    def perturbed(self, lprobs: Tensor, keys: Tensor, positions: Tensor) -> Tensor:
        """(B, N, V) float64: ``lprobs`` plus each token's noise inside the cut,
        ``-inf`` outside it; its argmax at a position is that position's sample.

        Args:
            lprobs: (B, N, V) log-probabilities.
            keys: (B,) the rows' :func:`~.draws.sentence_keys`.
            positions: (B, N) the output position each of the N predicts.
        """
        inside = self.support(lprobs)
        # Noise for the tokens inside the cut only (the widest cut of the call).
        width = int(inside.sum(-1).max())
        ids = lprobs.masked_fill(~inside, float("-inf")).topk(width, dim=-1).indices
        scores = lprobs.gather(-1, ids).double() + gumbel(keys, positions, ids)
        scores = scores.masked_fill(~inside.gather(-1, ids), float("-inf"))
        out = torch.full(lprobs.shape, float("-inf"), dtype=torch.float64,
                         device=lprobs.device)
        return out.scatter(-1, ids, scores)

    def inside_host(self, lprobs: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """:meth:`support` of one row's (N, V) float32 log-probabilities on the
        host: ``(positions, ids)`` of every token inside, increasing."""
        if self.topp > 0:  # support's own cut, on a CPU copy: the same bits on the host
            probs = torch.tensor(lprobs, dtype=torch.float64).exp()
            return np.nonzero(_nucleus(probs, self.topp).numpy())
        if 0 < self.topk < lprobs.shape[1]:
            # The k-th largest by torch's top-k: numpy's partition takes ten times as
            # long over a row of mostly -inf (a drafter's candidates, all else left out).
            kth = torch.from_numpy(lprobs).topk(self.topk, dim=1).values[:, -1].numpy()
            return np.nonzero(lprobs >= kth[:, None])
        return np.nonzero(np.ones(lprobs.shape, dtype=bool))

    def perturbed_host(self, lprobs: np.ndarray, key: int,
                       positions: Sequence[int]) -> np.ndarray:
        """:meth:`perturbed` of one row on the host: (N, V) float64 from (N, V)
        float32 log-probabilities, ``positions`` the N output positions."""
        rows, ids = self.inside_host(lprobs)
        noise = gumbel_host(key, np.asarray(positions, dtype=np.int64)[rows], ids)
        out = np.full(lprobs.shape, -np.inf)
        out[rows, ids] = lprobs[rows, ids].astype(np.float64) + noise
        return out

    def certified_host(self, scores: np.ndarray, normaliser: np.ndarray, inexact: Inexact,
                       key: int, positions: Sequence[int]) -> np.ndarray:
        """:meth:`perturbed_host` where ``scores`` (N, V), float32 constrained
        logits with their ``normaliser`` (N,), are inexact (:mod:`.certified`):
        (N, V) float64, ``-inf`` but at each position's sample. Each sample's logit,
        exact to fp32's rounding, is written into ``scores``, which the commit reads."""
        out = np.full(scores.shape, -np.inf)
        for row, position in enumerate(positions):
            exact, draw = partial(inexact.exact, row), partial(gumbel_host, key, np.int64(position))
            found = None if inexact.candidates is None else known_sample(
                scores[row], inexact.candidates[row], inexact.ceiling[row], inexact.rounding[row],
                exact, draw, self.topk, partial(gumbel_few, key, position))
            token, value, noise = found or certified_sample(
                scores[row], inexact.bounds[row], exact, draw, self.topk)
            scores[row, token] = value
            out[row, token] = value - normaliser[row] + noise
        return out


def draft_lprobs(draft_logits: Tensor, temperature: float) -> Tensor:
    """The draft head's (B, K, V) log-probabilities under ``temperature``."""
    return torch.log_softmax(draft_logits.float() / temperature, -1)


def _nucleus(probs: Tensor, topp: float) -> Tensor:
    """Whether each token is in fairseq's top-p set of ``probs`` (``_sample_topp``):
    the likeliest tokens up to and including the first whose running sum
    reaches ``topp``; tied tokens rank by id (a stable sort), so any batch cuts alike."""
    ranked, order = probs.sort(dim=-1, descending=True, stable=True)
    inside = ranked.cumsum(-1) < topp
    last = inside.sum(-1, keepdim=True).clamp(max=probs.size(-1) - 1)
    inside = inside.scatter(-1, last, True)
    return torch.zeros_like(inside).scatter(-1, order, inside)
