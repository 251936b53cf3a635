"""Export once per checkpoint, cached by the weights' sha256; never trust a stale graph.

Layout: ``<cache root>/<sha256 of the weights>/<fp32|int8>/`` holds
``encoder.onnx``, ``verify.onnx``, ``draft.onnx`` (no draft head: none) and
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

import hashlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional

import torch
from torch import Tensor, nn

from nmt_specdec.decoding.backends.onnxruntime.encoder_graph import (
    EncoderGraph,
    LeanEncoderGraph,
    lean_encoder_layers,
)
from nmt_specdec.decoding.backends.onnxruntime.attention_inputs import example_inputs
from nmt_specdec.decoding.backends.onnxruntime.graphs import DraftGraph, VerifyGraph, kv_names
from nmt_specdec.decoding.backends.onnxruntime.projection import APPROX_SCOPE
from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead
from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier
from nmt_specdec.errors import UserError

logger = logging.getLogger(__name__)

EXPORT_VERSION = 23  # bump whenever graphs.py or the export changes what a graph computes
OPSET = 17
MANIFEST = "manifest.json"
ENCODER, VERIFY, DRAFT = "encoder.onnx", "verify.onnx", "draft.onnx"
FUSED = "fused.onnx"  # verify, accept, then draft once (--fused-draft)
# The 8-bit verifier for batches: per-row integer products (quantize_rows), which
# beat MatMulNBits from ~4 rows on (see OrtVerifier.new_cache).
VERIFY_ROWS = "verify_rows.onnx"
# The 8-bit encoder for a batch of one sentence: one activation scale per product
# (quantize_sentence), where the batch encoder quantizes row by row.
ENCODER_SENTENCE = "encoder_sentence.onnx"


# A verify graph's first inputs (the 8-bit layout alone reads slot_index).
_SELF = ["tokens", "start", "memory_mask", "offsets", "self_mask", "slot_index"]


def input_names(graph: str, layers: int, draft_layers: int) -> list:
    """The positional inputs ``graph`` was exported with. The exporter drops inputs
    a graph does not use (e.g. ``src_lengths``), so sessions bind by these names."""
    past, cross = kv_names("past", layers), kv_names("cross", layers)
    draft = kv_names("draft", draft_layers)
    return {ENCODER: ["src_tokens", "src_lengths"],
            ENCODER_SENTENCE: ["src_tokens", "src_lengths"],
            VERIFY: [*_SELF, *past, *cross],
            VERIFY_ROWS: [*_SELF, *past, *cross],
            DRAFT: ["states", "last_tokens", "block_positions", "memory_mask", "candidate_slots",
                    *draft],
            FUSED: [*_SELF, "parents", "slot_offsets", "candidate_slots", *past, *cross,
                    *draft],
            }[graph]


def cache_root() -> Path:
    if os.environ.get("NMT_SPECDEC_ONNX_CACHE"):
        return Path(os.environ["NMT_SPECDEC_ONNX_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nmt_specdec" / "onnx"


def weights_sha256(model: nn.Module) -> str:
    """sha256 over the model's state dict (sorted names, dtypes, shapes, bytes)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy() if tensor.numel() else b"")
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _variant(model: nn.Module, pad: int, eos: int, int8: bool, fused: bool,
             int8_draft: bool, certified: bool):
    """``(directory name, identity)`` of a set of graphs: the manifest must match
    ``identity`` for cached graphs to be used."""
    import onnxruntime

    digest = weights_sha256(model)
    refine_steps, shortlist = _refine(model)
    variant = (("int8" if int8 else "fp32") + ("-fused" if fused else "")
               + ("-certified" if certified else "")
               + ("-int8draft" if int8_draft else "")
               + (f"-refine{refine_steps}x{shortlist}" if refine_steps else ""))
    # onnxruntime's version: its quantizer writes the int8 graphs.
    identity = {"export_version": EXPORT_VERSION, "torch": torch.__version__, "opset": OPSET,
                "onnxruntime": onnxruntime.__version__, "fused": fused,
                "weights_sha256": digest, "int8": int8, "int8_draft": int8_draft,
                "certified": certified, "pad": pad, "eos": eos,
                "draft_head": hasattr(model, "draft_head"),
                # Unrolled into the draft graph, and not a weight.
                "refine": [refine_steps, shortlist]}
    return variant, identity


