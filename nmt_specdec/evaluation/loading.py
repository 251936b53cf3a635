"""The checkpoint, and generators built exactly as ``fairseq-generate`` builds them."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Tuple

import torch
from fairseq.dataclass.configs import GenerationConfig
from torch import nn

from nmt_specdec import checkpoints
from nmt_specdec.model.head_file import attach_head_file
from nmt_specdec.decoding.build import build_decoder, fairseq_generator, resolve
from nmt_specdec.evaluation.config import DecoderSpec, EvalConfig


def load_checkpoint(cfg: EvalConfig, device: torch.device) -> Tuple[nn.Module, object]:
    """Loads one model and its task (dictionaries: ``--data`` or the checkpoint's dir).

    Through :func:`nmt_specdec.checkpoints.load`; the plugin defining the
    checkpoint's model must be registered (the command line does it).

    Returns:
        ``(model, task)``, the model in eval mode on ``device``.
    """
    overrides = {"data": cfg.data or os.path.dirname(os.path.abspath(cfg.checkpoint)),
                 "source_lang": cfg.source_lang or None,
                 "target_lang": cfg.target_lang or None}
    # Not stock-only: a stock transformer decodes with the engine too.
    model, task = checkpoints.load(cfg.checkpoint, overrides, specdec_task=not cfg.stock_only)
    model = model.to(device)
    if cfg.draft_head:
        attach_head_file(model.eval(), Path(cfg.draft_head))
    # As fairseq-generate: eval mode, generation-only optimisations.
    model.prepare_for_inference_(
        SimpleNamespace(generation=generation_config(cfg, beam=1))
    )
    model.eval()
    return model, task


def generation_config(cfg: EvalConfig, beam: int, sampling_topk: int = 0) -> GenerationConfig:
    """fairseq's ``--beam/--max-len-a/...`` namespace for one configuration
    (``sampling_topk``: ``--sampling --sampling-topk``)."""
    gen = GenerationConfig()
    gen.beam = beam
    gen.sampling = bool(sampling_topk)
    gen.sampling_topk = sampling_topk if sampling_topk else -1
    gen.max_len_a = cfg.max_len_a
    gen.max_len_b = cfg.max_len_b
    gen.min_len = cfg.min_len
    gen.lenpen = cfg.lenpen
    gen.unkpen = cfg.unkpen
    return gen


def check_specdec_supported(task, model: nn.Module, specs) -> None:
    """Refuses, before any row is built, the SpecDec rows that ``model`` cannot run
    (:func:`~nmt_specdec.decoding.build.resolve` says why; ``task``: unused, the
    engine decodes the model whatever its task)."""
    for spec in specs:
        if spec.kind == "specdec":
            resolve(model, spec.decoding)


def build_generator(task, model: nn.Module, spec: DecoderSpec, cfg: EvalConfig):
    """The row's generator through :func:`~nmt_specdec.decoding.build.build_decoder`,
    as ``fairseq-generate`` would build it. The batch-invariant replay is off
    (``DecoderSpec`` rows never set ``deterministic``): the plain generators are
    what is measured."""
    if spec.kind == "ct2":
        from nmt_specdec.evaluation.ct2 import ct2_generator

        return ct2_generator(cfg, task, model, spec)
    gen = generation_config(cfg, spec.beam, spec.sampling_topk)
    generator = build_decoder(model, task.target_dictionary, spec.decoding, gen,
                              fairseq_generator(task, model, gen))
    generator.eval()
    return generator


def prepare_model(model: nn.Module, spec: DecoderSpec) -> None:
    """Restores the model's attention beam size for this configuration.

    fairseq's SequenceGenerator, when built with beam N > 1, calls
    ``model.set_beam_size(N)`` on models that have it ("beamable"
    encoder-decoder attention, which folds rows into groups of N). Several
    generators share one model here, so the beam size a configuration expects
    is set again before each of its measurements: N for stock beam N, 1 for
    SpecDec, whose rows are not beam-shaped. Transformer models (stock or
    SpecDec) have no ``set_beam_size``, so for them this does nothing, exactly
    as in fairseq-generate.
    """
    if hasattr(model, "set_beam_size"):
        model.set_beam_size(spec.beam if spec.kind == "stock" else 1)


def parameter_counts(model: nn.Module) -> dict:
    """Parameters of the verifier (encoder + AR decoder) and of the draft head."""
    total = sum(p.numel() for p in model.parameters())  # shared ones once
    draft = (sum(p.numel() for p in model.draft_head.parameters())
             if hasattr(model, "draft_head") else 0)
    return {"verifier": total - draft, "draft_head": draft, "total": total}
