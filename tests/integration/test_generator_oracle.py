"""The Spec-Verify generator on a tiny random model with stub drafters (issue #4).

The verifier's greedy output comes from stock fairseq ``SequenceGenerator``
(beam 1). With beta = 1 the generator must reproduce it token for token
whatever the drafter proposes; only the number of iterations may change:

* an oracle that drafts the greedy continuation commits K+1 tokens per
  iteration, so a length-L output (EOS included) takes ceil(L / (K+1));
* a drafter that is always wrong at slot 1 commits exactly one token per
  iteration, so it takes L.
"""

from __future__ import annotations

import math

import pytest
from fairseq.dataclass.configs import GenerationConfig
import torch
from fairseq.sequence_generator import SequenceGenerator

from nmt_specdec.decoding.generator import SpecDecGenerator
from nmt_specdec.decoding.options import DecodingOptions
from nmt_specdec.decoding.stats import oracle_tokens_per_iteration
from tests.helpers.specdec_toy import (
    OracleDrafter,
    PadDrafter,
    WrongDrafter,
    random_specdec_model,
    select_rows,
    source_batch,
)

# Ragged source lengths (left-padded to 12+1); with MAX_LEN_B = 15 the default
# random model ends some of these early with EOS and runs others to the limit.
SOURCE_LENGTHS = (3, 11, 6, 9, 4, 7, 12, 5)
MAX_LEN_B = 15
SINGLE_ROWS = (1, 2)  # rows decoded alone in the batch-of-1 cases


def generation_args(max_len_a: float = 0.0, max_len_b: int = MAX_LEN_B):
    return GenerationConfig(beam=1, max_len_a=max_len_a, max_len_b=max_len_b,
                              min_len=1, lenpen=1.0, unkpen=0.0)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    task, model = random_specdec_model(tmp_path_factory.mktemp("random_specdec"),
                                       extra_args=("--spec-decoding", "--spec-k", "4"))
    return task, model, task.target_dictionary


@pytest.fixture(scope="module")
def batch(toy):
    _, _, dictionary = toy
    return source_batch(dictionary, SOURCE_LENGTHS, seed=0)


def greedy(model, dictionary, sample, max_len_a=0.0, max_len_b=MAX_LEN_B):
    """Stock fairseq beam-1 search: per row, (tokens, positional scores)."""
    stock = SequenceGenerator([model], dictionary, beam_size=1, max_len_a=max_len_a,
                              max_len_b=max_len_b)
    out = stock.generate([model], sample)
    return [(hyps[0]["tokens"], hyps[0]["positional_scores"]) for hyps in out]


def specdec(model, dictionary, sample, k, drafter=None, **length_args):
    generator = SpecDecGenerator.from_generation_args(
        model, dictionary, DecodingOptions(k=k), generation_args(**length_args), drafter)
    hyps = [h[0] for h in generator.generate([model], sample)]
    return hyps, generator


def sub_batch(sample, batch_size):
    return sample if batch_size == len(SOURCE_LENGTHS) else select_rows(sample, SINGLE_ROWS[:batch_size])


def assert_same_tokens(hyps, reference):
    for i, (hyp, (tokens, scores)) in enumerate(zip(hyps, reference)):
        assert hyp["tokens"].tolist() == tokens.tolist(), f"row {i}"
        torch.testing.assert_close(hyp["positional_scores"], scores, atol=1e-5, rtol=1e-5)


