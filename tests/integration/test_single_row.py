"""The single-row loop (:mod:`nmt_specdec.decoding.loops.single_row`) equals the batched loop.

At batch 1 on the CPU the engine decides on the host; the batched loop's
tensor path (:func:`~nmt_specdec.decoding.loops.decode_rows`) is the reference. Same tokens, the
same scores (to float32's rounding: the single-row loop verifies a chain only up to its first EOS
draft, a call of fewer inputs), the same iterations per sentence and the same statistics, on the shipped model's
40 hand-written sentences, for greedy, SpecDec beta=1, relaxed acceptance, draft
trees and --spec-k auto, on both backends; and at the length limits (EOS forbidden before
``min_len``, forced at ``max_len``), with an unk penalty and with a temperature,
greedy and K=2. Sampling's host loop is held equal to the batched one in
``test_speculative_sampling.py``.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.shipped_model import hand_written_sources, load_model, shipped_generator


@pytest.fixture(scope="module")
def shipped(onnx_cache):
    torch.set_num_threads(1)
    model, task = load_model()
    return model, task, hand_written_sources(task)


def _generator(model, task, options, loop, backend="torch", **lengths):
    from nmt_specdec.decoding.backends import make_backend

    return shipped_generator(model, task, options=options, loop=loop, **lengths,
                             backend=make_backend(backend, model, task.target_dictionary))


def _loops():
    """The single-row loop, then the reference."""
    from nmt_specdec.decoding.loops import DynamicLoop, decode_rows, decode_single_row

    return DynamicLoop(decode_single_row), DynamicLoop(decode_rows)


def _decode_both(model, task, sources, **kwargs):
    """Hypotheses and stats of the single-row loop and of the batched loop, batch 1."""
    dataset = task.build_dataset_for_inference(sources, [len(s) for s in sources])
    results = []
    for loop in _loops():
        generator = _generator(model, task, loop=loop, **kwargs)
        hyps = [generator.generate([model], dataset.collater([dataset[i]]))[0][0]
                for i in range(len(sources))]
        results.append((hyps, generator.stats))
    return results


def _assert_same(results) -> None:
    (ours, our_stats), (theirs, their_stats) = results
    for index, (a, b) in enumerate(zip(ours, theirs)):
        assert torch.equal(a["tokens"], b["tokens"]), index
        torch.testing.assert_close(a["positional_scores"], b["positional_scores"],
                                   atol=1e-5, rtol=0, msg=f"sentence {index}")
        assert a["positional_scores"].dtype == b["positional_scores"].dtype
        assert a["iterations"] == b["iterations"], index
    for field in ("sentences", "iterations", "tokens", "accepted_per_slot"):
        assert getattr(our_stats, field) == getattr(their_stats, field), field
    # Slots after an EOS draft that the verifier rejected: the batched loop drafts them.
    assert all(a <= b for a, b in zip(our_stats.drafted_per_slot, their_stats.drafted_per_slot))


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
@pytest.mark.parametrize("k, beta, tau, candidates", [
    (0, 1, 0.0, 1), (2, 1, 0.0, 1), (4, 1, 0.0, 1), (4, 3, 1.0, 1),  # chains
    (2, 1, 0.0, 2), (4, 3, 1.0, 3)])  # draft trees (--spec-candidates)
def test_single_row_loop_equals_the_batched_loop(shipped, backend, k, beta, tau, candidates):
    from nmt_specdec.decoding.options import DecodingOptions

    model, task, sources = shipped
    results = _decode_both(model, task, sources, backend=backend, options=DecodingOptions(
        k=k, beta=beta, tau=tau, candidates=candidates))
    _assert_same(results)
    if k:  # drafting happened, so the comparison covers acceptance and the EOS cut
        assert results[0][1].mean_accepted_tokens > 1.2


def test_auto_k_takes_the_same_turns(shipped):
    # The policy learns from timings, so its choices may differ between two runs;
    # with a fixed cost model, and a sentence's seconds its turns' cost by that
    # model (a sentence's measured overhead decides whether the next drafts), they
    # must not.
    from nmt_specdec.decoding.k_policy import AutoK
    from nmt_specdec.decoding.options import DecodingOptions

    class FixedCosts(AutoK):
        def end_batch(self, tokens: int, seconds: float) -> None:
            modelled = sum(turns * self.cost(k, 1) for k, turns in self.batch_turns.items())
            super().end_batch(tokens, modelled)

    model, task, sources = shipped
    dataset = task.build_dataset_for_inference(sources, [len(s) for s in sources])
    outputs = []
    for loop in _loops():
        generator = _generator(model, task, DecodingOptions(k=4, auto_k=True), loop)
        generator.k_policy = FixedCosts(4, cost=lambda k, batch: 1.0 + 0.3 * k)
        hyps = [generator.generate([model], dataset.collater([dataset[i]]))[0][0]
                for i in range(len(sources))]
        outputs.append(([h["tokens"].tolist() for h in hyps], generator.stats.k_chosen))
    assert outputs[0] == outputs[1]
    assert len(outputs[0][1]) > 1  # more than one K was chosen


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
@pytest.mark.parametrize("k", [0, 2])
@pytest.mark.parametrize("min_len, max_len_b, unkpen", [(3, 5, 0.0), (1, 2, 0.0), (6, 8, 0.0),
                                                        (1, 8, -20.0)])
def test_length_limits_match(shipped, backend, k, min_len, max_len_b, unkpen):
    # EOS forbidden for the first min_len steps, forced at max_len, unk penalised
    # (here rewarded, so that it is committed): both loops apply the same
    # constraints at the same iterations; a greedy turn of the single-row loop
    # applies them on its own host path.
    from nmt_specdec.decoding.options import DecodingOptions

    model, task, sources = shipped
    results = _decode_both(model, task, sources[:12], backend=backend,
                           options=DecodingOptions(k=k), min_len=min_len, max_len_a=0,
                           max_len_b=max_len_b, unkpen=unkpen)
    _assert_same(results)
    lengths = [h["tokens"].numel() for h in results[0][0]]
    # Output steps 0..max_len (EOS at the last), never EOS before step min_len.
    assert min_len + 1 <= min(lengths) and max(lengths) <= max_len_b + 1
    assert max(lengths) == max_len_b + 1  # some sentence was cut by the limit
    if unkpen:
        unk = task.target_dictionary.unk()
        assert any(unk in h["tokens"].tolist() for h in results[0][0])


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
@pytest.mark.parametrize("k", [0, 2])
def test_a_temperature_scores_the_same(shipped, backend, k):
    # --temperature divides the logits before the softmax: the same tokens as at
    # 1 (greedy), the scores of the tempered distribution, in both loops.
    from nmt_specdec.decoding.options import DecodingOptions

    model, task, sources = shipped
    results = _decode_both(model, task, sources[:12], backend=backend,
                           options=DecodingOptions(k=k), temperature=0.5)
    _assert_same(results)
    plain = _decode_both(model, task, sources[:12], backend=backend,
                         options=DecodingOptions(k=k))[0][0]
    for tempered, untempered in zip(results[0][0], plain):
        assert torch.equal(tempered["tokens"], untempered["tokens"])
    assert not torch.allclose(results[0][0][0]["positional_scores"],
                              plain[0]["positional_scores"])
