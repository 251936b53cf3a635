"""What the engine's host loop costs: ``scripts/probe_loop_graphs.py``.

Decodes the same sentences with the engine (greedy, SpecDec K) and with the
loop graphs of :mod:`.loop_graphs` (each sentence one runtime call), interleaved,
and prints milliseconds per token (fastest of the repeats), tokens per
iteration and how many outputs equal the engine's greedy. Batch 1, on the
ONNX Runtime backend's exported graphs.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Dict, List, Optional

import numpy as np
import torch

from nmt_specdec.errors import UserError
from nmt_specdec.evaluation.loop_graphs import build_loop
from nmt_specdec.evaluation.probe_inputs import add_test_set_args, load_test_set


class LoopDecoder:
    """Decodes one sentence with a :func:`build_loop` graph (``draft_k`` 0: greedy)."""

    def __init__(self, backend, model, rules, k: int, threads: int, copy: bool = False):
        import onnx
        import onnxruntime

        from nmt_specdec.decoding.backends.onnxruntime.export import DRAFT, VERIFY

        self.backend, self.rules, self.k = backend, rules, k
        weight = model.decoder.output_projection.weight.detach().numpy()
        self.copy = backend.copy_drafter(backend.pad) if copy else None
        draft = onnx.load(str(backend.directory / DRAFT)) if k and not copy else None
        copy_graph = (onnx.load(str(backend._int8_copy.directory / VERIFY)) if copy else None)
        graph = build_loop(onnx.load(str(backend.directory / VERIFY)),
                           np.ascontiguousarray(weight.T), backend.pad, backend.eos, draft, k,
                           copy_graph)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        self.session = onnxruntime.InferenceSession(graph.SerializeToString(), options,
                                                    providers=["CPUExecutionProvider"])
        self.names = [i.name for i in self.session.get_inputs()]
        self.start_state = (model.draft_head.start_state.detach().view(1, -1) if k else None)
        self.iterations = 0

    def __call__(self, sample: dict) -> List[int]:
        from nmt_specdec.decoding.backends.onnxruntime.drafters import candidate_slots

        b = self.backend
        memory = b.encode(sample["net_input"])
        limit = int(self.rules.max_lengths(sample["net_input"]["src_tokens"], b.pad)[0])
        drafts = torch.zeros(1, 1, self.k, dtype=torch.long)
        if self.copy is not None:  # the first block from the copy, as the engine drafts it
            from nmt_specdec.decoding.drafters import DraftRequest

            self.copy.start_batch(sample, memory)
            prefix = torch.full((1, limit + self.k + 2), b.pad, dtype=torch.long)
            prefix[0, 0] = b.eos
            drafts[0] = self.copy.propose(DraftRequest(prefix, torch.tensor([1]), None,
                                                       torch.tensor([0]), self.k, (0, b.eos, -1)))
        elif self.k:  # the first block, drafted as the engine drafts it
            b.draft_session.run([self.start_state, torch.tensor([b.eos]),
                                 torch.arange(self.k + 1).view(1, -1), memory.mask,
                                 candidate_slots(1), *memory.draft], [drafts])
        values = {"memory_mask": memory.mask.numpy(), "limit": np.array(limit),
                  "min_len": np.array(self.rules.min_len), "trips": np.array(limit + 1),
                  "drafts0": drafts[0].numpy()}
        for prefix, tensors in (("cross", memory.cross), ("draft", memory.draft)):
            for index, tensor in enumerate(tensors):
                values[f"{prefix}_{'key' if index % 2 == 0 else 'value'}_{index // 2}"] = (
                    tensor.numpy())
        if self.copy is not None:
            cache = self.copy.cache
            for layer in range(cache.key.size(0)):
                for kind, tensor in (("key", cache.key), ("value", cache.value)):
                    values[f"copy_past_{kind}_{layer}"] = tensor[layer, :, :, : self.k].numpy()
        blocks, counts = self.session.run(["blocks", "counts"],
                                          {n: values[n] for n in self.names})
        self.iterations += len(blocks)
        return [t for block, count in zip(blocks.tolist(), counts[:, 0]) for t in block[:count]]


def probe(model, task, sources: List[torch.Tensor], rules, k: int, repeats: int,
          threads: int, copy_k: int = 0) -> List[Dict]:
    """Rows of the table: the engine's greedy and SpecDec K, and both as loops
    (``rules``: the :class:`~nmt_specdec.decoding.options.LengthRules`)."""
    from nmt_specdec.decoding.backends import make_backend
    from nmt_specdec.decoding.loop import SpecDecGenerator
    from nmt_specdec.decoding.options import SpecDecOptions

    torch.set_num_threads(threads)
    dictionary = task.target_dictionary
    backend = make_backend("onnxruntime", model, dictionary)
    if not backend.certified:
        raise UserError("the probe needs the certified fp32 verify graph (a vocabulary "
                        "larger than 64)")
    engines = {kk: SpecDecGenerator(model, dictionary, SpecDecOptions(k=kk), rules,
                                    backend=backend) for kk in (0, k)}
    decoders = {
        "engine greedy [onnxruntime]": lambda s: engines[0].generate(
            [model], s)[0][0]["tokens"].tolist(),
        f"engine SpecDec K={k} [onnxruntime]": lambda s: engines[k].generate(
            [model], s)[0][0]["tokens"].tolist(),
        "greedy as one ONNX Loop": LoopDecoder(backend, model, rules, 0, threads),
        f"SpecDec K={k} as one ONNX Loop": LoopDecoder(backend, model, rules, k, threads)}
    if copy_k:
        decoders[f"SpecDec K={copy_k}, 8-bit copy drafts, as one ONNX Loop"] = LoopDecoder(
            backend, model, rules, copy_k, threads, copy=True)
    samples = [{"net_input": {"src_tokens": s.view(1, -1),
                              "src_lengths": torch.tensor([s.numel()])}} for s in sources]
    for decode in decoders.values():  # warm-up
        for sample in samples[:10]:
            decode(sample)
    seconds: Dict[str, List[float]] = {name: [] for name in decoders}
    outputs: Dict[str, List[List[int]]] = {}
    iterations = {}
    for _ in range(repeats):
        for name, decode in decoders.items():
            before = getattr(decode, "iterations", 0)
            started = time.perf_counter()
            outputs[name] = [decode(sample) for sample in samples]
            seconds[name].append(time.perf_counter() - started)
            iterations[name] = getattr(decode, "iterations", 0) - before
    for kk, name in ((0, "engine greedy [onnxruntime]"),
                     (k, f"engine SpecDec K={k} [onnxruntime]")):
        stats = engines[kk].stats  # every pass, warm-up included: the same tokens per iteration
        iterations[name] = sum(map(len, outputs[name])) * stats.iterations / stats.tokens
    greedy = outputs["engine greedy [onnxruntime]"]
    tokens = sum(map(len, greedy))
    base = min(seconds["engine greedy [onnxruntime]"])
    return [{"decoder": name, "ms_per_token": 1000 * min(times) / tokens,
             "vs_engine": base / min(times),
             "tokens_per_iteration": tokens / iterations[name] if iterations[name] else None,
             "same": sum(a == b for a, b in zip(outputs[name], greedy)),
             "sentences": len(samples)}
            for name, times in seconds.items()]


def main(argv: Optional[List[str]] = None) -> int:
    import fairseq_plugins  # noqa: F401  (registers the model; safe loading)

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_test_set_args(p)
    p.add_argument("--k", type=int, default=2, help="draft block size of the SpecDec rows")
    p.add_argument("--copy-k", type=int, default=0,
                   help="also a loop drafting K tokens with the verifier's 8-bit copy")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    logging.getLogger().setLevel(logging.WARNING)
    try:
        test = load_test_set(args)
        rows = probe(test.model, test.task, test.sources, test.rules, args.k, args.repeats,
                     args.threads, args.copy_k)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("| decoder | ms per token | vs engine greedy | tok/iter | same as engine greedy |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        tpi = row["tokens_per_iteration"]
        print(f"| {row['decoder']} | {row['ms_per_token']:.3f} | {row['vs_engine']:.2f}x | "
              f"{'n/a' if tpi is None else f'{tpi:.2f}'} | {row['same']}/{row['sentences']} |")
    return 0
