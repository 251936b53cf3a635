"""The static loop (:mod:`nmt_specdec.decoding.loops.static_rows`) on the CPU, where it
runs without capture: the same output as the batched loop, in shapes that never change.

It is the GPU's loop (one CUDA graph per K, replayed); here the tests hold it to
the batched loop token for token, score for score, iteration for iteration and
statistic for statistic (fp32: greedy, chains, trees, ``auto``; batch 1 and a
ragged batch of 8; the shipped model and a random Transformer-base shape), hold
beta=1 to its own greedy in bf16, and check what capture needs: every turn of a
K runs the same ops on the same shapes, with no host read, and a workspace is
reused from batch to batch (``test_host_syncs.py`` counts one read a turn).
``test_cuda.py`` captures and replays on a GPU.
"""

from __future__ import annotations

import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nmt_specdec.decoding.loops import DynamicLoop, StaticLoop, decode_rows
from nmt_specdec.decoding.loops import static_rows
from nmt_specdec.decoding.loops.static_rows import StaticShape, pad_encoder_out
from nmt_specdec.decoding.options import DecodingOptions
from tests.helpers.shipped_model import (
    decode_all,
    hand_written_sources,
    load_model,
    shipped_generator,
)
from tests.helpers.specdec_toy import generation_config, random_specdec_model, source_batch

OPTIONS = {
    "greedy": DecodingOptions(k=0),
    "k2": DecodingOptions(k=2),
    "k4": DecodingOptions(k=4),
    "tree": DecodingOptions(k=2, candidates=2),
    "auto": DecodingOptions(k=4, auto_k=True),
}


@pytest.fixture(scope="module")
def shipped():
    model, task = load_model()
    return model, task, hand_written_sources(task, 16)


def _stats(generator):
    stats = generator.stats
    return (stats.sentences, stats.iterations, stats.tokens, stats.drafted_per_slot,
            stats.accepted_per_slot, stats.k_chosen)


@pytest.mark.parametrize("batch_size", [1, 8])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_static_equals_batched_fp32(shipped, name, batch_size) -> None:
    model, task, sources = shipped
    options = OPTIONS[name]
    batched = shipped_generator(model, task, options=options, loop=DynamicLoop(decode_rows))
    static = shipped_generator(model, task, options=options, loop=StaticLoop(graphs=False))
    theirs = decode_all(batched, model, task, sources, batch_size, scores=True)
    ours = decode_all(static, model, task, sources, batch_size, scores=True)
    assert [tokens for tokens, _ in ours] == [tokens for tokens, _ in theirs]
    for (_, a), (_, b) in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4)
    if options.auto_k:  # K per turn follows measured pass costs: the tokens alone must agree
        return
    assert _stats(static) == _stats(batched)
    if options.k:
        assert static.stats.mean_accepted_tokens > 1.5


@pytest.mark.parametrize("batch_size", [1, 8])
def test_static_beta1_equals_its_greedy_bf16(shipped, batch_size) -> None:
    model, task, sources = shipped
    half = model.to(torch.bfloat16)
    try:
        greedy = decode_all(shipped_generator(half, task, loop=StaticLoop(graphs=False)),
                            half, task, sources, batch_size)
        for k in (2, 4):
            drafted = decode_all(shipped_generator(half, task, k=k,
                                                   loop=StaticLoop(graphs=False)),
                                 half, task, sources, batch_size)
            assert drafted == greedy, k
    finally:
        model.float()


BASE_SHAPE = ("--encoder-embed-dim", "512", "--decoder-embed-dim", "512",
              "--encoder-ffn-embed-dim", "2048", "--decoder-ffn-embed-dim", "2048",
              "--encoder-layers", "6", "--decoder-layers", "6",
              "--encoder-attention-heads", "8", "--decoder-attention-heads", "8",
              "--encoder-normalize-before", "--decoder-normalize-before")


