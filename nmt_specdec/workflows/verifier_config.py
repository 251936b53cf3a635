"""What ``nmt-specdec-add-draft-head`` reads of the stock verifier it extends:
its model options (as ``fairseq-train`` flags, so the joint model's verifier has
exactly its shape) and its languages."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List

from nmt_specdec.data.steps import RecipeError


def verifier_arch_flags(model_args: argparse.Namespace) -> List[str]:
    """The stock checkpoint's model options as ``fairseq-train`` flags.

    Every option fairseq's ``transformer`` declares is copied, so the verifier
    built by ``--arch specdec_transformer`` has exactly the input's shape.
    """
    from fairseq.models.transformer import TransformerModel

    parser = argparse.ArgumentParser(add_help=False)
    TransformerModel.add_args(parser)
    flags: List[str] = []
    for action in parser._actions:
        value = getattr(model_args, action.dest, None)
        if value is None or value is False or not action.option_strings:
            continue
        flag = action.option_strings[0]
        flags += [flag] if value is True else [flag, str(value)]
    return flags


def read_verifier_config(path: Path, data: Path):
    """(model options, source language, target language) of a stock checkpoint;
    languages the checkpoint leaves open are inferred from ``data`` (as fairseq does)."""
    from nmt_specdec.checkpoint_safety import load_checkpoint

    state = load_checkpoint(str(path))
    cfg = state.get("cfg") or {}
    model, task = (cfg.get("model"), cfg.get("task")) if isinstance(cfg, dict) else (None, None)
    if model is None and state.get("args") is not None:  # pre-Hydra checkpoints
        model = task = state["args"]
    if model is None:
        raise RecipeError(f"{path} holds no model configuration (not a fairseq checkpoint)")
    # What the checkpoint saved, as dicts: an option it lacks is simply absent.
    model = vars(model) if isinstance(model, argparse.Namespace) else dict(model)
    task = vars(task) if isinstance(task, argparse.Namespace) else dict(task or {})
    arch = str(model.get("arch") or "")
    if "transformer" not in arch or arch.startswith("specdec"):
        raise RecipeError(f"{path} is not a stock fairseq transformer (arch {arch or '?'})")
    src, tgt = task.get("source_lang"), task.get("target_lang")
    if not (src and tgt):
        from fairseq.data import data_utils

        src, tgt = data_utils.infer_language_pair(str(data))
    if not (src and tgt):
        raise RecipeError(f"{path} names no source/target language and {data} has no "
                          "train.SRC-TGT.* files to infer them from")
    return argparse.Namespace(**model), src, tgt
