"""Export once per checkpoint, cached by the weights' sha256; never trust a stale graph.

Layout: ``<cache root>/<sha256 of the weights>/<fp32|int8>/`` holds
the graphs (``encoder.onnx``, ``verify.onnx``, ...: :mod:`.graph_files`) and
``manifest.json``: what the graphs were built from (weights digest, exporter
version, torch version, special ids) and the sha256 of every file. A directory
whose manifest is missing, unreadable, from another exporter or whose files do
not hash to the recorded digests is deleted and rebuilt. Graphs are written
into a temporary sibling and renamed into place, so a crash or a concurrent
export never leaves a half-written directory behind a valid-looking name.

The key is the sha256 of the *loaded* weights (names, dtypes, shapes, bytes),
not of the file: the generator only sees the model (fairseq-generate, the hub),
and a model changed in memory must not reuse an old graph.

Cache root: ``$NMT_SPECDEC_ONNX_CACHE``, else ``$XDG_CACHE_HOME/nmt_specdec/onnx``,
else ``~/.cache/nmt_specdec/onnx``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import torch
from torch import nn

from nmt_specdec.cpu_flags import has_vnni
from nmt_specdec.decoding.backends.onnxruntime.copy_graph import CANDIDATES as COPY_CANDIDATES
from nmt_specdec.decoding.backends.onnxruntime.graph_files import (
    COPY_STEP,
    DRAFT,
    DRAFT_LOGITS,
    DRAFT_MEMORY,
    ENCODER,
    ENCODER_SENTENCE,
    FUSED,
    OPSET,
    VERIFY,
    VERIFY_ROWS,
    export_graphs,
)
from nmt_specdec.decoding.backends.onnxruntime.projection import APPROX_SCOPE, CANDIDATES
from nmt_specdec.decoding.backends.onnxruntime.quantize import (
    BLOCK,
    COPY_BLOCK,
    DRAFT_BITS,
    DRAFT_BLOCK,
)
from nmt_specdec.decoding.passes.draft_pass import refine_steps_of
from nmt_specdec.errors import UserError
from nmt_specdec.hashing import file_sha256, tensors_sha256

logger = logging.getLogger(__name__)

EXPORT_VERSION = 38  # bump whenever a graph module or graph_files changes what a graph computes
MANIFEST = "manifest.json"


def cache_root() -> Path:
    if os.environ.get("NMT_SPECDEC_ONNX_CACHE"):
        return Path(os.environ["NMT_SPECDEC_ONNX_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nmt_specdec" / "onnx"


def weights_sha256(model: nn.Module) -> str:
    """sha256 over the model's state dict (sorted names, dtypes, shapes, bytes)."""
    return tensors_sha256(sorted(model.state_dict().items()))


def _variant(model: nn.Module, pad: int, eos: int, int8: bool, fused: bool,
             int8_draft: bool, certified: bool, refine_steps: Optional[int],
             copy_bits: int = 0):
    """``(directory name, identity)`` of a set of graphs: the manifest must match
    ``identity`` for cached graphs to be used."""
    import onnxruntime

    digest = weights_sha256(model)
    refine_steps, shortlist = _refine(model, refine_steps)
    draft_vocab = _draft_vocab(model)
    # The integer products' weights: 8 bits where the CPU adds their products in
    # 32 bits (VNNI), else 7 (see quantize.weight_limit). In the name, so that a
    # cache shared between machines keeps both.
    bits = 8 if has_vnni() else 7
    variant = (("int8" if int8 else "fp32") + ("-fused" if fused else "")
               + ("-certified" if certified else "")
               + ("-w7" if bits == 7 and (int8 or certified) else "")
               + ("-int8draft" if int8_draft else "")
               + (f"-refine{refine_steps}x{shortlist}" if refine_steps else "")
               + (f"-vocab{draft_vocab}" if draft_vocab else "")
               + (f"-copy{copy_bits}" if copy_bits else ""))
    # onnxruntime's version: its quantizer writes the int8 graphs.
    identity = {"export_version": EXPORT_VERSION, "torch": torch.__version__, "opset": OPSET,
                "onnxruntime": onnxruntime.__version__, "fused": fused,
                "weights_sha256": digest, "int8": int8, "int8_draft": int8_draft,
                "certified": certified, "weight_bits": bits, "pad": pad, "eos": eos,
                "draft_head": hasattr(model, "draft_head"),
                "draft_weights": [DRAFT_BITS, DRAFT_BLOCK],
                # Unrolled into the draft graph, and not weights.
                "refine": [refine_steps, shortlist], "draft_vocab": draft_vocab}
    if certified:  # how many tokens the projection rescores in fp32
        identity["candidates"] = CANDIDATES
    if copy_bits:  # the drafting copy's step graph (absent from the other manifests)
        identity["copy_step"] = [copy_bits, BLOCK if copy_bits == 8 else COPY_BLOCK,
                                 COPY_CANDIDATES]
    return variant, identity


