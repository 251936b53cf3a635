"""The lean engine (issue #12) against fairseq on a tiny random model.

* the lean verifier pass equals fairseq's decoder (teacher-forced full pass);
* after decoding, each row's cache holds exactly the keys/values of its
  committed inputs (compared with a fresh recompute), whatever was rejected;
* K=0 (``--spec-k 0``) is stock greedy, at batch 1 and 32;
* the lean draft pass equals the draft head's module forward;
* a format-1 draft-head checkpoint is refused with a one-line error.
"""

from __future__ import annotations


import pytest
from fairseq.dataclass.configs import GenerationConfig
import torch
from fairseq.sequence_generator import SequenceGenerator

from nmt_specdec.decoding.loops import DynamicLoop, batched, decode_rows
from nmt_specdec.decoding.generator import SpecDecGenerator
from nmt_specdec.decoding.options import DecodingOptions
from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead
from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier
from nmt_specdec.errors import CheckpointError
from tests.helpers.specdec_toy import (
    WrongDrafter,
    random_specdec_model,
    select_rows,
    source_batch,
)

MAX_LEN_B = 15


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    task, model = random_specdec_model(tmp_path_factory.mktemp("lean_engine"))
    return task, model, task.target_dictionary


def generation_args():
    return GenerationConfig(beam=1, max_len_a=0.0, max_len_b=MAX_LEN_B, min_len=1,
                              lenpen=1.0, unkpen=0.0)


def stock_greedy(model, dictionary, sample):
    stock = SequenceGenerator([model], dictionary, beam_size=1, max_len_b=MAX_LEN_B)
    return [hyps[0]["tokens"].tolist() for hyps in stock.generate([model], sample)]


def lean(model, dictionary, sample, k, drafter=None):
    generator = SpecDecGenerator.from_generation_args(
        model, dictionary, DecodingOptions(k=k), generation_args(), drafter)
    return [h[0] for h in generator.generate([model], sample)], generator


def encode(model, sample):
    return model.encoder.forward_torchscript(sample["net_input"])