def graph_dir(model: nn.Module, pad: int, eos: int, int8: bool,
              root: Optional[Path] = None, fused: bool = False,
              int8_draft: bool = False, certified: bool = False) -> Path:
    """The directory of valid graphs for ``model``, exporting them if needed
    (``fused``: also the fused verify+draft graph, in a directory of its own so
    that the plain variant does not store its weights twice; ``int8_draft``: an
    8-bit draft graph beside an fp32 verifier, see :mod:`.quantize`;
    ``certified``: the fp32 verifier's output projection in 8 bits with its
    decisions certified, see :mod:`.projection`)."""
    int8_draft = int8_draft and not int8
    certified = certified and not int8
    variant, identity = _variant(model, pad, eos, int8, fused, int8_draft, certified)
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
        files = export_graphs(model, pad, building, fused, certified, same_bits=int8)
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
    quantized = ([name for name in files if name != ENCODER] if int8 else
                 [DRAFT] if int8_draft and DRAFT in files else [])
    files = list(files)
    if _has_rows_graph(identity):
        shutil.copy(building / VERIFY, building / VERIFY_ROWS)
        files.append(VERIFY_ROWS)
    if int8:
        shutil.copy(building / ENCODER, building / ENCODER_SENTENCE)
        files.append(ENCODER_SENTENCE)
    if not (quantized or certified):
        return files
    from nmt_specdec.decoding.backends.onnxruntime.quantize import (
        quantize_graph,
        quantize_rows,
        quantize_sentence,
    )

    if int8:  # many rows per product: see quantize_rows
        quantize_rows(building / ENCODER)
        quantize_sentence(building / ENCODER_SENTENCE)
    if VERIFY_ROWS in files:
        quantize_rows(building / VERIFY_ROWS)
    for name in quantized:
        quantize_graph(building / name)
    if int8_draft and FUSED in files:  # its draft head as the draft graph's
        quantize_graph(building / FUSED, only_under="/draft/")
    if certified:  # the verifier's output projection alone
        quantize_graph(building / VERIFY, only_under=APPROX_SCOPE)
    return files


def _has_rows_graph(identity: Dict) -> bool:
    """Whether the variant has :data:`VERIFY_ROWS`: 8-bit, and no fused graph (whose
    calls a batch would then mix with another graph's, and beta=1 with them)."""
    return identity["int8"] and not identity["fused"]


