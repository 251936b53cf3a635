"""Loading a fairseq checkpoint: the one place nmt_specdec does it.

Every entry point (``nmt-specdec-translate``, ``nmt-specdec-evaluate``, the
workflows) gets its model from :func:`load`, the package's only call of
fairseq's ``load_model_ensemble_and_task``. Around that call this module owns:

* **safety**: :func:`install_safe_loading` makes fairseq unpickle every
  checkpoint with :func:`nmt_specdec.checkpoint_safety.load_checkpoint`
  (weights only, the fairseq allowlist) and turns the load failures it can
  attribute into a one-line :class:`CheckpointError`
  (:mod:`nmt_specdec.load_errors` words them);
* **the plugin**: :func:`register_plugin` imports a ``--user-dir`` exactly as
  fairseq's CLIs do, by default this project's plugin (:func:`plugin_dir`);
* **shards**: a checkpoint shipped in shards is joined on first use
  (:func:`nmt_specdec.model_shards.materialize`) before fairseq opens it;
* **the task**: :func:`specdec_task_for` gives a stock ``translation`` task as
  ``translation_specdec``, so that a stock transformer decodes with the engine.

The plugin calls into this module (its import installs the safe loading and
:func:`install_one_line_errors` for fairseq's own CLIs); this module never
imports the plugin: once registered, its task is in fairseq's registry.

fairseq is imported inside the functions: ``nmt-specdec-translate`` imports
this module at start-up and needs fairseq only once it loads a model.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import os
import sys
import types
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

import torch

from nmt_specdec.checkpoint_safety import MapLocation, load_checkpoint
from nmt_specdec.errors import CheckpointError, UserError
from nmt_specdec.load_errors import foreign_checkpoint, state_dict_mismatch
from nmt_specdec.model_shards import materialize

PLUGIN_PACKAGE = "fairseq_plugins"
SPECDEC_TASK = "translation_specdec"
# Set on each function installed here, so that installing twice wraps once.
_MARK = "_nmt_specdec_safe"


def load(checkpoint: str, overrides: Optional[Mapping[str, Any]] = None,
         specdec_task: bool = False) -> Tuple[Any, Any]:
    """Loads one model and its task through the safe loader.

    The plugin that defines the checkpoint's task and model must be registered
    (:func:`register_plugin`); a stock fairseq checkpoint needs none.

    Args:
        checkpoint: path of a fairseq checkpoint.
        overrides: fairseq's ``arg_overrides`` (``data``, ``source_lang``...);
            entries that are ``None`` are left out.
        specdec_task: give a stock ``translation`` task as ``translation_specdec``
            (see :func:`specdec_task_for`).

    Returns:
        ``(model, task)``, the model on the CPU as fairseq built it.

    Raises:
        UserError: a missing, unsafe, broken or mismatched checkpoint, missing
            dictionaries, or a task or model no loaded plugin registered.
    """
    from fairseq import checkpoint_utils

    install_safe_loading()
    overrides = {name: value for name, value in (overrides or {}).items() if value is not None}
    try:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(checkpoint)], arg_overrides=overrides)
    except FileNotFoundError as err:  # the dictionaries: the checkpoint itself is checked first
        raise UserError(
            f"cannot load {checkpoint}: no such file {err.filename}; pass --data DIR holding "
            "the checkpoint's dict.SRC.txt and dict.TGT.txt (and --source-lang/--target-lang)"
        ) from None
    except KeyError as err:
        raise UserError(f"{checkpoint} needs a task or architecture that is not registered "
                        f"({err}); is its --user-dir plugin loaded?") from None
    return models[0], specdec_task_for(task) if specdec_task else task


def specdec_task_for(task: Any) -> Any:
    """A stock ``translation`` task's settings and dictionaries under
    ``translation_specdec``, whose generator decodes with the engine: a stock
    transformer then decodes with ``--spec-k 0`` or ``--spec-drafter verifier-int8``.
    Any other task is returned as it is.

    Raises:
        UserError: the plugin that defines ``translation_specdec`` is not registered.
    """
    from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    if not isinstance(task, TranslationTask):
        return task
    specdec = TASK_REGISTRY.get(SPECDEC_TASK)
    if specdec is None:
        raise UserError(f"the task {SPECDEC_TASK} is not registered; is the --user-dir "
                        f"plugin ({PLUGIN_PACKAGE}) loaded?")
    if isinstance(task, specdec):
        return task
    config = TASK_DATACLASS_REGISTRY[SPECDEC_TASK]
    names = {f.name for f in dataclasses.fields(config)} - {"_name"}
    settings = {name: getattr(task.cfg, name) for name in names if name in task.cfg}
    return specdec(config(**settings), task.src_dict, task.tgt_dict)


def plugin_dir() -> str:
    """This project's fairseq plugin folder, what ``--user-dir`` names by default.

    Found on the import path without importing it: the plugin is imported by
    fairseq, as any ``--user-dir`` (:func:`register_plugin`), never by this package.
    """
    spec = importlib.util.find_spec(PLUGIN_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"cannot find the {PLUGIN_PACKAGE} package; pass --user-dir")
    return os.path.abspath(list(spec.submodule_search_locations)[0])


def register_plugin(user_dir: Optional[str] = None) -> None:
    """Registers a fairseq plugin as fairseq's CLIs register ``--user-dir``.

    Args:
        user_dir: the plugin's folder; ``None``: this project's (:func:`plugin_dir`).

    Raises:
        UserError: no such folder.
    """
    from fairseq import utils

    user_dir = plugin_dir() if user_dir is None else user_dir
    if not os.path.isdir(user_dir):
        raise UserError(f"--user-dir: no such directory {user_dir}")
    utils.import_user_module(argparse.Namespace(user_dir=user_dir))


def install_safe_loading() -> None:
    """Makes fairseq load every checkpoint safely, failures in one line (idempotent).

    * ``checkpoint_utils`` unpickles through :class:`_TorchWithSafeLoad`: that
      covers ``load_checkpoint_to_cpu`` (which generate, interactive,
      validate, train's resume, the hub interface and :func:`load` go
      through) and ``load_ema_from_checkpoint``; ``load_checkpoint_to_cpu``
      keeps fairseq's own post-processing (overrides, cfg upgrade);
    * ``load_model_ensemble_and_task`` and the trainer's ``load_checkpoint``
      explain a checkpoint that unpickles but does not fit (:func:`_explained`).
    """
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    if not getattr(checkpoint_utils.load_checkpoint_to_cpu, _MARK, False):
        checkpoint_utils.torch = _TorchWithSafeLoad()
        checkpoint_utils.load_checkpoint_to_cpu = _readable(
            checkpoint_utils.load_checkpoint_to_cpu)
    if not getattr(checkpoint_utils.load_model_ensemble_and_task, _MARK, False):
        checkpoint_utils.load_model_ensemble_and_task = _explained(
            checkpoint_utils.load_model_ensemble_and_task,
            paths=lambda args, kwargs: args[0] if args else kwargs["filenames"])
    if not getattr(Trainer.load_checkpoint, _MARK, False):
        # A method: args are (trainer, filename, ...).
        Trainer.load_checkpoint = _explained(
            Trainer.load_checkpoint,
            paths=lambda args, kwargs: [args[1] if len(args) > 1 else kwargs["filename"]])


def install_one_line_errors() -> None:
    """Makes an uncaught :class:`UserError` print as one line ``error: <message>``
    on stderr with exit status 2 (idempotent).

    For fairseq's CLIs, which would print the errors of the plugin and of the
    safe loader with a traceback; our own CLIs catch them in ``main``.
    """
    if not getattr(sys.excepthook, _MARK, False):
        sys.excepthook = _user_error_hook(sys.excepthook)


class _TorchWithSafeLoad(types.ModuleType):
    """``torch`` as seen by ``fairseq.checkpoint_utils``: only ``load`` differs.

    Swapping the module's global ``torch`` name patches exactly the
    ``torch.load`` step of fairseq's loaders and nothing else in the process
    (no global ``torch.load`` monkeypatch, no process-wide safe globals), and
    unlike a temporary swap it is safe when two threads load at once.
    """

    def __init__(self) -> None:
        super().__init__("torch", "torch, with load() replaced by nmt_specdec's safe loader")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def load(f: Any, map_location: MapLocation = None, **_fairseq_kwargs: Any) -> Any:
        """Loads with the fairseq allowlist; fairseq passes no other options."""
        return load_checkpoint(f, map_location=map_location)


def _readable(original: Callable[..., Any]) -> Callable[..., Any]:
    """fairseq's ``load_checkpoint_to_cpu``, with a missing or unreadable file
    (raised by fairseq's own ``open``) as a one-line :class:`CheckpointError`."""

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path: str, arg_overrides: Any = None,
                               load_on_all_ranks: bool = False) -> Any:
        try:
            materialize(path)
            return original(path, arg_overrides, load_on_all_ranks)
        except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            raise CheckpointError(f"cannot read checkpoint {path}: {exc.strerror}") from exc

    setattr(load_checkpoint_to_cpu, _MARK, True)
    return load_checkpoint_to_cpu