def test_static_equals_batched_on_a_base_shape(tmp_path) -> None:
    # Random weights: time per token at most, never a translation.
    from nmt_specdec.decoding.generator import SpecDecGenerator

    task, model = random_specdec_model(tmp_path, extra_args=BASE_SHAPE)
    sample = source_batch(task.source_dictionary, [3, 9, 5, 12, 1, 7, 4, 10], seed=3)
    for k in (0, 2):
        outputs = []
        for loop in (DynamicLoop(decode_rows), StaticLoop(graphs=False)):
            generator = SpecDecGenerator.from_generation_args(
                model, task.target_dictionary, DecodingOptions(k=k),
                generation_config(max_len_a=1.0, max_len_b=6), loop=loop)
            outputs.append([(h[0]["tokens"].tolist(), h[0]["iterations"])
                            for h in generator.generate([model], sample)])
        assert outputs[0] == outputs[1], k


class OpTrace(TorchDispatchMode):
    """Every aten op with the shapes of its tensor arguments, in order."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        shapes = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else
                       (a if isinstance(a, (int, float, bool)) and func.__name__.startswith(
                           ("slice", "select")) else None) for a in args)
        self.ops.append((str(func), shapes))
        return func(*args, **(kwargs or {}))


def test_every_turn_of_a_k_runs_the_same_ops_without_a_host_read(shipped, monkeypatch):
    model, task, sources = shipped
    traces = collections.defaultdict(list)
    turn = static_rows._static_turn

    def traced(parts, space, k):
        with OpTrace() as trace:
            turn(parts, space, k)
        traces[space.shape, k].append(trace.ops)

    monkeypatch.setattr(static_rows, "_static_turn", traced)
    generator = shipped_generator(model, task, options=DecodingOptions(k=4, auto_k=True),
                                  loop=StaticLoop(graphs=False))
    # Four batches (greedy, drafting, greedy, the winner): a batch's first iteration is not
    # timed as its K's, so one drafting batch of 4 short sentences measures K=1 alone.
    decode_all(generator, model, task, sources, 4)
    assert len({k for _, k in traces}) >= 3  # auto tried several K
    assert max(len(turns) for turns in traces.values()) >= 5
    for key, turns in traces.items():  # a workspace shape and K
        assert all(ops == turns[0] for ops in turns), key  # same ops, same shapes
        names = {name for name, _ in turns[0]}
        assert not names & {"aten._local_scalar_dense.default", "aten.nonzero.default",
                            "aten.masked_select.default", "aten.unique_consecutive.default"}


def test_a_workspace_serves_every_batch_of_its_shape(shipped) -> None:
    model, task, sources = shipped
    loop = StaticLoop(graphs=False)
    generator = shipped_generator(model, task, k=2, loop=loop)
    decode_all(generator, model, task, sources[:2], 1)
    (space,) = loop._spaces.values()
    buffers = [space.cache.key.data_ptr(), space.rows.tokens.data_ptr(),
               space.cross[0].key.data_ptr(), space.flags.data_ptr()]
    decode_all(generator, model, task, sources[:2], 1)
    assert list(loop._spaces.values()) == [space]
    assert [space.cache.key.data_ptr(), space.rows.tokens.data_ptr(),
            space.cross[0].key.data_ptr(), space.flags.data_ptr()] == buffers


def test_shapes_come_in_buckets() -> None:
    like = torch.zeros(1)
    shape = StaticShape.of(rows=5, source=17, longest_limit=40, k_max=4, candidates=1,
                           like=like)
    assert (shape.rows, shape.source, shape.slots) == (8, 32, 64)
    assert StaticShape.of(1, 3, 10, 0, 1, like)[:3] == (1, 16, 32)
    assert StaticShape.of(5, 20, 40, 4, 1, like) == shape  # same buckets, same graphs


def test_padded_encoder_output_masks_what_it_adds() -> None:
    states = torch.randn(3, 2, 4)
    padding = torch.tensor([[False, False, False], [True, False, False]])
    padded = pad_encoder_out({"encoder_out": [states], "encoder_padding_mask": [padding]},
                             rows=4, source=16)
    out, mask = padded["encoder_out"][0], padded["encoder_padding_mask"][0]
    assert out.shape == (16, 4, 4) and mask.shape == (4, 16)
    assert torch.equal(out[:3, :2], states) and not out[3:].any() and not out[:, 2:].any()
    assert torch.equal(mask[:2, :3], padding) and mask[:2, 3:].all()
    assert not mask[2:, 0].any() and mask[2:, 1:].all()  # a padding row sees one zero

