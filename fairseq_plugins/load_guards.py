"""Glue: a checkpoint that does not fit the model is a one-line user error.

fairseq reports a checkpoint trained on another dictionary (embedding rows !=
dictionary size, e.g. data encoded with another SentencePiece model) or with
another architecture as a multi-line ``RuntimeError`` from ``load_state_dict``
(generate, interactive, the hub interface) or as a bare ``Exception("Cannot
load model parameters ...")`` (train's resume), and a missing ``--path`` as
an ``OSError("Model file not found")`` with a traceback; a PyTorch file
that is no fairseq checkpoint, or one of an unregistered architecture, fails
with a ``KeyError``/``IndexError`` deep inside fairseq. Importing this module wraps
both loaders, once per process, so that these failures become a
:class:`~nmt_specdec.errors.CheckpointError`, which the plugin's excepthook
prints as one ``error:`` line with exit status 2. Everything else propagates
unchanged. The message is built by :mod:`nmt_specdec.load_errors`.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

from fairseq import checkpoint_utils
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.trainer import Trainer

from nmt_specdec.checkpoint_safety import load_checkpoint
from nmt_specdec.errors import CheckpointError
from nmt_specdec.load_errors import foreign_checkpoint, state_dict_mismatch

_MARK = "_nmt_specdec_load_guard"


def _explain(exc: BaseException, paths: Sequence[Any]) -> Optional[CheckpointError]:
    """A one-line error for a load failure we can attribute, else ``None``."""
    names = ", ".join(map(str, paths))
    error = state_dict_mismatch(exc, names)
    if error is not None or not isinstance(
        exc, (KeyError, RuntimeError, IndexError, AttributeError, TypeError)
    ):
        return error
    for path in paths:  # only on the failure path: read the file once more
        state = load_checkpoint(str(path))  # may itself raise a CheckpointError
        error = foreign_checkpoint(state, str(path), _is_registered)
        if error is not None:
            return error
    return None


def _is_registered(arch: str) -> bool:
    return arch in ARCH_MODEL_REGISTRY or arch in MODEL_REGISTRY


def _guard_ensemble_loader(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def load_model_ensemble_and_task(filenames, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(filenames, *args, **kwargs)
        except OSError as exc:  # fairseq's own existence check, before any open()
            if not str(exc).startswith("Model file not found: "):
                raise
            path = str(exc).removeprefix("Model file not found: ")
            raise CheckpointError(
                f"cannot read checkpoint {path}: No such file"
            ) from None
        except Exception as exc:
            error = _explain(exc, list(filenames))
            if error is None:
                raise
            raise error from None

    setattr(load_model_ensemble_and_task, _MARK, True)
    return load_model_ensemble_and_task


def _guard_trainer_loader(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def load_checkpoint(self, filename, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, filename, *args, **kwargs)
        except CheckpointError:
            raise
        except Exception as exc:  # fairseq raises a bare Exception here
            error = _explain(exc, [filename])
            if error is None:
                raise
            raise error from None

    setattr(load_checkpoint, _MARK, True)
    return load_checkpoint


def install() -> None:
    """Wraps fairseq's two model-state loaders (idempotent)."""
    if not getattr(checkpoint_utils.load_model_ensemble_and_task, _MARK, False):
        checkpoint_utils.load_model_ensemble_and_task = _guard_ensemble_loader(
            checkpoint_utils.load_model_ensemble_and_task
        )
    if not getattr(Trainer.load_checkpoint, _MARK, False):
        Trainer.load_checkpoint = _guard_trainer_loader(Trainer.load_checkpoint)


install()
