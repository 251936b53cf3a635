"""One-line explanations of checkpoints that unpickle but do not fit the model.

A checkpoint can load safely and still not match what fairseq builds from the
command line: a different dictionary (its embeddings have another number of
rows than ``dict.*.txt`` has symbols, e.g. data encoded with another
SentencePiece model) or a different architecture (missing or unexpected
parameters). torch reports both as a multi-line ``RuntimeError``; this module
turns that report into one sentence for a :class:`CheckpointError`.

A PyTorch file that is not a fairseq checkpoint at all (a bare
``model.state_dict()``, a tensor) makes fairseq fail with a ``KeyError`` or
``RuntimeError`` deep in its upgrade code, and an architecture name that no
loaded plugin registered with an ``IndexError`` from a broken format string;
:func:`foreign_checkpoint` recognises both from the unpickled state.

Pure logic: no fairseq import. :mod:`nmt_specdec.checkpoints` wraps fairseq's
loaders with it.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

from nmt_specdec.errors import CheckpointError

_SIZE_MISMATCH = re.compile(
    r"size mismatch for ([\w.]+): copying a param with shape "
    r"torch\.Size\(\[([\d, ]*)\]\) "
    r"from checkpoint, the shape in current model is torch\.Size\(\[([\d, ]*)\]\)"
)
_KEYS = re.compile(
    r"(Missing|Unexpected) key\(s\) in state_dict: ((?:\"[^\"]+\"(?:, )?)+)"
)


def state_dict_mismatch(
    exc: BaseException, checkpoint: str
) -> Optional[CheckpointError]:
    """Explains torch's ``load_state_dict`` failure in one line.

    Args:
        exc: the exception raised while loading the checkpoint's parameters
            (fairseq's trainer wraps it; its ``__context__`` is then searched).
        checkpoint: the checkpoint path, for the message.

    Returns:
        The error to raise instead, or ``None`` if ``exc`` is no parameter mismatch.
    """
    text = _mismatch_text(exc)
    if text is None:
        return None
    size = _SIZE_MISMATCH.search(text)
    if size:
        name, saved, built = size.group(1), size.group(2), size.group(3)
        if "embed_tokens" in name or "output_projection" in name:
            return CheckpointError(
                f"checkpoint {checkpoint} does not match the dictionary: its {name} "
                f"has {saved.split(',')[0]} rows but the dictionary has "
                f"{built.split(',')[0]} "
                "symbols; use the data directory (dict.*.txt) and SentencePiece model "
                "the checkpoint was trained with"
            )
        return CheckpointError(
            f"checkpoint {checkpoint} does not match the architecture: {name} has "
            "shape "
            f"[{saved}] in the checkpoint but [{built}] in the model built from the "
            "options; pass the checkpoint's own --arch and size options"
        )
    keys = _KEYS.search(text)
    detail = ""
    if keys:
        names = [k.strip('"') for k in keys.group(2).split(", ")]
        detail = f" ({keys.group(1).lower()} parameters: {', '.join(names[:3])}" + (
            ", ...)" if len(names) > 3 else ")"
        )
    return CheckpointError(
        f"checkpoint {checkpoint} does not match the architecture{detail}; it was "
        "trained with another --arch (or other model options)"
    )


def _mismatch_text(exc: Optional[BaseException]) -> Optional[str]:
    """torch's ``Error(s) in loading state_dict`` message in ``exc`` or its context."""
    seen = 0
    while exc is not None and seen < 4:
        if isinstance(exc, RuntimeError) and "Error(s) in loading state_dict" in str(
            exc
        ):
            return str(exc)
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def foreign_checkpoint(
    state: Any, checkpoint: str, is_registered: Callable[[str], bool]
) -> Optional[CheckpointError]:
    """Explains why an unpickled ``state`` cannot be a usable fairseq checkpoint.

    Args:
        state: what the checkpoint file unpickled to.
        checkpoint: its path, for the message.
        is_registered: whether fairseq knows a model architecture name.

    Returns:
        The error to raise, or ``None`` if ``state`` looks like a fairseq
        checkpoint of a registered architecture.
    """
    if (
        not isinstance(state, dict)
        or "model" not in state
        or (state.get("cfg") is None and state.get("args") is None)
    ):
        keys = sorted(map(str, state))[:3] if isinstance(state, dict) else []
        what = f"a dict with keys {keys}" if keys else f"a {type(state).__name__}"
        return CheckpointError(
            f"{checkpoint} is a PyTorch file but not a fairseq checkpoint: it holds "
            f"{what}, "
            "not 'model' with 'cfg' or 'args' (was it saved by fairseq-train?)"
        )
    if state.get("optimizer_history") == []:  # fairseq's upgrade reads its last entry
        return CheckpointError(
            f"checkpoint {checkpoint} has an empty 'optimizer_history', which fairseq "
            "cannot load; give it one entry, e.g. [{'criterion_name': "
            "'CrossEntropyCriterion', 'optimizer_name': 'FairseqAdam', "
            "'lr_scheduler_state': {'best': None}, 'num_updates': 0}]"
        )
    arch = _architecture(state)
    if arch is not None and not is_registered(arch):
        return CheckpointError(
            f"checkpoint {checkpoint} needs the model architecture '{arch}', which is "
            "not "
            "registered; is the --user-dir plugin that defines it loaded?"
        )
    return None


def _architecture(state: dict) -> Optional[str]:
    """The saved model architecture name (legacy ``args`` or Hydra ``cfg``)."""
    model_cfg = state["args"] if state.get("cfg") is None else state["cfg"].get("model")
    for name in ("arch", "_name"):
        value = (
            model_cfg.get(name)
            if isinstance(model_cfg, dict)
            else getattr(model_cfg, name, None)
        )
        if isinstance(value, str):
            return value
    return None
