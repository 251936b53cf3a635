"""Export the verifier of a SpecDec checkpoint as a stock fairseq ``transformer``.

The verifier *is* a standard fairseq Transformer (the draft head only adds
parameters), so exporting means dropping ``draft_head.*`` and rewriting the
saved configuration to the stock model, task and criterion names. The result
decodes with plain ``fairseq-generate`` without ``--user-dir``, and
``ct2-fairseq-converter`` converts it as it is (see :func:`_converter_view`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import OrderedDict
from typing import Any, Dict

from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.tasks.translation import TranslationConfig
from omegaconf import DictConfig, OmegaConf

from nmt_specdec.errors import UserError

_DRAFT_MODEL_FIELDS = ("draft_layers", "draft_block_size", "untie_draft_output")


def _stock_fields(section: Dict[str, Any], config_cls, name: str) -> Dict[str, Any]:
    allowed = {f.name for f in dataclasses.fields(config_cls)}
    stock = {key: value for key, value in section.items() if key in allowed}
    stock["_name"] = name
    return stock


def _plain(value: Any) -> Any:
    if isinstance(value, argparse.Namespace):
        return dict(vars(value))
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    return value


def verifier_state(state: Dict[str, Any], require_draft_head: bool = True) -> Dict[str, Any]:
    """Returns a stock-``transformer`` checkpoint dict built from a SpecDec one.

    Args:
        state: a checkpoint as returned by fairseq's ``load_checkpoint_to_cpu``.
        require_draft_head: refuse a checkpoint without one (False: rewrite a stock
            transformer too, e.g. so that CTranslate2's converter takes it).

    Returns:
        A new checkpoint dict (model weights shared, not copied).
    """
    weights = state["model"]
    if require_draft_head and not any(key.startswith("draft_head.") for key in weights):
        raise UserError("this checkpoint has no draft head: it already is a plain transformer")
    # Plain containers only: stock fairseq under torch >= 2.6 loads checkpoints
    # with weights_only=True, which refuses Namespace and DictConfig objects.
    cfg = {key: _plain(value) for key, value in state["cfg"].items()}
    model_cfg = {k: v for k, v in cfg["model"].items() if k not in _DRAFT_MODEL_FIELDS}
    model_cfg["_name"] = model_cfg["arch"] = "transformer"
    cfg["model"] = model_cfg
    cfg["task"] = _stock_fields(cfg["task"], TranslationConfig, "translation")
    cfg["model"] = _converter_view(model_cfg, cfg["task"])
    if cfg.get("criterion"):
        cfg["criterion"] = _stock_fields(
            cfg["criterion"], LabelSmoothedCrossEntropyCriterionConfig,
            "label_smoothed_cross_entropy",
        )
    return {
        "args": None,
        "cfg": cfg,
        "model": {k: v for k, v in weights.items() if not k.startswith("draft_head.")},
        "optimizer_history": state.get("optimizer_history", []),
        "extra_state": state.get("extra_state", {}),
        # The optimizer state covers the draft head too; it cannot be reused.
        "last_optimizer_state": None,
    }


# A legacy architecture that has no dataclass of its own: fairseq then builds
# the model from flat attributes (the checkpoint sets every one of them).
_CONVERTER_ARCH = "transformer_wmt_en_de"


def _converter_view(model_cfg: Dict[str, Any], task_cfg: Dict[str, Any]) -> "OrderedDict":
    """``cfg["model"]`` that fairseq's loader and CTranslate2's converter both read.

    fairseq's loader reads the mapping (``OmegaConf.create``). The converter
    reads ``cfg["model"]`` as an argparse namespace (attributes: ``args.arch``,
    ``args.task``, ``args.data`` ... then ``tasks.setup_task(args)``) after a
    ``torch.load(weights_only=True)``, which refuses ``argparse.Namespace``. An
    ``OrderedDict`` passes that loader and keeps instance attributes, so it
    carries both: the model config as items, the flat model and task options
    (``task=translation``, no ``_name``) as attributes.
    """
    view: "OrderedDict" = OrderedDict(model_cfg)
    flat = {k: v for k, v in task_cfg.items() if k != "_name"}
    flat.update({k: v for k, v in model_cfg.items() if k != "_name"})
    flat.update(task="translation", arch=_CONVERTER_ARCH)
    for name, value in flat.items():
        setattr(view, name, value)
    return view
