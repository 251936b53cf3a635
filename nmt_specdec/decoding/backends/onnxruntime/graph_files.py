"""The exported graphs' files: their names, their inputs, and how each is written
from the model (``torch.onnx.export`` of the modules of :mod:`.encoder_graph`,
:mod:`.graphs` and :mod:`.fused`). Where they are cached: :mod:`.export`.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional

import torch
from torch import Tensor, nn

from nmt_specdec.decoding.backends.onnxruntime.attention_inputs import example_inputs
from nmt_specdec.decoding.backends.onnxruntime.copy_graph import CopyStepGraph
from nmt_specdec.decoding.backends.onnxruntime.encoder_graph import (
    DraftMemoryGraph,
    EncoderGraph,
    LeanEncoderGraph,
    lean_encoder_layers,
)
from nmt_specdec.decoding.backends.onnxruntime.graphs import (
    DraftGraph,
    DraftLogitsGraph,
    VerifyGraph,
    kv_names,
)
from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead
from nmt_specdec.decoding.passes.verifier_pass import LeanVerifier

OPSET = 17
ENCODER, VERIFY, DRAFT = "encoder.onnx", "verify.onnx", "draft.onnx"
# The draft head's logits, which speculative sampling draws the drafts from.
DRAFT_LOGITS = "draft_logits.onnx"
FUSED = "fused.onnx"  # verify, accept, then draft once (--fused-draft)
# The draft head's encoder keys/values, made only for a batch that drafts.
DRAFT_MEMORY = "draft_memory.onnx"
# The 8-bit verifier for batches: per-row integer products (quantize_rows), which
# beat MatMulNBits from ~4 rows on (see OrtVerifier.new_cache).
VERIFY_ROWS = "verify_rows.onnx"
# The encoder for a batch of one sentence: no padding to leave out (the batch
# encoder's products run on the real tokens' rows only), and in 8 bits one
# activation scale per product (quantize_sentence) where the batch encoder
# quantizes row by row.
ENCODER_SENTENCE = "encoder_sentence.onnx"
# The drafting copy's call of one input per row (--spec-drafter verifier-int4/-int8).
COPY_STEP = "copy_step.onnx"


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
            DRAFT_LOGITS: ["states", "last_tokens", "block_positions", "memory_mask", *draft],
            DRAFT_MEMORY: ["states"],
            COPY_STEP: ["tokens", "start", "memory_mask", "self_mask", *past, *cross],
            FUSED: [*_SELF, "parents", "slot_offsets", "candidate_slots", *past, *cross,
                    *draft],
            }[graph]


def export_graphs(model: nn.Module, pad: int, out: Path, fused: bool = False,
                  certified: bool = False, same_bits: bool = False,
                  refine_steps: Optional[int] = None, copy_step: bool = False) -> list:
    """Writes the encoder, verifier and (if any) draft graphs; returns their names
    (``same_bits``: see :class:`~.graphs.VerifyGraph`, for the 8-bit variant;
    ``refine_steps``: the draft head's refinement runs, None for its own;
    ``copy_step``: also the drafting copy's step graph, :mod:`.copy_graph`)."""
    # The tracer refuses to bake in tensors that require grad (e.g. shared
    # weights reached outside the module tree): freeze for the export only.
    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        files = _export_graphs(model, pad, out, fused, certified, same_bits, refine_steps)
        if copy_step:
            _export_copy_step(LeanVerifier(model.decoder), out)
        return files + ([COPY_STEP] if copy_step else [])
    finally:
        for p in frozen:
            p.requires_grad_(True)


def _export_graphs(model: nn.Module, pad: int, out: Path, fused: bool, certified: bool,
                   same_bits: bool, refine_steps: Optional[int]) -> list:
    verifier = LeanVerifier(model.decoder)
    head = (LeanDraftHead(model.draft_head, pad, refine_steps) if hasattr(model, "draft_head")
            else None)
    memory = _export_encoder(model, verifier, head, pad, out)
    heads, head_dim = verifier.heads, verifier.dim // verifier.heads
    # Room for every example pass's inputs at their slots (start + N <= T).
    past = [torch.zeros(2, heads, 12, head_dim) for _ in range(2 * len(verifier.layers))]
    _export_verify(verifier, certified, memory, past, out, same_bits)
    if head is None:
        return [ENCODER, ENCODER_SENTENCE, VERIFY]
    _export_draft(verifier, head, memory, out)
    if not fused:
        return [ENCODER, ENCODER_SENTENCE, VERIFY, DRAFT, DRAFT_LOGITS, DRAFT_MEMORY]
    _export_fused(verifier, head, memory, past, out, same_bits)
    return [ENCODER, ENCODER_SENTENCE, VERIFY, DRAFT, DRAFT_LOGITS, DRAFT_MEMORY, FUSED]


class _Memory(NamedTuple):
    """What the example encoder call gave: the inputs of the other graphs' examples."""

    mask: Tensor
    cross: List[Tensor]  # the verifier's encoder keys and values, per layer
    draft_cross: List[Tensor]  # the draft head's (from the draft memory graph)


_BATCH, _SOURCE = {0: "batch"}, {0: "batch", 2: "source"}
_MEMORY_MASK = {"memory_mask": {0: "batch", 3: "source"}}
_VERIFY_OUTPUTS = {"logits": {0: "batch", 1: "new"}, "normaliser": {0: "batch", 1: "new"},
                   "hidden": {0: "batch", 1: "new"},
                   "new_keys": {0: "layers_batch", 2: "new"},
                   "new_values": {0: "layers_batch", 2: "new"}}
_CERTIFIED_OUTPUTS = {name: {0: "batch", 1: "new"} for name in ("bound", "rounding", "candidates")}


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
    src = _example_ids([[5, 6, 7, 2], [pad, 5, 6, 2]], model.encoder.embed_tokens.num_embeddings)
    lean_layers = lean_encoder_layers(model.encoder)
    states = {"states": {0: "batch", 1: "source"}} if head else {}
    for name, pack in ((ENCODER, True), (ENCODER_SENTENCE, False)):  # see _Packing
        encoder = (EncoderGraph(model.encoder, verifier, head) if lean_layers is None else
                   LeanEncoderGraph(model.encoder, lean_layers, verifier, head, pack)).eval()
        _export(encoder, (src, torch.tensor([4, 3])), out / name,
                {"src_tokens": {0: "batch", 1: "source"}, "src_lengths": _BATCH},
                {**_MEMORY_MASK, **{n: _SOURCE for n in kv_names("cross", layers)}, **states})
    with torch.no_grad():
        memory = encoder(src, torch.tensor([4, 3]))
    draft_cross: List[Tensor] = []
    if head:
        graph = DraftMemoryGraph(head).eval()
        with torch.no_grad():
            draft_cross = list(graph(memory[-1]))
        _export(graph, (memory[-1],), out / DRAFT_MEMORY, states,
                {n: _SOURCE for n in kv_names("draft", draft_layers)})
    return _Memory(memory[0], list(memory[1: 1 + 2 * layers]), draft_cross)


def _export_verify(verifier, certified: bool, memory: _Memory, past: List[Tensor],
                   out: Path, same_bits: bool) -> None:
    chain = torch.arange(3)
    start = torch.tensor([2, 4])
    self_inputs = example_inputs(verifier.heads, same_bits, start, past[0].size(2),
                                 chain.view(-1, 1) >= chain)
    _export(VerifyGraph(verifier, certified, same_bits).eval(),
            (_example_ids([[5, 6, 7], [8, 9, 10]], verifier.embed.size(0)), start, memory.mask,
             chain, *self_inputs,
             *past, *memory.cross),
            out / VERIFY, _verify_inputs(len(verifier.layers)),
            {**_VERIFY_OUTPUTS, **(_CERTIFIED_OUTPUTS if certified else {})})


def _export_copy_step(verifier, out: Path) -> None:
    layers, heads = len(verifier.layers), verifier.heads
    head_dim = verifier.dim // heads
    past = [torch.zeros(2, heads, 12, head_dim) for _ in range(2 * layers)]
    cross = [torch.zeros(2, heads, 5, head_dim) for _ in range(2 * layers)]
    start = torch.tensor([3, 6])
    self_mask = torch.arange(12).view(1, 1, 1, -1) < start.view(-1, 1, 1, 1)
    memory_mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    tokens = _example_ids([[5], [6]], verifier.embed.size(0))
    _export(CopyStepGraph(verifier).eval(), (tokens, start, memory_mask, self_mask, *past, *cross),
            out / COPY_STEP,
            {"tokens": _BATCH, "start": _BATCH, **_MEMORY_MASK,
             "self_mask": {0: "batch", 3: "slots"},
             **{n: {0: "batch", 2: "slots"} for n in kv_names("past", layers)},
             **{n: _SOURCE for n in kv_names("cross", layers)}},
            {"scores": _BATCH, "candidates": _BATCH, "new_keys": {0: "layers_batch"},
             "new_values": {0: "layers_batch"}})


def _export_draft(verifier, head, memory: _Memory, out: Path) -> None:
    inputs = (torch.randn(2, verifier.dim), _example_ids([5, 6], verifier.embed.size(0)),
              torch.tensor([[3, 4, 5], [0, 1, 2]]), memory.mask)
    axes = {"states": _BATCH, "last_tokens": _BATCH,
            "block_positions": {0: "batch", 1: "block"}, **_MEMORY_MASK}
    cross = {n: _SOURCE for n in kv_names("draft", len(head.layers))}
    _export(DraftGraph(head).eval(), (*inputs, torch.arange(2), *memory.draft_cross),
            out / DRAFT, {**axes, "candidate_slots": {0: "candidates"}, **cross},
            {"drafts": {0: "batch", 1: "candidates", 2: "slots"}})
    _export(DraftLogitsGraph(head).eval(), (*inputs, *memory.draft_cross), out / DRAFT_LOGITS,
            {**axes, **cross}, {"logits": {0: "batch", 1: "slots"}})


def _export_fused(verifier, head, memory: _Memory, past: List[Tensor], out: Path,
                  same_bits: bool) -> None:
    from nmt_specdec.decoding.backends.onnxruntime.fused import FusedVerifyGraph
    from nmt_specdec.decoding.decision.tree import parent_list
    from nmt_specdec.decoding.draft_tree import tree_layout

    # A chain of K=2 drafts with one leaf per slot (C=2): N = 5 inputs.
    layout = tree_layout(2, 2)
    start = torch.tensor([2, 4])
    self_inputs = example_inputs(verifier.heads, same_bits, start, past[0].size(2),
                                 layout.ancestors)
    _export(FusedVerifyGraph(verifier, head, same_bits).eval(),
            (_example_ids([[5, 6, 7, 8, 9], [8, 9, 10, 11, 12]], verifier.embed.size(0)), start,
             memory.mask, layout.offsets, *self_inputs, torch.tensor(parent_list(2, 2)),
             torch.arange(3), torch.arange(2), *past, *memory.cross, *memory.draft_cross),
            out / FUSED,
            {**_verify_inputs(len(verifier.layers), {
                "parents": {0: "nodes"}, "slot_offsets": {0: "block"},
                "candidate_slots": {0: "candidates"}}),
             **{n: _SOURCE for n in kv_names("draft", len(head.layers))}},
            {**_VERIFY_OUTPUTS, "drafts": {0: "batch", 1: "candidates", 2: "draft_slots"},
             "decision": {0: "batch"}})


def _example_ids(ids: list, vocabulary: int) -> Tensor:
    """Example token ids that exist in a vocabulary of any size: an ordinary id
    (4 and up, after fairseq's specials) wraps around the ordinary symbols."""
    def fit(i: int) -> int:
        if i < 4:
            return i % vocabulary
        return 4 + (i - 4) % (vocabulary - 4) if vocabulary > 4 else i % vocabulary
    return torch.tensor([fit(i) if isinstance(i, int) else [fit(j) for j in i] for i in ids])


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
