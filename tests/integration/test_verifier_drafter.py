"""``--spec-drafter verifier-int8`` (``verifier-int4``): the verifier's own 8-bit (4-bit)
ONNX graph drafts, token by token, for the fp32 verifier
(``decoding/backends/onnxruntime/verifier_drafter.py``).

- beta = 1 output is the fp32 greedy output, at batch 1 (the single-row loop)
  and 8 (the batched loop), with a fixed K and with ``--spec-k auto`` (whose
  greedy turns draft nothing);
- the drafts are nearly the oracle's: tokens per iteration at K=3 far above
  the draft head's (a drafter that fed the wrong token or position would be
  accepted about as often as chance);
- the copy writes the verifier's cache only where the next verify call writes
  again: from each row's last committed token on, never before it;
- the single-row and batched loops take the same iterations, where the copy's
  drafts end only at an EOS draft; a single row's drafts end early where the
  copy is unsure, for the same output;
- beside the 8-bit verifier (``--int8``), the copy drafts over its cache the same
  way, and beta = 1 output is the 8-bit greedy output (a fixed K: ``auto`` is
  refused there, where drafting lost at every K measured);
- a stock fairseq transformer (no draft head) decodes with it through
  ``fairseq-generate``, as greedy does;
- what cannot work is refused in one line.
"""

from __future__ import annotations

import pytest

from nmt_specdec.decoding.options import DecodingOptions
from nmt_specdec.errors import UserError
from tests.helpers.fairseq_toy import EXACT_BATCHING, PLUGINS_DIR, hypotheses, run_cli
from tests.helpers.shipped_model import (
    assert_same_decoding,
    decode_all,
    onnx_greedy,
    shipped_generator,
)


@pytest.fixture(scope="module")
def shipped(onnx_cache):
    model, task, backend, sources, greedy = onnx_greedy()
    return model, task, sources, backend, greedy


def _drafting(model, task, backend, k: int = 3, auto: bool = False, loop=None,
              drafter: str = "verifier-int8"):
    options = DecodingOptions(k=k, auto_k=auto, drafter=drafter)
    return shipped_generator(model, task, backend=backend, options=options, loop=loop)


@pytest.mark.parametrize("drafter", ["verifier-int8", "verifier-int4"])
@pytest.mark.parametrize("batch_size", [1, 8])
def test_same_output_as_greedy_with_near_oracle_acceptance(shipped, batch_size, drafter):
    model, task, sources, backend, greedy = shipped
    generator = _drafting(model, task, backend, drafter=drafter)
    assert decode_all(generator, model, task, sources, batch_size) == greedy
    stats = generator.stats
    # The head reaches ~2.1 tokens per iteration at K=3 on these sentences; an
    # oracle at most 4, and fewer where sentences end within the block.
    assert stats.tokens / stats.iterations > 3.0


def test_auto_k_keeps_greedy_output(shipped):
    model, task, sources, backend, greedy = shipped
    generator = _drafting(model, task, backend, k=4, auto=True)
    assert decode_all(generator, model, task, sources, 1) == greedy
    # It tried greedy and several K (larger K only where K=1 and 2 did not lose
    # more and more: see k_policy), and drafts after greedy turns were accepted as
    # the others.
    stats = generator.stats
    assert set(stats.k_chosen) >= {0, 1, 2}
    assert stats.accepted_per_slot[0] >= 0.8 * stats.drafted_per_slot[0] > 0


@pytest.mark.parametrize("rows", [1, 2])
def test_the_copy_writes_the_verifiers_cache_only_after_the_committed_slots(shipped, rows):
    """Two rows of different lengths (the batched path: each row's own position),
    or one (the single-row path)."""
    import torch

    from nmt_specdec.decoding.drafters import DraftRequest

    model, task, sources, backend, _ = shipped
    pad, k = task.target_dictionary.pad(), 3
    batch = torch.nn.utils.rnn.pad_sequence(  # left-padded, as fairseq batches
        [s.flip(0) for s in sources[:rows]], batch_first=True, padding_value=pad).flip(1)
    memory = backend.encode({"src_tokens": batch, "src_lengths": batch.ne(pad).sum(1)})
    verifier = backend.verifier()
    cache = verifier.new_cache(rows, 16)
    prefix = torch.full((rows, 12), pad)
    prefix[:, :6] = torch.tensor([task.target_dictionary.eos(), 20, 21, 22, 23, 24])
    lengths = torch.tensor([6, 4][:rows])  # committed tokens, BOS included
    verifier.verify(prefix[:, :5], torch.zeros(rows, dtype=torch.long), 0, cache, memory)
    before = cache.key.clone()
    drafter = backend.drafter(pad, "verifier-int4")
    drafter.start_batch({}, memory)
    anchor = (5, 24, -1) if rows == 1 else None
    request = DraftRequest(prefix, lengths, torch.zeros(rows, 1), torch.arange(rows), k,
                           anchor, cache)
    assert drafter.propose(request).shape == (rows, k)
    for row, length in enumerate(lengths.tolist()):
        changed = (cache.key[:, row] != before[:, row]).flatten(0, 1).any(0).any(-1)  # (T,)
        written = torch.arange(length - 1, length - 1 + k)  # the last token and K-1 drafts
        assert changed[written].all() and changed.sum() == k, (row, changed.nonzero())


