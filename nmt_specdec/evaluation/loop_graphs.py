"""Greedy and SpecDec decoding as one ONNX ``Loop`` (what :mod:`.loop_graph_probe` times).

The engine decides every iteration on the host: its runtime calls, then
acceptance, constraints and bookkeeping in Python (~0.25 ms a greedy step at
batch 1 on ONNX Runtime, beside a ~0.73 ms verify call). These graphs put a
sentence's whole decode into one runtime call: an ONNX ``Loop`` whose body
inlines the exported graphs and does the host's work in-graph.

- Greedy: the fp32 verify graph (certified 8-bit projection) for one position,
  then the engine's constraints (never pad; no EOS before ``min_len``; only EOS
  from ``max_len`` on), an ``If`` that recomputes the logits in fp32 where the
  bound does not certify the step, and the argmax.
- SpecDec (β=1, a chain of K drafts): the verify graph for the last token and
  the K drafts, the same constraints and certification for all K+1 positions,
  the accepted run (leading drafts equal to the argmax), the correction, the
  cut after an EOS, and the next block: from the head's draft graph (reading
  the state that predicted the correction), or from the verifier's 8-bit copy
  (K int8 verify graphs unrolled, its own past cut back to the committed
  tokens). The first block is drafted outside.

The past keys and values grow by ``Concat`` as loop state (only the accepted
positions' are kept). These are probes, not decoders: batch 1, no ``--unkpen``,
and a tie for the best logit is decided by ``ArgMax`` (the first index) where
the engine has its own tie order.

Shapes: K draft slots, N = K + 1 verified positions, V vocabulary.
"""

from __future__ import annotations

import copy
from typing import Dict, List, Optional

import numpy as np