def test_random_model_gives_a_useful_mix(toy, batch):
    # Guard for the tests below: some outputs end early, some hit the max length.
    _, model, dictionary = toy
    lengths = [len(t) for t, _ in greedy(model, dictionary, batch)]
    assert any(n == MAX_LEN_B + 1 for n in lengths), lengths
    assert any(n <= MAX_LEN_B // 2 for n in lengths), lengths
    assert len(set(lengths)) >= 3, lengths


@pytest.mark.parametrize("batch_size", [1, 8])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_oracle_drafter_commits_k_plus_1_per_iteration(toy, batch, batch_size, k):
    _, model, dictionary = toy
    sample = sub_batch(batch, batch_size)
    reference = greedy(model, dictionary, sample)
    drafter = OracleDrafter([t for t, _ in reference], dictionary.pad())
    hyps, generator = specdec(model, dictionary, sample, k, drafter)

    assert_same_tokens(hyps, reference)
    lengths = [len(t) for t, _ in reference]
    expected = [math.ceil(n / (k + 1)) for n in lengths]
    assert [h["iterations"] for h in hyps] == expected
    stats = generator.stats
    assert stats.sentences == batch_size
    assert stats.iterations == sum(expected)
    assert stats.tokens == sum(lengths)
    assert drafter.calls == max(expected)  # one draft call per loop turn
    # Every iteration but a row's last commits all K drafts plus the bonus.
    assert stats.accepted_per_slot[0] >= sum(e - 1 for e in expected)
    assert stats.mean_accepted_tokens == pytest.approx(sum(lengths) / sum(expected))
    assert stats.mean_accepted_tokens == pytest.approx(oracle_tokens_per_iteration(lengths, k))


@pytest.mark.parametrize("batch_size", [1, 8])
@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("kind", ["wrong_word", "pad"])
def test_always_wrong_drafter_commits_one_per_iteration(toy, batch, batch_size, k, kind):
    _, model, dictionary = toy
    sample = sub_batch(batch, batch_size)
    reference = greedy(model, dictionary, sample)
    refs = [t for t, _ in reference]
    drafter = (WrongDrafter(refs, dictionary.pad(), dictionary.nspecial, len(dictionary))
               if kind == "wrong_word" else PadDrafter(dictionary.pad()))
    hyps, generator = specdec(model, dictionary, sample, k, drafter)

    assert_same_tokens(hyps, reference)
    lengths = [len(t) for t in refs]
    assert [h["iterations"] for h in hyps] == lengths
    stats = generator.stats
    assert stats.iterations == sum(lengths) == stats.tokens
    assert stats.mean_accepted_tokens == 1.0
    assert set(stats.accepted_per_slot) == {0}
    assert stats.slot_acceptance() == [0.0] * len(stats.accepted_per_slot)


@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("max_len_a, max_len_b", [(0.0, MAX_LEN_B), (0.0, 6), (0.5, 3)])
def test_draft_head_beta1_equals_sequence_generator(toy, batch, k, max_len_a, max_len_b):
    # The model's own (random) draft head; ragged left-padded sources; max_len
    # small enough that rows are cut by the length limit (fairseq's rule
    # a * padded_width + b, the same for every row of the batch).
    _, model, dictionary = toy
    reference = greedy(model, dictionary, batch, max_len_a, max_len_b)
    hyps, generator = specdec(model, dictionary, batch, k, max_len_a=max_len_a,
                              max_len_b=max_len_b)
    assert_same_tokens(hyps, reference)
    max_len = int(max_len_a * batch["net_input"]["src_tokens"].size(1) + max_len_b)
    assert any(len(h["tokens"]) == max_len + 1 for h in hyps)  # forced EOS
    assert all(len(h["tokens"]) <= max_len + 1 for h in hyps)
    assert all(h["tokens"][-1] == dictionary.eos() for h in hyps)
    for hyp, (tokens, scores) in zip(hyps, reference):
        # fairseq's sentence score: mean positional score (lenpen 1).
        assert float(hyp["score"]) == pytest.approx(float(scores.mean()), abs=1e-5)


def test_task_build_generator_equals_sequence_generator(toy, batch):
    # The same through the task (what fairseq-generate --spec-decoding calls).
    task, model, dictionary = toy
    generator = task.build_generator([model], generation_args())
    assert isinstance(generator, SpecDecGenerator)
    assert generator.options.k == 4  # --spec-k
    hyps = [h[0] for h in generator.generate([model], batch)]
    assert_same_tokens(hyps, greedy(model, dictionary, batch))


@pytest.mark.parametrize("k", [2, 5])
def test_batch_of_one_equals_batch_of_n(toy, batch, k):
    _, model, dictionary = toy
    together, _ = specdec(model, dictionary, batch, k)
    for row in range(len(SOURCE_LENGTHS)):
        alone, _ = specdec(model, dictionary, select_rows(batch, [row]), k)
        assert alone[0]["tokens"].tolist() == together[row]["tokens"].tolist(), f"row {row}"
        torch.testing.assert_close(alone[0]["positional_scores"],
                                   together[row]["positional_scores"], atol=1e-5, rtol=1e-5)
    # Row order in the input is kept whatever order rows finish in.
    reversed_rows = list(range(len(SOURCE_LENGTHS)))[::-1]
    backwards, _ = specdec(model, dictionary, select_rows(batch, reversed_rows), k)
    assert [h["tokens"].tolist() for h in backwards] == [
        together[r]["tokens"].tolist() for r in reversed_rows]


def test_stats_fields(toy, batch):
    _, model, dictionary = toy
    k = 4
    hyps, generator = specdec(model, dictionary, batch, k)
    stats = generator.stats
    n = len(SOURCE_LENGTHS)
    assert stats.sentences == n
    assert stats.tokens == sum(len(h["tokens"]) for h in hyps)
    assert stats.iterations == sum(h["iterations"] for h in hyps)
    assert all(1 <= h["iterations"] <= len(h["tokens"]) for h in hyps)
    assert 1.0 <= stats.mean_accepted_tokens <= k + 1
    assert stats.iterations_per_sentence == pytest.approx(stats.iterations / n)
    assert len(stats.accepted_per_slot) == k
    assert all(a >= b for a, b in zip(stats.accepted_per_slot, stats.accepted_per_slot[1:]))
    # Slot 1 is drafted in every iteration except those at the max length (K=0).
    assert 0 < stats.drafted_per_slot[0] <= stats.iterations
    assert all(0.0 <= r <= 1.0 for r in stats.slot_acceptance())
    assert stats.summary().startswith(f"SpecDec: {n} sentences")
    # Totals keep running over calls of the same generator.
    generator.generate([model], batch)
    assert stats.sentences == 2 * n and stats.iterations == 2 * sum(h["iterations"] for h in hyps)


@pytest.mark.parametrize("loop", ["single_row", "batched", "static"])
def test_auto_k_learns_the_drafts_each_turn_committed(toy, batch, loop):
    # With the oracle every draft up to the EOS is accepted: a turn of K with R
    # tokens left commits min(K, R) drafts (the EOS among them when R <= K). The
    # loops told --spec-k auto one fewer where the EOS was a draft (committed
    # tokens - 1), a rejection it learned from every sentence's last turn.
    from nmt_specdec.decoding.k_policy import AutoK
    from nmt_specdec.decoding.loops import DynamicLoop, StaticLoop, decode_rows, decode_single_row

    _, model, dictionary = toy
    samples = ([select_rows(batch, [row]) for row in range(len(SOURCE_LENGTHS))]
               if loop == "single_row" else [batch] * 2)
    run = {"single_row": DynamicLoop(decode_single_row), "batched": DynamicLoop(decode_rows),
           "static": StaticLoop(graphs=False)}[loop]
    generator = SpecDecGenerator.from_generation_args(
        model, dictionary, DecodingOptions(k=4, auto_k=True), generation_args(), None,
        loop=run)
    # Fixed iteration costs: which K runs does not depend on the machine's timing.
    generator.k_policy = policy = AutoK(4, cost=lambda k, rows: 1.0 + 0.1 * k)
    observe, seen = policy.observe, []
    policy.observe = lambda counts, k, s: seen.append((k, counts)) or observe(counts, k, s)
    expected = []
    for sample in samples:  # several rows: a greedy batch, then a drafting one
        reference = [t for t, _ in greedy(model, dictionary, sample)]
        generator.drafter = OracleDrafter(reference, dictionary.pad())
        first = len(seen)
        assert_same_tokens([h[0] for h in generator.generate([model], sample)],
                           greedy(model, dictionary, sample))
        left = [len(tokens) for tokens in reference]  # tokens each row has left
        for k, counts in seen[first:]:
            active = [row for row, n in enumerate(left) if n > 0]
            # Tokens committed beyond one: an EOS drafted within the block ends the row
            # with no token after it.
            expected.append((k, [min(k + 1, left[row]) - 1 for row in active] if counts else []))
            for row in active:
                left[row] -= min(k + 1, left[row])
    assert seen == expected
    # The case in question happened: a row ended on its EOS drafted before slot K.
    assert any(0 < n < k for k, counts in seen for n in counts)
