"""Which layouts of fairseq's ``transformer`` decoder the SpecDec engine implements.

Every backend runs (or traces) the lean passes
(:mod:`.passes.layers`, :mod:`.passes.verifier_pass`), and the
fixed-shape replay (:mod:`.replay.replay_pass`) re-implements the
decoder's forward too. They cover every layout that fairseq's ``transformer``
architecture family builds from its flags (tested against fairseq's own decoder, layout by layout):
post- or pre-norm (``--decoder-normalize-before``, with or without
``--no-decoder-final-norm``), sinusoidal, learned or no positions,
``--layernorm-embedding``, ``--no-scale-embedding``, shared or separate output
embeddings, any activation, an encoder width different from the decoder's, and
``--quant-noise-pq`` (whose extra embedding projection is applied),
``--decoder-layerdrop`` and ``--checkpoint-activations`` (no-ops in eval mode). Anything
else changes the arithmetic in a way the engine does not reproduce, so a
checkpoint that uses it is refused when the generator is built, with the
option named, instead of being decoded silently wrong.
"""

from __future__ import annotations

from typing import List

from torch import nn

from nmt_specdec.errors import UserError
from nmt_specdec.model.layer_options import unsupported_layer_options


def unsupported_options(decoder: nn.Module) -> List[str]:
    """The options of a fairseq ``TransformerDecoderBase`` the engine does not implement.

    Args:
        decoder: the verifier's decoder.

    Returns:
        Option names (fairseq's spelling), empty when the engine reproduces the decoder.
    """
    from fairseq.models.transformer import TransformerDecoderBase
    from fairseq.modules import LearnedPositionalEmbedding, SinusoidalPositionalEmbedding
    from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

    found = []
    if not isinstance(decoder, TransformerDecoderBase):
        return [f"decoder class {type(decoder).__name__} (not a fairseq TransformerDecoder)"]
    if getattr(decoder, "adaptive_softmax", None) is not None:
        found.append("adaptive_softmax_cutoff")
    if not isinstance(decoder.embed_tokens, nn.Embedding):
        found.append("adaptive_input")
    if getattr(decoder, "cross_self_attention", False):
        found.append("cross_self_attention")
    if decoder.project_in_dim is not None:
        found.append("decoder_input_dim")
    if decoder.project_out_dim is not None:
        found.append("decoder_output_dim")
    positions = decoder.embed_positions
    if positions is not None and not isinstance(
            positions, (LearnedPositionalEmbedding, SinusoidalPositionalEmbedding)):
        found.append(f"positional embedding {type(positions).__name__}")
    for layer in decoder.layers:
        if not isinstance(layer, TransformerDecoderLayerBase):
            found.append(f"base_layers ({type(layer).__name__})")
            continue
        found += unsupported_layer_options(layer)
    return list(dict.fromkeys(found))  # each option once, in order


def check_decodable(model: nn.Module) -> None:
    """Refuses, before any export or pass, a model the engine cannot decode: one
    that is not a fairseq encoder-decoder, has no parameters, has a decoder
    without layers, or uses a decoder option the engine does not implement.

    Raises:
        UserError: one line saying why.
    """
    name = type(model).__name__
    if getattr(model, "encoder", None) is None or getattr(model, "decoder", None) is None:
        raise UserError(f"the SpecDec engine decodes fairseq encoder-decoder models; "
                        f"{name} is not one (decode it without --spec-decoding/--deterministic)")
    if next(iter(model.parameters()), None) is None:
        raise UserError(f"the model ({name}) has no parameters: nothing to decode with")
    check_supported(model.decoder)
    if len(model.decoder.layers) == 0:
        raise UserError("the SpecDec engine needs a decoder with at least one layer "
                        "(this one has --decoder-layers 0)")


def check_supported(decoder: nn.Module) -> None:
    """Refuses a decoder the engine would decode differently from fairseq.

    Raises:
        UserError: one line naming every unsupported option.
    """
    found = unsupported_options(decoder)
    if found:
        raise UserError(f"the SpecDec engine does not implement the decoder option(s) "
                        f"{', '.join(found)}; decode this checkpoint with stock fairseq "
                        "(without --spec-decoding/--deterministic)")
