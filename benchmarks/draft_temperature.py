"""Speculative sampling's acceptance when the draft head's distribution is tempered.

Under ``--sampling`` the head drafts the perturbed argmax of its own distribution
``q`` (the verifier's temperature and cut, the verifier's noise), and a draft is
kept where it equals the verifier's perturbed argmax. If ``q`` were sharper or
flatter than the verifier's ``p``, dividing the head's logits by a further factor
would make the two argmaxes agree more often. This probe decodes the same
sentences with SpecDec sampling at each ``--factors`` (the head's logits divided
by temperature x factor; 1 is what the engine does) and prints tokens per
iteration and acceptance per slot, over every ``--seeds`` (torch's seed before each
pass); every factor must give the same samples (any drafter keeps the output
exact), which the last column checks.

Example (from the repository root; the test sentences as ``make quickstart``
prepares them)::

    python benchmarks/draft_temperature.py --src-file work/gettext-heldout/raw/test.de
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import sampling_speed  # noqa: E402
from nmt_specdec.decoding.loops import sampled, single_row  # noqa: E402


def tempered(factor: float):
    """:func:`~nmt_specdec.decoding.decision.sampling.draft_lprobs`, the logits
    divided by ``factor`` more."""
    def draft_lprobs(draft_logits, temperature: float):
        return torch.log_softmax(draft_logits.float() / (temperature * factor), -1)
    return draft_lprobs


def main(argv: Optional[List[str]] = None) -> int:
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model)
    from nmt_specdec.decoding.build import build_decoder
    from nmt_specdec.decoding.options import DecodingOptions
    from nmt_specdec.evaluation.machine import cpu_model
    from nmt_specdec.shipped_models import ShippedModel

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sampling_speed.add_input_args(p)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--factors", type=float, nargs="+", default=[1.0, 0.5, 0.7, 1.4, 2.0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--backend", default="onnxruntime")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    model_dir = Path(args.model_dir)
    task, model, spm = sampling_speed.load(model_dir)
    generation = sampling_speed.generation_args(args.topk, ShippedModel.at(model_dir).settings)
    lines = Path(args.src_file).read_text(encoding="utf-8").splitlines()[: args.sentences]
    samples = sampling_speed.batches(task, spm, lines, 1)
    generator = build_decoder(model, task.target_dictionary,
                              DecodingOptions(True, k=args.k, backend=args.backend), generation)
    print(f"{model_dir}, first {len(lines)} lines, batch 1, --sampling --sampling-topk {args.topk}, "
          f"seeds {args.seeds}, SpecDec K={args.k} [{args.backend}], {cpu_model()}")
    print(f"{'factor':>6} {'tok/it':>7} {'seconds':>8}  acceptance by slot   same samples as 1")
    reference = None
    for factor in sorted(args.factors, key=lambda f: f != 1.0):
        sampled.draft_lprobs = single_row.draft_lprobs = tempered(factor)
        generator.stats.__init__()
        start, outputs = time.perf_counter(), []
        for seed in args.seeds:
            torch.manual_seed(seed)
            outputs += sampling_speed.decode(task, model, generator, samples)
        seconds = time.perf_counter() - start
        reference = outputs if reference is None else reference
        stats = generator.stats
        slots = " ".join(f"{a:.3f}" for a in stats.slot_acceptance())
        print(f"{factor:6.2f} {stats.mean_accepted_tokens:7.3f} {seconds:8.1f}  {slots:18}  "
              f"{outputs == reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
