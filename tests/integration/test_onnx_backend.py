"""The ONNX Runtime CPU backend on the shipped model (issue #19).

- the exported passes equal the torch passes (encoder memory, verifier states
  and logits at non-uniform starts, drafts);
- beta=1 SpecDec equals K=0 greedy on the same backend, fp32 and ``--int8``;
- fp32 onnxruntime equals stock fairseq greedy on >= 99% of the sentences;
- a corrupted or stale export cache is rebuilt, never trusted;
- a missing runtime is a one-line error.

Sentences: 40 hand-written German sentences (tests/helpers/de_sentences.txt), so
that nothing needs the network. Exports go to a per-module temporary cache.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from fairseq.dataclass.configs import GenerationConfig
import torch

from nmt_specdec.errors import UserError
from tests.helpers.shipped_model import (
    MODEL_DIR,
    SETTINGS,
    decode_all,
    hand_written_sources,
    load_model,
    shipped_generator,
)

SENTENCES = Path(__file__).resolve().parents[1] / "helpers" / "de_sentences.txt"
LENGTHS = dict(max_len_a=SETTINGS["max_len_a"], max_len_b=SETTINGS["max_len_b"])


@pytest.fixture(scope="module")
def shipped(onnx_cache):
    torch.set_num_threads(1)
    model, task = load_model()
    return model, task, hand_written_sources(task)


@pytest.fixture(scope="module")
def backends(shipped):
    from nmt_specdec.decoding.backends import make_backend

    model, task, _ = shipped
    return {int8: make_backend("onnxruntime", model, task.target_dictionary, int8)
            for int8 in (False, True)}


def _generator(model, task, k, backend=None):
    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions, LengthRules

    rules = LengthRules.from_generation_args(
        GenerationConfig(min_len=1, unkpen=0.0, lenpen=1.0, **LENGTHS), model)
    return SpecDecGenerator(model, task.target_dictionary, DecodingOptions(k=k), rules,
                            backend=backend)



def _first_batch(task, sources, size):
    dataset = task.build_dataset_for_inference(sources, [len(s) for s in sources])
    return dataset.collater([dataset[i] for i in range(size)])


def test_passes_equal_the_torch_passes(shipped, backends):
    # fp32 both ways; only the summation order differs (MLAS vs MKL GEMMs, and
    # the graph attends over the whole cache where torch slices the used width).
    # That moves logits of magnitude ~10 by ~1e-6; 1e-4 is still far below the
    # top-1/top-2 gaps that decide a token and below int8's error (~1e-2).
    from nmt_specdec.decoding.backends.torch.adapter import TorchBackend
    from nmt_specdec.decoding.drafters import DraftRequest

    from nmt_specdec.decoding.backends.onnxruntime.session import OrtBackend

    model, task, sources = shipped
    batch = _first_batch(task, sources, 4)["net_input"]
    dictionary = task.target_dictionary
    # fp32 drafts too (the default drafts in int8: see the next test), and every
    # logit in fp32 (the default's 8-bit projection: test_certified_projection.py).
    fp32 = OrtBackend(model, dictionary.pad(), dictionary.eos(), int8_draft=False,
                      certified=False)
    results = []
    for backend in (TorchBackend(model), fp32):
        memory = backend.encode(batch)
        verifier = backend.verifier()
        cross = verifier.cross_states(memory)
        cache = verifier.new_cache(4, 16)
        prefix = torch.tensor([[2, 10, 11, 12, 13]] * 4)  # BOS + 4 tokens
        first = verifier.verify(prefix, torch.zeros(4, dtype=torch.long), 0, cache, cross, True)
        first = type(first)(*(None if t is None else t.clone() for t in first))  # reused buffers
        start = torch.tensor([5, 3, 4, 1])  # rows that kept different prefixes
        second = verifier.verify(torch.tensor([[20, 21, 22]] * 4), start, 5, cache, cross)
        drafter = backend.drafter(task.target_dictionary.pad())
        drafter.start_batch({}, memory)
        request = DraftRequest(prefix, start, second.hidden[:, 0], torch.arange(4), 3)
        drafts = drafter.propose(request)
        # The encoder memory the verifier's first layer attends to, pads zeroed.
        key, mask = ((cross[0].key, cross[0].mask) if isinstance(cross, list)
                     else (cross.cross[0], cross.mask))
        results.append((first, second, drafts, key * mask.transpose(2, 3)))
    (torch_first, torch_second, torch_drafts, torch_key), (ort_first, ort_second, ort_drafts,
                                                           ort_key) = results
    torch.testing.assert_close(ort_key, torch_key, atol=1e-5, rtol=1e-4)
    for ours, theirs in ((ort_first, torch_first), (ort_second, torch_second)):
        torch.testing.assert_close(ours.logits, theirs.logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ours.hidden, theirs.hidden, atol=1e-4, rtol=1e-4)
        # The graph's normaliser is the torch loop's logsumexp of the same logits.
        assert theirs.normaliser is None
        torch.testing.assert_close(ours.normaliser, torch.logsumexp(ours.logits, -1),
                                   atol=1e-5, rtol=1e-6)
    assert torch.equal(ort_drafts, torch_drafts)


def test_fp32_backend_drafts_in_int8_and_decodes_the_same(shipped, backends):
    # The fp32 backend's draft graph is 8-bit, its verifier is not: drafts are
    # proposals, so the output stays fp32 greedy and acceptance barely moves.
    import onnx

    from nmt_specdec.decoding.backends.onnxruntime.session import OrtBackend

    model, task, sources = shipped
    default = backends[False]
    from nmt_specdec.decoding.backends.onnxruntime.projection import APPROX_SCOPE

    quantized = {name: [node.name for node in onnx.load(str(default.directory / name)).graph.node
                        if node.op_type == "MatMulNBits"]
                 for name in ("draft.onnx", "verify.onnx")}
    # The verifier's only 8-bit product is its certified output projection's.
    assert quantized["draft.onnx"] and len(quantized["verify.onnx"]) == 1
    assert quantized["verify.onnx"][0].startswith(APPROX_SCOPE)
    dictionary = task.target_dictionary
    fp32 = OrtBackend(model, dictionary.pad(), dictionary.eos(), int8_draft=False)
    runs = []
    for backend in (fp32, default):
        generator = _generator(model, task, 2, backend)
        runs.append((decode_all(generator, model, task, sources, 1),
                     generator.stats.mean_accepted_tokens))
    (fp32_out, fp32_rate), (int8_out, int8_rate) = runs
    assert int8_out == fp32_out
    assert abs(int8_rate - fp32_rate) < 0.05


def test_kept_bindings_read_what_lies_there_now(shipped, backends):
    # The session re-binds a name only when its address, shape or type changed:
    # new contents at the same address must still be read, and a new shape bound.
    from nmt_specdec.decoding.backends.torch.adapter import TorchBackend

    model, task, sources = shipped
    batch = _first_batch(task, sources, 2)["net_input"]
    calls = []
    for backend in (TorchBackend(model), backends[False]):
        verifier = backend.verifier()
        cross = verifier.cross_states(backend.encode(batch))
        cache = verifier.new_cache(2, 12)
        tokens, start = torch.tensor([[2, 10], [2, 30]]), torch.zeros(2, dtype=torch.long)
        results = []

        def kept(got):  # logits, and where they are exact (all of them in torch)
            exact = (torch.ones_like(got.logits, dtype=torch.bool) if got.bound is None
                     else got.logits > got.bound.unsqueeze(-1))
            return got.logits.clone(), exact

        for contents in ([[2, 10], [2, 30]], [[2, 40], [2, 50]]):  # same tensor, new values
            tokens.copy_(torch.tensor(contents))
            results.append(kept(verifier.verify(tokens, start, 0, cache, cross, True)))
        other = torch.tensor([[2, 70], [2, 71]])  # the same shape at another address
        results.append(kept(verifier.verify(other, start, 0, cache, cross, True)))
        wider = torch.tensor([[60, 61, 62], [63, 64, 65]])  # a new shape
        results.append(kept(verifier.verify(wider, torch.full((2,), 2), 2, cache, cross, True)))
        calls.append(results)
    assert not torch.allclose(calls[1][0][0], calls[1][1][0])
    assert not torch.allclose(calls[1][1][0], calls[1][2][0])
    for (ours, exact), (theirs, _) in zip(calls[1], calls[0]):
        # The certified 8-bit projection is exact above its bound (the best tokens).
        assert exact.any(-1).all()
        torch.testing.assert_close(ours[exact], theirs[exact], atol=1e-4, rtol=1e-4)
        assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
@pytest.mark.parametrize("batch_size", [1, 8])
def test_beta1_equals_greedy_on_the_same_backend(shipped, backends, int8, batch_size):
    model, task, sources = shipped
    backend = backends[int8]
    greedy = decode_all(_generator(model, task, 0, backend), model, task, sources, batch_size)
    spec = _generator(model, task, SETTINGS["k"], backend)
    drafted = decode_all(spec, model, task, sources, batch_size)
    same = sum(a == b for a, b in zip(greedy, drafted))
    # Every sentence. int8 by construction: a position scores the same bits in a
    # pass over 1 or K+1 positions (VerifyGraph same_bits) and 8-bit activations
    # are quantized per row (quantize.py). fp32 rounds by pass shape in the last
    # bits, which would take an exact fp32 tie to change a token.
    assert same == len(greedy), f"{len(greedy) - same} differ"
    assert spec.stats.mean_accepted_tokens > 1.15  # the head's drafts were accepted
    assert backend.calls["draft"] > 0


@pytest.mark.parametrize("batch_size", [1, 8])
def test_only_a_batch_that_drafts_makes_the_draft_heads_encoder_memory(shipped, backends,
                                                                      batch_size):
    """The encoder call returns the verifier's keys/values and its states; the draft
    head's keys/values (~10% of an encoder call) are made by their own graph, only
    for a batch that drafts."""
    model, task, sources = shipped
    backend = backends[True]
    encoded, made = backend.calls["encode"], backend.calls["draft_memory"]
    decode_all(_generator(model, task, 0, backend), model, task, sources, batch_size)
    assert backend.calls["encode"] > encoded
    assert backend.calls["draft_memory"] == made  # greedy: none
    encoded = backend.calls["encode"]
    decode_all(_generator(model, task, SETTINGS["k"], backend), model, task, sources, batch_size)
    assert backend.calls["draft_memory"] - made == backend.calls["encode"] - encoded


def test_fp32_linear_layers_run_fused_with_their_bias(backends, tmp_path):
    """The fp32 graphs multiply (B*N, C) rows (graphs.Rows), so the runtime fuses
    each linear layer's product and bias into one Gemm (3-D: MatMul, then Add)."""
    import onnx
    import onnxruntime as ort

    from nmt_specdec.decoding.backends.onnxruntime.graph_files import ENCODER, VERIFY

    backend = backends[False]
    for name, linears in ((VERIFY, 6 * backend.layers), (ENCODER, 4 * backend.layers)):
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(tmp_path / name)
        ort.InferenceSession(str(backend.directory / name), options,
                             providers=["CPUExecutionProvider"])
        ops = [node.op_type for node in onnx.load(str(tmp_path / name)).graph.node]
        # The encoder's verifier keys/values add one product per decoder layer.
        assert ops.count("Gemm") + ops.count("FusedGemm") >= linears, (name, ops)


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_fused_draft_gives_the_same_drafts_in_fewer_calls(shipped, int8):
    from nmt_specdec.decoding.backends import make_backend

    model, task, sources = shipped
    runs = {}
    for fused in (False, True):
        backend = make_backend("onnxruntime", model, task.target_dictionary, int8, fused)
        before = backend.calls["draft"]
        spec = _generator(model, task, SETTINGS["k"], backend)
        # Batches of 4: from 8 rows the plain 8-bit backend verifies with its batch
        # graph, which quantizes otherwise (the fused one keeps MatMulNBits).
        runs[fused] = (decode_all(spec, model, task, sources, 4), spec.stats,
                       backend.calls["draft"] - before)
    (plain, plain_stats, plain_calls), (fused, fused_stats, fused_calls) = runs.values()
    assert fused == plain
    # The same drafts (the head's arithmetic on the same states), up to ties.
    assert abs(fused_stats.mean_accepted_tokens - plain_stats.mean_accepted_tokens) < 0.02
    # Each batch's first block, and where a length constraint changed the decision.
    assert fused_calls <= len(sources) / 4 + plain_calls / 10