class _Body:
    """Nodes, constants and initializers of a loop body under construction."""

    def __init__(self, outer: set):
        self.outer = outer  # names read from the main graph (source memory)
        self.constants: List = []
        self.nodes: List = []
        self.initializers: List = []

    def const(self, name: str, value) -> str:
        from onnx import helper, numpy_helper

        self.constants.append(helper.make_node(
            "Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name)))
        return name

    def node(self, op: str, inputs: List[str], output, **attrs):
        from onnx import helper

        outputs = [output] if isinstance(output, str) else output
        self.nodes.append(helper.make_node(op, inputs, outputs, **attrs))
        return output

    def inline(self, model, prefix: str, bind: Dict[str, str],
               weights: Optional[str] = None) -> None:
        """Copies ``model``'s graph in, its names prefixed; ``bind``: its inputs;
        ``weights``: the prefix of its initializers (default ``prefix``), whose
        copies are added once however many times the graph is inlined."""
        weights = prefix if weights is None else weights
        known = {t.name for t in self.initializers}
        for tensor in model.graph.initializer:
            if weights + tensor.name not in known:
                renamed = copy.deepcopy(tensor)
                renamed.name = weights + tensor.name
                self.initializers.append(renamed)
        names = {t.name for t in model.graph.initializer}
        for name, source in bind.items():
            self.node("Identity", [source], prefix + name)
        for original in model.graph.node:
            copied = copy.deepcopy(original)
            copied.name = prefix + copied.name if copied.name else ""
            for io in (copied.input, copied.output):
                renamed = [n if n == "" or n in self.outer else
                           (weights if n in names else prefix) + n for n in io]
                del io[:]
                io.extend(renamed)
            self.nodes.append(copied)

    def decide(self, prefix: str, steps: str, vocab: int, pad: int, eos: int):
        """The verify call's constrained, certified scores: ``(scores (N, V), lse (N,),
        argmax (N,))`` for the output ``steps`` (N,) its positions predict."""
        from onnx import TensorProto, helper

        pad_mask, no_eos, only_eos = (np.zeros(vocab, np.float32) for _ in range(3))
        pad_mask[pad], no_eos[eos] = -np.inf, -np.inf
        only_eos[:] = -np.inf
        only_eos[eos] = 0
        zeros, axis1 = self.const("zeros", np.zeros(vocab, np.float32)), self.const("axis1", [1])
        rules = []
        for name, test, bound, mask in (("early", "Less", "min_len", no_eos),
                                        ("late", "GreaterOrEqual", "limit", only_eos)):
            applies = self.node("Unsqueeze", [self.node(test, [steps, bound], name), axis1],
                                name + "_rows")
            rules.append(self.node("Where", [applies, self.const(name + "_v", mask), zeros],
                                   name + "_mask"))
        mask = self.node("Add", [self.node("Add", rules, "length_mask"),
                                 self.const("pad_mask", pad_mask)], "mask")  # (N, V)
        batch = self.const("batch_axis", [0])
        scores = self.node("Add", [self.node("Squeeze", [prefix + "logits", batch], "raw"), mask],
                           "constrained")
        best = self.node("ReduceMax", [scores], "best", axes=[1], keepdims=0)
        above = self.node("Cast", [self.node("Greater", [best, self.node(
            "Squeeze", [prefix + "bound", batch], "bound")], "above")], "above_f",
            to=TensorProto.FLOAT)
        certain = self.node("Cast", [self.node("ReduceMin", [above], "all_above", keepdims=0)],
                            "certain", to=TensorProto.BOOL)
        lse = self.node("Squeeze", [prefix + "normaliser", batch], "lse")
        out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
               for n in ("scores_out", "lse_out")]
        kept = helper.make_graph([helper.make_node("Identity", [scores], ["scores_out"]),
                                  helper.make_node("Identity", [lse], ["lse_out"])],
                                 "kept", [], out)
        exact = helper.make_graph([
            helper.make_node("Squeeze", [prefix + "hidden", batch], ["exact_states"]),
            helper.make_node("MatMul", ["exact_states", "exact_wt"], ["exact"]),
            helper.make_node("ReduceLogSumExp", ["exact"], ["lse_out"], axes=[1], keepdims=0),
            helper.make_node("Add", ["exact", mask], ["scores_out"])], "exact", [], out)
        self.node("If", [certain], ["scores", "scores_lse"], then_branch=kept,
                  else_branch=exact)
        return "scores", "scores_lse", self.node("ArgMax", ["scores"], "argmax", axis=1,
                                                 keepdims=0)


def _outer_inputs(*graphs) -> List:
    seen, inputs = set(), []
    for graph in graphs:
        for i in graph.graph.input:
            if (i.name == "memory_mask" or i.name.startswith(("cross_", "draft_"))) \
                    and i.name not in seen:
                seen.add(i.name)
                inputs.append(i)
    return inputs


def build_loop(verify, exact_wt: np.ndarray, pad: int, eos: int, draft=None, k: int = 0,
               copy_graph=None):
    """The decoding graph: greedy (``k`` 0) or SpecDec with ``draft`` (the draft
    graph) and K = ``k`` (see the module docstring). ``verify``: the fp32 certified
    verify graph; ``exact_wt``: the (C, V) fp32 output projection.

    Inputs: the source memory (``memory_mask``, ``cross_*``, ``draft_*``),
    ``limit`` (the step from which only EOS may follow), ``min_len``, ``trips``
    (``limit + 1``), and for SpecDec ``drafts0`` (1, K), the first block.
    Outputs: ``blocks`` (iterations, K+1) and ``counts`` (iterations, 1): each
    iteration commits ``blocks[i, :counts[i]]``.
    """
    from onnx import TensorProto, helper, numpy_helper

    outer_inputs = _outer_inputs(verify, *([draft] if draft is not None else []))
    body = _Body({i.name for i in outer_inputs})
    past = [i for i in verify.graph.input if i.name.startswith("past_")]
    heads, head_dim = (past[0].type.tensor_type.shape.dim[i].dim_value for i in (1, 3))
    kv = [1, heads, None, head_dim]
    new = k + 1
    node, const = body.node, body.const
    body_in = [helper.make_tensor_value_info("step", TensorProto.INT64, []),
               helper.make_tensor_value_info("go", TensorProto.BOOL, []),
               helper.make_tensor_value_info("last", TensorProto.INT64, [1, 1]),
               helper.make_tensor_value_info("drafts", TensorProto.INT64, [1, k]),
               helper.make_tensor_value_info("start", TensorProto.INT64, [1])]
    body_in += [helper.make_tensor_value_info("in_" + p.name, TensorProto.FLOAT, kv)
                for p in past]
    if copy_graph is not None:  # the 8-bit copy's own past
        body_in += [helper.make_tensor_value_info("in8_" + p.name, TensorProto.FLOAT, kv)
                    for p in past]
    offsets = const("offsets", np.arange(new))
    body.inline(verify, "v_", {
        "tokens": node("Concat", ["last", "drafts"], "tokens", axis=1), "start": "start",
        "offsets": offsets, "ancestors": const("causal", np.tril(np.ones((new, new), bool))),
        **{p.name: "in_" + p.name for p in past}})
    scores, lse, best = body.decide("v_", node("Add", ["start", offsets], "steps"),
                                    exact_wt.shape[1], pad, eos)
    one, first = const("one", [1]), const("first", [0])
    # Accepted: the drafts before the first that differs from the argmax.
    drafted = node("Squeeze", ["drafts", first], "drafted")  # (K,)
    differs = node("Cast", [node("Not", [node("Equal", [node(
        "Slice", [best, first, const("k", [k])], "best_k"), drafted], "same")], "differ")],
        "differs", to=TensorProto.INT64)
    misses = node("CumSum", [differs, const("axis0", np.array(0))], "misses")
    accepted = node("Reshape", [node("ReduceSum", [node("Cast", [node(
        "Equal", [misses, const("none", np.array(0))], "leading")], "leading_n",
        to=TensorProto.INT64)], "accepted_n", keepdims=0), one], "accepted")  # (1,)
    correction = node("Gather", [best, accepted], "correction")  # (1,)
    block = node("Where", [node("Less", [offsets, accepted], "is_draft"),
                           node("Concat", [drafted, correction], "padded", axis=0),
                           correction], "block_out")  # (N,): commits block[:accepted+1]
    taken = node("Add", [accepted, one], "taken")
    ended = node("And", [node("Equal", [block, const("eos", [eos])], "is_eos"),
                         node("Less", [offsets, taken], "in_block")], "ended")
    ended_n = node("Cast", [ended], "ended_n", to=TensorProto.INT64)
    finished = node("Cast", [node("ReduceMax", [ended_n], "any_n", keepdims=1)], "finished",
                    to=TensorProto.BOOL)
    node("Where", [finished, node("Add", [node("ArgMax", [ended_n], "first_eos", axis=0,
                                                keepdims=1), one], "to_eos"), taken],
         "count_out")
    node("Sub", [node("Squeeze", [node("GatherElements", [scores, node(
        "Unsqueeze", [block, const("last_axis", [1])], "block_col")], "picked", axis=1),
        "last_axis"], "picked_1"), lse], "scores_out")
    body_out = [helper.make_tensor_value_info("go_out", TensorProto.BOOL, []),
                helper.make_tensor_value_info("last_out", TensorProto.INT64, [1, 1]),
                helper.make_tensor_value_info("drafts_out", TensorProto.INT64, [1, k]),
                helper.make_tensor_value_info("start_out", TensorProto.INT64, [1])]
    node("Squeeze", [node("Not", [finished], "going")], "go_out")
    node("Reshape", [correction, const("one_by_one", [1, 1])], "last_out")
    node("Add", ["start", taken], "start_out")  # the correction's position
    position_axis = const("position_axis", [2])
    for index, p in enumerate(past):
        kind = "v_new_keys" if index % 2 == 0 else "v_new_values"
        layer = node("Gather", [kind, const(f"layer_{index}", np.array(index // 2))],
                     f"new_{p.name}", axis=0)  # (1, H, N, D)
        kept = node("Slice", [layer, first, taken, position_axis], f"kept_{p.name}")
        node("Concat", ["in_" + p.name, kept], "out_" + p.name, axis=2)
        body_out.append(helper.make_tensor_value_info("out_" + p.name, TensorProto.FLOAT, kv))
    if draft is not None:  # the next block, from the state that predicted the correction
        state = node("Gather", [node("Squeeze", ["v_hidden", first], "states"), accepted],
                     "state")
        body.inline(draft, "d_", {
            "states": state, "last_tokens": correction,
            "block_positions": node("Unsqueeze", [node("Add", ["start_out", offsets],
                                                       "positions"), first], "block"),
            "candidate_slots": const("one_candidate", np.arange(1))})
        node("Reshape", ["d_drafts", const("drafts_shape", [1, k])], "drafts_out")
    elif copy_graph is not None:
        _copy_drafts(body, copy_graph, past, k, body_out, kv)
    else:
        node("Identity", ["drafts"], "drafts_out")
    body_out += [helper.make_tensor_value_info(n, t, s) for n, t, s in (
        ("block_out", TensorProto.INT64, [new]), ("count_out", TensorProto.INT64, [1]),
        ("scores_out", TensorProto.FLOAT, [new]))]
    # The weights live in the body itself: as outer-scope values the runtime would
    # not pre-pack the 8-bit ones (each call would unpack them).
    step = helper.make_graph(body.constants + body.nodes, "iteration", body_in, body_out,
                             initializer=body.initializers
                             + [numpy_helper.from_array(exact_wt, "exact_wt")])
    inputs = outer_inputs + [helper.make_tensor_value_info(n, TensorProto.INT64, [])
                             for n in ("limit", "min_len", "trips")]
    inputs.append(helper.make_tensor_value_info("drafts0", TensorProto.INT64, [1, k]))
    start = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(v, name))
             for name, v in (("go0", np.array(True)), ("bos", np.array([[eos]], np.int64)),
                             ("start0", np.array([0], np.int64)),
                             ("no_past", np.zeros((1, heads, 0, head_dim), np.float32)))]
    copied = [f"copy_{p.name}" for p in past] if copy_graph is not None else []
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, kv) for n in copied]
    loop = helper.make_node("Loop", ["trips", "go0", "bos", "drafts0", "start0"]
                            + ["no_past"] * len(past) + copied,
                            ["last_final", "drafts_final", "start_final"]
                            + [f"final_{p.name}" for p in past]
                            + [f"final8_{p.name}" for p in past if copied]
                            + ["blocks", "counts", "scores"], body=step)
    main = helper.make_graph(
        start + [loop], "decode", inputs,
        [helper.make_tensor_value_info("blocks", TensorProto.INT64, [None, new]),
         helper.make_tensor_value_info("counts", TensorProto.INT64, [None, 1])],
)
    model = helper.make_model(main, opset_imports=list(verify.opset_import))
    model.ir_version = verify.ir_version
    return model