def _explained(original: Callable[..., Any],
               paths: Callable[[tuple, dict], Sequence[Any]]) -> Callable[..., Any]:
    """A fairseq loader whose failures we can attribute raise a one-line
    :class:`CheckpointError`; everything else propagates unchanged.

    fairseq reports a checkpoint of another dictionary or architecture as a
    multi-line ``RuntimeError`` (or, on train's resume, a bare ``Exception``), a
    missing file as ``OSError("Model file not found")``, and a PyTorch file that
    is no fairseq checkpoint, or of an unregistered architecture, as a
    ``KeyError``/``IndexError`` deep inside fairseq. ``paths(args, kwargs)``:
    the checkpoints the call loads, each joined from its shards first where it
    is shipped so.
    """

    @functools.wraps(original)
    def loader(*args: Any, **kwargs: Any) -> Any:
        for path in paths(args, kwargs):
            materialize(path)
        try:
            return original(*args, **kwargs)
        except CheckpointError:
            raise
        except OSError as exc:  # fairseq's own existence check, before any open()
            if not str(exc).startswith("Model file not found: "):
                raise
            path = str(exc).removeprefix("Model file not found: ")
            raise CheckpointError(f"cannot read checkpoint {path}: No such file") from None
        except Exception as exc:
            error = _explain(exc, list(paths(args, kwargs)))
            if error is None:
                raise
            raise error from None

    setattr(loader, _MARK, True)
    return loader