def _refine(model: nn.Module) -> tuple:
    """(runs, shortlist) of the head's refinement: unrolled into the draft graph,
    so they name its cache variant (they are settings, not weights)."""
    head = getattr(model, "draft_head", None)
    steps = getattr(head, "refine_steps", 0)
    return (steps, head.refine_shortlist) if steps else (0, 0)


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
        wanted = {ENCODER, VERIFY} | ({DRAFT} if identity["draft_head"] else set())
        wanted |= {FUSED} if identity["draft_head"] and identity["fused"] else set()
        wanted |= {VERIFY_ROWS} if _has_rows_graph(identity) else set()
        files = manifest["files"]
        return wanted <= set(files) and all(
            file_sha256(directory / name) == digest for name, digest in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def export_graphs(model: nn.Module, pad: int, out: Path, fused: bool = False,
                  certified: bool = False, same_bits: bool = False) -> list:
    """Writes the encoder, verifier and (if any) draft graphs; returns their names
    (``same_bits``: see :class:`~.graphs.VerifyGraph`, for the 8-bit variant)."""
    # The tracer refuses to bake in tensors that require grad (e.g. shared
    # weights reached outside the module tree): freeze for the export only.
    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        return _export_graphs(model, pad, out, fused, certified, same_bits)
    finally:
        for p in frozen:
            p.requires_grad_(True)


def _export_graphs(model: nn.Module, pad: int, out: Path, fused: bool, certified: bool,
                   same_bits: bool) -> list:
    verifier = LeanVerifier(model.decoder)
    head = LeanDraftHead(model.draft_head, pad) if hasattr(model, "draft_head") else None
    memory = _export_encoder(model, verifier, head, pad, out)
    heads, head_dim = verifier.heads, verifier.dim // verifier.heads
    # Room for every example pass's inputs at their slots (start + N <= T).
    past = [torch.zeros(2, heads, 12, head_dim) for _ in range(2 * len(verifier.layers))]
    _export_verify(verifier, certified, memory, past, out, same_bits)
    if head is None:
        return [ENCODER, VERIFY]
    _export_draft(verifier, head, memory, out)
    if not fused:
        return [ENCODER, VERIFY, DRAFT]
    _export_fused(verifier, head, memory, past, out, same_bits)
    return [ENCODER, VERIFY, DRAFT, FUSED]


class _Memory(NamedTuple):
    """What the example encoder call gave: the inputs of the other graphs' examples."""

    mask: Tensor
    cross: List[Tensor]  # the verifier's encoder keys and values, per layer
    draft_cross: List[Tensor]  # the draft head's


_BATCH, _SOURCE = {0: "batch"}, {0: "batch", 2: "source"}
_MEMORY_MASK = {"memory_mask": {0: "batch", 3: "source"}}
_VERIFY_OUTPUTS = {"logits": {0: "batch", 1: "new"}, "normaliser": {0: "batch", 1: "new"},
                   "hidden": {0: "batch", 1: "new"},
                   "new_keys": {0: "layers_batch", 2: "new"},
                   "new_values": {0: "layers_batch", 2: "new"}}


def _verify_inputs(layers: int, extra: Optional[Dict] = None) -> Dict:
    """Dynamic axes of a verify graph's inputs, in their order (the exporter names
    the example arguments positionally): the fused graph's ``extra`` inputs come
    before the caches."""
    return {"tokens": {0: "batch", 1: "new"}, "start": _BATCH, **_MEMORY_MASK,
            "offsets": {0: "new"}, "self_mask": {0: "batch", 2: "mask_rows", 3: "mask_width"},
            "slot_index": {0: "batch", 2: "new"}, **(extra or {}),
            **{n: {0: "batch", 2: "slots"} for n in kv_names("past", layers)},
            **{n: _SOURCE for n in kv_names("cross", layers)}}


def _export_encoder(model: nn.Module, verifier, head, pad: int, out: Path) -> _Memory:
    layers, draft_layers = len(verifier.layers), len(head.layers) if head else 0
    # Two source rows, one left-padded: fairseq's encoder then takes its padding
    # branch, which is also right for unpadded batches.
    src = torch.tensor([[5, 6, 7, 2], [pad, 5, 6, 2]])
    lean_layers = lean_encoder_layers(model.encoder)
    encoder = (EncoderGraph(model.encoder, verifier, head) if lean_layers is None else
               LeanEncoderGraph(model.encoder, lean_layers, verifier, head)).eval()
    with torch.no_grad():
        memory = encoder(src, torch.tensor([4, 3]))
    cross_names = kv_names("cross", layers) + kv_names("draft", draft_layers)
    _export(encoder, (src, torch.tensor([4, 3])), out / ENCODER,
            {"src_tokens": {0: "batch", 1: "source"}, "src_lengths": _BATCH},
            {**_MEMORY_MASK, **{n: _SOURCE for n in cross_names}})
    return _Memory(memory[0], list(memory[1: 1 + 2 * layers]), list(memory[1 + 2 * layers:]))


def _export_verify(verifier, certified: bool, memory: _Memory, past: List[Tensor],
                   out: Path, same_bits: bool) -> None:
    chain = torch.arange(3)
    start = torch.tensor([2, 4])
    self_inputs = example_inputs(verifier.heads, same_bits, start, past[0].size(2),
                                 chain.view(-1, 1) >= chain)
    _export(VerifyGraph(verifier, certified, same_bits).eval(),
            (torch.tensor([[5, 6, 7], [8, 9, 10]]), start, memory.mask, chain, *self_inputs,
             *past, *memory.cross),
            out / VERIFY, _verify_inputs(len(verifier.layers)),
            {**_VERIFY_OUTPUTS, **({"bound": {0: "batch", 1: "new"}} if certified else {})})


def _export_draft(verifier, head, memory: _Memory, out: Path) -> None:
    _export(DraftGraph(head).eval(),
            (torch.randn(2, verifier.dim), torch.tensor([5, 6]),
             torch.tensor([[3, 4, 5], [0, 1, 2]]), memory.mask, torch.arange(2),
             *memory.draft_cross),
            out / DRAFT,
            {"states": _BATCH, "last_tokens": _BATCH,
             "block_positions": {0: "batch", 1: "block"}, **_MEMORY_MASK,
             "candidate_slots": {0: "candidates"},
             **{n: _SOURCE for n in kv_names("draft", len(head.layers))}},
            {"drafts": {0: "batch", 1: "candidates", 2: "slots"}})


def _export_fused(verifier, head, memory: _Memory, past: List[Tensor], out: Path,
                  same_bits: bool) -> None:
    from nmt_specdec.decoding.backends.onnxruntime.fused import FusedVerifyGraph
    from nmt_specdec.decoding.draft_tree import parent_list, tree_layout

    # A chain of K=2 drafts with one leaf per slot (C=2): N = 5 inputs.
    layout = tree_layout(2, 2)
    start = torch.tensor([2, 4])
    self_inputs = example_inputs(verifier.heads, same_bits, start, past[0].size(2),
                                 layout.ancestors)
    _export(FusedVerifyGraph(verifier, head, same_bits).eval(),
            (torch.tensor([[5, 6, 7, 8, 9], [8, 9, 10, 11, 12]]), start,
             memory.mask, layout.offsets, *self_inputs, torch.tensor(parent_list(2, 2)),
             torch.arange(3), torch.arange(2), *past, *memory.cross, *memory.draft_cross),
            out / FUSED,
            {**_verify_inputs(len(verifier.layers), {
                "parents": {0: "nodes"}, "slot_offsets": {0: "block"},
                "candidate_slots": {0: "candidates"}}),
             **{n: _SOURCE for n in kv_names("draft", len(head.layers))}},
            {**_VERIFY_OUTPUTS, "drafts": {0: "batch", 1: "candidates", 2: "draft_slots"},
             "decision": {0: "batch"}})


def _export(module: nn.Module, args: tuple, path: Path, inputs: Dict, outputs: Dict) -> None:
    with torch.no_grad(), warnings.catch_warnings(), _static_layer_norm():
        warnings.simplefilter("ignore")  # tracer and deprecation chatter
        torch.onnx.export(module, args, str(path), dynamo=False, opset_version=OPSET,
                          input_names=list(inputs), output_names=list(outputs),
                          dynamic_axes={**inputs, **outputs}, do_constant_folding=True)


@contextmanager
def _static_layer_norm() -> Iterator[None]:
    """The lean passes call ``F.layer_norm(x, x.shape[-1:], ...)``; traced, that
    shape is a graph value, which the exporter refuses. C is fixed: make it an int."""
    original = torch.nn.functional.layer_norm

    def layer_norm(x, shape, *args, **kwargs):
        return original(x, [int(s) for s in shape], *args, **kwargs)

    torch.nn.functional.layer_norm = layer_norm
    try:
        yield
    finally:
        torch.nn.functional.layer_norm = original
