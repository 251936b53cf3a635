"""What the engine's Python loop costs: greedy decoding as one ONNX ``Loop``.

The engine decides every step on the host: one verify call, then acceptance,
constraints and bookkeeping in Python (~0.25 ms a step at batch 1 on ONNX
Runtime, beside a ~0.73 ms call). This probe puts the whole greedy decode of a
sentence into one runtime call: an ONNX ``Loop`` whose body is the exported
fp32 verify graph (certified 8-bit projection) for one position, followed by
the engine's constraints (never pad; no EOS before ``min_len``; EOS at
``max_len``), the certification check (an ``If`` that recomputes the logits in
fp32 where the bound does not certify the step) and the argmax. The past
keys/values grow by ``Concat`` as loop state. It prints the time per token of
both decoders on the same sentences (interleaved, fastest of the repeats) and
checks that they choose the same tokens.

It is a probe, not a decoder: batch 1, no ``--unkpen``, and a tie between the
best two logits is decided by ``ArgMax`` (the first index) where the engine
uses its shared tie order.

Shapes: L layers, H heads, D head dim, C model dim, V vocabulary.
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
import time
from typing import List, Optional

import numpy as np
import torch

from nmt_specdec.errors import UserError

BODY = "v_"  # prefix of the verify graph's names inside the loop body


def build_greedy_loop(verify, exact_wt: np.ndarray, pad: int, eos: int):
    """The greedy decoding graph around ``verify`` (the fp32 certified verify
    graph, an ``onnx.ModelProto``); ``exact_wt`` is the (C, V) fp32 output
    projection for the uncertified steps.

    Inputs: ``memory_mask`` and ``cross_*`` (as the verify graph's), ``limit``
    (the step at which EOS is forced), ``min_len``, ``trips`` (``limit + 1``).
    Outputs: ``tokens`` (steps, 1) and ``scores`` (steps, 1), EOS last.
    """
    from onnx import TensorProto, helper, numpy_helper

    graph = verify.graph
    past = [i for i in graph.input if i.name.startswith("past_")]
    heads, head_dim = (past[0].type.tensor_type.shape.dim[i].dim_value for i in (1, 3))
    outer = {i.name for i in graph.input if i.name == "memory_mask" or i.name.startswith("cross_")}
    outer |= {t.name for t in graph.initializer}
    vocab = exact_wt.shape[1]
    constants: List = []
    nodes: List = []

    def const(name: str, value) -> str:
        constants.append(helper.make_node("Constant", [], [name],
                                          value=numpy_helper.from_array(np.asarray(value), name)))
        return name

    def node(op: str, inputs: List[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [output], **attrs))
        return output

    kv_type = [1, heads, None, head_dim]
    body_in = [helper.make_tensor_value_info("step", TensorProto.INT64, []),
               helper.make_tensor_value_info("go", TensorProto.BOOL, []),
               helper.make_tensor_value_info("last", TensorProto.INT64, [1, 1])]
    body_in += [helper.make_tensor_value_info("state_" + p.name, TensorProto.FLOAT, kv_type)
                for p in past]
    # The verify graph's inputs for one new position at position `step`.
    node("Reshape", ["step", const("one", np.array([1]))], BODY + "start")
    node("Identity", ["last"], BODY + "tokens")
    node("Identity", [const("zero_offset", np.array([0]))], BODY + "offsets")
    node("Identity", [const("itself", np.ones((1, 1), bool))], BODY + "ancestors")
    for p in past:
        node("Identity", ["state_" + p.name], BODY + p.name)
    for original in graph.node:
        copied = copy.deepcopy(original)
        for names in (copied.input, copied.output):
            renamed = [n if n == "" or n in outer else BODY + n for n in names]
            del names[:]
            names.extend(renamed)
        nodes.append(copied)
    # The engine's constraints as an additive mask over the vocabulary.
    pad_mask, no_eos, only_eos = (np.zeros(vocab, np.float32) for _ in range(3))
    pad_mask[pad], no_eos[eos] = -np.inf, -np.inf
    only_eos[:] = -np.inf
    only_eos[eos] = 0
    zeros = const("zeros", np.zeros(vocab, np.float32))
    early = node("Where", [node("Less", ["step", "min_len"], "early"), const("no_eos", no_eos),
                           zeros], "early_mask")
    late = node("Where", [node("GreaterOrEqual", ["step", "limit"], "late"),
                          const("only_eos", only_eos), zeros], "late_mask")
    mask = node("Add", [node("Add", [early, late], "length_mask"), const("pad_mask", pad_mask)],
                "mask")
    squeeze = const("first_two", np.array([0, 1]))
    scores = node("Add", [node("Squeeze", [BODY + "logits", squeeze], "raw"), mask], "constrained")
    certain = node("Greater", [node("ReduceMax", [scores], "best", keepdims=0),
                               node("Squeeze", [BODY + "bound", squeeze], "bound")], "certain")
    lse = node("Squeeze", [BODY + "normaliser", squeeze], "lse")
    out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
           for n, s in (("scores_out", [vocab]), ("lse_out", []))]
    kept = helper.make_graph([helper.make_node("Identity", [scores], ["scores_out"]),
                              helper.make_node("Identity", [lse], ["lse_out"])], "kept", [], out)
    exact = helper.make_graph([
        helper.make_node("Squeeze", [BODY + "hidden", squeeze], ["state"]),
        helper.make_node("MatMul", ["state", "exact_wt"], ["exact"]),
        helper.make_node("ReduceLogSumExp", ["exact"], ["lse_out"], keepdims=0),
        helper.make_node("Add", ["exact", mask], ["scores_out"])], "exact", [], out)
    nodes.append(helper.make_node("If", [certain], ["chosen", "chosen_lse"],
                                  then_branch=kept, else_branch=exact))
    token = node("ArgMax", ["chosen"], "token", keepdims=1)  # (1,)
    node("Sub", [node("Gather", ["chosen", token], "logit"), "chosen_lse"], "score")
    node("Reshape", [token, const("one_by_one", np.array([1, 1]))], "last_out")
    node("Squeeze", [node("Not", [node("Equal", [token, const("eos", np.array([eos]))], "ended")],
                          "going")], "go_out")
    body_out = [helper.make_tensor_value_info("go_out", TensorProto.BOOL, []),
                helper.make_tensor_value_info("last_out", TensorProto.INT64, [1, 1])]
    for index, p in enumerate(past):
        layer, kind = index // 2, "new_keys" if index % 2 == 0 else "new_values"
        new = node("Gather", [BODY + kind, const(f"layer_{index}", np.array(layer))],
                   f"new_{p.name}", axis=0)
        node("Concat", ["state_" + p.name, new], "out_" + p.name, axis=2)
        body_out.append(helper.make_tensor_value_info("out_" + p.name, TensorProto.FLOAT, kv_type))
    body_out += [helper.make_tensor_value_info(n, t, [1]) for n, t in
                 (("token", TensorProto.INT64), ("score", TensorProto.FLOAT))]
    body = helper.make_graph(constants + nodes, "step", body_in, body_out)
    inputs = [i for i in graph.input if i.name in outer]
    inputs += [helper.make_tensor_value_info(n, TensorProto.INT64, []) for n in
               ("limit", "min_len", "trips")]
    start = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))
             for name, value in (("start_go", np.array(True)),
                                 ("bos", np.array([[eos]], np.int64)),
                                 ("no_past", np.zeros((1, heads, 0, head_dim), np.float32)))]
    loop = helper.make_node("Loop", ["trips", "start_go", "bos"] + ["no_past"] * len(past),
                            ["last_final"] + [f"final_{p.name}" for p in past]
                            + ["tokens", "scores"], body=body)
    main = helper.make_graph(
        start + [loop], "greedy", inputs,
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [None, 1]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 1])],
        initializer=list(graph.initializer) + [numpy_helper.from_array(exact_wt, "exact_wt")])
    model = helper.make_model(main, opset_imports=list(verify.opset_import))
    model.ir_version = verify.ir_version
    return model


def probe(model, task, sources: List[torch.Tensor], rules, repeats: int, threads: int):
    """Rows of the table: the engine's greedy and the loop graph, ms per token
    (``rules``: the :class:`~nmt_specdec.decoding.options.LengthRules`)."""
    import onnx
    import onnxruntime

    from nmt_specdec.decoding.backends import make_backend
    from nmt_specdec.decoding.backends.onnxruntime.export import VERIFY
    from nmt_specdec.decoding.loop import SpecDecGenerator
    from nmt_specdec.decoding.options import SpecDecOptions

    torch.set_num_threads(threads)
    dictionary = task.target_dictionary
    backend = make_backend("onnxruntime", model, dictionary)
    if not backend.certified:
        raise UserError("the probe needs the certified fp32 verify graph (a vocabulary "
                        "larger than 64)")
    engine = SpecDecGenerator(model, dictionary, SpecDecOptions(k=0), rules, backend=backend)
    weight = model.decoder.output_projection.weight.detach().numpy()
    graph = build_greedy_loop(onnx.load(str(backend.directory / VERIFY)),
                              np.ascontiguousarray(weight.T), dictionary.pad(), dictionary.eos())
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = onnxruntime.InferenceSession(graph.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    samples = [{"net_input": {"src_tokens": s.view(1, -1),
                              "src_lengths": torch.tensor([s.numel()])}} for s in sources]

    def loop_decode(sample) -> List[int]:
        memory = backend.encode(sample["net_input"])
        limit = int(engine.lengths.max_lengths(sample["net_input"]["src_tokens"],
                                               dictionary.pad())[0])
        names = [i.name for i in session.get_inputs()]
        values = dict(zip(["memory_mask"] + [f"cross_{kind}_{layer}"
                                             for layer in range(len(memory.cross) // 2)
                                             for kind in ("key", "value")],
                          [memory.mask.numpy()] + [t.numpy() for t in memory.cross]))
        values.update(limit=np.array(limit), min_len=np.array(engine.lengths.min_len),
                      trips=np.array(limit + 1))
        return session.run(["tokens"], {n: values[n] for n in names})[0][:, 0].tolist()

    def engine_decode(sample) -> List[int]:
        return engine.generate([model], sample)[0][0]["tokens"].tolist()

    seconds = {"engine greedy [onnxruntime]": [], "greedy as one ONNX Loop": []}
    outputs = {}
    for decode in (engine_decode, loop_decode):  # warm-up
        for sample in samples[:10]:
            decode(sample)
    for _ in range(repeats):
        for name, decode in zip(seconds, (engine_decode, loop_decode)):
            started = time.perf_counter()
            outputs[name] = [decode(sample) for sample in samples]
            seconds[name].append(time.perf_counter() - started)
    tokens = sum(map(len, outputs["engine greedy [onnxruntime]"]))
    same = sum(a == b for a, b in zip(*outputs.values()))
    base = min(seconds["engine greedy [onnxruntime]"])
    return [{"decoder": name, "ms_per_token": 1000 * min(times) / tokens,
             "vs_engine": base / min(times), "same": same, "sentences": len(samples)}
            for name, times in seconds.items()]


def main(argv: Optional[List[str]] = None) -> int:
    import fairseq_plugins  # noqa: F401  (registers the model; safe loading)

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, help="directory with the dictionaries")
    p.add_argument("--src-file", required=True, help="raw source sentences, one per line")
    p.add_argument("--spm-model", required=True)
    p.add_argument("--max-sentences", type=int, default=200)
    p.add_argument("--max-len-a", type=float, default=0.0)
    p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    logging.getLogger().setLevel(logging.WARNING)
    try:
        import sentencepiece
        from fairseq import checkpoint_utils

        from nmt_specdec.decoding.options import LengthRules

        models, _, task = checkpoint_utils.load_model_ensemble_and_task(
            [args.checkpoint], arg_overrides={"data": args.data})
        model = models[0].eval()
        spm = sentencepiece.SentencePieceProcessor(model_file=args.spm_model)
        with open(args.src_file, encoding="utf-8") as handle:
            lines = handle.read().splitlines()[: args.max_sentences]
        sources = [task.source_dictionary.encode_line(" ".join(spm.encode(line, out_type=str)),
                                                      add_if_not_exist=False).long()
                   for line in lines]
        rules = LengthRules(max_len_a=args.max_len_a, max_len_b=args.max_len_b,
                            max_positions=model.max_decoder_positions())
        rows = probe(model, task, sources, rules, args.repeats, args.threads)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("| decoder | ms per token | vs engine greedy | same tokens |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['decoder']} | {row['ms_per_token']:.3f} | {row['vs_engine']:.2f}x | "
              f"{row['same']}/{row['sentences']} |")
    return 0
