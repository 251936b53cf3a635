"""Speculative sampling is exact in distribution (issue 67).

On a random-weight model whose outputs are short enough to enumerate, the
exact probability of every output under fairseq's sampling (``search.Sampling``
applied to the constrained, tempered log-probabilities, step by step) is
compared with the frequencies of 20,000 SpecDec samples (K = 2, the random draft
head proposing far from the verifier, so that drafts are both kept and
rejected often) in a chi-square test at significance 0.001. The same test must
reject each of three deliberate mistakes in the rule, the draws must not depend
on the batch, and drafting must not change a sample.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Dict, Tuple

import pytest
import torch
from fairseq.dataclass.configs import GenerationConfig
from fairseq.search import Sampling
from scipy.stats import chisquare

from nmt_specdec.decoding.build import build_decoder
from nmt_specdec.decoding.decision import draws
from nmt_specdec.decoding.decision import sampling as sampling_rule
from nmt_specdec.decoding.decision.tree import Acceptance
from nmt_specdec.decoding.loops import batched, sampled, single_row
from nmt_specdec.decoding.options import DecodingOptions
from tests.helpers.specdec_toy import random_specdec_model, select_rows, source_batch

SAMPLES = 20_000
CHUNK = 2_500
SIGNIFICANCE = 1e-3
SEED = 1234
# (topk, topp, temperature, max_len): few enough outputs to enumerate.
SETTINGS = {
    "top-k": (3, -1.0, 1.0, 3),
    "top-p": (-1, 0.35, 1.0, 3),
    "temperature": (-1, -1.0, 0.7, 2),
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    task, model = random_specdec_model(tmp_path_factory.mktemp("sampling"), eos_boost=2.0,
                                       extra_args=("--spec-decoding", "--spec-k", "2"))
    source = source_batch(task.target_dictionary, (5,), seed=3)
    return model, task.target_dictionary, source


def generation_args(topk: int, topp: float, temperature: float, max_len: int):
    return GenerationConfig(beam=1, max_len_a=0.0, max_len_b=max_len, sampling=True,
                            sampling_topk=topk, sampling_topp=topp, temperature=temperature)


def repeated(source: dict, first: int, count: int) -> dict:
    """``count`` copies of the one-sentence ``source``, ids ``first``.. on."""
    src = source["net_input"]["src_tokens"].expand(count, -1).contiguous()
    return {"id": torch.arange(first, first + count),
            "net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum(1)}}


def sampling_generator(model, dictionary, args, k: int, backend: str = "torch",
                       candidates: int = 1, drafter: str = "head"):
    """What ``--spec-decoding --sampling`` builds (``args``: fairseq's config;
    ``candidates``: ``--spec-candidates``, a tree above 1; ``drafter``:
    ``--spec-drafter``)."""
    options = DecodingOptions(spec_decoding=True, k=k, backend=backend, candidates=candidates,
                              drafter=drafter)
    return build_decoder(model, dictionary, options, args)


def specdec_samples(model, dictionary, source, setting, k: int = 2, total: int = SAMPLES,
                    batch: int = CHUNK, backend: str = "torch", candidates: int = 1,
                    drafter: str = "head") -> Tuple[Counter, object]:
    """Output frequencies of ``total`` samples of the one sentence."""
    generator = sampling_generator(model, dictionary, generation_args(*setting), k, backend,
                                   candidates, drafter)
    torch.manual_seed(SEED)
    counts: Counter = Counter()
    for first in range(0, total, batch):
        for hyps in generator.generate([model], repeated(source, first, batch)):
            counts[tuple(hyps[0]["tokens"].tolist())] += 1
    return counts, generator


def fairseq_step(lprobs: torch.Tensor, dictionary, step: int, max_len: int, topk: int,
                 topp: float) -> torch.Tensor:
    """(V,) the probabilities fairseq's SequenceGenerator + search.Sampling sample
    from at ``step`` (its constraints, then its own top-k / top-p code)."""
    lprobs = lprobs.clone()
    lprobs[dictionary.pad()] = -math.inf
    if step >= max_len:
        eos = lprobs[dictionary.eos()].item()
        lprobs[:] = -math.inf
        lprobs[dictionary.eos()] = eos
    if step < 1:  # min_len 1
        lprobs[dictionary.eos()] = -math.inf
    search = Sampling(dictionary, sampling_topk=topk, sampling_topp=topp)
    view = lprobs.view(1, 1, -1)
    if topp > 0:
        probs, indices = search._sample_topp(view)
    elif topk > 0:
        values, indices = view.topk(topk)
        probs = values.exp()
    else:
        probs, indices = view.exp(), torch.arange(view.size(-1)).view(1, 1, -1)
    full = torch.zeros_like(lprobs, dtype=torch.float64)
    full[indices.view(-1)] = probs.view(-1).double()
    return full / full.sum()


@torch.no_grad()
def exact_distribution(model, dictionary, source, setting) -> Dict[tuple, float]:
    """Every output with its probability under fairseq's sampling."""
    topk, topp, temperature, max_len = setting
    src = source["net_input"]["src_tokens"]
    encoder_out = model.encoder(src, src_lengths=source["net_input"]["src_lengths"])
    outcomes, frontier = {}, [((), 1.0)]
    for step in range(max_len + 1):
        grown = []
        for prefix, mass in frontier:
            prev = torch.tensor([[dictionary.eos(), *prefix]])
            logits, _ = model.decoder(prev, encoder_out=encoder_out)
            lprobs = torch.log_softmax(logits[0, -1].float() / temperature, -1)
            probs = fairseq_step(lprobs, dictionary, step, max_len, topk, topp)
            for token in probs.nonzero().view(-1).tolist():
                item = (prefix + (token,), mass * probs[token].item())
                (outcomes.update([item]) if token == dictionary.eos() else grown.append(item))
        frontier = grown
    assert not frontier
    return outcomes


