"""The fp32 ONNX Runtime verifier's 8-bit output projection, certified in fp32
(``nmt_specdec/decoding/backends/onnxruntime/projection.py``), on the shipped model.

- no token's exact logit lies above the call's ``bound`` unless the call gave
  that token its exact logit: the guarantee every decision rests on;
- the 8-bit error is within half the bound the graph assumes, for both 8-bit
  products (blocks for few rows, per-row integer products for batches);
- decoding takes the same tokens as the all-fp32 verifier, with scores within
  5e-3, at batch 1 and 8 (both loops);
- where the bound certifies nothing, the loops fall back to fp32 logits: the
  same tokens, and scores equal to the all-fp32 verifier's;
- top-k sampling certifies its sample on the 8-bit logits: the same samples as
  the all-fp32 verifier, at batch 1 and 8, chains and K = 0, with a temperature
  and an unk penalty, and with bounds ten times too wide; relaxed acceptance
  (beta > 1) certifies its tests: the all-fp32 verifier's tokens.
"""

from __future__ import annotations


import pytest
from fairseq.dataclass.configs import GenerationConfig
import torch

from nmt_specdec.decoding.decision import sampling as sampling_module
from tests.helpers.shipped_model import (
    SETTINGS,
    decode_all,
    hand_written_sources,
    load_model,
)

LENGTHS = dict(max_len_a=SETTINGS["max_len_a"], max_len_b=SETTINGS["max_len_b"])


@pytest.fixture(scope="module")
def shipped(onnx_cache):
    from nmt_specdec.decoding.backends.onnxruntime.session import OrtBackend

    torch.set_num_threads(1)
    model, task = load_model()
    dictionary = task.target_dictionary
    backends = {certified: OrtBackend(model, dictionary.pad(), dictionary.eos(),
                                      certified=certified) for certified in (True, False)}
    assert backends[True].certified and not backends[False].certified
    return model, task, hand_written_sources(task), backends


def _decode(model, task, sources, backend, k: int, batch_size: int, unkpen: float = 0.0,
            sampling=None, temperature: float = 1.0, beta: int = 1, tau: float = 0.0,
            candidates: int = 1):
    """(tokens, positional scores) per sentence, in input order (``sampling``: a
    :class:`~nmt_specdec.decoding.decision.sampling.SamplingRule`, seed 1)."""
    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions, LengthRules

    rules = LengthRules.from_generation_args(
        GenerationConfig(min_len=1, unkpen=unkpen, lenpen=1.0, temperature=temperature,
                         **LENGTHS), model)
    generator = SpecDecGenerator(model, task.target_dictionary,
                                 DecodingOptions(k=k, beta=beta, tau=tau, candidates=candidates),
                                 rules,
                                 backend=backend, sampling=sampling)
    torch.manual_seed(1)
    return decode_all(generator, model, task, sources, batch_size, scores=True)


def _teacher_forced_calls(model, task, sources, backend):
    """Verify calls over each sentence's greedy output, 4 positions at a time:
    [(certified logits, bound, hidden)] on real decoder states."""
    from nmt_specdec.decoding.generator import SpecDecGenerator  # noqa: F401  (registration

    greedy = _decode(model, task, sources[:12], backend, 0, 1)
    calls = []
    for source, (tokens, _) in zip(sources[:12], greedy):
        memory = backend.encode({"src_tokens": source.view(1, -1),
                                 "src_lengths": torch.tensor([source.numel()])})
        verifier = backend.verifier()
        cross = verifier.cross_states(memory)
        cache = verifier.new_cache(1, len(tokens) + 8)
        inputs = [task.target_dictionary.eos()] + tokens[:-1]
        for first in range(0, len(inputs), 4):
            block = torch.tensor([inputs[first: first + 4]])
            got = verifier.verify(block, torch.tensor([first]), first, cache, cross, True)
            calls.append((got.logits.clone(), got.bound.clone(), got.hidden.clone()))
    return calls


@pytest.mark.parametrize("rows_graph", [False, True])
def test_no_inexact_logit_lies_above_the_bound(shipped, monkeypatch, rows_graph):
    """Either 8-bit projection: MatMulNBits' blocks (few rows) or the batch graph's
    per-row integer product (``rows_graph``), under the same bound."""
    from nmt_specdec.decoding.backends.onnxruntime import session
    from nmt_specdec.decoding.backends.onnxruntime.projection import CertifiedProjection

    model, task, sources, backends = shipped
    batch_graph = backends[True].verifier()._batch_graph()
    assert batch_graph is not None and batch_graph is not backends[True].verifier().session
    if rows_graph:  # a cache of one row verifies with the batch graph too
        monkeypatch.setattr(session, "ROWS_FROM", 1)
    weight = model.decoder.output_projection.weight.detach()
    projection = CertifiedProjection(weight)
    positions = certain = 0
    for logits, bound, hidden in _teacher_forced_calls(model, task, sources, backends[True]):
        exact = hidden @ weight.t()
        inexact = (logits - exact).abs() > 1e-4  # the 8-bit scores
        # The guarantee: any token above the bound has its exact score.
        assert not (inexact & (exact >= bound.unsqueeze(-1))).any()
        # The 8-bit error stays within half the assumed bound (the other half: SAFETY).
        stats = torch.stack([hidden.abs().amax(-1), hidden.abs().sum(-1),
                             torch.ones_like(hidden[..., 0])], -1)
        assumed = stats @ projection.coef
        assert ((logits - exact).abs() <= assumed / 2)[inexact].all()
        # The candidates are the tokens the decisions read: the best is exact.
        best = exact.argmax(-1, keepdim=True)
        torch.testing.assert_close(logits.gather(-1, best), exact.gather(-1, best),
                                   atol=1e-4, rtol=1e-5)
        positions += bound.numel()
        certain += int((exact.amax(-1) > bound).sum())
    assert positions > 100 and certain / positions > 0.95


