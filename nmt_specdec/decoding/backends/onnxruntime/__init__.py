"""The ONNX Runtime CPU backend: ``export`` (graphs cached per checkpoint, rebuilt
when stale or corrupt), ``graph_files`` (each graph's file, inputs and export,
traced from :mod:`nmt_specdec.decoding.passes`), ``encoder_graph``, ``graphs``
and ``fused`` (the traced modules), ``projection`` (the
certified 8-bit output projection), ``quantize`` (``--int8``), ``session`` (the
model calls), ``drafters`` (the draft graph as a drafter) and ``verifier_drafter``
(``--spec-drafter verifier-int8`` / ``verifier-int4``: the verifier's 8-bit or
4-bit copy as a drafter).

Importing this package does not import ``onnxruntime``; building the backend does.
"""

from __future__ import annotations

import weakref

import torch

from nmt_specdec.errors import UserError

OPTIONS = frozenset({"int8", "fused_draft"})
DRAFTERS = ("head", "verifier-int8", "verifier-int4")  # the --spec-drafter kinds it makes
CPU_ONLY = True  # the CPU execution provider
HALF = False  # float32 models (and --int8)


def create(model, tgt_dict, int8: bool = False, fused_draft: bool = False,
           exact_scores: bool = False, refine_steps=None):
    """The backend for an fp32 ``model``, one per (model, options): the hub builds a
    generator per call and the evaluation one per row; each would otherwise hash
    the weights again and hold its own copy of them in its sessions."""
    from nmt_specdec.decoding.backends.onnxruntime.session import (
        OrtBackend,
        require_onnxruntime,
    )

    dtype = next(model.parameters()).dtype
    if dtype != torch.float32:
        raise UserError(f"--backend onnxruntime runs fp32 models (and --int8): decode this "
                        f"{dtype} model with --backend torch")
    require_onnxruntime()
    key = (tgt_dict.pad(), tgt_dict.eos(), int8, fused_draft, exact_scores, refine_steps)
    shared = _SHARED.setdefault(model, {})
    if key not in shared:
        shared[key] = OrtBackend(model, *key[:3], fused_draft=fused_draft,
                                 certified=not exact_scores, refine_steps=refine_steps)
    return shared[key]


_SHARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