def chi_square_p(counts: Counter, exact: Dict[tuple, float]) -> float:
    """The p-value of the frequencies under ``exact``, cells with an expected
    count below 5 pooled (an output outside ``exact`` fails outright)."""
    if set(counts) - set(exact):
        return 0.0
    total = sum(counts.values())
    observed, expected, pooled = [], [], [0.0, 0.0]
    for outcome, prob in exact.items():
        cell = pooled if prob * total < 5 else None
        if cell is None:
            observed.append(counts[outcome])
            expected.append(prob * total)
        else:
            cell[0] += counts[outcome]
            cell[1] += prob * total
    if pooled[1] > 0:
        observed.append(pooled[0])
        expected.append(pooled[1])
    return chisquare(observed, expected).pvalue


@pytest.mark.parametrize("name,backend,candidates,drafter", [
    *((name, "torch", 1, "head") for name in sorted(SETTINGS)),
    ("top-k", "onnxruntime", 1, "head"), ("top-k", "torch", 2, "head"),
    ("top-p", "onnxruntime", 2, "head"), ("top-k", "onnxruntime", 1, "verifier-int8"),
    ("temperature", "onnxruntime", 1, "verifier-int8")])
def test_samples_follow_fairseqs_sampling_distribution(toy, onnx_cache, name, backend,
                                                       candidates, drafter):
    model, dictionary, source = toy
    exact = exact_distribution(model, dictionary, source, SETTINGS[name])
    assert abs(sum(exact.values()) - 1) < 1e-6 and len(exact) > 5
    counts, generator = specdec_samples(model, dictionary, source, SETTINGS[name],
                                        backend=backend, candidates=candidates, drafter=drafter)
    rates = generator.stats.slot_acceptance()
    if drafter == "head":  # the random head drafts far from the verifier: both branches decide
        assert 0.05 < rates[0] < 0.95, rates
    else:  # the verifier's 8-bit copy draws nearly the verifier's own sample
        assert rates[0] > 0.6, rates
    assert chi_square_p(counts, exact) > SIGNIFICANCE


def _uniform_noise(keys, positions, ids):
    """Mistake 1: the uniform itself as the noise, not -log(-log u)."""
    return (-draws.gumbel(keys, positions, ids)).exp().neg().exp()


def _noise_of_every_position_alike(keys, positions, ids):
    """Mistake 2: the noise keyed without the output position."""
    return draws.gumbel(keys, torch.zeros_like(positions), ids)


def _drafts_kept_inside_the_cut(scores, drafts, rule):
    """Mistake 3: a draft kept wherever it is inside the cut (a finite perturbed
    score), not only as the perturbed argmax."""
    num_slots = drafts.size(1)
    inside = scores[:, :num_slots].gather(-1, drafts.unsqueeze(-1)).squeeze(-1).isfinite()
    accepted = inside.long().cumprod(dim=1).bool()
    num_accepted = accepted.sum(1)
    at = scores.gather(1, num_accepted.view(-1, 1, 1).expand(-1, 1, scores.size(-1)))
    return Acceptance(accepted, num_accepted, at.squeeze(1).argmax(-1))


@pytest.mark.parametrize("where,mistake", [
    ((sampling_rule, "gumbel"), _uniform_noise),
    ((sampling_rule, "gumbel"), _noise_of_every_position_alike),
    ((batched, "accept_drafts"), _drafts_kept_inside_the_cut)],
    ids=["uniform-noise", "noise-without-position", "drafts-kept-inside-the-cut"])
def test_the_test_rejects_a_wrong_rule(toy, monkeypatch, where, mistake):
    model, dictionary, source = toy
    setting = SETTINGS["top-k"]
    exact = exact_distribution(model, dictionary, source, setting)
    monkeypatch.setattr(*where, mistake)
    counts, _ = specdec_samples(model, dictionary, source, setting)
    assert chi_square_p(counts, exact) < 1e-6


def _sampled(model, dictionary, sample, k: int, batch: int, seed: int = SEED,
             match_source_len: bool = False, backend: str = "torch", candidates: int = 1,
             drafter: str = "head"):
    args = generation_args(10, -1.0, 1.0, 5)
    args.match_source_len = match_source_len
    generator = sampling_generator(model, dictionary, args, k, backend, candidates, drafter)
    torch.manual_seed(seed)
    rows = sample["id"].numel()
    outputs = []
    for first in range(0, rows, batch):
        part = select_rows(sample, range(first, min(rows, first + batch)))
        outputs += [h[0]["tokens"].tolist() for h in generator.generate([model], part)]
    return outputs


