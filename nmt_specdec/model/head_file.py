"""A draft head in a file of its own, attached to the verifier it was trained on.

A joint checkpoint carries the verifier and its head together (a 2 MB head
travels as a 20 MB model, 17 MB as 114 MB for Transformer-base). A head file
holds the head's weights (half precision), its shape and its verifier's
fingerprint; :func:`attach_head_file` builds the head onto a stock
``transformer`` model, which then drafts as a joint one does.

The fingerprint is the sha256 of the verifier's parameters (encoder and
decoder, by name) rounded to half precision: the same verifier loaded in fp32
or cast to fp16 matches, and a bf16 cast is matched by the bf16 fingerprint
that the file records beside it. Any other verifier is refused in one line.
Files load weights-only (``torch.load(weights_only=True)``): nothing pickled runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

import torch
from torch import nn

from nmt_specdec.errors import CheckpointError
from nmt_specdec.hashing import tensors_sha256
from nmt_specdec.model.draft_head import DraftHead

MARKER = "nmt_specdec_draft_head"
FORMAT = 1
# DraftHead's constructor arguments (and the model's K), as the file stores them.
HALF_TYPES = (torch.float16, torch.bfloat16)
SHAPE_FIELDS = ("layers", "untie_output", "vocab_size", "refine_layers", "refine_steps",
                "block_size")


def verifier_fingerprint(model: nn.Module, dtype: torch.dtype) -> str:
    """sha256 of ``model``'s verifier: its encoder and decoder parameters, sorted
    by name, rounded to ``dtype``."""
    named = sorted([(f"encoder.{name}", p) for name, p in model.encoder.named_parameters()]
                   + [(f"decoder.{name}", p) for name, p in model.decoder.named_parameters()])
    return tensors_sha256((name, param.detach().to(dtype)) for name, param in named)


def verifier_fingerprints(model: nn.Module) -> Dict[str, str]:
    """``{"float16": sha256, "bfloat16": sha256}``: :func:`verifier_fingerprint`
    rounded to each half type (what a head file records)."""
    return {str(dtype).replace("torch.", ""): verifier_fingerprint(model, dtype)
            for dtype in HALF_TYPES}


def head_shape(model: nn.Module) -> Dict[str, object]:
    """The arguments that rebuild ``model.draft_head`` (and the model's K)."""
    head: DraftHead = model.draft_head
    return {"layers": len(head.layers), "untie_output": head.output_projection is not None,
            "vocab_size": head.vocab_size, "refine_layers": len(head.refine_layers),
            "refine_steps": head.refine_steps or 1, "block_size": int(model.draft_block_size)}


def write_head_file(model: nn.Module, path: Path) -> Path:
    """Writes ``model``'s draft head, in half precision, with its verifier's fingerprints."""
    weights = {name: (tensor.detach().cpu().half() if tensor.is_floating_point()
                      else tensor.detach().cpu())
               for name, tensor in model.draft_head.state_dict().items()}
    _save({MARKER: FORMAT, "verifier": verifier_fingerprints(model),
           "shape": head_shape(model), "weights": weights}, path)
    return path


def _save(content: Dict, path: Path) -> None:
    """Writes a head file's ``content`` to ``path`` atomically (a whole file or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".tmp")
    torch.save(content, partial)
    partial.replace(path)


def attach_head_file(model: nn.Module, path: Path) -> None:
    """Builds the head in ``path`` onto ``model`` (a stock transformer: eval mode,
    on its device, in its precision), as ``model.draft_head`` with its K.

    Raises:
        CheckpointError: not a head file, or a head of another verifier (one line).
    """
    content = _read(path)
    _check_verifier(content, model, f"--draft-head {path}")
    dtype = model.decoder.embed_tokens.weight.dtype
    if hasattr(model, "draft_head"):
        raise CheckpointError(f"--draft-head {path}: the checkpoint already has a draft head")
    shape = content["shape"]
    head = DraftHead(model.decoder, shape["layers"], shape["untie_output"], shape["vocab_size"],
                     shape["refine_layers"], shape["refine_steps"])
    try:
        head.load_state_dict(content["weights"])
    except RuntimeError as error:  # missing, unexpected or misshapen weights
        raise CheckpointError(f"--draft-head {path}: its weights do not fit its shape "
                              f"({str(error).splitlines()[0]})") from None
    device = model.decoder.embed_tokens.weight.device
    model.draft_head = head.to(device=device, dtype=dtype).eval()
    model.draft_block_size = shape["block_size"]


def set_head_defaults(path: Path, out: Path, refine_steps: Optional[int] = None,
                      draft_vocab_size: Optional[int] = None) -> Dict[str, object]:
    """Writes the head file at ``path`` to ``out`` with other decoding defaults:
    how often decoding runs its refinement (``--spec-refine-steps`` still
    overrides it) and how many of the first ids it drafts from (0: every id).
    The same weights and fingerprints; None leaves a default as it is. Returns
    the new shape.

    The draft vocabulary is a setting only for a head tied to the verifier's
    output projection: it drafts from that projection's first rows, so any
    number of them takes the same weights (an untied head has its own rows).

    Raises:
        CheckpointError: not a head file, refinement runs for a head without
            refinement layers or < 1, a draft vocabulary for an untied head or
            < 0 (one line).
    """
    content = _read(path)
    shape = dict(content["shape"])
    if refine_steps is not None:
        if not shape["refine_layers"]:
            raise CheckpointError(f"{path}: this head has no refinement layers")
        if refine_steps < 1:
            raise CheckpointError(f"--refine-steps must be >= 1, got {refine_steps}")
        shape["refine_steps"] = refine_steps
    if draft_vocab_size is not None:
        if shape["untie_output"]:
            raise CheckpointError(f"{path}: this head has an output projection of its own; "
                                  "its draft vocabulary is its weights' size")
        if draft_vocab_size < 0:
            raise CheckpointError(f"--draft-vocab-size must be >= 0, got {draft_vocab_size}")
        shape["vocab_size"] = draft_vocab_size
    content["shape"] = shape
    _save(content, out)
    return shape


def head_file_weights(model: nn.Module, path: Path, flag: str
                      ) -> Optional[Dict[str, torch.Tensor]]:
    """The head weights (half precision) of the head file at ``path``, for a warm
    start of ``model``'s head (``flag``: the option that named it, for errors);
    None when ``path`` is not a head file.

    Raises:
        CheckpointError: a head file of another verifier than ``model``'s (one line).
    """
    try:
        content = _read(path)
    except CheckpointError:
        return None
    _check_verifier(content, model, f"{flag} {path}")
    return content["weights"]


def _check_verifier(content: Dict, model: nn.Module, named: str) -> None:
    dtype = model.decoder.embed_tokens.weight.dtype
    rounded = torch.bfloat16 if dtype == torch.bfloat16 else torch.float16
    kind = str(rounded).replace("torch.", "")
    if content["verifier"].get(kind) != verifier_fingerprint(model, rounded):
        raise CheckpointError(f"{named}: this head was trained on another verifier "
                              "(its fingerprint differs from this checkpoint's)")


def _read(path: Path) -> Dict:
    """The file's content, checked for its marker and fields."""
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"--draft-head {path}: no such file") from None
    except Exception as error:  # not a torch file, truncated, or pickled code
        raise CheckpointError(f"--draft-head {path}: not a draft head file "
                              f"({type(error).__name__})") from None
    if not isinstance(content, dict) or content.get(MARKER) != FORMAT:
        raise CheckpointError(f"--draft-head {path}: not a draft head file (format "
                              f"{FORMAT} of nmt-specdec-add-draft-head)")
    shape = content.get("shape")
    if (not isinstance(shape, dict) or set(shape) != set(SHAPE_FIELDS)
            or not isinstance(content.get("weights"), dict)
            or not isinstance(content.get("verifier"), dict)):
        raise CheckpointError(f"--draft-head {path}: a damaged draft head file")
    return content
