"""Load fairseq checkpoints without running arbitrary pickled code.

A checkpoint is a pickle; unpickling an untrusted one with plain ``torch.load``
can run any code (a ``__reduce__`` that calls ``os.system``). torch >= 2.6
defaults to ``weights_only=True``, which only rebuilds tensors, containers and
primitives plus globals that the caller allowlists. fairseq 0.12 checkpoints
need a few more types than that default, so stock ``fairseq-generate`` fails on
them; the tempting fix (``weights_only=False`` or
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``) reopens the hole. Instead this module
loads with ``weights_only=True`` inside a ``safe_globals`` context holding the
minimal allowlist below, and turns every failure into a one-line
:class:`~nmt_specdec.errors.CheckpointError`.

This module is pure logic: it does not import fairseq.
:mod:`nmt_specdec.checkpoints` makes fairseq's loaders use it.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import zipfile
from typing import IO, Any, Callable, Union

import numpy as np
import torch

from nmt_specdec.errors import CheckpointError

CheckpointSource = Union[str, "os.PathLike[str]", IO[bytes]]
MapLocation = Union[str, torch.device, Callable[..., Any], dict, None]

_REFUSAL_TAIL = "which is not on the allowlist of fairseq checkpoint types"


def fairseq_checkpoint_globals() -> list[Any]:
    """The allowlist: every global a genuine fairseq 0.12 checkpoint contains.

    Found empirically by training tiny stock ``transformer`` models with
    ``fairseq-train`` (legacy flags; with ``--eval-bleu``; with ``--store-ema``
    and interval/best-k checkpoints) and with ``fairseq-hydra-train`` (YAML
    config), then listing what ``weights_only=True`` refuses
    (``torch.serialization.get_unsafe_globals_in_checkpoint``). Everything
    else a fairseq checkpoint holds (tensors, ``OrderedDict``, ``dict``,
    ``list``, ``str``, numbers, ``None``) is already allowed by torch. None of
    these types runs code on construction beyond building a plain value.

    Returns:
        Entries for ``torch.serialization.safe_globals``: objects, or
        ``(object, "module.name")`` pairs for a name the object had when saved.
    """
    return [
        # Legacy-flag training (``fairseq-train --arch transformer``) stores
        # the model config as ``cfg["model"] = argparse.Namespace(...)``, and
        # pre-0.10 checkpoints store their top-level ``args`` as one too.
        # Hydra-config checkpoints contain no Namespace.
        argparse.Namespace,
        # ``--eval-bleu`` logs n-gram counts as numpy arrays
        # (``_bleu_counts``/``_bleu_totals`` meters), and fairseq saves all
        # meters in ``extra_state["metrics"]``. Unpickling an array needs the
        # array type, its reconstructor and its dtype.
        np.ndarray,
        _reconstruct_function(),
        np.dtype,
        # numpy >= 1.25 builds a dtype as an instance of a per-type class.
        # Int64: counts from one process (Python ints), seen empirically.
        np.dtypes.Int64DType,
        # Float64: the same counts after multi-GPU training, where fairseq's
        # all_reduce_dict casts every logged stat to a float64 tensor (read
        # from fairseq/distributed/utils.py; a 2-CPU machine cannot reproduce it).
        np.dtypes.Float64DType,
        # Checkpoints written under numpy 1.x name the reconstructor by its
        # old module path; it is the same function.
        (_reconstruct_function(), "numpy.core.multiarray._reconstruct"),
    ]


def _reconstruct_function() -> Callable[..., Any]:
    """numpy's ndarray reconstructor, wherever this numpy version keeps it."""
    core = getattr(np, "_core", None) or np.core
    return core.multiarray._reconstruct


def load_checkpoint(source: CheckpointSource, map_location: MapLocation = "cpu") -> Any:
    """Loads a checkpoint with ``weights_only=True`` and the fairseq allowlist.

    Args:
        source: A path, or a binary file object opened on the checkpoint.
        map_location: Passed to ``torch.load`` (default: everything on CPU).

    Returns:
        The unpickled checkpoint state (normally a dict).

    Raises:
        CheckpointError: The file cannot be read, is not a checkpoint, is
            truncated or corrupt, or contains a global outside the allowlist.
            The message is one line naming the file.
    """
    name = _display_name(source)
    start = source.tell() if _is_file(source) else None
    problem = _container_problem(source, start)
    if problem:
        raise CheckpointError(f"cannot load checkpoint {name}: it is truncated, corrupt or "
                              f"not a PyTorch checkpoint ({problem})")
    try:
        with torch.serialization.safe_globals(fairseq_checkpoint_globals()):
            return torch.load(source, map_location=map_location, weights_only=True)
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {name}: {exc.strerror or exc}") from exc
    except pickle.UnpicklingError as exc:
        if str(exc).startswith("Weights only load failed"):
            raise _refusal(source, start, name, exc) from exc
        raise _unreadable(name, exc) from exc
    except Exception as exc:  # noqa: BLE001  (weights_only ran no foreign code)
        # A truncated or corrupt file fails in many ways (RuntimeError from the
        # zip reader, EOFError, KeyError, UnicodeDecodeError, struct.error...);
        # all of them mean the same thing to the user.
        raise _unreadable(name, exc) from exc