@pytest.mark.parametrize("k,match_source_len,backend", [
    (0, False, "torch"), (2, False, "torch"), (2, True, "torch"), (2, False, "onnxruntime")])
def test_a_sentences_sample_depends_on_the_seed_and_its_position_alone(
        toy, onnx_cache, k, match_source_len, backend):
    """The same bytes at batch 32, 8 and 1 and on a rerun; another seed, others.
    With --match-source-len every row runs to a limit of its own, where the K of
    a turn would otherwise shrink with the batch's longest limit."""
    model, dictionary, _ = toy
    lengths = [3 + (7 * i) % 10 for i in range(32)]
    sample = source_batch(dictionary, lengths, seed=5)
    setting = (match_source_len, backend)
    whole = _sampled(model, dictionary, sample, k, 32, SEED, *setting)
    assert _sampled(model, dictionary, sample, k, 8, SEED, *setting) == whole
    assert _sampled(model, dictionary, sample, k, 1, SEED, *setting) == whole
    assert _sampled(model, dictionary, sample, k, 32, SEED, *setting) == whole
    assert _sampled(model, dictionary, sample, k, 32, SEED + 1, *setting) != whole
    assert len(set(map(len, whole))) > 3


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_drafting_never_changes_a_sample(toy, onnx_cache, backend, monkeypatch):
    """A token is the perturbed argmax of the verifier's scores at its output
    position, whoever drafted it: SpecDec at K=2 gives the engine's own sampling
    (K=0) byte for byte, chains and trees, in batches (tensor forms) and one by
    one (host forms)."""
    model, dictionary, _ = toy
    sample = source_batch(dictionary, [3 + (7 * i) % 10 for i in range(16)], seed=5)
    plain = _sampled(model, dictionary, sample, 0, 8, backend=backend)
    assert _sampled(model, dictionary, sample, 2, 8, backend=backend) == plain
    assert _sampled(model, dictionary, sample, 2, 1, backend=backend) == plain
    trees = []  # the (B, C, K) candidates each tree turn flattened
    for loop in (sampled, single_row):
        flatten = loop.flatten_candidates
        monkeypatch.setattr(loop, "flatten_candidates",
                            lambda last, best, flatten=flatten: trees.append(best.shape)
                            or flatten(last, best))
    for batch in (8, 1):  # a tree: each slot's two best perturbed tokens
        assert _sampled(model, dictionary, sample, 2, batch, backend=backend,
                        candidates=2) == plain
    assert {shape[1:] for shape in trees} == {(2, 2)} and {1, 8} <= {s[0] for s in trees}
    if backend == "onnxruntime":  # a chain drafter, slot after slot: the verifier's copies
        for batch, drafter in itertools.product((8, 1), ("verifier-int8", "verifier-int4")):
            assert _sampled(model, dictionary, sample, 2, batch, backend=backend,
                            drafter=drafter) == plain


def test_equal_lines_draw_independently(toy):
    model, dictionary, source = toy
    outputs = _sampled(model, dictionary, repeated(source, 0, 16), k=2, batch=16)
    assert len(set(map(tuple, outputs))) > 1


@pytest.mark.parametrize("name,backend,candidates", [
    *((name, "torch", 1) for name in sorted(SETTINGS)), ("top-k", "onnxruntime", 1),
    ("top-k", "torch", 2)])
def test_the_single_row_loop_samples_as_the_batched_loop(toy, onnx_cache, name, backend,
                                                         candidates):
    """At batch 1 on the CPU the host decides (:mod:`~nmt_specdec.decoding.loops.single_row`,
    the host forms of the rule and the draws): the same tokens, scores, iterations
    and acceptance as the batched loop's tensor forms, sentence by sentence (the
    scores to float32's rounding)."""
    from nmt_specdec.decoding.loops import DynamicLoop, decode_rows, decode_single_row

    model, dictionary, _ = toy
    sample = source_batch(dictionary, [3 + (7 * i) % 10 for i in range(24)], seed=5)
    results = []
    for loop in (decode_single_row, decode_rows):
        generator = sampling_generator(model, dictionary,
                                       generation_args(*SETTINGS[name][:3], 8), 2, backend,
                                       candidates)
        generator.loop = DynamicLoop(loop)
        hyps = [generator.generate([model], select_rows(sample, [i]))[0][0] for i in range(24)]
        results.append(([(h["tokens"].tolist(), h["iterations"]) for h in hyps],
                        generator.stats.accepted_per_slot,
                        torch.cat([h["positional_scores"] for h in hyps])))
    assert results[0][:2] == results[1][:2]
    # To float32's rounding: the single-row loop verifies a chain up to its first EOS draft.
    torch.testing.assert_close(results[0][2], results[1][2], atol=1e-5, rtol=0)
    accepted = results[0][1]
    assert 0 < accepted[0] < 24 * 8  # drafts were both accepted and rejected