def test_single_row_loop_takes_the_batched_loops_iterations(shipped):
    # Without the stop on the copy's scores, the single row's chain differs from
    # the batched loop's only after an EOS draft, which commits nothing.
    model, task, sources, backend, _ = shipped
    from nmt_specdec.decoding.loops import DynamicLoop, decode_rows, decode_single_row

    single_row = _drafting(model, task, backend, loop=DynamicLoop(decode_single_row))
    single_row.drafter.stop_below = 0.0
    batched = _drafting(model, task, backend, loop=DynamicLoop(decode_rows))
    assert_same_decoding(single_row, batched, model, task, sources[:20])


def test_a_single_rows_drafts_end_where_the_copy_is_unsure(shipped):
    # The stop on the copy's own scores: fewer drafts for the same output.
    model, task, sources, backend, greedy = shipped
    drafted = []
    for stop_below in (0.0, 0.5):
        generator = _drafting(model, task, backend, k=6, drafter="verifier-int4")
        generator.drafter.stop_below = stop_below
        assert decode_all(generator, model, task, sources, 1) == greedy
        drafted.append(sum(generator.stats.drafted_per_slot))
    assert drafted[1] < drafted[0]


@pytest.mark.parametrize("batch_size", [1, 8])
def test_the_8bit_verifier_keeps_its_own_greedy_output(shipped, batch_size):
    from nmt_specdec.decoding.backends import make_backend

    model, task, sources, _, _ = shipped
    int8 = make_backend("onnxruntime", model, task.target_dictionary, int8=True)
    greedy = decode_all(shipped_generator(model, task, backend=int8), model, task, sources,
                        batch_size)
    generator = _drafting(model, task, int8, drafter="verifier-int4")
    assert decode_all(generator, model, task, sources, batch_size) == greedy
    stats = generator.stats
    assert stats.tokens / stats.iterations > 3.0


def test_refusals(shipped):
    from nmt_specdec.decoding.backends import make_backend

    model, task, _, _, _ = shipped
    with pytest.raises(UserError, match="needs --backend onnxruntime"):
        _drafting(model, task, make_backend("torch", model, task.target_dictionary))
    with pytest.raises(UserError, match="--spec-k auto does not choose for --spec-drafter"):
        DecodingOptions(k=10, auto_k=True, int8=True, backend="onnxruntime",
                        drafter="verifier-int4")
    with pytest.raises(UserError, match="--spec-candidates > 1 needs the draft head"):
        DecodingOptions(k=2, candidates=2, drafter="verifier-int8")
    with pytest.raises(UserError, match="--spec-drafter must be one of"):
        DecodingOptions(k=2, drafter="oracle")


def test_stock_transformer_drafts_with_its_int8_copy(toy_data_bin, tiny_transformer_ckpt,
                                                     onnx_cache):
    """A checkpoint without a draft head: fairseq-generate with the SpecDec task."""
    common = [toy_data_bin, "--path", tiny_transformer_ckpt, "--cpu", *EXACT_BATCHING,
              "--user-dir", str(PLUGINS_DIR), "--task", "translation_specdec",
              "--spec-decoding", "--backend", "onnxruntime", "--batch-size", "1",
              "--max-len-a", "1", "--max-len-b", "5"]
    greedy = hypotheses(run_cli("generate", [*common, "--spec-k", "0"]).stdout)
    drafted = run_cli("generate", [*common, "--spec-drafter", "verifier-int8", "--print-step"])
    assert hypotheses(drafted.stdout) == greedy and len(greedy) > 5
    # --print-step: the iterations each sentence took, fewer than its tokens when drafts pass.
    steps = [int(line.split("\t")[1]) for line in drafted.stdout.splitlines()
             if line.startswith("I-")]
    assert len(steps) == len(greedy) and min(steps) >= 1
    assert sum(steps) < sum(len(h.split()) + 1 for h in greedy.values())


def test_translate_takes_a_stock_checkpoint_under_the_specdec_task(toy_data_bin,
                                                                   tiny_transformer_ckpt):
    """nmt-specdec-translate --spec-decoding loads a stock ``translation`` checkpoint
    under ``translation_specdec`` (same settings and dictionaries), which builds the
    engine's generator for it."""
    from fairseq_plugins.specdec_task import TranslationSpecDecTask
    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.translate import TranslateConfig, _build_generator, _load_model

    common = dict(checkpoint=str(tiny_transformer_ckpt), spm_model=__file__,
                  data=str(toy_data_bin))
    _, stock_task = _load_model(TranslateConfig(**common))
    assert not isinstance(stock_task, TranslationSpecDecTask)  # without --spec-decoding
    cfg = TranslateConfig(**common, decoding=DecodingOptions(spec_decoding=True, k=0))
    model, task = _load_model(cfg)
    assert isinstance(task, TranslationSpecDecTask)
    assert (task.cfg.source_lang, task.cfg.target_lang) == ("src", "tgt")
    assert task.src_dict.symbols == stock_task.src_dict.symbols
    assert task.tgt_dict.symbols == stock_task.tgt_dict.symbols
    assert isinstance(_build_generator(cfg, task, model), SpecDecGenerator)
