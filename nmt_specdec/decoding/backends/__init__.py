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
backend. A new backend adds one folder here (a :class:`~.base.Backend` subclass with its
:class:`~.base.VerifierCalls` and a :class:`~nmt_specdec.decoding.drafters.Drafter`),
its name in :data:`BACKENDS` and one branch in :func:`make_backend`.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

from nmt_specdec.decoding.backends.base import Backend
from nmt_specdec.errors import UserError

BACKENDS = ("auto", "torch", "onnxruntime")  # the --backend choices
# What `auto` runs on the CPU: the fastest backend by the benchmarks (README).
# A GPU model always gets `torch`.
CPU_BACKEND = "onnxruntime"
DEFAULT_BACKEND = "auto"
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
    ``--fused-draft`` without onnxruntime (``auto`` is checked once resolved)."""
    if name not in BACKENDS:
        raise UserError(f"--backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    allowed = ("onnxruntime", "auto") if CPU_BACKEND == "onnxruntime" else ("onnxruntime",)
    for flag, value in (("--int8", int8), ("--fused-draft", fused_draft)):
        if value and name not in allowed:
            raise UserError(f"{flag} needs --backend onnxruntime")


def make_backend(name: str, model: nn.Module, tgt_dict, int8: bool = False,
                 fused_draft: bool = False, exact_scores: bool = False) -> Backend:
    """The backend ``name`` for ``model`` (special ids from ``tgt_dict``;
    ``exact_scores``: onnxruntime's fp32 verifier computes every logit in fp32
    instead of certifying its decisions over an 8-bit output projection).

    Raises:
        UserError: unknown name, ``--int8`` with torch, or a runtime that is not
            installed (one line, no traceback).
    """
    weight = next(model.parameters())
    name = resolve_backend(name, weight.device, weight.dtype)
    check_backend(name, int8, fused_draft)
    if name == "onnxruntime" and weight.dtype != _FLOAT32:
        raise UserError(f"--backend onnxruntime runs fp32 models (and --int8): decode this "
                        f"{weight.dtype} model with --backend torch")
    if name == "torch":
        from nmt_specdec.decoding.backends.torch import TorchBackend

        return TorchBackend(model)
    from nmt_specdec.decoding.backends.onnxruntime.session import (
        OrtBackend,
        require_onnxruntime,
    )

    require_onnxruntime()
    # One backend per (model, options): the hub builds a generator per call and
    # the evaluation one per row; each would otherwise hash the weights again and
    # hold its own copy of them in its sessions.
    key = (tgt_dict.pad(), tgt_dict.eos(), int8, fused_draft, exact_scores)
    shared = _SHARED.setdefault(model, {})
    if key not in shared:
        shared[key] = OrtBackend(model, *key[:3], fused_draft=fused_draft,
                                 certified=not exact_scores)
    return shared[key]


_SHARED: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()
