"""``--spec-k auto`` where drafting does not pay: its greedy sentences and batches
run the engine's greedy path (no draft state, a greedy-sized cache, no accepted
counts), and their output is greedy's."""

from __future__ import annotations


import pytest
from fairseq.dataclass.configs import GenerationConfig

from nmt_specdec.decoding.k_policy import AutoK
from nmt_specdec.decoding.loops import DynamicLoop, decode_rows, decode_single_row
from nmt_specdec.decoding.generator import SpecDecGenerator
from nmt_specdec.decoding.options import DecodingOptions
from tests.helpers.specdec_toy import random_specdec_model, source_batch


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    task, model = random_specdec_model(tmp_path_factory.mktemp("auto_k_greedy"))
    return model, task.target_dictionary


def _generator(model, dictionary, k: int, auto: bool, loop, caches) -> SpecDecGenerator:
    """The generator whose every batch runs ``loop``, its cache appended to ``caches``."""
    args = GenerationConfig(beam=1, max_len_a=0.0, max_len_b=12, min_len=1, lenpen=1.0,
                              unkpen=0.0)
    def run(parts, batch):
        caches.append(batch.cache)
        return loop(parts, batch)
    return SpecDecGenerator.from_generation_args(
        model, dictionary, DecodingOptions(k=k, auto_k=auto), args, loop=DynamicLoop(run))


@pytest.mark.parametrize("loop", [decode_single_row, decode_rows],
                         ids=["single_row", "batched_loop"])
def test_greedy_sentences_take_the_greedy_path(toy, loop):
    model, dictionary = toy
    greedy_caches, auto_caches = [], []
    greedy = _generator(model, dictionary, 0, False, loop, greedy_caches)
    auto = _generator(model, dictionary, 4, True, loop, auto_caches)
    # Each drafted token costs a whole step: K=0 wins once the second sentence measured
    # (the first is greedy: it measures greedy's per-sentence cost).
    auto.k_policy = AutoK(4, cost=lambda k, batch: 1.0 + k)
    drafter_calls, observed = [], []
    start = auto.drafter.start_batch
    auto.drafter.start_batch = lambda *args: drafter_calls.append(1) or start(*args)
    observe = auto.k_policy.observe
    auto.k_policy.observe = lambda counts, k, s: observed.append(counts) or observe(counts, k, s)
    for sentence in range(18):
        sample = source_batch(dictionary, [6 + sentence % 3], seed=sentence)
        drafter_calls.clear(), observed.clear()
        ours = auto.generate([model], sample)[0][0]["tokens"].tolist()
        assert ours == greedy.generate([model], sample)[0][0]["tokens"].tolist()
        assert auto.k_policy.may_draft is (sentence == 1), sentence
        if sentence != 1:  # greedy: no draft state, no cache slots for drafts, nothing to count
            assert not drafter_calls and observed and not any(observed)
            assert auto_caches[-1].max_slots == greedy_caches[-1].max_slots
        else:  # the measuring sentence drafts (K=0 chosen, but it may draft)
            assert drafter_calls and auto_caches[-1].max_slots > greedy_caches[-1].max_slots
    assert auto.stats.k_chosen.keys() == {0}
    # After 16 greedy sentences in a row a re-check drafts, every slot at first.
    again = source_batch(dictionary, [7], seed=18)
    assert auto.generate([model], again)[0][0]["tokens"].tolist() == (
        greedy.generate([model], again)[0][0]["tokens"].tolist())
    assert auto.k_policy.may_draft and drafter_calls and 4 in auto.stats.k_chosen
