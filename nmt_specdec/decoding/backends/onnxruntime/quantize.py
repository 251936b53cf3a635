"""``--int8``: 8-bit weights for the verifier and draft graphs.

Without ``--int8`` the draft graph alone is quantized the same way (the fp32
backend's default): drafts are only proposals, the fp32 verifier still decides
every token, and the draft call gets ~40% cheaper.

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

It is exact per row, not bit-exact across pass shapes: float rounding (~1e-6)
that differs between a 1- and a 3-position pass, or a padded and an unpadded
source, can push one activation across a quantization step, which moves a
logit by ~0.04; a top-2 gap below that can flip (1 of 40 sentences, measured).
``ACCURACY_LEVEL = 1`` (8-bit weights, fp32 arithmetic) would remove the steps
at the cost of the int8 kernels' speed.

Weights are symmetric int8 per output channel and block of ``BLOCK`` inputs.
Before quantizing, constant weights become initializers and ``Gemm`` nodes
(how the exporter writes ``addmm``) become ``MatMul`` + ``Add``: the quantizer
only rewrites ``MatMul`` with an initializer as its second input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from nmt_specdec import logs

BLOCK = 32
ACCURACY_LEVEL = 4  # int8 activations (per row and block), int32 accumulation


def quantize_graph(path: Path, only_under: Optional[str] = None) -> None:
    """Rewrites the graph at ``path`` in place with 8-bit ``MatMulNBits`` weights
    (``only_under``: only the matrix products whose node names start with it, e.g.
    ``/draft/`` for the draft head inside the fused verify graph)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(path))
    constants_to_initializers(model)
    gemm_to_matmul(model)
    products = [n.name for n in model.graph.node if n.op_type == "MatMul"]
    # The quantizer takes every MatMul with constant weights it is not told to leave.
    exclude = [] if only_under is None else [n for n in products if not n.startswith(only_under)]
    if only_under is not None and len(exclude) == len(products):
        raise RuntimeError(f"no matrix product under {only_under} in {path.name}")
    quantizer = MatMulNBitsQuantizer(model, bits=8, block_size=BLOCK, is_symmetric=True,
                                     accuracy_level=ACCURACY_LEVEL, nodes_to_exclude=exclude)
    with logs.quiet("onnxruntime.quantization"):  # one INFO line per matrix product
        quantizer.process()
    quantizer.model.save_model_to_file(str(path))


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