def test_lean_verifier_pass_equals_fairseq_decoder(toy):
    _, model, dictionary = toy
    sample = source_batch(dictionary, (5, 9, 3), seed=3)
    encoder_out = encode(model, sample)
    g = torch.Generator().manual_seed(0)
    prev = torch.randint(dictionary.nspecial, len(dictionary), (3, 7), generator=g)
    prev[:, 0] = dictionary.eos()
    expected, _ = model.decoder(prev, encoder_out=encoder_out, features_only=True)

    verifier = LeanVerifier(model.decoder)
    cache = verifier.new_cache(3, 16)
    cross = verifier.cross_states(encoder_out)
    # Feed 7 inputs as 3 + 4 new positions (two passes over the cache).
    first = verifier.forward(prev[:, :3], torch.zeros(3, dtype=torch.long), 0, cache, cross)
    second = verifier.forward(prev[:, 3:], torch.full((3,), 3), 3, cache, cross)
    torch.testing.assert_close(torch.cat([first, second], 1), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(verifier.logits(second), model.decoder.output_layer(expected[:, 3:]),
                               atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("k", [2, 5])
def test_cache_keeps_exactly_the_committed_entries(toy, k, monkeypatch):
    # A drafter whose slot 1 is always wrong and slots 2..K right: every pass
    # writes K rejected entries after the committed ones. The cache that the
    # loop leaves must equal a fresh recompute over the committed tokens alone.
    _, model, dictionary = toy
    sample = source_batch(dictionary, (4, 10, 7, 2), seed=5)
    references = stock_greedy(model, dictionary, sample)
    drafter = WrongDrafter(references, dictionary.pad(), dictionary.nspecial, len(dictionary))
    caches = []

    def run(parts, batch):  # the batched loop, its cache kept for the spy
        caches.append(batch.cache)
        return decode_rows(parts, batch)
    generator = SpecDecGenerator.from_generation_args(
        model, dictionary, DecodingOptions(k=k), generation_args(), drafter, loop=DynamicLoop(run))
    captured = {}
    original = batched._collect

    def spy(stats, rows, done, lengths, index, iterations, finished):
        # Before rows leave: remember their cache (slots < committed inputs).
        for i in [i for i, flag in enumerate(done) if flag]:
            used = lengths[i] - 1
            captured[index[i]] = (caches[-1].key[:, i, :, :used].clone(), used)
        return original(stats, rows, done, lengths, index, iterations, finished)

    monkeypatch.setattr(batched, "_collect", spy)
    finished = [hyps[0]["tokens"] for hyps in generator.generate([model], sample)]
    for row, (keys, used) in captured.items():
        tokens = [dictionary.eos()] + finished[row].tolist()
        fresh_verifier = LeanVerifier(model.decoder)
        fresh = fresh_verifier.new_cache(1, 32)
        cross = fresh_verifier.cross_states(encode(model, select_rows(sample, [row])))
        fresh_verifier.forward(torch.tensor([tokens[:used]]), torch.zeros(1, dtype=torch.long),
                               0, fresh, cross)
        torch.testing.assert_close(keys, fresh.key[:, 0, :, :used], atol=1e-5, rtol=1e-5)
        assert finished[row].tolist() == references[row]


@pytest.mark.parametrize("batch_size", [1, 32])
def test_k0_is_stock_greedy(toy, batch_size):
    _, model, dictionary = toy
    lengths = [(3 * i) % 11 + 2 for i in range(batch_size)]
    sample = source_batch(dictionary, lengths, seed=batch_size)
    hyps, generator = lean(model, dictionary, sample, k=0)
    assert [h["tokens"].tolist() for h in hyps] == stock_greedy(model, dictionary, sample)
    assert generator.stats.mean_accepted_tokens == 1.0
    assert generator.stats.drafted_per_slot == []


@pytest.mark.parametrize("batch_size", [1, 32])
def test_beta1_draft_head_is_stock_greedy(toy, batch_size):
    _, model, dictionary = toy
    lengths = [(5 * i) % 12 + 1 for i in range(batch_size)]
    sample = source_batch(dictionary, lengths, seed=7)
    hyps, _ = lean(model, dictionary, sample, k=4)
    assert [h["tokens"].tolist() for h in hyps] == stock_greedy(model, dictionary, sample)


def test_lean_draft_pass_equals_module_forward(toy):
    _, model, dictionary = toy
    sample = source_batch(dictionary, (6, 2, 9), seed=11)
    encoder_out = encode(model, sample)
    head = model.draft_head
    g = torch.Generator().manual_seed(1)
    states = torch.randn(3, head.mask_embedding.numel(), generator=g)
    last = torch.tensor([5, 7, dictionary.eos()])
    positions = torch.tensor([3, 1, 0])
    with torch.no_grad():
        logits = head(states, last, positions, encoder_out, 4)
    lean_head = LeanDraftHead(head, dictionary.pad())
    lean_head.start_batch(encoder_out)
    drafts = lean_head.propose(states, last, positions, 4)
    logits[:, :, dictionary.pad()] = float("-inf")
    assert drafts.tolist() == logits.argmax(-1).tolist()


def test_format1_draft_head_is_refused(toy):
    _, model, _ = toy
    state = {k: v for k, v in model.state_dict().items() if k != "draft_head.format_version"}
    with pytest.raises(CheckpointError, match="format 1"):
        model.load_state_dict(state)
    model.load_state_dict(model.state_dict())  # format 2 loads


def test_logit_gap_at_the_first_difference(toy):
    from nmt_specdec.evaluation.mismatch import first_difference, logit_gaps

    _, model, dictionary = toy
    sample = source_batch(dictionary, (6, 4), seed=2)
    greedy = stock_greedy(model, dictionary, sample)
    other = [list(greedy[0]), list(greedy[1])]
    other[0][2] = dictionary.nspecial + (other[0][2] - dictionary.nspecial + 1) % 20
    sources = [s[s.ne(dictionary.pad())] for s in sample["net_input"]["src_tokens"]]
    gaps = logit_gaps(model, sources, dict(enumerate(greedy)), dict(enumerate(other)),
                      dictionary.eos())
    assert first_difference(greedy[0], other[0]) == 2
    assert [g["sentence"] for g in gaps] == [0] and gaps[0]["step"] == 2
    # The greedy token is the verifier's top-1 there: the gap is its margin.
    assert gaps[0]["logit_gap"] > 0
    # A substituted token is no near-tie: the report must not call it rounding.
    assert gaps[0]["near_tie"] == (gaps[0]["logit_gap"] < 1e-4) and not gaps[0]["near_tie"]


def test_auto_greedy_batches_start_no_drafter(toy):
    # --spec-k auto's first batch of a size bucket is greedy (BatchArms): it must not
    # pay for the draft head's per-batch state (the torch drafter projects the
    # encoder output for its layers), nor keep its rows; the next batch drafts.
    _, model, dictionary = toy
    generator = SpecDecGenerator.from_generation_args(
        model, dictionary, DecodingOptions(k=4, auto_k=True), generation_args())
    calls = []
    for name in ("start_batch", "keep_rows"):
        method = getattr(generator.drafter, name)
        setattr(generator.drafter, name,
                lambda *args, _name=name, _method=method: calls.append(_name) or _method(*args))
    sample = source_batch(dictionary, [3, 9, 5, 12], seed=5)
    expected = stock_greedy(model, dictionary, sample)
    for drafts in (False, True):
        calls.clear()
        hyps = [h[0]["tokens"].tolist() for h in generator.generate([model], sample)]
        assert hyps == expected
        assert generator.k_policy.may_draft is drafts
        assert ("start_batch" in calls) is drafts
        assert drafts or "keep_rows" not in calls


def test_spec_k_0_starts_no_drafter(toy):
    # --spec-k 0 never drafts: like a greedy batch of auto, it must not pay for the
    # draft head's per-batch state (the engine greedy rows' baseline).
    _, model, dictionary = toy
    generator = SpecDecGenerator.from_generation_args(
        model, dictionary, DecodingOptions(k=0), generation_args())
    calls = []
    start = generator.drafter.start_batch
    generator.drafter.start_batch = lambda *args: calls.append(1) or start(*args)
    sample = source_batch(dictionary, [3, 9, 5, 12], seed=5)
    hyps = [h[0]["tokens"].tolist() for h in generator.generate([model], sample)]
    assert hyps == stock_greedy(model, dictionary, sample) and not calls