@pytest.mark.parametrize("batch_size", [1, 8])
def test_decodes_as_the_fp32_verifier(shipped, batch_size):
    model, task, sources, backends = shipped
    for k in (0, SETTINGS["k"]):
        ours = _decode(model, task, sources, backends[True], k, batch_size)
        theirs = _decode(model, task, sources, backends[False], k, batch_size)
        assert [t for t, _ in ours] == [t for t, _ in theirs]
        for (_, a), (_, b) in zip(ours, theirs):
            torch.testing.assert_close(a, b, atol=5e-3, rtol=0)


@pytest.mark.parametrize("batch_size", [1, 8])
@pytest.mark.parametrize("k, unkpen", [(0, 0.0), (SETTINGS["k"], 0.0),  # 0: single-row greedy
                                       (0, -20.0)])  # an unk penalty (a reward: unk is chosen)
def test_uncertain_calls_fall_back_to_fp32(shipped, monkeypatch, batch_size, k, unkpen):
    # A bound above every logit certifies nothing: every call must be redone in
    # fp32, so that even the scores are the all-fp32 verifier's (constrained once).
    from nmt_specdec.decoding.backends.onnxruntime.session import OrtVerifier

    model, task, sources, backends = shipped
    verify, fallbacks = OrtVerifier.verify, []

    unk = task.target_dictionary.unk()

    def certifies_nothing(self, *args, **kwargs):
        got = verify(self, *args, **kwargs)
        if not unkpen:
            return got._replace(bound=torch.full_like(got.bound, float("inf")))
        # Just above every logit with the penalty applied once: a loop that applied
        # it twice would find a certain best and keep the 8-bit scores.
        once = torch.maximum(got.logits.amax(-1), got.logits[..., unk] - unkpen)
        return got._replace(bound=once + 1.0)

    exact_logits = OrtVerifier.exact_logits

    def counted(self, hidden):
        fallbacks.append(hidden.shape[:2])
        return exact_logits(self, hidden)

    monkeypatch.setattr(OrtVerifier, "verify", certifies_nothing)
    monkeypatch.setattr(OrtVerifier, "exact_logits", counted)
    ours = _decode(model, task, sources[:16], backends[True], k, batch_size, unkpen)
    monkeypatch.undo()
    theirs = _decode(model, task, sources[:16], backends[False], k, batch_size, unkpen)
    assert fallbacks
    assert [t for t, _ in ours] == [t for t, _ in theirs]
    for (_, a), (_, b) in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    if unkpen:
        assert any(unk in t for t, _ in ours)


@pytest.mark.parametrize("batch_size", [1, 8])
@pytest.mark.parametrize("k, topk, unkpen, temperature", [(0, 10, 0.0, 1.0), (2, 10, 0.0, 1.0),
                                                          (2, 3, -20.0, 0.7), (0, 40, 0.0, 1.3)])
def test_samples_as_the_fp32_verifier(shipped, monkeypatch, batch_size, k, topk, unkpen,
                                      temperature):
    # Top-k sampling certifies its sample on the 8-bit logits (decision/certified.py):
    # the same draws as the all-fp32 verifier's, the sampled token's exact logit in
    # its score. Some positions hold the top k among the call's candidates, others
    # need the checks.
    from nmt_specdec.decoding.decision import certified
    from nmt_specdec.decoding.decision.sampling import SamplingRule
    from nmt_specdec.decoding.loops import single_row

    model, task, sources, backends = shipped
    rule, calls = SamplingRule(topk=topk), {"known": 0, "checked": 0}
    known, sample = certified.known_sample, certified.certified_sample

    def counted_known(*args, **kwargs):
        found = known(*args, **kwargs)
        calls["known"] += found is not None
        return found

    def counted(*args):
        calls["checked"] += 1
        return sample(*args)

    monkeypatch.setattr(sampling_module, "known_sample", counted_known)
    monkeypatch.setattr(single_row, "known_sample", counted_known)  # its K = 0 turns
    monkeypatch.setattr(sampling_module, "certified_sample", counted)
    monkeypatch.setattr(single_row, "certified_sample", counted)
    ours = _decode(model, task, sources, backends[True], k, batch_size, unkpen, rule,
                   temperature)
    monkeypatch.undo()
    theirs = _decode(model, task, sources, backends[False], k, batch_size, unkpen, rule,
                     temperature)
    # Every position of ours certified its sample, either way.
    assert calls["known"] + calls["checked"] > 100
    if topk == 10:  # both ways: the known candidates, and the checks
        assert calls["known"] > 0 and calls["checked"] > 0
    assert [t for t, _ in ours] == [t for t, _ in theirs]
    for (_, a), (_, b) in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=5e-3, rtol=0)
    if unkpen:  # the penalty (a reward) applies to the exact logits too
        assert any(task.target_dictionary.unk() in t for t, _ in ours)


