"""Greedy batches decided on the host (:mod:`nmt_specdec.decoding.loops.greedy_rows`)
equal the batched loop's tensor path.

Same tokens, same scores (bit for bit), same iterations and statistics, on the
shipped model's 40 hand-written sentences in batches of 8, on both backends (the
ONNX Runtime fp32 verifier's 8-bit projection with its certification, and 8 bits
throughout), at the length limits (EOS forbidden before ``min_len``, forced at
``max_len``) and with an unk penalty; and where the certification fails, both
recompute in fp32.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

from tests.helpers.shipped_model import decode_all, hand_written_sources, load_model, \
    shipped_generator


@pytest.fixture(scope="module")
def shipped(onnx_cache):
    torch.set_num_threads(1)
    model, task = load_model()
    return model, task, hand_written_sources(task)


def _decode(model, task, sources, backend, host: bool, k: int = 0, **lengths):
    """Decodes in batches of 8: ``host`` True, greedy turns decide on the host (K=0:
    the greedy-rows loop; else the batched loop's host turn); False, the batched
    loop's tensor path throughout."""
    from nmt_specdec.decoding.backends import make_backend
    from nmt_specdec.decoding.loops import DynamicLoop, decode_greedy_rows, decode_rows

    if host:
        loop = (DynamicLoop(decode_greedy_rows) if k == 0
                else DynamicLoop(decode_rows, greedy_on_host=True))
    else:
        loop = DynamicLoop(decode_rows)
    kind, _, int8 = backend.partition("-")
    made = make_backend(kind, model, task.target_dictionary, **({"int8": True} if int8 else {}))
    generator = shipped_generator(model, task, k, backend=made, loop=loop, **lengths)
    return decode_all(generator, model, task, sources, 8, scores=True), generator.stats


def _assert_same(ours, theirs) -> None:
    (hyps, our_stats), (their_hyps, their_stats) = ours, theirs
    for index, ((tokens, scores), (their_tokens, their_scores)) in enumerate(
            zip(hyps, their_hyps)):
        assert tokens == their_tokens, index
        assert torch.equal(scores, their_scores), index
    for field in ("sentences", "iterations", "tokens"):
        assert getattr(our_stats, field) == getattr(their_stats, field), field


@pytest.mark.parametrize("backend", ["torch", "onnxruntime", "onnxruntime-int8"])
@pytest.mark.parametrize("lengths", [{}, {"min_len": 6}, {"max_len_a": 0, "max_len_b": 4},
                                     {"unkpen": -20.0}])  # a reward: unk is chosen
def test_host_turn_equals_the_tensor_path(shipped, backend, lengths):
    model, task, sources = shipped
    ours = _decode(model, task, sources, backend, True, **lengths)
    theirs = _decode(model, task, sources, backend, False, **lengths)
    _assert_same(ours, theirs)
    if "max_len_b" in lengths:  # most rows reached the limit: EOS forced there
        sizes = [len(tokens) for tokens, _ in ours[0]]
        assert sizes.count(max(sizes)) > len(sizes) / 2, sizes


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_greedy_turns_of_a_batch_that_may_draft(shipped, monkeypatch, backend):
    """A batch that may draft (K=2) but takes greedy turns (as --spec-k auto may):
    the batched loop's turn with its host decision equals the tensor path."""
    from nmt_specdec.decoding.loops import batched, steps

    model, task, sources = shipped
    plan = steps.plan_turn
    monkeypatch.setattr(batched, "plan_turn", lambda *args: (0, plan(*args)[1]))
    ours = _decode(model, task, sources, backend, True, k=2, min_len=3)
    theirs = _decode(model, task, sources, backend, False, k=2, min_len=3)
    _assert_same(ours, theirs)
    assert ours[1].k_chosen == {0: ours[1].k_chosen[0]}  # greedy turns only


def test_host_turn_recomputes_uncertain_calls_in_fp32(shipped, monkeypatch):
    """A bound above every logit certifies nothing: both paths take fp32 logits."""
    from nmt_specdec.decoding.backends.onnxruntime.session import OrtVerifier

    model, task, sources = shipped
    verify, exact = OrtVerifier.verify, OrtVerifier.exact_logits
    calls = []

    def uncertain(self, *args, **kwargs):
        verified = verify(self, *args, **kwargs)
        assert verified.bound is not None
        return verified._replace(bound=torch.full_like(verified.bound, float("inf")))

    def counted(self, hidden):
        calls.append(hidden.size(0))
        return exact(self, hidden)

    monkeypatch.setattr(OrtVerifier, "verify", uncertain)
    monkeypatch.setattr(OrtVerifier, "exact_logits", counted)
    ours = _decode(model, task, sources[:16], "onnxruntime", True)
    host_calls = len(calls)
    theirs = _decode(model, task, sources[:16], "onnxruntime", False)
    _assert_same(ours, theirs)
    assert host_calls > 0 and len(calls) == 2 * host_calls  # every turn, both paths