def test_fp32_onnxruntime_equals_stock_greedy(shipped, backends):
    from fairseq.sequence_generator import SequenceGenerator

    model, task, sources = shipped
    stock = SequenceGenerator([model], task.target_dictionary, beam_size=1, **LENGTHS)
    greedy = decode_all(stock, model, task, sources, 8)
    drafted = decode_all(_generator(model, task, SETTINGS["k"], backends[False]), model, task,
                      sources, 8)
    same = sum(a == b for a, b in zip(greedy, drafted))
    assert same >= 0.99 * len(greedy), f"{len(greedy) - same} sentences differ"


def test_int8_stays_close_to_fp32(shipped, backends):
    model, task, sources = shipped
    fp32, int8 = (decode_all(_generator(model, task, 0, backends[q]), model, task, sources, 8)
                  for q in (False, True))
    assert sum(a == b for a, b in zip(fp32, int8)) >= 0.8 * len(fp32)
    assert backends[True].directory.name.split("-")[0] == "int8"


def test_corrupt_or_stale_cache_is_rebuilt(tmp_path, caplog):
    from nmt_specdec.decoding.backends.onnxruntime import export
    from tests.helpers.specdec_toy import random_specdec_model

    task, model = random_specdec_model(tmp_path / "toy")
    pad, eos = task.target_dictionary.pad(), task.target_dictionary.eos()
    directory = export.graph_dir(model, pad, eos, False, root=tmp_path / "cache")
    manifest = json.loads((directory / export.MANIFEST).read_text())
    good = (directory / export.VERIFY).read_bytes()
    (directory / export.VERIFY).write_bytes(good[: len(good) // 2])  # truncated
    with caplog.at_level(logging.WARNING):
        again = export.graph_dir(model, pad, eos, False, root=tmp_path / "cache")
    assert again == directory and "stale or corrupt: rebuilding" in caplog.text
    assert export.file_sha256(directory / export.VERIFY) == manifest["files"][export.VERIFY]
    # A manifest from another exporter version is stale: rebuilt, not trusted, and
    # the warning says it is an upgrade, not damage.
    (directory / export.MANIFEST).write_text(json.dumps(dict(manifest, export_version=-1)))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        export.graph_dir(model, pad, eos, False, root=tmp_path / "cache")
    assert "written by another release or runtime: rebuilding" in caplog.text
    assert json.loads((directory / export.MANIFEST).read_text()) == manifest
    # Other weights, other key.
    with torch.no_grad():
        model.decoder.output_projection.weight.mul_(2)
    other = export.graph_dir(model, pad, eos, False, root=tmp_path / "cache")
    assert other != directory


def test_a_head_of_another_draft_vocabulary_gets_graphs_of_its_own(tmp_path):
    """A tied head drafts from its rows of the verifier's output projection: a head
    that differs only in its draft vocabulary has the very same weights, and must
    not be served the other's draft graph."""
    from nmt_specdec.decoding.backends.onnxruntime import export
    from tests.helpers.specdec_toy import random_specdec_model

    task, model = random_specdec_model(tmp_path / "toy")
    pad, eos = task.target_dictionary.pad(), task.target_dictionary.eos()
    full = model.draft_head.vocab_size
    directories = {}
    for vocab in (full, full // 2):
        model.draft_head.vocab_size = vocab
        directories[vocab] = export.graph_dir(model, pad, eos, False, root=tmp_path / "cache")
        manifest = json.loads((directories[vocab] / export.MANIFEST).read_text())
        assert manifest["draft_vocab"] == vocab
    assert directories[full] != directories[full // 2]
    model.draft_head.vocab_size = full
    assert export.graph_dir(model, pad, eos, False, root=tmp_path / "cache") == directories[full]


def test_int8_weight_bits_follow_the_cpu_and_name_the_cache(tmp_path, monkeypatch):
    """8-bit integer weights where the CPU has VNNI, 7 elsewhere, each in a cache
    directory of its own: a cache shared by two machines serves both."""
    import onnx
    from onnx import numpy_helper

    from nmt_specdec.decoding.backends.onnxruntime import export
    from tests.helpers.specdec_toy import random_specdec_model

    task, model = random_specdec_model(tmp_path / "toy")
    pad, eos = task.target_dictionary.pad(), task.target_dictionary.eos()
    built = {}
    for vnni in (True, False):
        monkeypatch.setattr(export, "has_vnni", lambda vnni=vnni: vnni)
        directory = export.graph_dir(model, pad, eos, True, root=tmp_path / "cache")
        manifest = json.loads((directory / export.MANIFEST).read_text())
        encoder = onnx.load(str(directory / export.ENCODER)).graph.initializer
        largest = max(int(abs(numpy_helper.to_array(t)).max()) for t in encoder
                      if t.name.endswith("_w8"))
        built[vnni] = (directory, manifest["weight_bits"], largest)
    assert built[True][1:] == (8, 127) and built[False][1:] == (7, 63)
    assert built[True][0] != built[False][0] and "-w7" in built[False][0].name
    assert export.graph_dir(model, pad, eos, True, root=tmp_path / "cache") == built[False][0]


def test_missing_runtime_is_a_one_line_error(shipped, monkeypatch, capsys):
    from nmt_specdec import translate
    from nmt_specdec.decoding.backends import make_backend

    model, task, _ = shipped
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` fails
    with pytest.raises(UserError, match="onnxruntime package"):
        make_backend("onnxruntime", model, task.target_dictionary)
    status = translate.main(["--checkpoint", str(MODEL_DIR / "model.pt"), "--data", str(MODEL_DIR),
                             "--spm-model", str(MODEL_DIR / "spm.model"), "--input",
                             str(SENTENCES), "--spec-decoding", "--backend", "onnxruntime"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.startswith("error:") and "onnxruntime" in err
    assert len(err.splitlines()) == 1


def test_hub_decodes_with_onnxruntime(shipped):
    from fairseq_plugins.specdec_model import SpecDecTransformerModel

    options = dict(checkpoint_file="model.pt", data_name_or_path=str(MODEL_DIR),
                   bpe="sentencepiece", sentencepiece_model=str(MODEL_DIR / "spm.model"),
                   spec_decoding=True, spec_k="2")
    lines = SENTENCES.read_text(encoding="utf-8").splitlines()[:3]
    ort = SpecDecTransformerModel.from_pretrained(str(MODEL_DIR), backend="onnxruntime",
                                                  **options)
    generator = ort.task.build_generator(ort.models, ort.cfg.generation)
    assert generator.backend.name == "onnxruntime"
    plain = SpecDecTransformerModel.from_pretrained(str(MODEL_DIR), **options)
    assert ort.translate(lines, beam=1) == plain.translate(lines, beam=1)


def test_evaluate_runs_backends_and_ctranslate2_rows(shipped, tmp_path):
    from nmt_specdec.evaluation.config import EvalConfig
    from nmt_specdec.evaluation.pipeline import run

    cfg = EvalConfig(
        checkpoint=str(MODEL_DIR / "model.pt"), out=str(tmp_path / "eval"),
        src_file=str(SENTENCES), ref_file=str(SENTENCES),  # BLEU is not the point here
        spm_model=str(MODEL_DIR / "spm.model"), beams=(1,), grid_k=(0, SETTINGS["k"]),
        grid_beta=(1,), backends=("onnxruntime",), int8=True, ct2=True,
        batch_sizes=(8,), repeats=1, warmup_batches=0, progress=False, cpu=True, **LENGTHS)
    rows = {row["name"]: row for row in run(cfg)["rows"]}
    assert rows["CTranslate2 greedy fp32"]["differs_from_greedy"] <= 1  # fp32, same weights
    assert rows["CTranslate2 greedy int8"]["role"] == "ct2"
    fp32 = rows[f"SpecDec K={SETTINGS['k']} β=1 [onnxruntime]"]
    assert fp32["backend"] == "onnxruntime" and fp32["differs_from_greedy"] == 0
    assert rows[f"SpecDec K={SETTINGS['k']} β=1 [onnxruntime int8]"]["int8"]
    # "vs engine greedy" compares with the greedy of the same backend.
    assert rows["engine greedy [onnxruntime int8]"]["speedup_vs_k0"] == 1.0


@pytest.mark.parametrize("extra", [
    (),
    ("--encoder-normalize-before", "--decoder-normalize-before", "--layernorm-embedding"),
    # The lean encoder refuses quant-noise: fairseq's own encoder is traced instead.
    ("--quant-noise-pq", "0.1", "--quant-noise-pq-block-size", "8"),
], ids=["post-norm", "pre-norm", "traced-encoder"])
def test_random_model_variants_decode_as_torch(tmp_path, onnx_cache, extra):
    # The graphs write the layers out: both norm placements and the embedding
    # LayerNorm must match the torch passes (the shipped model is post-norm).
    from nmt_specdec.decoding.backends import make_backend
    from tests.helpers.specdec_toy import random_specdec_model, source_batch

    task, model = random_specdec_model(tmp_path, extra_args=extra)
    dictionary = task.target_dictionary
    sample = source_batch(dictionary, [3, 7, 5, 9, 2, 6])
    ort = make_backend("onnxruntime", model, dictionary, fused_draft=True)
    for k in (0, 4):
        expected = _generator(model, task, k).generate([model], sample)
        got = _generator(model, task, k, ort).generate([model], sample)
        assert [h[0]["tokens"].tolist() for h in got] == [h[0]["tokens"].tolist()
                                                          for h in expected]
        for ours, theirs in zip(got, expected):
            torch.testing.assert_close(ours[0]["positional_scores"],
                                       theirs[0]["positional_scores"], atol=1e-4, rtol=1e-4)


def test_iteration_cost_reports_runtime_calls(shipped):
    from benchmarks.iteration_cost import format_rows, measure

    model, task, sources = shipped
    dataset = task.build_dataset_for_inference(sources[:4], [len(s) for s in sources[:4]])
    rows = {row["decoder"]: row for row in measure(
        model, task.target_dictionary, dataset, 4, 2, [0, SETTINGS["k"]], 1,
        backend="onnxruntime", fused_draft=True, **LENGTHS)}
    assert rows["engine K=0 (onnxruntime fused)"]["calls_per_iteration"] == 1.0
    # Fused: one call per iteration, plus the draft call of each batch's first block.
    fused_calls = rows[f"engine K={SETTINGS['k']} (onnxruntime fused)"]["calls_per_iteration"]
    assert 1.0 < fused_calls < 1.5
    table = format_rows("shipped", list(rows.values())).splitlines()
    assert len(table) == len(rows) and all(line.count("|") == 9 for line in table)
    assert table[0].endswith("| n/a |")  # stock greedy makes no backend calls


def test_auto_is_the_cpu_backend_on_the_cpu_and_torch_on_a_gpu(shipped, monkeypatch):
    from nmt_specdec.decoding import backends

    model, task, _ = shipped
    assert backends.resolve_backend("auto", torch.device("cuda", 0)) == "torch"
    for cpu_backend in ("torch", "onnxruntime"):  # flipping the default is this one line
        monkeypatch.setattr(backends, "CPU_BACKEND", cpu_backend)
        assert backends.make_backend("auto", model, task.target_dictionary).name == cpu_backend
    with pytest.raises(UserError, match="--int8"):
        backends.make_backend("torch", model, task.target_dictionary, int8=True)


def test_an_8bit_position_scores_the_same_bits_in_passes_of_any_size(shipped, backends):
    """The 8-bit verify graph's scores for a position and the keys it leaves in the
    cache do not depend on how many positions share the pass: one position at a
    time and a chain of 3 after two single steps give the same bits (its activation
    quantization turned last-bit differences into other tokens)."""
    model, task, sources = shipped
    backend = backends[True]
    source = sources[0].unsqueeze(0)
    memory = backend.encode({"src_tokens": source, "src_lengths": torch.tensor([source.size(1)])})
    verifier = backend.verifier()
    tokens = [task.target_dictionary.eos()] + [source[0, i].item() for i in range(4)]

    def run(chunks):
        cache, position, logits = verifier.new_cache(1, 16), 0, []
        for size in chunks:
            block = torch.tensor([tokens[position: position + size]])
            verified = verifier.verify(block, torch.tensor([position]), position, cache, memory,
                                       True, None)
            logits += [verified.logits[0, i].clone() for i in range(size)]
            position += size
        return logits, cache

    one_by_one, cache_a = run([1] * 5)
    chained, cache_b = run([1, 1, 3])
    for a, b in zip(one_by_one, chained):
        assert torch.equal(a, b)
    assert torch.equal(cache_a.key[:, :, :, :5], cache_b.key[:, :, :, :5])


def test_8bit_batches_verify_with_the_batch_graph_to_their_last_row(shipped, backends):
    """From ROWS_FROM rows a batch verifies with the per-row integer graph, a smaller
    one with MatMulNBits; a batch keeps its graph as its rows finish (beta=1 is its
    greedy: the test above at batch 8), and a row scores the same bits alone as in
    the batch through that graph."""
    from nmt_specdec.decoding.backends.onnxruntime import export
    from nmt_specdec.decoding.backends.onnxruntime.session import ROWS_FROM

    model, task, sources = shipped
    backend = backends[True]
    assert (backend.directory / export.VERIFY_ROWS).exists()
    # fp32 has one too: its certified output projection as a per-row product.
    assert (backends[False].directory / export.VERIFY_ROWS).exists()
    verifier = backend.verifier()
    pad = task.source_dictionary.pad()
    batch = torch.nn.utils.rnn.pad_sequence(  # left-padded, as fairseq batches
        [s.flip(0) for s in sources[:ROWS_FROM]], batch_first=True, padding_value=pad).flip(1)
    lengths = batch.ne(pad).sum(1)
    memory = backend.encode({"src_tokens": batch, "src_lengths": lengths})
    tokens = torch.full((ROWS_FROM, 1), task.target_dictionary.eos())
    start = torch.zeros(ROWS_FROM, dtype=torch.long)

    def first_logits(cache, rows, memory):
        return verifier.verify(tokens[:rows], start[:rows], 0, cache, memory, True).logits.clone()

    big = verifier.new_cache(ROWS_FROM, 8)
    small = verifier.new_cache(ROWS_FROM - 1, 8)
    graphs = verifier._graph_of
    assert graphs[big] is verifier._batch_graph() and small not in graphs
    in_batch = first_logits(big, ROWS_FROM, memory)
    big.keep_rows(torch.tensor([0]))  # the batch's last row: still the batch graph
    alone = first_logits(big, 1, verifier.keep_rows(memory, torch.tensor([0])))
    assert torch.equal(alone[0], in_batch[0])
    plain = first_logits(verifier.new_cache(1, 8), 1, verifier.keep_rows(memory, torch.tensor([0])))
    assert not torch.equal(plain[0], in_batch[0])  # the other graph quantizes otherwise


@pytest.mark.parametrize("batch", [1, 8])
def test_the_cache_grows_with_the_sentences_at_every_batch_size(backends, batch):
    """The graphs attend over (and copy) the whole cache buffer: allocated at a
    sentence's length limit (~200 slots for ~10 tokens) it made a step ~25% dearer."""
    from nmt_specdec.decoding.backends.onnxruntime.session import CACHE_CHUNK

    cache = backends[True].verifier().new_cache(batch, 202)
    assert cache.slots == CACHE_CHUNK
    cache.reserve(CACHE_CHUNK + 1)
    assert cache.slots == 2 * CACHE_CHUNK


@pytest.mark.parametrize("int8", [False, True])
def test_a_batch_of_one_encodes_with_the_sentence_graph(shipped, backends, monkeypatch, int8):
    """A lone sentence takes the sentence encoder (8 bits: one scale per product,
    fused kernels), a batch the one whose products skip the pad rows; the two
    encode alike, and the batch's pad positions hold finite values."""
    model, task, sources = shipped
    backend = backends[int8]
    used = []
    for name in ("encoder_session", "sentence_encoder_session"):
        session = getattr(backend, name)
        monkeypatch.setattr(session, "run", lambda i, o, run=session.run, name=name:
                            (used.append(name), run(i, o))[1])
    pad = task.source_dictionary.pad()
    short, long = sorted(sources[:8], key=len)[0], sorted(sources[:8], key=len)[-1]
    batch = torch.nn.utils.rnn.pad_sequence(
        [long.flip(0), short.flip(0)], batch_first=True, padding_value=pad).flip(1)
    assert batch.eq(pad).any()
    lengths = batch.ne(pad).sum(1)
    both = backend.encode({"src_tokens": batch, "src_lengths": lengths})
    alone = backend.encode({"src_tokens": short.unsqueeze(0), "src_lengths": lengths[1:]})
    assert used == ["encoder_session", "sentence_encoder_session"]
    width = short.size(0)
    for a, b in zip(alone.cross, both.cross):
        assert torch.isfinite(b).all()
        difference = (a[0] - b[1, :, -width:]).abs().max()
        # 8 bits: rounding, not garbage; fp32: the same sums in another order.
        assert difference < (0.05 if int8 else 1e-4) * a.abs().max(), difference


def test_a_greedy_step_reruns_its_bound_call_and_reads_the_new_contents(shipped, backends,
                                                                         monkeypatch):
    """The same tensors as the last call (a sentence's greedy steps) run the bound
    call again; its results are those of a call bound afresh."""
    from nmt_specdec.decoding.backends.onnxruntime.graph_session import GraphSession
    from nmt_specdec.decoding.backends.onnxruntime.session import OrtVerifier

    model, task, sources = shipped
    backend = backends[True]
    verifier = backend.verifier()
    first = sources[0].unsqueeze(0)
    memory = backend.encode({"src_tokens": first, "src_lengths": torch.tensor([first.size(1)])})
    eos, calls = task.target_dictionary.eos(), []
    call, run_bound, runs = OrtVerifier._call, GraphSession.run_bound, []
    monkeypatch.setattr(OrtVerifier, "_call", lambda self, *a: (calls.append(1), call(self, *a))[1])
    # Every run goes through run_bound (where --profile clocks the runtime).
    monkeypatch.setattr(GraphSession, "run_bound", lambda self: (runs.append(1), run_bound(self)))
    results = {}
    for kept in (True, False):  # the same tensors each step, or new ones
        cache = verifier.new_cache(1, 8)
        tokens, start = torch.tensor([[eos]]), torch.zeros(1, dtype=torch.long)
        calls.clear()
        for step, token in enumerate([eos, 57, 301]):
            if not kept:
                tokens, start = tokens.clone(), start.clone()
            tokens[0, 0], start[0] = token, step
            results[kept, step] = verifier.verify(tokens, start, step, cache, memory,
                                                  True).logits.clone()
        assert len(calls) == (1 if kept else 3)
    assert len(runs) == 6
    for step in range(3):
        assert torch.equal(results[True, step], results[False, step])
    assert not torch.equal(results[True, 1], results[True, 2])


def test_one_sentence_after_another_takes_over_the_cache_buffers(shipped, backends):
    """At batch 1 a new cache takes over the last one's first buffers, zeroed (the
    graph's cache inputs then stay bound); another shape or a batch gets its own.
    A sentence decoded again after another gives the same tokens and scores."""
    model, task, sources = shipped
    verifier = backends[True].verifier()
    first = verifier.new_cache(1, 20)
    first.key.fill_(1.0)
    first.value.fill_(float("nan"))
    second = verifier.new_cache(1, 20)
    assert second.key is first.key and second.value is first.value
    assert not second.key.any() and not second.value.any()
    assert verifier.new_cache(2, 20).key is not second.key
    assert verifier.new_cache(1, 10).key.shape != second.key.shape  # fewer slots than a chunk
    generator = shipped_generator(model, task, backend=backends[True])
    dataset = task.build_dataset_for_inference(sources[:2], [len(s) for s in sources[:2]])
    hypotheses = [generator.generate([model], dataset.collater([dataset[i]]))[0][0]
                  for i in (0, 1, 0)]
    assert torch.equal(hypotheses[0]["tokens"], hypotheses[2]["tokens"])
    assert torch.equal(hypotheses[0]["positional_scores"], hypotheses[2]["positional_scores"])


def test_runtime_workers_do_not_spin_between_calls(backends):
    """The runtime's worker threads do not spin-wait after a call: the loop's host
    work and torch's own parallel ops between calls get the cores."""
    from nmt_specdec.decoding.backends.onnxruntime.graph_session import SPIN_WAIT

    backend = backends[True]
    for graph in (backend.encoder_session, backend.verifier().session, backend.draft_session):
        options = graph.session.get_session_options()
        assert options.get_session_config_entry(SPIN_WAIT) == "0"


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_the_draft_graph_has_4_bit_weights_and_the_verifier_8(backends, int8):
    """Drafts are proposals: the draft graph's products take DRAFT_BITS-bit
    weights; with --int8 the verifier's keep 8 bits (its greedy is what beta=1
    reproduces)."""
    import onnx

    from nmt_specdec.decoding.backends.onnxruntime.graph_files import DRAFT, VERIFY
    from nmt_specdec.decoding.backends.onnxruntime.quantize import DRAFT_BITS

    def bits(name):
        graph = onnx.load(str(backends[int8].directory / name)).graph
        return {onnx.helper.get_attribute_value(a) for node in graph.node
                if node.op_type == "MatMulNBits" for a in node.attribute if a.name == "bits"}

    assert DRAFT_BITS == 4 and bits(DRAFT) == {4}
    # int8: every product of the verifier; fp32: its certified output projection alone.
    assert bits(VERIFY) == {8}
