"""``--int8``: 8-bit weights for the verifier, and 4-bit ones for the draft graph.

The draft graph is quantized with or without ``--int8`` (without it, beside the
fp32 verifier, it is the fp32 backend's default): drafts are only proposals, the
verifier still decides every token, so the draft's weights take 4 bits
(:data:`DRAFT_BITS`, in blocks of :data:`DRAFT_BLOCK` inputs), which keep its
acceptance. A draft call reads its weights from memory anew each iteration (the
verify call in between sweeps them out of the caches), so its cost follows
their bytes: 4 bits instead of 8 make that call cheaper for the same tokens
per iteration (docs/results.md, "The draft graph in 4 bits").
Copies of one weight (a refinement layer unrolled twice) are shared before
quantizing, so that one copy is read. The wider block gives a row other bits
beside other rows (below): that moves only proposals, never a β=1 output.

The 4-bit copy of the verifier that drafts for it (``--spec-drafter
verifier-int4``) takes the draft graph's reasoning further: every product of
its step graph (:mod:`.copy_graph`) has :data:`COPY_BITS` in blocks of
:data:`COPY_BLOCK`, the output projection too, which only picks the candidates
that fp32 rows then score.

Why not ``onnxruntime.quantization.quantize_dynamic``: it quantizes each
matmul's *activations* with one scale per tensor, i.e. over all rows and all
verified positions of a call. A position's scores would then depend on the
drafts beside it and on the other sentences of the batch, and SpecDec with
beta=1 would no longer reproduce the int8 verifier's own greedy output (nor
batch 1 reproduce batch 32). ``MatMulNBits`` with 8-bit weights and
``accuracy_level=4`` quantizes activations per row in blocks of the inner
dimension, so every position is computed on its own, as in fp32: beta=1 stays
exact (up to float rounding) and the int8 GEMM kernels are used. Measured on
the shipped model, 40 German sentences: per-tensor ``quantize_dynamic`` gave
SpecDec K=2 beta=1 = its own K=0 greedy on 35/40 (and batch 8 = batch 1 on
35/40); this quantization gave 40/40 for K=2 and K=4 at batch 1 and 8.

Per row is not yet bit-exact across pass shapes: float rounding (~1e-6) that
differs between a 1- and a 3-position pass can push one activation across a
quantization step, which moves a logit by ~0.04, and a top-2 gap below that
flips (3-6 of 500 sentences, measured). The 8-bit verify graph is therefore
exported with the layout that scores a position the same bits in a pass of any
size (``graphs.VerifyGraph``'s ``same_bits``): 500/500.

Weights are symmetric int8 per output channel and block of ``BLOCK`` inputs.
64 is the widest block for which ONNX Runtime gives a row the same bits alone
as beside others (``tests/unit/test_quantize_graph.py``; 128 and 256 do not:
one row takes another kernel there). Against 32 it made the 8-bit greedy 4.7%
faster at batch 1 (median of 8 interleaved pass pairs over 500 sentences, AMD
EPYC family 26; fewer block scales per product): 25 of 500 outputs change, BLEU
35.62 -> 35.63, beta=1 still its greedy on 500/500.

The encoder (:func:`quantize_rows`) multiplies many rows at once (every source
position of every sentence), where ``MatMulNBits`` is no faster than fp32 (it
quantizes and multiplies row by row). There each row is quantized by graph ops
(symmetric, its own scale, shifted to uint8 for the runtime's u8 x s8 integer
GEMM; signed x signed has no fast kernel) and the weights per output column. Still one scale per row: a
sentence's encoding does not depend on the others of its batch.

The weights of these integer products have 8 bits on a CPU with VNNI and 7
bits elsewhere (:func:`weight_limit`; the dynamic quantizer's ``reduce_range``):
without VNNI the runtime's u8 x s8 kernel adds pairs of products in 16 bits,
and with 8-bit weights a pair (up to 2 x 255 x 127) overflows them (what that
did to the encoder: docs/results.md, "On a CPU without VNNI"). 2 x 255 x 63
fits. With VNNI the eighth bit is kept (what it is worth there: the same
section).

A batch of one sentence has an encoder of its own (:func:`quantize_sentence`):
its input is that sentence alone, so one activation scale per product, over all
its rows, still depends on nothing else, and the runtime fuses the quantization
and the product into one kernel (fewer than half the nodes; the timings:
docs/results.md).

Before quantizing, constant weights become initializers and ``Gemm`` nodes
(how the exporter writes ``addmm``) become ``MatMul`` + ``Add``: the quantizer
only rewrites ``MatMul`` with an initializer as its second input.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import numpy as np

from nmt_specdec import logs

BLOCK = 64  # see the module's docstring: wider breaks beta=1 = greedy
DRAFT_BITS, DRAFT_BLOCK = 4, 128  # the draft graph's weights (see the module's docstring)
# The 4-bit copy's step graph (--spec-drafter verifier-int4).
COPY_BITS, COPY_BLOCK = 4, 128
ACCURACY_LEVEL = 4  # int8 activations (per row and block), int32 accumulation


def weight_limit(bits: int) -> int:
    """The largest integer weight of the u8 x s8 products with ``bits``-bit weights
    (8 on a CPU with VNNI, else 7: see the module's docstring)."""
    return 2 ** (bits - 1) - 1


def quantize_graph(path: Path, only_under: Optional[str] = None, bits: int = 8,
                   block: int = BLOCK) -> None:
    """Rewrites the graph at ``path`` in place with ``bits``-bit ``MatMulNBits``
    weights in blocks of ``block`` inputs (``only_under``: only the matrix
    products whose node names start with it, e.g. ``/draft/`` for the draft head
    inside the fused verify graph)."""
    import onnx
    from onnxruntime.quantization.onnx_model import ONNXModel

    model = onnx.load(str(path))
    constants_to_initializers(model)
    gemm_to_matmul(model)
    share_identical_initializers(model)
    products = [n.name for n in model.graph.node if n.op_type == "MatMul"]
    # The quantizer takes every MatMul with constant weights it is not told to leave.
    exclude = [] if only_under is None else [n for n in products if not n.startswith(only_under)]
    if only_under is not None and len(exclude) == len(products):
        raise RuntimeError(f"no matrix product under {only_under} in {path.name}")
    model = _matmul_nbits(model, bits, block, exclude=exclude)
    fold_biases(model)
    ONNXModel(model).save_model_to_file(str(path))


def _matmul_nbits(model, bits: int, block: int, exclude=()):
    """``model`` with its constant-weight products (all but ``exclude``) as
    ``bits``-bit ``MatMulNBits``."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(model, bits=bits, block_size=block, is_symmetric=True,
                                     accuracy_level=ACCURACY_LEVEL, nodes_to_exclude=list(exclude))
    with logs.quiet("onnxruntime.quantization"):  # one INFO line per matrix product
        quantizer.process()
    return quantizer.model.model


def fold_biases(model) -> int:
    """Moves each constant bias ``Add`` after a ``MatMulNBits`` into the op's own
    bias input (the quantizer leaves them apart): the same sums, one node fewer
    each (18 in the shipped model's verify graph).
    Returns how many were folded."""
    graph = model.graph
    vectors = {t.name: t.dims[0] for t in graph.initializer if len(t.dims) == 1}
    readers: dict = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    kept_outputs = {o.name for o in graph.output}
    folded = []
    for node in graph.node:
        if node.op_type != "MatMulNBits" or (len(node.input) > 5 and node.input[5]):
            continue
        product = node.output[0]
        users = readers.get(product, [])
        if product in kept_outputs or len(users) != 1 or users[0].op_type != "Add":
            continue
        add = users[0]
        bias = add.input[1] if add.input[0] == product else add.input[0]
        columns = next(a.i for a in node.attribute if a.name == "N")
        if vectors.get(bias) != columns:  # a bias of every output column, nothing else
            continue
        # Inputs: A, B, scales, zero_points, g_idx, bias (the skipped ones empty).
        node.input.extend([""] * (5 - len(node.input)) + [bias])
        node.output[0] = add.output[0]
        folded.append(add)
    for add in folded:
        graph.node.remove(add)
    return len(folded)


def quantize_rows(path: Path, only_under: Optional[str] = None, weight_bits: int = 7) -> None:
    """Rewrites every matrix product with constant weights of the graph at ``path``
    in place as a per-row 8-bit integer product with ``weight_bits``-bit weights
    (see the module's docstring; ``only_under``: as :func:`quantize_graph`'s)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    constants_to_initializers(model)
    gemm_to_matmul(model)
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    shared = {"rows_inv127": np.float32(1 / 127), "rows_tiny": np.float32(1e-30),
              "rows_f128": np.float32(128), "rows_u128": np.uint8(128)}
    graph.initializer.extend(numpy_helper.from_array(np.array(v), k) for k, v in shared.items())
    nodes = []
    for node in graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if (weight is None or len(weight.dims) != 2
                or (only_under is not None and not node.name.startswith(only_under))):
            nodes.append(node)
            continue
        matrix = numpy_helper.to_array(weight).astype(np.float32)
        scale = np.abs(matrix).max(axis=0) / weight_limit(weight_bits)
        scale[scale == 0] = 1
        name = node.name or node.output[0]
        graph.initializer.extend([
            numpy_helper.from_array(np.round(matrix / scale).astype(np.int8), name + "_w8"),
            numpy_helper.from_array(scale.astype(np.float32), name + "_wscale")])
        nodes += _row_product(node.input[0], name, node.output[0])
    del graph.node[:]
    graph.node.extend(nodes)
    # The float weights replaced (the runtime would warn of each unused one).
    used = {name for node in nodes for name in node.input}
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _row_product(x: str, name: str, out: str) -> list:
    """``x @ W`` with ``x`` quantized per row: scale = max|row| / 127,
    uint8 = round(x / scale) + 128, an integer product with ``name``'s int8 weights,
    then both scales."""
    from onnx import TensorProto, helper

    def t(suffix: str) -> str:
        return f"{name}_{suffix}"

    step = [("Abs", [x], "abs", {}), ("ReduceMax", [t("abs")], "max", {"axes": [-1], "keepdims": 1}),
            ("Mul", [t("max"), "rows_inv127"], "scale0", {}),
            ("Max", [t("scale0"), "rows_tiny"], "scale", {}),  # an all-zero row stays zero
            ("Div", [x, t("scale")], "scaled", {}), ("Round", [t("scaled")], "rounded", {}),
            ("Add", [t("rounded"), "rows_f128"], "shifted", {}),
            ("Cast", [t("shifted")], "u8", {"to": TensorProto.UINT8}),
            ("MatMulInteger", [t("u8"), name + "_w8", "rows_u128"], "int32", {}),
            ("Cast", [t("int32")], "float", {"to": TensorProto.FLOAT}),
            ("Mul", [t("scale"), name + "_wscale"], "scales", {})]
    nodes = [helper.make_node(op, inputs, [t(output)], name=t(output), **attrs)
             for op, inputs, output, attrs in step]
    return nodes + [helper.make_node("Mul", [t("float"), t("scales")], [out], name=t("out"))]


def quantize_sentence(path: Path, weight_bits: int = 7) -> None:
    """Rewrites the encoder graph at ``path`` in place for a batch of one sentence:
    ONNX Runtime's dynamic quantization (one activation scale per product over the
    whole input, int8 weights per output column, 7 bits of them unless
    ``weight_bits`` is 8), which the runtime runs as ``DynamicQuantizeMatMul``: 2
    nodes per product where :func:`quantize_rows` needs 12 (see the module's
    docstring)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(path))
    constants_to_initializers(model)
    gemm_to_matmul(model)
    onnx.save(model, str(path))
    # It advises (on the root logger) a pre-processing pass that has nothing to
    # fold in these graphs: that line alone is dropped.
    root = logging.getLogger()
    advice = "Please consider to run pre-processing"

    def not_advice(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(advice)

    root.addFilter(not_advice)
    try:
        with logs.quiet("onnxruntime.quantization"):
            quantize_dynamic(str(path), str(path), op_types_to_quantize=["MatMul"],
                             per_channel=True, weight_type=QuantType.QInt8,
                             reduce_range=weight_bits < 8)
    finally:
        root.removeFilter(not_advice)


def constants_to_initializers(model) -> None:
    """``Constant`` nodes holding a tensor -> graph initializers (same names)."""
    graph = model.graph
    kept = []
    for node in graph.node:
        value = [a for a in node.attribute if a.name == "value"]
        if node.op_type == "Constant" and value and len(node.attribute) == 1:
            tensor = value[0].t
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
        else:
            kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)


def share_identical_initializers(model) -> int:
    """Points every reader of an initializer at the first one with the same type,
    shape and values, and drops the copies (the exporter writes a weight once per
    use: an unrolled layer's weights once per run). Names a subgraph reads are
    left alone. Returns the copies dropped."""
    import hashlib

    from onnx import numpy_helper

    graph = model.graph
    nested = _subgraph_inputs(graph)
    first, renamed, kept = {}, {}, []
    for tensor in graph.initializer:
        values = numpy_helper.to_array(tensor)
        key = (tensor.data_type, values.shape, hashlib.sha256(values.tobytes()).digest())
        if key in first and tensor.name not in nested:
            renamed[tensor.name] = first[key]
            continue
        first.setdefault(key, tensor.name)
        kept.append(tensor)
    if renamed:
        del graph.initializer[:]
        graph.initializer.extend(kept)
        for node in graph.node:
            node.input[:] = [renamed.get(name, name) for name in node.input]
    return len(renamed)


def _subgraph_inputs(graph) -> set:
    """Every input name read by a node inside a subgraph (``If``, ``Loop``) of ``graph``."""
    from onnx import AttributeProto

    names: set = set()
    for node in graph.node:
        for attribute in node.attribute:
            bodies = ([attribute.g] if attribute.type == AttributeProto.GRAPH else
                      list(attribute.graphs) if attribute.type == AttributeProto.GRAPHS else [])
            for body in bodies:
                names.update(name for inner in body.node for name in inner.input)
                names |= _subgraph_inputs(body)
    return names


def gemm_to_matmul(model) -> None:
    """``Gemm(A, B, C)`` with constant B, alpha = beta = 1 -> ``MatMul(A, B') + C``."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    nodes = []
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if (node.op_type != "Gemm" or node.input[1] not in weights or attrs.get("transA", 0)
                or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0):
            nodes.append(node)
            continue
        weight = weights[node.input[1]]
        if attrs.get("transB", 0):
            transposed = numpy_helper.to_array(weight).T.copy()
            weight = numpy_helper.from_array(transposed, node.input[1] + "_t")
            graph.initializer.append(weight)
            weights[weight.name] = weight
        product = node.output[0] + "_matmul"
        nodes.append(helper.make_node("MatMul", [node.input[0], weight.name], [product],
                                      name=node.name + "_matmul"))
        if len(node.input) > 2 and node.input[2]:
            nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]],
                                          name=node.name + "_bias"))
        else:
            nodes.append(helper.make_node("Identity", [product], [node.output[0]]))
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
