"""How often the 8-bit projection's error bound would certify a top-k: the table.

Runs SpecDec sampling (K=2, top-k ``--topk``, ONNX Runtime, batch 1) over the
first ``--sentences`` lines and keeps every verify call's final states. For each
call it computes the fp32 logits, fairseq's constraints applied, and asks: is the
k-th best logit above the bound, i.e. above every token outside the exactly
rescored candidates? Two bounds (``upper`` = exact logit + bound, an optimistic
stand-in for the 8-bit ``approx`` + bound):

- ``shipped``: the bound of :class:`~nmt_specdec.decoding.backends.onnxruntime.projection.CertifiedProjection`
  (whole-row maxima, ``SAFETY`` 2);
- ``per-block``: the rounding of each block of 64 inputs bounded on its own
  (8-bit symmetric weights and activations, ``SAFETY`` 2).

Prints, per bound and number of candidates, the share of calls whose every
position is certified; then the time of the projection's product alone at 3
positions on ONNX Runtime (1 thread): fp32, and 8-bit ``MatMulNBits`` with
activations quantized (``accuracy_level`` 4, what the certified projection
runs) and without (0, which a weight-only bound would need).

The top-k set is what the residual rule needed; the Gumbel rule needs only the
sampled token (``decision/certified.py``), which the engine now certifies on the
8-bit projection. Last, the same sentences decoded that way: how many positions
the call's own candidates settle (``certified.known_sample``), how many one
round of exact scores settles, how many need the whole vocabulary
beyond the shortlist, and how many tokens a position scores exactly. Example::

    python benchmarks/topk_certification.py --src-file work/gettext-heldout/raw/test.de
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BLOCK = 64


def per_block_bound(states: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(N, V) worst-case error of 8-bit symmetric blocks of weights and activations."""
    blocks = weight.view(weight.size(0), -1, BLOCK)  # (V, nb, 64)
    step_w = blocks.abs().amax(-1) / 127  # (V, nb)
    x = states.view(states.size(0), -1, BLOCK)  # (N, nb, 64)
    step_h = x.abs().amax(-1) / 127  # (N, nb)
    rows_l1 = blocks.abs().sum(-1) + BLOCK * step_w / 2
    states_l1 = x.abs().sum(-1) + BLOCK * step_h / 2
    return 2.0 * ((step_h / 2) @ rows_l1.t() + states_l1 @ (step_w / 2).t()) + 1e-3


def certified_share(calls, weight, coef, topk: int, candidates: List[int]):
    """{(bound, candidates): share of calls certified}."""
    counts = {}
    for states, logits in calls:
        kth = logits.topk(topk, -1).values[:, -1]  # (N,)
        size = states.abs()
        stats = torch.stack([size.amax(-1), size.sum(-1), torch.ones_like(states[:, 0])], -1)
        exact = states @ weight.t()
        for name, bound in (("shipped", stats @ coef), ("per-block",
                                                         per_block_bound(states, weight))):
            upper = exact + bound
            for m in candidates:
                above = upper.topk(m + 1, -1).values[:, m]
                key = (name, m)
                counts[key] = counts.get(key, 0) + bool((kth > above).all())
    return {key: value / len(calls) for key, value in counts.items()}