def _explain(exc: BaseException, paths: Sequence[Any]) -> Optional[CheckpointError]:
    """A one-line error for a load failure we can attribute, else ``None``."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    if "Could not infer language pair" in str(exc):  # translation.setup_task, an Exception
        return CheckpointError(
            f"{', '.join(map(str, paths))}: its task records no language pair and the data "
            "directory has no split files to read it from: give -s/--source-lang and "
            "-t/--target-lang")
    error = state_dict_mismatch(exc, ", ".join(map(str, paths)))
    if error is not None or not isinstance(
        exc, (KeyError, RuntimeError, IndexError, AttributeError, TypeError)
    ):
        return error
    def registered(arch: str) -> bool:
        return arch in ARCH_MODEL_REGISTRY or arch in MODEL_REGISTRY

    for path in paths:  # only on the failure path: read the file once more
        state = load_checkpoint(str(path))  # may itself raise a CheckpointError
        error = foreign_checkpoint(state, str(path), registered)
        if error is not None:
            return error
    return None


def _user_error_hook(previous: Callable[..., Any]) -> Callable[..., Any]:
    """An excepthook printing :class:`UserError` as one line, else ``previous``."""

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        if not issubclass(exc_type, UserError):
            previous(exc_type, exc, tb)
            return
        message = " ".join(str(exc).split())  # one line, whatever it held
        sys.stdout.flush()
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
        # An excepthook cannot choose the exit status (Python then exits 1);
        # 2 is the usage-error convention, so leave at once with it.
        os._exit(2)

    setattr(hook, _MARK, True)
    return hook
