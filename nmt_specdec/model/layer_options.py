"""The options of a fairseq decoder layer that this project's own layer code does
not implement.

Two re-implementations of ``TransformerDecoderLayerBase.forward`` read a layer's
weights directly: the decoding engine's lean passes
(``nmt_specdec.decoding.layout`` refuses such a checkpoint, naming the option)
and the draft head's training layers (:mod:`.train_layers`, which fall back to
the fairseq layer). Both cover the plain layer; this module names what is not.
"""

from __future__ import annotations

from typing import List

from torch import nn

# Layer attribute -> the option that creates it (NormFormer, fairseq's transformer_lm).
_LAYER_EXTRAS = (("attn_ln", "scale_attn"), ("c_attn", "scale_heads"),
                 ("ffn_layernorm", "scale_fc"), ("w_resid", "scale_resids"))


def unsupported_layer_options(layer: nn.Module) -> List[str]:
    """The options ``layer`` (a fairseq ``TransformerDecoderLayerBase``) uses beyond
    the plain layer with encoder attention, each named once ([] for a plain one)."""
    found = [option for name, option in _LAYER_EXTRAS if getattr(layer, name, None) is not None]
    if getattr(layer, "cross_self_attention", False):
        found.append("cross_self_attention")
    if getattr(layer, "encoder_attn", None) is None:
        found.append("no_cross_attention (decoder layers without encoder attention)")
    for attn in (layer.self_attn, getattr(layer, "encoder_attn", None)):
        if attn is None:
            continue
        if attn.bias_k is not None:
            found.append("add_bias_kv")
        if attn.add_zero_attn:
            found.append("add_zero_attn")
        if getattr(attn, "use_xformers", False):
            found.append("xformers_att_config")
        if attn.num_heads * attn.head_dim != layer.embed_dim:
            found.append("pruned attention heads")
    return found