def _container_problem(source: CheckpointSource, start: int | None) -> str:
    """Says why ``source`` cannot be a checkpoint, from its container alone.

    torch's own errors for such files are misleading ("Invalid argument",
    "Unsupported operand 205"); the container check names the real problem.
    A checkpoint is a zip archive (torch >= 1.6) or a legacy pickle (protocol
    byte 0x80). Returns "" when the container looks fine or cannot be read here.
    """
    try:
        if start is None:
            with open(source, "rb") as handle:  # type: ignore[arg-type]
                head, is_zip = handle.read(4), zipfile.is_zipfile(handle)
        else:
            head = source.read(4)  # type: ignore[union-attr]
            source.seek(start)  # type: ignore[union-attr]
            is_zip = zipfile.is_zipfile(source)  # type: ignore[arg-type]
            source.seek(start)  # type: ignore[union-attr]
    except OSError:
        return ""  # let torch.load report the I/O error
    if not head:
        return "empty file"
    if head.startswith(b"PK"):
        return "" if is_zip else "incomplete zip archive"
    if head[:1] == b"\x80":
        return ""
    return "neither a zip archive nor a pickle"


def _refusal(
    source: CheckpointSource, start: int | None, name: str, exc: Exception
) -> CheckpointError:
    """Builds the one-line error for a checkpoint that weights_only refused."""
    refused = _refused_globals(source, start, str(exc))
    if not refused:
        reason = _first_line(exc) or "no details"
        return CheckpointError(
            f"refusing to load checkpoint {name}: weights-only loading rejected it ({reason})"
        )
    if len(refused) == 1:
        what = f"the global '{refused[0]}',"
    else:
        what = "the globals " + ", ".join(f"'{g}'" for g in refused) + ","
    return CheckpointError(f"refusing to load checkpoint {name}: it contains {what} {_REFUSAL_TAIL}")


def _refused_globals(source: CheckpointSource, start: int | None, message: str) -> list[str]:
    """Names the globals outside the allowlist, without unpickling anything.

    torch's scanner reads the pickle opcodes of a zip checkpoint and lists every
    offending global; it cannot read the legacy (pre-1.6) format, and it does
    not see types reached through an allowed call (numpy's per-dtype classes),
    so torch's own error message is parsed as the fallback.
    """
    found: list[str] = []
    try:
        if start is not None:
            source.seek(start)  # type: ignore[union-attr]
        with torch.serialization.safe_globals(fairseq_checkpoint_globals()):
            found = list(torch.serialization.get_unsafe_globals_in_checkpoint(source))
    except Exception:  # noqa: BLE001  (legacy format or odd file: use the message)
        found = []
    if found:
        return sorted(set(found))
    match = re.search(r"GLOBAL ([\w.]+)", message) or re.search(r"but got <class '([\w.]+)'>", message)
    return [match.group(1)] if match else []


def _unreadable(name: str, exc: Exception) -> CheckpointError:
    """Builds the one-line error for a file that is not a loadable checkpoint."""
    detail = _first_line(exc)
    cause = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return CheckpointError(
        f"cannot load checkpoint {name}: it is truncated, corrupt or not a PyTorch "
        f"checkpoint ({cause})"
    )


def _first_line(exc: BaseException, limit: int = 160) -> str:
    """The first informative sentence of an exception message, for one-liners.

    torch's messages are paragraphs with boilerplate ("Weights only load
    failed...", advice to set weights_only=False, doc links); keep the first
    sentence that says what actually went wrong, without terminal escapes.

    Returns:
        That sentence, shortened to ``limit`` characters; "" if there is none.
    """
    boilerplate = ("Weights only load failed", "(1)", "(2)", "Check the documentation",
                   "Please file an issue", "In PyTorch 2.6")
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    for line in text.splitlines():
        line = line.strip().removeprefix("WeightsUnpickler error: ")
        if line and not line.startswith(boilerplate):
            line = line.split(". ")[0].rstrip(".")
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def _is_file(source: CheckpointSource) -> bool:
    """Whether ``source`` is an open file object rather than a path."""
    return hasattr(source, "read") and hasattr(source, "seek")


def _display_name(source: CheckpointSource) -> str:
    """How the user knows this checkpoint: its path, or a file object's name."""
    if _is_file(source):
        return str(getattr(source, "name", "<checkpoint stream>"))
    return os.fspath(source)  # type: ignore[arg-type]