def product_times(weight: torch.Tensor, repeats: int = 300) -> dict:
    """{name: ms} of the (1, 3, C) x (C, V) product in fp32 and in 8-bit blocks."""
    import time

    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    vocab, dim = weight.shape
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, dim])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, vocab])]
    states = np.random.default_rng(0).standard_normal((1, 3, dim)).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    times = {}
    for name, level in (("fp32", None), ("8-bit, accuracy_level 4", 4),
                        ("8-bit, accuracy_level 0", 0)):
        graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "p", inputs,
                                  outputs, [numpy_helper.from_array(weight.t().numpy().copy(), "w")])
        made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        if level is not None:
            quantizer = MatMulNBitsQuantizer(made, bits=8, block_size=BLOCK, is_symmetric=True,
                                             accuracy_level=level)
            quantizer.process()
            made = quantizer.model.model
        session = ort.InferenceSession(made.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        for _ in range(20):
            session.run(None, {"x": states})
        start = time.perf_counter()
        for _ in range(repeats):
            session.run(None, {"x": states})
        times[name] = (time.perf_counter() - start) / repeats * 1e3
    return times


def winner_rounds(task, model, generator, samples) -> dict:
    """Decodes ``samples`` with ``generator`` (certified top-k sampling), counting
    per sampled position its rounds of exact scoring (``ProjectionCheck.exact``
    calls) and whether it left the shortlist."""
    import sampling_speed as speed

    from nmt_specdec.decoding.backends.onnxruntime.projection import ProjectionCheck
    from nmt_specdec.decoding.decision import certified, sampling

    counts = {"positions": 0, "calls": 0, "tokens": 0, "whole": 0, "one_round": 0, "known": 0}
    sample, winner, exact = certified.certified_sample, certified._winner, ProjectionCheck.exact
    known = certified.known_sample

    def counted_known(*args, **kwargs):
        before = counts["calls"]
        found = known(*args, **kwargs)
        counts["positions"] += found is not None
        counts["known"] += found is not None
        counts["one_round"] += found is not None and counts["calls"] - before == 1
        return found

    def counted_sample(*args):
        before = counts["calls"]
        counts["positions"] += 1
        found = sample(*args)
        counts["one_round"] += counts["calls"] - before == 1
        return found

    def counted_winner(upper, ids, *args):
        counts["whole"] += ids.size == upper.size and ids.size > certified.SHORTLIST
        return winner(upper, ids, *args)

    def counted_exact(self, state, ids):
        counts["calls"] += 1
        counts["tokens"] += ids.size
        return exact(self, state, ids)

    sampling.certified_sample, certified._winner = counted_sample, counted_winner
    sampling.known_sample = counted_known
    ProjectionCheck.exact = counted_exact
    try:
        speed.decode(task, model, generator, samples)
    finally:
        sampling.certified_sample, certified._winner = sample, winner
        sampling.known_sample = known
        ProjectionCheck.exact = exact
    return counts


def main(argv: Optional[List[str]] = None) -> int:
    import fairseq_plugins  # noqa: F401
    import sampling_speed as speed

    from nmt_specdec.decoding.backends.onnxruntime.projection import CertifiedProjection
    from nmt_specdec.decoding.build import build_decoder
    from nmt_specdec.decoding.loops import single_row
    from nmt_specdec.decoding.options import DecodingOptions
    from nmt_specdec.evaluation.machine import cpu_model
    from nmt_specdec.shipped_models import ShippedModel

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    speed.add_input_args(p)
    p.add_argument("--candidates", type=int, nargs="+", default=[16, 32, 48, 64, 96, 128])
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)  # the samples' seed: the same calls on every run
    task, model, spm = speed.load(Path(args.model_dir))
    settings = ShippedModel.at(Path(args.model_dir)).settings
    generator = build_decoder(model, task.target_dictionary,  # fp32: the exact logits
                              DecodingOptions(True, k=2, backend="onnxruntime",
                                              exact_scores=True),
                              speed.generation_args(args.topk, settings))
    calls, scores = [], single_row.constrained_scores

    def kept(verifier, verified, constrain, margin, **kwargs):
        logits, lse = scores(verifier, verified, constrain, margin, **kwargs)
        calls.append((verified.hidden[0].float().clone(), logits[0].clone()))
        return logits, lse

    single_row.constrained_scores = kept
    lines = Path(args.src_file).read_text(encoding="utf-8").splitlines()[: args.sentences]
    speed.decode(task, model, generator, speed.batches(task, spm, lines, 1))
    weight = model.decoder.output_projection.weight.detach().float()
    coef = CertifiedProjection(weight).coef
    shares = certified_share(calls, weight, coef, args.topk, args.candidates)
    print(f"{args.model_dir}, first {len(lines)} lines, {len(calls)} verify calls (K=2, "
          f"3 positions), top-{args.topk}, {cpu_model()}")
    print(f"{'candidates':>10} " + " ".join(f"{m:>7}" for m in args.candidates))
    for name in ("shipped", "per-block"):
        print(f"{name:>10} " + " ".join(f"{shares[name, m]:7.1%}" for m in args.candidates))
    print("\nthe projection's product alone, 3 positions, 1 thread:")
    for name, ms in product_times(weight).items():
        print(f"  {name:26} {ms:6.2f} ms")
    certified = build_decoder(model, task.target_dictionary,
                              DecodingOptions(True, k=2, backend="onnxruntime"),
                              speed.generation_args(args.topk, settings))
    torch.manual_seed(0)
    c = winner_rounds(task, model, certified, speed.batches(task, spm, lines, 1))
    n = c["positions"]
    print(f"\nthe sampled token certified on the 8-bit projection: {n} positions; settled by the "
          f"call's candidates {c['known'] / n:.1%}; in one round of exact scores "
          f"{c['one_round'] / n:.1%}; "
          f"checked over the whole vocabulary {c['whole'] / n:.1%}; tokens scored exactly per "
          f"position {c['tokens'] / n:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
