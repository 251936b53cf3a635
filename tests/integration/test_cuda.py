"""The engine on CUDA, in fp32, fp16 and bf16 (skipped without a GPU).

Each test names the CUDA path it covers. The shipped model decodes the 40
hand-written sentences; the CPU tests of the same paths are in
``test_half_precision.py``, ``test_host_syncs.py`` and ``test_deterministic*.py``.
"""

from __future__ import annotations

import copy
import subprocess
from dataclasses import replace

import pytest
import torch

from nmt_specdec.decoding.options import DecodingOptions
from nmt_specdec.evaluation.mismatch import logit_gaps
from tests.helpers.shipped_model import (
    HAND_WRITTEN,
    decode_all,
    hand_written_sources,
    load_model,
    shipped_generator,
)
from tests.integration.test_half_precision import (
    SPECDEC,
    _deterministic,
    hub_translates,
    interactive_translates,
    translate_command,
)
from tests.helpers.specdec_toy import source_batch
from tests.integration.test_speculative_sampling import (  # noqa: F401 (toy: a fixture)
    SETTINGS,
    SIGNIFICANCE,
    _sampled,
    chi_square_p,
    exact_distribution,
    specdec_samples,
    toy,
)
from tests.unit.test_host_syncs import PER_BATCH, HostReads

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(scope="module")
def shipped():
    model, task = load_model()
    return model, task, hand_written_sources(task, 40)


def _on_cuda(model, dtype):
    return copy.deepcopy(model).to(device="cuda", dtype=dtype)


