"""The engine's verifier passes equal fairseq's decoder for every ``transformer`` layout.

For each layout that fairseq's ``transformer`` flags can build, a small random
model (d=32, 2 layers, built in this process in well under a second) is run
teacher-forced through fairseq's decoder and through

* the lean pass (:class:`LeanVerifier`, what SpecDec and K=0 decode with), fed
  in two blocks over its cache, and
* the fixed-shape replay's pass (:func:`verify_block` of
  :mod:`nmt_specdec.decoding.replay.replay_pass`, what ``--deterministic``
  decodes with), also in two blocks;

the logits (log-probabilities for the replay) must agree within ``ATOL``.

Tolerance: both sides compute the same float32 arithmetic in a different
order (q/k/v fused into one matrix, ``scaled_dot_product_attention`` instead of
fairseq's bmm-softmax-bmm), so they differ by float32 rounding: about 1e-6 on
logits of magnitude ~5 here (float32 eps 1.2e-7 times a few accumulated
roundings; measured: at most 2.4e-6 over these layouts). ``ATOL = 1e-4`` is
~40x that. A layout mistake moves logits by
orders of magnitude more: :func:`test_tolerance_catches_a_layout_mistake`
shows that a pass with the wrong norm placement, or without the embedding
scale, misses by more than ``100 * ATOL``.

Options the engine does not implement are refused when the generator is built,
with a one-line error naming the option.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest
import torch

from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier
from nmt_specdec.decoding.replay.replay_pass import KVCache, verify_block
from nmt_specdec.errors import UserError
from tests.helpers.specdec_toy import random_fairseq_model, source_batch

ATOL = 1e-4
DIMS = ("--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-layers", "2", "--decoder-layers", "2",
        "--encoder-attention-heads", "4", "--decoder-attention-heads", "4")

LAYOUTS = {
    "post-norm sinusoidal": (),
    "pre-norm": ("--decoder-normalize-before", "--encoder-normalize-before"),
    "pre-norm no final norm": ("--decoder-normalize-before", "--no-decoder-final-norm"),
    "learned positions": ("--decoder-learned-pos",),
    "no positions": ("--no-token-positional-embeddings",),
    "layernorm embedding": ("--layernorm-embedding",),
    "no scale embedding": ("--no-scale-embedding",),
    "shared output embedding": ("--share-decoder-input-output-embed",),
    "shared all embeddings": ("--share-all-embeddings",),
    "gelu": ("--activation-fn", "gelu"),
    "quant noise": ("--quant-noise-pq", "0.1"),
    "wider encoder": ("--encoder-embed-dim", "48", "--encoder-ffn-embed-dim", "96"),
    "layerdrop": ("--decoder-layerdrop", "0.2"),  # a no-op in eval mode
    "checkpoint activations": ("--checkpoint-activations",),
    "pre-norm learned layernorm-embedding unscaled shared": (
        "--decoder-normalize-before", "--decoder-learned-pos", "--layernorm-embedding",
        "--no-scale-embedding", "--share-decoder-input-output-embed"),
}

REFUSED = {
    "adaptive_softmax_cutoff": ("--adaptive-softmax-cutoff", "10"),
    "cross_self_attention": ("--cross-self-attention",),
    "decoder_output_dim": ("--decoder-output-dim", "16"),
    "no_cross_attention": ("--no-cross-attention",),
}


def build_model(workdir: Path, flags: Sequence[str], seed: int = 0):
    """A random stock ``transformer`` with ``flags``, every parameter perturbed so
    that LayerNorm gains/biases and positions all matter; eval mode."""
    return random_fairseq_model(workdir, ("--task", "translation", "--arch", "transformer",
                                          "--dropout", "0", *DIMS, *flags),
                                seed, noise=0.1, eos_scale=1.0)


def _inputs(dictionary):
    sample = source_batch(dictionary, (5, 9, 3), seed=3)
    g = torch.Generator().manual_seed(0)
    prev = torch.randint(dictionary.nspecial, len(dictionary), (3, 7), generator=g)
    prev[:, 0] = dictionary.eos()
    return sample, prev


def fairseq_logits(model, sample, prev):
    encoder_out = model.encoder.forward_torchscript(sample["net_input"])
    with torch.no_grad():
        logits, _ = model.decoder(prev, encoder_out=encoder_out)
    return encoder_out, logits  # (B, T, V)


def lean_logits(model, encoder_out, prev, split: int = 3, verifier=None):
    verifier = verifier or LeanVerifier(model.decoder)
    cache = verifier.new_cache(prev.size(0), 16)
    cross = verifier.cross_states(encoder_out)
    rows = prev.size(0)
    with torch.no_grad():
        first = verifier.forward(prev[:, :split], torch.zeros(rows, dtype=torch.long), 0,
                                 cache, cross)
        second = verifier.forward(prev[:, split:], torch.full((rows,), split), split,
                                  cache, cross)
        return verifier.logits(torch.cat([first, second], 1))


def replay_lprobs(model, encoder_out, prev, split: int = 4):
    cache = KVCache(model.decoder)
    positions = torch.arange(prev.size(1)).expand_as(prev)
    with torch.no_grad():
        blocks = [verify_block(model.decoder, prev[:, a:b], positions[:, a:b], encoder_out,
                               cache) for a, b in ((0, split), (split, prev.size(1)))]
    return torch.cat(blocks, 1)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("layouts")


@pytest.mark.parametrize("flags", list(LAYOUTS.values()), ids=list(LAYOUTS))
def test_lean_and_replay_passes_equal_fairseq(workdir, flags):
    task, model = build_model(workdir, flags)
    sample, prev = _inputs(task.target_dictionary)
    encoder_out, expected = fairseq_logits(model, sample, prev)
    assert expected.abs().max() > 1.0  # the comparison is not between near-zeros
    torch.testing.assert_close(lean_logits(model, encoder_out, prev), expected,
                               atol=ATOL, rtol=0)
    torch.testing.assert_close(replay_lprobs(model, encoder_out, prev),
                               torch.log_softmax(expected, -1), atol=ATOL, rtol=0)


def test_layouts_really_differ(workdir):
    # Guards the parametrization: the flags reach the model (e.g. pre-norm has a
    # final norm, learned positions a table, quant noise its projection).
    def decoder(flags):
        return build_model(workdir, flags)[1].decoder

    from fairseq.modules import LearnedPositionalEmbedding

    assert decoder(LAYOUTS["pre-norm"]).layers[0].normalize_before
    assert decoder(LAYOUTS["pre-norm"]).layer_norm is not None
    assert decoder(LAYOUTS["pre-norm no final norm"]).layer_norm is None
    assert isinstance(decoder(LAYOUTS["learned positions"]).embed_positions,
                      LearnedPositionalEmbedding)
    assert decoder(LAYOUTS["layernorm embedding"]).layernorm_embedding is not None
    assert decoder(LAYOUTS["no scale embedding"]).embed_scale == 1.0
    shared = decoder(LAYOUTS["shared output embedding"])
    assert shared.output_projection.weight is shared.embed_tokens.weight
    assert decoder(LAYOUTS["quant noise"]).quant_noise is not None


def test_tolerance_catches_a_layout_mistake(workdir):
    task, model = build_model(workdir, LAYOUTS["pre-norm"])
    sample, prev = _inputs(task.target_dictionary)
    encoder_out, expected = fairseq_logits(model, sample, prev)
    verifier = LeanVerifier(model.decoder)
    verifier.layers = [w._replace(normalize_before=False) for w in verifier.layers]
    wrong_norm = lean_logits(model, encoder_out, prev, verifier=verifier)
    assert (wrong_norm - expected).abs().max() > 100 * ATOL
    model.decoder.embed_scale = 1.0  # as if --no-scale-embedding were ignored
    unscaled = lean_logits(model, encoder_out, prev)
    assert (unscaled - expected).abs().max() > 100 * ATOL


@pytest.mark.parametrize("option", list(REFUSED), ids=list(REFUSED))
def test_unimplemented_options_are_refused_at_build_time(workdir, option):
    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions, LengthRules

    task, model = build_model(workdir, REFUSED[option])
    with pytest.raises(UserError, match=option) as err:
        SpecDecGenerator(model, task.target_dictionary, DecodingOptions(k=0), LengthRules())
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("option", ["add_bias_kv", "add_zero_attn"])
def test_attention_extras_are_refused(workdir, option):
    from fairseq.modules import MultiheadAttention

    from nmt_specdec.decoding.options import LengthRules
    from nmt_specdec.decoding.replay.determinism import FixedShapeReplay

    task, model = build_model(workdir, ())
    layer = model.decoder.layers[1]
    layer.self_attn = MultiheadAttention(32, 4, self_attention=True, **{option: True})
    with pytest.raises(UserError, match=option):
        LeanVerifier(model.decoder)
    with pytest.raises(UserError, match=option):  # --deterministic's replay too
        FixedShapeReplay(model, task.target_dictionary, LengthRules(per_sentence=True))