def _copy_drafts(body: "_Body", copy_graph, past, k: int, body_out: List, kv) -> None:
    """The next block from the verifier's 8-bit copy, one position a call (K calls
    unrolled): its past is cut back to the committed tokens it saw, then it reads
    the token before the correction and the correction, then each draft."""
    from onnx import TensorProto, helper

    node, const = body.node, body.const
    first, one, slot_axis = "first", "one", "position_axis"
    keep = node("Sub", ["start_out", one], "copy_keep")  # committed positions it holds
    before = node("Gather", [node("Concat", [node("Reshape", ["last", one], "last_1"),
                                             "drafted"], "inputs_k", axis=0), "accepted"],
                  "before")  # the token before the correction
    tokens = node("Unsqueeze", [node("Concat", [before, "correction"], "pair", axis=0), first],
                  "pair_1")
    state = [node("Slice", ["in8_" + p.name, first, keep, slot_axis], f"cut8_{p.name}")
             for p in past]
    drafts = []
    for j in range(k):
        prefix = f"q{j}_"
        bind = {"tokens": tokens, "start": keep if j == 0 else
                node("Add", ["start_out", const(f"ahead_{j}", [j])], f"at_{j}"),
                "offsets": const(f"copy_offsets_{j}", np.arange(2 if j == 0 else 1)),
                "ancestors": const(f"copy_causal_{j}", np.tril(np.ones((2, 2), bool)) if j == 0
                                   else np.ones((1, 1), bool)),
                **{p.name: state[i] for i, p in enumerate(past)}}
        body.inline(copy_graph, prefix, bind, weights="q_")
        last_row = node("Gather", [prefix + "logits", const(f"row_{j}", np.array(-1))],
                        f"copy_scores_{j}", axis=1)  # (1, V)
        drafts.append(node("ArgMax", [node("Add", [last_row, "pad_mask"], f"copy_masked_{j}")],
                           f"copy_draft_{j}", axis=1, keepdims=0))  # (1,)
        state = [node("Concat", [state[i], node("Gather", [
            prefix + ("new_keys" if i % 2 == 0 else "new_values"), f"layer_{i}"],
            f"copy_new_{j}_{i}", axis=0)], f"copy_past_{j}_{i}", axis=2)
            for i in range(len(past))]
        tokens = node("Unsqueeze", [drafts[-1], first], f"copy_next_{j}")
    node("Unsqueeze", [node("Concat", drafts, "copy_drafts", axis=0), first], "drafts_out")
    for i, p in enumerate(past):
        node("Identity", [state[i]], "out8_" + p.name)
        body_out.append(helper.make_tensor_value_info("out8_" + p.name, TensorProto.FLOAT, kv))
