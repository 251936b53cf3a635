"""CTranslate2 rows (``nmt-specdec-evaluate --ct2``): the verifier, converted once.

The SpecDec checkpoint's verifier is exported as a stock fairseq ``transformer``
(:func:`nmt_specdec.export.verifier_state`, which ``ct2-fairseq-converter``
takes as it is), converted with CTranslate2's own fairseq converter into
``<out>/ctranslate2/``, and decoded greedily (beam 1) with fairseq's length
rules, behind fairseq's generator interface so that the runner times it in the
same interleaved passes as every other row. int8 and half-precision rows load
the same converted model with another ``compute_type`` (CTranslate2 converts on
load). Every row runs on the model's device, so a CUDA evaluation compares GPU
with GPU; a compute type the device lacks (float16 on most CPUs) drops its row
with a warning.

Shapes: B sentences, S source length.
"""

from __future__ import annotations

import logging
import os
from typing import Dict, List

import torch
from torch import nn

from nmt_specdec.decoding.options import LengthRules
from nmt_specdec.errors import UserError

logger = logging.getLogger(__name__)

_CONVERTED: Dict[tuple, str] = {}  # (checkpoint, out dir) -> converted model dir


def require_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise UserError("--ct2 needs the ctranslate2 package, which is not installed "
                        "(pip install ctranslate2)") from None
    return ctranslate2


def convert_verifier(checkpoint: str, data: str, source_lang: str, target_lang: str,
                     out_dir: str) -> str:
    """Exports and converts the verifier once per (checkpoint, out dir); returns the
    CTranslate2 model directory."""
    key = (os.path.abspath(checkpoint), os.path.abspath(out_dir))
    if key in _CONVERTED:
        return _CONVERTED[key]
    require_ctranslate2()
    from ctranslate2.converters import FairseqConverter
    from fairseq import checkpoint_utils

    from nmt_specdec.export import verifier_state

    os.makedirs(out_dir, exist_ok=True)
    exported = os.path.join(out_dir, "verifier.pt")
    state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)
    torch.save(verifier_state(state, require_draft_head=False), exported)  # stock ones too
    model_dir = os.path.join(out_dir, "model")
    FairseqConverter(exported, data, source_lang=source_lang,
                     target_lang=target_lang).convert(model_dir, force=True)
    _CONVERTED[key] = model_dir
    return model_dir


class CT2Generator:
    """CTranslate2 greedy search (or top-k sampling) behind fairseq's
    ``generate(models, sample)``.

    Args:
        translator: a ``ctranslate2.Translator``.
        src_dict, tgt_dict: the task's dictionaries (ids <-> CTranslate2's tokens).
        rules: fairseq's length rules (one max length per batch, as fairseq's).
        sampling_topk: CTranslate2's ``sampling_topk`` (1: greedy).
    """

    stats = None  # no SpecDec statistics

    def __init__(self, translator, src_dict, tgt_dict, rules: LengthRules,
                 sampling_topk: int = 1):
        self.translator, self.src_dict, self.tgt_dict = translator, src_dict, tgt_dict
        self.rules, self.sampling_topk = rules, sampling_topk
        self.symbols_to_strip_from_output = {tgt_dict.eos()}

    def eval(self) -> "CT2Generator":
        return self

    def generate(self, models, sample: dict, **unused) -> List[List[dict]]:
        src = sample["net_input"]["src_tokens"]  # (B, S), left-padded, EOS-terminated
        pad, eos = self.src_dict.pad(), self.src_dict.eos()
        # The converted model appends the source EOS itself (add_source_eos).
        sources = [[self.src_dict[i] for i in row if i != pad and i != eos]
                   for row in src.tolist()]
        limit = int(self.rules.max_lengths(src, pad).max())
        results = self.translator.translate_batch(
            sources, beam_size=1, max_decoding_length=limit,
            min_decoding_length=self.rules.min_len, return_scores=True,
            sampling_topk=self.sampling_topk)
        return [[self._hypothesis(result)] for result in results]

    def _hypothesis(self, result) -> dict:
        ids = [self.tgt_dict.index(t) for t in result.hypotheses[0]] + [self.tgt_dict.eos()]
        tokens = torch.tensor(ids, dtype=torch.long)
        return {"tokens": tokens, "score": torch.tensor(result.scores[0]), "attention": None,
                "alignment": None, "positional_scores": torch.zeros(len(ids))}


def compute_type(spec) -> str:
    """CTranslate2's ``compute_type`` for a row (a ``DecoderSpec`` of kind ct2)."""
    return "int8" if spec.int8 else spec.dtype


def ct2_supports(spec, device: torch.device) -> bool:
    """Whether CTranslate2 runs this row's compute type on ``device`` (else warns)."""
    supported = require_ctranslate2().get_supported_compute_types(device.type)
    if compute_type(spec) in supported:
        return True
    logger.warning("%s: CTranslate2 has no %s on %s (it has %s); row dropped", spec.name,
                   compute_type(spec), device.type, ", ".join(sorted(supported)))
    return False


def ct2_generator(cfg, task, model: nn.Module, spec) -> CT2Generator:
    """The CTranslate2 row's generator for an evaluation config (``EvalConfig``), on
    the model's device."""
    ctranslate2 = require_ctranslate2()
    data = cfg.data or os.path.dirname(os.path.abspath(cfg.checkpoint))
    model_dir = convert_verifier(cfg.checkpoint, data, task.cfg.source_lang,
                                 task.cfg.target_lang, os.path.join(cfg.out, "ctranslate2"))
    device = next(model.parameters()).device
    translator = ctranslate2.Translator(model_dir, device=device.type,
                                        device_index=device.index or 0,
                                        compute_type=compute_type(spec),
                                        inter_threads=1, intra_threads=cfg.threads)
    rules = LengthRules(max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b,
                        max_positions=model.max_decoder_positions(), min_len=cfg.min_len)
    return CT2Generator(translator, task.source_dictionary, task.target_dictionary, rules)
