"""Backends: who runs the model calls of the shared Spec-Verify loop.

Everything else (the loop, acceptance, the K policy, the cache) is in
:mod:`nmt_specdec.decoding` and shared.

- ``base.py``: the interface (encode, verify N positions against the
  self-attention cache and the encoder memory, draft);
- ``torch/``: eager PyTorch over the lean passes of :mod:`nmt_specdec.decoding.passes`
  (any device; the GPU path);
- ``onnxruntime/``: the same passes exported to ONNX once per checkpoint, run
  by ONNX Runtime on the CPU (``--int8``: 8-bit weights; ``--fused-draft``:
  drafts from the verify call; ``--spec-drafter verifier-int8``);
- ``auto`` (the default): :data:`CPU_BACKEND` for an fp32 model on the CPU,
  ``torch`` on a GPU or in half precision.

A backend imports :mod:`nmt_specdec.decoding` and its passes, never another
backend. A new backend adds one folder here and touches nothing else: a
:class:`~.base.Backend` subclass with its :class:`~.base.VerifierCalls` and a
:class:`~nmt_specdec.decoding.drafters.Drafter`, and in the folder's ``__init__``
``OPTIONS`` (which of ``int8``, ``fused_draft`` it takes), ``DRAFTERS`` (the
``--spec-drafter`` kinds it makes), ``CPU_ONLY`` and ``HALF`` (whether it runs on
the CPU alone, whether it takes float16/bfloat16 models) and
``create(model, tgt_dict, int8, fused_draft, exact_scores, refine_steps)``. :data:`BACKENDS`
lists the folders.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Optional

import torch
from torch import nn

from nmt_specdec.decoding.backends.base import Backend
from nmt_specdec.errors import UserError

# The --backend choices: ``auto`` and every backend folder beside this module.
BACKENDS = ("auto", *sorted((m.name for m in pkgutil.iter_modules(__path__) if m.ispkg),
                            reverse=True))
# What `auto` runs on the CPU: the fastest backend by the benchmarks (README).
# A GPU model always gets `torch`.
CPU_BACKEND = "onnxruntime"
DEFAULT_BACKEND = "auto"
# What a generator built without a backend runs (benchmarks, the head's acceptance
# report): eager torch on the model's own weights, on whatever device it is.
REFERENCE_BACKEND = "torch"
# Bound now: importing the torch backend (a subpackage named ``torch``) rebinds the
# name ``torch`` in this package's namespace.
_FLOAT32 = torch.float32


def resolve_backend(name: str, device: torch.device, dtype: torch.dtype = _FLOAT32) -> str:
    """``auto`` -> :data:`CPU_BACKEND` for an fp32 model on the CPU, ``torch`` for
    a model on a GPU or in half precision; others as given."""
    if name != "auto":
        return name
    return CPU_BACKEND if device.type == "cpu" and dtype == _FLOAT32 else "torch"


def check_backend(name: str, int8: bool = False, fused_draft: bool = False) -> None:
    """Raises :class:`UserError` for an unknown ``--backend``, or ``--int8`` or
    ``--fused-draft`` with a backend that lacks it (``auto``: as the CPU's)."""
    if name not in BACKENDS:
        raise UserError(f"--backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    options = _package(CPU_BACKEND if name == "auto" else name).OPTIONS
    for flag, option, value in (("--int8", "int8", int8),
                                ("--fused-draft", "fused_draft", fused_draft)):
        if value and option not in options:
            raise UserError(f"{flag} needs --backend "
                            f"{_having(lambda package: option in package.OPTIONS)}")


def check_drafter(name: str, kind: str) -> None:
    """Raises :class:`UserError` where backend ``name`` does not make the
    ``--spec-drafter`` ``kind`` (its package's ``DRAFTERS``), naming those that do."""
    if kind not in _package(name).DRAFTERS:
        having = _having(lambda package: kind in package.DRAFTERS)
        raise UserError(f"--spec-drafter {kind} needs --backend {having} "
                        f"(this is {name})")


def cpu_only(name: str) -> bool:
    """Whether backend ``name`` runs on the CPU alone (``auto`` picks by device: no)."""
    return name != "auto" and _package(name).CPU_ONLY


def check_half(name: str) -> None:
    """Raises :class:`UserError` where backend ``name`` runs float32 models only
    (``auto`` takes half precision: it picks ``torch`` for it)."""
    if name != "auto" and not _package(name).HALF:
        raise UserError(f"--fp16/--bf16 decode with --backend {_having(lambda p: p.HALF)} "
                        f"({name} runs float32 models and --int8)")


def make_backend(name: str, model: nn.Module, tgt_dict, int8: bool = False,
                 fused_draft: bool = False, exact_scores: bool = False,
                 refine_steps: Optional[int] = None) -> Backend:
    """The backend ``name`` for ``model`` (special ids from ``tgt_dict``;
    ``exact_scores``: onnxruntime's fp32 verifier computes every logit in fp32
    instead of certifying its decisions over an 8-bit output projection;
    ``refine_steps``: the draft head's refinement runs, None for the head's own).

    Raises:
        UserError: unknown name, an option the backend lacks, a model it cannot
            run, or a runtime that is not installed (one line, no traceback).
    """
    weight = next(model.parameters())
    name = resolve_backend(name, weight.device, weight.dtype)
    check_backend(name, int8, fused_draft)
    return _package(name).create(model, tgt_dict, int8=int8, fused_draft=fused_draft,
                                 exact_scores=exact_scores, refine_steps=refine_steps)


def _having(ability) -> str:
    """The backends whose package has ``ability`` (a test of the package), "a or b"."""
    return " or ".join(b for b in BACKENDS[1:] if ability(_package(b)))


def _package(name: str):
    """A backend's package: ``OPTIONS`` (which of ``int8``, ``fused_draft`` it
    takes) and ``create(model, tgt_dict, **options)``."""
    return importlib.import_module(f"{__name__}.{name}")
