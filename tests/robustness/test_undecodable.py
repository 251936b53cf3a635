"""Models and length limits the engine cannot decode: refused in one line, on
every backend, before any export; degenerate models it can decode, decoded.

fairseq's own generator refuses ``--min-len`` above the longest output allowed
(an assert); the engine refuses it with a :class:`UserError`, at build time
when the limit is fixed and per batch when it grows with the source.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from torch import nn

from nmt_specdec import translate as tr
from nmt_specdec.decoding.build import build_decoder, fairseq_generator
from nmt_specdec.decoding.options import DecodingOptions
from nmt_specdec.errors import UserError
from tests.helpers.fairseq_toy import PLUGINS_DIR, run_cli
from tests.helpers.specdec_toy import generation_config as beam_one_config
from tests.helpers.specdec_toy import random_fairseq_model, source_batch
from tests.robustness.test_invalid_options import _translate_args, one_error_line

DIMS = ("--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-layers", "1", "--decoder-layers", "1",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--dropout", "0")
STOCK = ("--task", "translation", "--arch", "transformer", *DIMS)
HEAD = ("--task", "translation_specdec", "--arch", "specdec_transformer_tiny", *DIMS,
        "--draft-layers", "1", "--draft-block-size", "2", "--criterion", "specdec_joint_loss")
ENGINES = {
    "torch K=0": DecodingOptions(spec_decoding=True, k=0, backend="torch"),
    "onnxruntime K=0": DecodingOptions(spec_decoding=True, k=0, backend="onnxruntime",
                                       exact_scores=True),
    "onnxruntime 8-bit copy": DecodingOptions(spec_decoding=True, k=2, backend="onnxruntime",
                                              exact_scores=True, drafter="verifier-int8"),
    "deterministic": DecodingOptions(deterministic=True),
}


generation_config = partial(beam_one_config, max_len_b=8)  # beam 1


def build(model, task, options, config=None):
    config = config or generation_config()
    return build_decoder(model, task.target_dictionary, options, config,
                         fairseq_generator(task, model, config))


class _Parts(nn.Module):
    """An encoder and a decoder without a parameter between them."""

    def __init__(self):
        super().__init__()
        self.encoder, self.decoder = nn.Identity(), nn.Identity()


@pytest.mark.parametrize("engine", list(ENGINES))
def test_models_the_engine_cannot_decode_are_refused_in_one_line(tmp_path, engine):
    _, lstm = random_fairseq_model(tmp_path / "lstm", (
        "--task", "translation", "--arch", "lstm", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-hidden-size", "16",
        "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16"), seed=1)
    task, no_layers = random_fairseq_model(tmp_path / "empty", (*STOCK, "--decoder-layers", "0"),
                                           seed=1)
    refused = {"LSTMDecoder": lstm, "at least one layer": no_layers,
               "no parameters": _Parts(), "encoder-decoder": nn.Linear(2, 2)}
    for reason, model in refused.items():
        with pytest.raises(UserError) as err:
            build(model, task, ENGINES[engine])
        assert reason in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("symbols", ["a", "abcdefgh"])
def test_a_tiny_vocabulary_decodes_on_every_backend(tmp_path, symbols):
    """12 symbols or fewer: the ONNX export's example token ids fit any vocabulary."""
    task, model = random_fairseq_model(tmp_path, HEAD, seed=3, symbols=tuple(symbols))
    sample = source_batch(task.source_dictionary, (3, 5, 1), seed=2)
    config = generation_config()
    reference = fairseq_generator(task, model, config)().generate([model], sample)
    engines = {**ENGINES, "onnxruntime head K=2": DecodingOptions(
        spec_decoding=True, k=2, backend="onnxruntime", exact_scores=True)}
    for name, options in engines.items():
        out = build(model, task, options, config).generate([model], sample)
        for ours, theirs in zip(out, reference):
            assert ours[0]["tokens"].tolist() == theirs[0]["tokens"].tolist(), name
            torch.testing.assert_close(ours[0]["positional_scores"],
                                       theirs[0]["positional_scores"], atol=1e-5, rtol=0)


def test_a_decoder_over_an_encoder_without_layers_decodes(tmp_path):
    task, model = random_fairseq_model(tmp_path, (*STOCK, "--encoder-layers", "0"), seed=4)
    sample = source_batch(task.source_dictionary, (3, 5), seed=2)
    reference = fairseq_generator(task, model, generation_config())().generate([model], sample)
    for name, options in ENGINES.items():
        out = build(model, task, options).generate([model], sample)
        assert [h[0]["tokens"].tolist() for h in out] == \
            [h[0]["tokens"].tolist() for h in reference], name


@pytest.fixture(scope="module")
def stock_model(tmp_path_factory):
    return random_fairseq_model(tmp_path_factory.mktemp("lengths"), STOCK, seed=5)


@pytest.mark.parametrize("engine", list(ENGINES) + ["torch K=2"])
def test_min_len_above_a_fixed_limit_is_refused_at_build_time(stock_model, engine):
    task, model = stock_model
    options = ENGINES.get(engine) or DecodingOptions(spec_decoding=True, k=2, backend="torch",
                                                     drafter="verifier-int8")
    with pytest.raises(UserError, match="--min-len 9 is above the longest output allowed"):
        build(model, task, options, generation_config(min_len=9))
    with pytest.raises(UserError, match="--min-len 1 is above"):  # --max-len-b 0
        build(model, task, options, generation_config(max_len_b=0))


GROWING_LIMITS = {"max-len-a": {"max_len_a": 1.0, "max_len_b": 0, "min_len": 5},
                  "match-source-len": {"match_source_len": True, "min_len": 7}}


@pytest.mark.parametrize("engine,limit", [
    (engine, limit) for engine in ENGINES for limit in GROWING_LIMITS
    if (engine, limit) != ("deterministic", "match-source-len")])  # refused at build time
def test_min_len_above_a_batch_limit_is_refused_per_batch(stock_model, engine, limit):
    """The limit grows with the source: a batch of long sources decodes, one of
    short sources is refused, as fairseq's generator asserts."""
    task, model = stock_model
    fields = GROWING_LIMITS[limit]
    generator = build(model, task, ENGINES[engine], generation_config(**fields))
    long = source_batch(task.source_dictionary, (6, 8), seed=1)
    out = generator.generate([model], long)
    assert all(len(h[0]["tokens"]) > fields["min_len"] for h in out)
    with pytest.raises(UserError, match="is above the longest output allowed"):
        generator.generate([model], source_batch(task.source_dictionary, (2, 3), seed=1))


def test_translate_refuses_min_len_above_max_len_in_one_line(raw_text_toy, capsys):
    args = [*_translate_args(raw_text_toy, "--spec-decoding", "--spec-k", "2"), "--max-len-b", "0"]
    assert tr.main(args) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "--min-len 1 is above the longest output allowed (0" in line


def test_interactive_refuses_an_option_in_one_line(raw_text_toy) -> None:
    proc = run_cli("interactive", [
        raw_text_toy.data, "--path", raw_text_toy.specdec, "--user-dir", PLUGINS_DIR,
        "--task", "translation_specdec", "-s", "src", "-t", "tgt", "--cpu",
        "--spec-decoding", "--beam", "1", "--nbest", "2"], stdin="the cat\n", check=False)
    assert proc.returncode == 2 and "H-" not in proc.stdout
    line = one_error_line(proc.stderr)
    assert line.startswith("error: --nbest 2 is not supported with --spec-decoding")