@pytest.mark.parametrize("batch_size", [1, 8])
@pytest.mark.parametrize("beta, tau, unkpen, candidates", [(3, 0.5, 0.0, 1), (5, 2.0, 0.0, 1),
                                                          (3, 1.0, 1.0, 1), (3, 1.0, 0.0, 2)])
def test_relaxed_acceptance_decides_as_the_fp32_verifier(shipped, batch_size, beta, tau,
                                                         unkpen, candidates):
    # beta > 1 certifies each draft's top-beta/tau test and each argmax on the
    # 8-bit logits (AcceptanceRule.certify_host): the fp32 verifier's tokens,
    # chains and trees (candidates 2).
    model, task, sources, backends = shipped
    relaxed = dict(beta=beta, tau=tau, candidates=candidates)
    ours = _decode(model, task, sources, backends[True], SETTINGS["k"], batch_size, unkpen,
                   **relaxed)
    theirs = _decode(model, task, sources, backends[False], SETTINGS["k"], batch_size, unkpen,
                     **relaxed)
    greedy = _decode(model, task, sources, backends[False], 0, batch_size, unkpen)
    assert [t for t, _ in ours] == [t for t, _ in theirs]
    assert [t for t, _ in ours] != [t for t, _ in greedy]  # relaxed: other tokens
    for (_, a), (_, b) in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=5e-3, rtol=0)


def test_a_loose_bound_still_samples_as_the_fp32_verifier(shipped, monkeypatch):
    # Bounds ten times too wide, every position through the checks: most score
    # many tokens exactly and fall back from the shortlist to the whole
    # vocabulary, with the same draws.
    from nmt_specdec.decoding.backends.onnxruntime.projection import ProjectionCheck
    from nmt_specdec.decoding.decision.sampling import SamplingRule

    model, task, sources, backends = shipped
    bounds = ProjectionCheck.bounds
    monkeypatch.setattr(ProjectionCheck, "bounds", lambda self, h: 10 * bounds(self, h))
    from nmt_specdec.decoding.loops import single_row

    for module in (sampling_module, single_row):
        monkeypatch.setattr(module, "known_sample", lambda *args, **kwargs: None)
    ours = _decode(model, task, sources[:16], backends[True], 2, 1, sampling=SamplingRule(10))
    monkeypatch.undo()
    theirs = _decode(model, task, sources[:16], backends[False], 2, 1, sampling=SamplingRule(10))
    assert [t for t, _ in ours] == [t for t, _ in theirs]


def test_exact_scores_turns_it_off_in_the_hub_and_the_cli(shipped, tmp_path, capsys):
    from fairseq_plugins.specdec_model import SpecDecTransformerModel
    from nmt_specdec import translate
    from tests.helpers.shipped_model import HAND_WRITTEN, MODEL_DIR

    options = dict(checkpoint_file="model.pt", data_name_or_path=str(MODEL_DIR),
                   bpe="sentencepiece", sentencepiece_model=str(MODEL_DIR / "spm.model"),
                   spec_decoding=True, spec_k="2", backend="onnxruntime")
    for exact in (False, True):
        hub = SpecDecTransformerModel.from_pretrained(str(MODEL_DIR), exact_scores=exact,
                                                      **options)
        generator = hub.task.build_generator(hub.models, hub.cfg.generation)
        assert generator.backend.certified is not exact
    # beta > 1 certifies its decisions on the host; top-p sampling reads every
    # probability: the fp32 projection.
    hub = SpecDecTransformerModel.from_pretrained(str(MODEL_DIR), spec_beta=3, spec_tau=1.0,
                                                  **options)
    assert hub.task.build_generator(hub.models, hub.cfg.generation).backend.certified
    hub = SpecDecTransformerModel.from_pretrained(str(MODEL_DIR), sampling=True,
                                                  sampling_topp=0.9, **options)
    assert not hub.task.build_generator(hub.models, hub.cfg.generation).backend.certified
    lines = HAND_WRITTEN.read_text(encoding="utf-8").splitlines()[:4]
    source = tmp_path / "in.de"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    outputs = []
    for extra in ([], ["--exact-scores"]):
        status = translate.main(["--checkpoint", str(MODEL_DIR / "model.pt"), "--data",
                                 str(MODEL_DIR), "--spm-model", str(MODEL_DIR / "spm.model"),
                                 "--input", str(source), "--spec-decoding", "--backend",
                                 "onnxruntime", *extra])
        assert status == 0
        outputs.append(capsys.readouterr().out.splitlines())
    assert outputs[0] == outputs[1] and len(outputs[0]) == len(lines)
