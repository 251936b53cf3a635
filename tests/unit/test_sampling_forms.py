"""Sampling's two forms write the same perturbed scores, and the noise is a
standard Gumbel that depends on what it decides alone.

- :meth:`SamplingRule.perturbed` (B rows, tensors) and
  :meth:`SamplingRule.perturbed_host` (one row, numpy) give the same float64
  scores and the same ``-inf`` cells, for top-k (with ties at the k-th),
  top-p and the whole vocabulary, and the same top-p set where tokens tie at
  its edge;
- :func:`gumbel` and :func:`gumbel_host` give the same bits; the noise does not
  depend on the other rows, positions or tokens asked for with it, and its
  moments are a standard Gumbel's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nmt_specdec.decoding.decision.draws import (
    NEAR,
    gumbel,
    gumbel_few,
    gumbel_host,
    sentence_keys,
)
from nmt_specdec.decoding.decision.sampling import SamplingRule

VOCAB = 40


def _lprobs(rows: int, positions: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, positions, VOCAB, generator=generator) * 2
    logits[:, :, 5] = float("-inf")  # a constrained token (pad)
    logits[0, 0, 7] = logits[0, 0].topk(3).values[-1]  # a tie at the 3rd likeliest
    return torch.log_softmax(logits, -1)


@pytest.mark.parametrize("rule", [SamplingRule(topk=3), SamplingRule(topp=0.6),
                                  SamplingRule(topk=3, topp=0.9), SamplingRule()],
                         ids=["top-k", "top-p", "top-p-over-top-k", "all"])
def test_the_host_form_perturbs_as_the_tensor_form(rule):
    lprobs = _lprobs(3, 4, seed=0)
    keys = sentence_keys(11, torch.arange(3))
    positions = torch.tensor([[1, 2, 3, 4], [7, 8, 9, 10], [2, 3, 4, 5]])
    batch = rule.perturbed(lprobs, keys, positions)
    for row in range(3):
        alone = rule.perturbed_host(lprobs[row].numpy(), int(keys[row]), positions[row].tolist())
        assert np.array_equal(alone, batch[row].numpy())
    inside = batch.isfinite().sum(-1)
    if rule.topp > 0:
        assert (inside >= 1).all()
    elif rule.topk > 0:
        assert inside[0, 0] == 4 and (inside.view(-1)[1:] == 3).all()  # the tie is inside
    else:
        assert (inside == VOCAB - 1).all()  # all but the constrained token


@pytest.mark.parametrize("topp", [0.3, 0.6, 0.9])
def test_the_two_forms_cut_the_same_nucleus_at_ties(topp):
    # Logits on a coarse grid: many tokens tie, the nucleus's last one among them.
    generator = torch.Generator().manual_seed(int(topp * 10))
    logits = (torch.randn(200, 1000, generator=generator) * 4).round() / 2
    lprobs = torch.log_softmax(logits, -1)
    rule = SamplingRule(topp=topp)
    rows, ids = rule.inside_host(lprobs.numpy())
    host = np.zeros(lprobs.shape, dtype=bool)
    host[rows, ids] = True
    inside = rule.support(lprobs).numpy()
    assert np.array_equal(host, inside), np.nonzero(host != inside)[0][:5]
    # Some nucleus ends inside a tie, so the order among tied tokens matters here.
    ranked = lprobs.sort(-1, descending=True).values
    last = torch.from_numpy(inside).sum(-1) - 1
    split = ranked.gather(-1, last[:, None]) == ranked.gather(-1, last[:, None] + 1)
    assert split.sum() >= 10


def test_the_noise_depends_on_its_row_position_and_token_alone():
    keys = sentence_keys(3, torch.arange(4))
    ids = torch.arange(30).view(1, 1, 30).expand(4, 2, 30)
    positions = torch.tensor([[1, 2], [1, 2], [5, 6], [1, 9]])
    noise = gumbel(keys, positions, ids)
    # One row, one position, a few tokens in another order: the same values.
    picked = torch.tensor([[[29, 3, 17]]])
    alone = gumbel(keys[2:3], positions[2:3, 1:], picked)
    assert torch.equal(alone[0, 0], noise[2, 1, [29, 3, 17]])
    host = gumbel_host(int(keys[3]), np.full(30, 9), np.arange(30))
    assert np.array_equal(host, noise[3, 1].numpy())
    # A few tokens of one position, hashed in Python integers: the same bits.
    few = np.array([29, 3, 17, 2 ** 31 + 5])
    expected = gumbel(keys[3:], torch.tensor([[9]]), torch.from_numpy(few).view(1, 1, -1))
    assert np.array_equal(gumbel_host(int(keys[3]), np.int64(9), few), expected[0, 0].numpy())
    # Bit for bit over many tokens: numpy's own float64 log differs from torch's
    # in the last bit for ~0.3% of values on an AMD EPYC Zen 4.
    many = torch.arange(20000).view(1, 1, -1)
    wide = gumbel(keys[3:], torch.tensor([[9]]), many)[0, 0].numpy()
    assert np.array_equal(gumbel_host(int(keys[3]), np.full(20000, 9), np.arange(20000)), wide)
    # Python's logs: within NEAR of the same noise.
    near = np.array(gumbel_few(int(keys[3]), 9, range(20000)))
    assert np.abs(near - wide).max() < NEAR
    # Another sentence, position or seed: other noise.
    assert not torch.equal(noise[0, 0], noise[1, 0])
    assert not torch.equal(noise[0, 0], noise[0, 1])
    assert not torch.equal(gumbel(sentence_keys(4, torch.arange(1)), positions[:1], ids[:1]),
                           noise[:1])


def test_the_noise_is_a_standard_gumbel():
    keys = sentence_keys(5, torch.arange(20))
    positions = torch.arange(50).expand(20, 50)
    noise = gumbel(keys, positions, torch.arange(100).expand(20, 50, 100)).view(-1)
    assert noise.numel() == 100_000
    # Mean: Euler's gamma; variance: pi^2 / 6 (standard errors ~0.004 and ~0.01).
    assert abs(noise.mean().item() - 0.5772) < 0.02
    assert abs(noise.var().item() - math.pi ** 2 / 6) < 0.05
    # P(g <= 0) = exp(-1).
    assert abs((noise <= 0).double().mean().item() - math.exp(-1)) < 0.005