STATIC = [DecodingOptions(k=0), DecodingOptions(k=2), DecodingOptions(k=4),
          DecodingOptions(k=2, candidates=2), DecodingOptions(k=4, auto_k=True)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch_size", [1, 8])
def test_cuda_graphs_replay_the_static_loop(shipped, dtype, batch_size) -> None:
    # Path: the static loop on CUDA, each turn captured once per shape and K and
    # replayed: the same output as the same passes run eagerly (--cuda-graphs off),
    # and beta=1 the same as greedy of the same precision up to near-ties.
    model, task, sources = shipped
    cuda = _on_cuda(model, dtype)
    greedy = decode_all(shipped_generator(cuda, task), cuda, task, sources, batch_size)
    for options in STATIC:
        graphed = shipped_generator(cuda, task, options=options)
        ours = decode_all(graphed, cuda, task, sources, batch_size)
        eager = shipped_generator(cuda, task, options=replace(options, cuda_graphs="off"))
        assert decode_all(eager, cuda, task, sources, batch_size) == ours, options
        assert graphed.stats.capture_seconds > 0 and eager.stats.capture_seconds == 0
        graphs = sum(len(space.graphs) for space in graphed._static._spaces.values())
        assert 1 <= graphs <= len(graphed._static._spaces) * (options.k + 1)
        gaps = logit_gaps(cuda, sources, dict(enumerate(greedy)), dict(enumerate(ours)),
                          task.target_dictionary.eos())
        assert all(gap["near_tie"] for gap in gaps), (options, gaps)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch_size", [1, 8])
def test_cuda_torch_backend_chains_trees_auto(shipped, dtype, batch_size) -> None:
    # Path: torch backend on CUDA, batched loop (batch 1 too), head drafter, draft
    # trees, --spec-k auto; beta=1 differs from same-precision greedy only at near-ties.
    model, task, sources = shipped
    cuda = _on_cuda(model, dtype)
    greedy = decode_all(shipped_generator(cuda, task), cuda, task, sources, batch_size)
    for options in SPECDEC:
        generator = shipped_generator(cuda, task, options=options)
        ours = decode_all(generator, cuda, task, sources, batch_size)
        gaps = logit_gaps(cuda, sources, dict(enumerate(greedy)), dict(enumerate(ours)),
                          task.target_dictionary.eos())
        assert all(gap["near_tie"] for gap in gaps), (options, gaps)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_deterministic_replay(shipped, dtype) -> None:
    # Path: --deterministic on CUDA (replay tensors built on the model's device).
    model, task, sources = shipped
    cuda = _on_cuda(model, dtype)
    outputs = [decode_all(_deterministic(cuda, task, k), cuda, task, sources, batch)
               for k in (0, 2) for batch in (1, 8)]
    assert all(output == outputs[0] for output in outputs)


@pytest.mark.parametrize("options", [DecodingOptions(k=0), DecodingOptions(k=2),
                                     DecodingOptions(k=3, candidates=2)], ids=str)
def test_cuda_one_host_read_per_iteration(shipped, options) -> None:
    # Path: the batched loop's device reads on CUDA (each one waits for the GPU).
    model, task, sources = shipped
    cuda = _on_cuda(model, torch.float16)
    dataset = task.build_dataset_for_inference(sources[:8], [len(s) for s in sources[:8]])
    batch = dataset.collater([dataset[i] for i in range(8)])
    batch["net_input"] = {k: v.cuda() for k, v in batch["net_input"].items()}
    generator = shipped_generator(cuda, task, options=options)
    generator.generate([cuda], batch)
    turns = sum(generator.stats.k_chosen.values())
    with HostReads() as reads:
        generator.generate([cuda], batch)
    turns = sum(generator.stats.k_chosen.values()) - turns
    assert sum(reads.count.values()) == turns + PER_BATCH, dict(reads.count)


def test_cuda_keeps_one_copy_of_each_weight(shipped) -> None:
    # Path: the torch backend's lean weights on CUDA: views of the model's weights,
    # not transposed copies (only the fused q/k/v and k/v projections are copies).
    model, task, _ = shipped
    cuda = _on_cuda(model, torch.float16)
    lean = shipped_generator(cuda, task).lean_verifier().lean
    layer = cuda.decoder.layers[0]
    assert lean.layers[0].fc1[1].data_ptr() == layer.fc1.weight.data_ptr()
    assert lean.output_t.data_ptr() == cuda.decoder.output_projection.weight.data_ptr()


@pytest.mark.parametrize("flag", ["--fp16", "--bf16"])
def test_cuda_translate_command(flag) -> None:
    # Path: nmt-specdec-translate --spec-decoding on CUDA (no --cpu), each precision.
    result = subprocess.run(translate_command(flag), check=True, timeout=600,
                            capture_output=True, text=True)
    lines = HAND_WRITTEN.read_text(encoding="utf-8").splitlines()
    assert len(result.stdout.splitlines()) == len(lines)


def test_cuda_fairseq_interactive_fp16() -> None:
    # Path: fairseq-interactive --fp16 --spec-decoding on CUDA through the plugin.
    interactive_translates()


def test_cuda_hub_bf16() -> None:
    # Path: the fairseq hub interface on CUDA in bfloat16 with SpecDec.
    hub_translates(lambda hub: hub.cuda().bfloat16())


# Speculative sampling on CUDA: the batched loop's tensor forms of the rule and
# the draws (one row too: the host forms are the CPU's), on the toy model whose
# outputs can all be listed (``test_speculative_sampling.py`` has the CPU tests).

@pytest.fixture(scope="module")
def toy_on_cuda(toy):
    model, dictionary, source = toy
    return model, copy.deepcopy(model).cuda(), dictionary, source


@pytest.mark.parametrize("name,candidates", [("top-k", 1), ("top-p", 1), ("temperature", 1),
                                             ("top-k", 2)])
def test_cuda_speculative_sampling_follows_fairseqs_distribution(toy_on_cuda, name,
                                                                 candidates) -> None:
    # Path: --spec-decoding --sampling on CUDA, chains and trees: 20,000 samples of
    # one sentence against the exact probabilities of fairseq's sampling.
    model, cuda, dictionary, source = toy_on_cuda
    exact = exact_distribution(model, dictionary, source, SETTINGS[name])
    counts, generator = specdec_samples(cuda, dictionary, source, SETTINGS[name],
                                        candidates=candidates)
    assert 0.05 < generator.stats.slot_acceptance()[0] < 0.95  # both branches decide
    assert chi_square_p(counts, exact) > SIGNIFICANCE


def test_cuda_sample_depends_on_the_seed_and_its_position_alone(toy_on_cuda) -> None:
    # Path: the keyed draws on CUDA: the same bytes at batch 32, 8 and 1 and with
    # or without drafting; the CPU's samples but where the two devices' logs round
    # a near-tie apart (the draws are integer hashes, the same on both).
    model, cuda, dictionary, _ = toy_on_cuda
    sample = source_batch(dictionary, [3 + (7 * i) % 10 for i in range(32)], seed=5)
    whole = _sampled(cuda, dictionary, sample, 2, 32)
    for k, batch in ((2, 8), (2, 1), (0, 32), (0, 1)):
        assert _sampled(cuda, dictionary, sample, k, batch) == whole, (k, batch)
    on_cpu = _sampled(model, dictionary, sample, 2, 32)
    assert sum(a == b for a, b in zip(whole, on_cpu)) >= 0.75 * len(whole)


def test_cuda_translate_command_samples_alike_at_any_batch_size() -> None:
    # Path: nmt-specdec-translate --spec-decoding --sampling on CUDA: a seed gives
    # the same lines at batch 8 and 1 and without drafting.
    flags = ("--sampling", "--sampling-topk", "10", "--seed", "1")
    runs = [subprocess.run(translate_command(*flags, *extra), check=True, timeout=600,
                           capture_output=True, text=True).stdout.splitlines()
            for extra in ((), ("--batch-size", "1"), ("--spec-k", "0"))]
    lines = HAND_WRITTEN.read_text(encoding="utf-8").splitlines()
    assert len(runs[0]) == len(lines) and runs[1] == runs[0] and runs[2] == runs[0]
