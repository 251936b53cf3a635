"""Checkpoints for shipping: half-size weights, no training state, a plain config.

A decoding checkpoint needs the model weights and the config, nothing else.
Floating-point weights are stored as float16 (half the bytes) and load into the
float32 model unchanged by fairseq (``load_state_dict`` copies and converts), so
the model decodes in float32 with weights rounded once to float16.

fairseq's own loader turns ``cfg`` into an OmegaConf ``DictConfig``; pickling
that would need OmegaConf's classes, which the safe loader (rightly) refuses.
fairseq itself saves ``cfg`` as plain containers, and so does this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import torch

# What a decoding checkpoint keeps (fairseq's loader reads these keys).
_KEEP = ("cfg", "model", "args", "optimizer_history", "extra_state")


def plain_config(cfg: Any) -> Any:
    """``cfg`` as plain dicts/lists (an OmegaConf config is converted)."""
    try:
        from omegaconf import OmegaConf
    except ImportError:  # pragma: no cover - fairseq depends on omegaconf
        return cfg
    if OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    return cfg


# Paths of the machine that trained the model: meaningless elsewhere, and
# fairseq would try to import a ``user_dir`` that does not exist there.
# Each is reset to fairseq's (or our task's) default.
_LOCAL_PATHS = {("common", "user_dir"): None, ("task", "init_from_ar_checkpoint"): None,
                ("task", "init_draft_head_from"): None,
                ("task", "distill_data"): None, ("task", "cached_states"): None,
                ("checkpoint", "save_dir"): "checkpoints",
                ("checkpoint", "restore_file"): "checkpoint_last.pt", ("task", "data"): "."}


def portable_config(cfg: Any) -> Any:
    """Plain containers, with the training machine's paths removed."""
    cfg = plain_config(cfg)
    if isinstance(cfg, dict):
        for (group, key), default in _LOCAL_PATHS.items():
            if isinstance(cfg.get(group), dict) and key in cfg[group]:
                cfg[group][key] = default
        _drop_local_paths(cfg.get("model"))
    return cfg


def _drop_local_paths(model: Any) -> None:
    """A legacy (flat) model config copies every option, the paths too: as items,
    and in a stock verifier's converter view also as attributes
    (:func:`nmt_specdec.export.verifier_state`)."""
    if not isinstance(model, dict):
        return
    attributes = getattr(model, "__dict__", {})
    for (_, key), default in _LOCAL_PATHS.items():
        if key in model:
            model[key] = default
        if key in attributes:
            attributes[key] = default


def compact_state(state: Dict[str, Any], dtype: torch.dtype = torch.float16) -> Dict[str, Any]:
    """A decoding-only copy of a fairseq checkpoint state."""
    out = {key: state[key] for key in _KEEP if key in state}
    out["cfg"] = portable_config(state.get("cfg"))
    # Tied weights (shared embeddings) are one storage: convert each storage
    # once so that the saved file keeps them shared.
    converted: Dict[tuple, torch.Tensor] = {}
    model = {}
    for name, value in state["model"].items():
        if value.is_floating_point():
            key = (value.data_ptr(), tuple(value.shape), tuple(value.stride()))
            value = converted.setdefault(key, value.to(dtype))
        model[name] = value
    out["model"] = model
    extra = dict(out.get("extra_state") or {})
    extra.pop("train_iterator", None)
    out["extra_state"] = extra
    out["optimizer_history"] = [
        {key: value for key, value in entry.items() if key != "optimizer_state"}
        for entry in state.get("optimizer_history") or []
    ]
    return out


def save_compact(state: Dict[str, Any], path: Path,
                 dtype: torch.dtype = torch.float16) -> None:
    """Writes :func:`compact_state` atomically."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(compact_state(state, dtype), tmp)
    tmp.replace(path)