def graph_dir(model: nn.Module, pad: int, eos: int, int8: bool,
              root: Optional[Path] = None, fused: bool = False,
              int8_draft: bool = False, certified: bool = False,
              refine_steps: Optional[int] = None, copy_bits: int = 0) -> Path:
    """The directory of valid graphs for ``model``, exporting them if needed
    (``fused``: also the fused verify+draft graph, in a directory of its own so
    that the plain variant does not store its weights twice; ``int8_draft``: an
    8-bit draft graph beside an fp32 verifier, see :mod:`.quantize`;
    ``certified``: the fp32 verifier's output projection in 8 bits with its
    decisions certified, see :mod:`.projection`; ``refine_steps``: the draft
    head's refinement runs, None for the head's own; ``copy_bits``: with
    ``int8``, the drafting copy's variant, whose step graph (:mod:`.copy_graph`)
    has weights of these bits, 8 or 4; 0: none)."""
    int8_draft = int8_draft and not int8
    certified = certified and not int8
    variant, identity = _variant(model, pad, eos, int8, fused, int8_draft, certified,
                                 refine_steps, copy_bits if int8 else 0)
    directory = (root or cache_root()) / identity["weights_sha256"] / variant
    if _is_valid(directory, identity):
        return directory
    if directory.exists():
        why = ("written by another release or runtime" if _other_exporter(directory, identity)
               else "stale or corrupt")
        logger.warning("ONNX cache %s is %s: rebuilding it", directory, why)
        shutil.rmtree(directory, ignore_errors=True)
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(dir=directory.parent, prefix=".building-"))
    except OSError as err:
        raise UserError(f"--backend onnxruntime: cannot write the ONNX cache {directory.parent} "
                        f"({err.strerror}); set NMT_SPECDEC_ONNX_CACHE to a writable "
                        "directory") from None
    try:
        files = export_graphs(model, pad, building, fused, certified, same_bits=int8,
                              refine_steps=refine_steps, copy_step="copy_step" in identity)
        files = _quantize(building, files, identity)
        manifest = dict(identity, files={name: file_sha256(building / name) for name in files})
        (building / MANIFEST).write_text(json.dumps(manifest, indent=1))
        try:
            os.rename(building, directory)
        except OSError:  # another process finished first: use its graphs if valid
            if not _is_valid(directory, identity):
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return directory


def _quantize(building: Path, files: List[str], identity: Dict) -> List[str]:
    """Quantizes the exported graphs in ``building`` as the variant asks, adding
    the 8-bit variants' own graphs; returns every file of the variant."""
    int8, int8_draft, certified = (identity[key] for key in ("int8", "int8_draft", "certified"))
    drafts = [name for name in (DRAFT, DRAFT_LOGITS) if name in files]
    quantized = ([name for name in files if name not in (ENCODER, ENCODER_SENTENCE)] if int8 else
                 drafts if int8_draft else [])
    files = list(files)
    if _has_rows_graph(identity):
        shutil.copy(building / VERIFY, building / VERIFY_ROWS)
        files.append(VERIFY_ROWS)
    if not (quantized or certified):
        return files
    from nmt_specdec.decoding.backends.onnxruntime.quantize import (
        quantize_graph,
        quantize_rows,
        quantize_sentence,
    )

    bits = identity["weight_bits"]
    if int8:  # many rows per product: see quantize_rows
        quantize_rows(building / ENCODER, weight_bits=bits)
        quantize_sentence(building / ENCODER_SENTENCE, weight_bits=bits)
    if VERIFY_ROWS in files:  # certified: the output projection alone
        quantize_rows(building / VERIFY_ROWS, only_under=None if int8 else APPROX_SCOPE,
                      weight_bits=bits)
    draft_weights = dict(bits=DRAFT_BITS, block=DRAFT_BLOCK)
    if FUSED in files and (int8 or int8_draft):  # its draft head as the draft graph's
        quantize_graph(building / FUSED, only_under="/draft/", **draft_weights)
    copy = identity.get("copy_step")  # [bits, block, candidates]
    for name in quantized:  # with --int8 the fused graph's other products too
        weights = (draft_weights if name in drafts else
                   dict(bits=copy[0], block=copy[1]) if name == COPY_STEP else {})
        quantize_graph(building / name, **weights)
    if certified:  # the verifier's output projection alone
        quantize_graph(building / VERIFY, only_under=APPROX_SCOPE)
    return files


def _has_rows_graph(identity: Dict) -> bool:
    """Whether the variant has :data:`VERIFY_ROWS`: 8-bit products (everywhere, or
    the certified output projection), and no fused graph (whose calls a batch
    would then mix with another graph's, and beta=1 with them)."""
    return (identity["int8"] or identity["certified"]) and not identity["fused"]


def _refine(model: nn.Module, asked: Optional[int]) -> tuple:
    """(runs, shortlist) of the head's refinement, run as ``asked`` (None: as the
    head says): unrolled into the draft graph, so they name its cache variant
    (they are settings, not weights)."""
    head = getattr(model, "draft_head", None)
    steps = 0 if head is None else refine_steps_of(head, asked)
    return (steps, head.refine_shortlist) if steps else (0, 0)


def _draft_vocab(model: nn.Module) -> int:
    """The ids the head drafts from (0: no head). A tied head reads its rows of
    the verifier's output projection, so two heads that differ only in their
    draft vocabulary have the same weights: the size must name the variant."""
    head = getattr(model, "draft_head", None)
    return 0 if head is None else head.vocab_size


def _other_exporter(directory: Path, identity: Dict) -> bool:
    """Whether the cached graphs' manifest is intact but from another exporter
    version, torch or onnxruntime (an upgrade, not damage)."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        return any(manifest.get(key) != identity[key]
                   for key in ("export_version", "torch", "onnxruntime"))
    except (OSError, ValueError, AttributeError):
        return False


def _is_valid(directory: Path, identity: Dict) -> bool:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        if any(manifest.get(key) != value for key, value in identity.items()):
            return False
        wanted = {ENCODER, ENCODER_SENTENCE, VERIFY}
        wanted |= {DRAFT, DRAFT_LOGITS, DRAFT_MEMORY} if identity["draft_head"] else set()
        wanted |= {FUSED} if identity["draft_head"] and identity["fused"] else set()
        wanted |= {VERIFY_ROWS} if _has_rows_graph(identity) else set()
        wanted |= {COPY_STEP} if "copy_step" in identity else set()
        files = manifest["files"]
        return wanted <= set(files) and all(
            file_sha256(directory / name) == digest for name, digest in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
