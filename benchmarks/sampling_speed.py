"""Speculative sampling against fairseq's sampling and the engine's own, one process.

Decodes the first ``--sentences`` lines of ``--src-file`` (batch 1, or
``--batch-size``, in input order) with
``--sampling --sampling-topk K`` in each of: stock fairseq (``SequenceGenerator``),
CTranslate2 (fp32, its ``sampling_topk``), and on each of ``--backends`` the
engine at K=0 (its own sampling) and SpecDec sampling at each ``--ks`` (drafts
from the draft head's distribution; with ``--drafters verifier-int8`` also from
the verifier's 8-bit copy's, on ONNX Runtime), beside greedy rows (stock, the
engine's K=0 and CTranslate2), over ``--repeats`` passes: whole passes in turn,
or with ``--interleave`` batch by batch in turn. Prints tokens per
second, the ratios (greedy rows against stock greedy), tokens per iteration and
acceptance per slot. Then it samples one sentence ``--repeat-one`` times with
fairseq's sampling and with SpecDec sampling and prints a chi-square two-sample
test of the two output frequency tables.

Example (from the repository root; the test sentences as ``make quickstart``
prepares them)::

    python benchmarks/sampling_speed.py --src-file work/gettext-heldout/raw/test.de
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec import logs  # noqa: E402
from nmt_specdec.shipped_models import ShippedModel  # noqa: E402


def load(model_dir: Path):
    """(task, model, spm) of a shipped model, its draft head attached."""
    import sentencepiece

    from nmt_specdec import checkpoints
    from nmt_specdec.model.head_file import attach_head_file

    shipped = ShippedModel.at(model_dir)
    model, task = checkpoints.load(str(shipped.checkpoint), {"data": str(model_dir)},
                                   specdec_task=True)
    attach_head_file(model.eval(), Path(shipped.draft_head))
    return task, model, sentencepiece.SentencePieceProcessor(model_file=str(shipped.spm_model))


def generation_args(topk: int, settings: dict):
    from fairseq.dataclass.configs import GenerationConfig

    return GenerationConfig(beam=1, sampling=True, sampling_topk=topk,
                            max_len_a=settings["max_len_a"], max_len_b=settings["max_len_b"])


def ct2_rows(task, model, model_dir: Path, settings: dict, topk: int, threads: int,
             out: Path) -> Dict[str, object]:
    """CTranslate2 fp32 greedy and top-k sampling on the same verifier."""
    import ctranslate2

    from nmt_specdec.decoding.options import LengthRules
    from nmt_specdec.evaluation.ct2 import CT2Generator, convert_verifier

    shipped = ShippedModel.at(model_dir)
    converted = convert_verifier(str(shipped.checkpoint), str(model_dir), "de", "en", str(out))
    translator = ctranslate2.Translator(converted, device="cpu", compute_type="float32",
                                        inter_threads=1, intra_threads=threads)
    rules = LengthRules(max_len_a=settings["max_len_a"], max_len_b=settings["max_len_b"],
                        max_positions=model.max_decoder_positions())
    dicts = (task.source_dictionary, task.target_dictionary)
    return {"CTranslate2 greedy fp32": CT2Generator(translator, *dicts, rules),
            f"CTranslate2 sampling top-{topk} fp32": CT2Generator(translator, *dicts, rules,
                                                                 sampling_topk=topk)}


def generators(task, model, args, ks: List[int], backends: List[str],
               candidates: int = 1, fp32_projection: bool = False,
               drafters: Sequence[str] = ()) -> Dict[str, object]:
    """Stock sampling first (the table's baseline), then greedy on stock and the
    engine, then the engine's sampling at K=0 and SpecDec sampling per backend
    (with ``candidates`` above 1, trees of that width too; with
    ``fp32_projection``, ONNX Runtime's rows again with ``--exact-scores``: the
    all-fp32 output projection instead of the certified 8-bit one; ``drafters``:
    ONNX Runtime's SpecDec rows again with each of these ``--spec-drafter``)."""
    from fairseq.dataclass.configs import GenerationConfig

    from nmt_specdec.decoding.build import build_decoder, fairseq_generator
    from nmt_specdec.decoding.options import DecodingOptions

    greedy = GenerationConfig(beam=1, max_len_a=args.max_len_a, max_len_b=args.max_len_b)
    made = {"stock sampling": fairseq_generator(task, model, args)(),
            "stock greedy": fairseq_generator(task, model, greedy)()}
    for backend in backends:
        made[f"engine greedy K=0 {backend}"] = build_decoder(
            model, task.target_dictionary, DecodingOptions(True, k=0, backend=backend), greedy)
    for backend in backends:
        for k in (0, *ks):
            name = f"{'engine' if k == 0 else 'SpecDec'} sampling K={k} {backend}"
            made[name] = build_decoder(model, task.target_dictionary,
                                       DecodingOptions(True, k=k, backend=backend), args)
            if k and candidates > 1:
                made[f"SpecDec sampling K={k} C={candidates} {backend}"] = build_decoder(
                    model, task.target_dictionary,
                    DecodingOptions(True, k=k, backend=backend, candidates=candidates), args)
            for drafter in drafters if k and backend == "onnxruntime" else ():
                made[f"SpecDec sampling K={k} drafter={drafter} {backend}"] = build_decoder(
                    model, task.target_dictionary,
                    DecodingOptions(True, k=k, backend=backend, drafter=drafter), args)
            if fp32_projection and backend == "onnxruntime":
                made[f"{name.split()[0]} sampling K={k} fp32-projection {backend}"] = (
                    build_decoder(model, task.target_dictionary,
                                  DecodingOptions(True, k=k, backend=backend,
                                                  exact_scores=True), args))
    return made


def batches(task, spm, lines: List[str], size: int) -> List[dict]:
    src = task.source_dictionary
    tokens = [torch.tensor([src.index(p) for p in spm.encode(line, out_type=str)] + [src.eos()])
              for line in lines]
    dataset = task.build_dataset_for_inference(tokens, [t.numel() for t in tokens])
    return [dataset.collater([dataset[i] for i in range(start, min(len(lines), start + size))])
            for start in range(0, len(lines), size)]


def decode(task, model, generator, samples: List[dict]) -> List[tuple]:
    outputs = []
    for sample in samples:
        for hyps in task.inference_step(generator, [model], sample):
            outputs.append(tuple(hyps[0]["tokens"].tolist()))
    return outputs


def interleaved_pass(task, model, made: Dict[str, object], samples: List[dict],
                     seed: int) -> Dict[str, tuple]:
    """One pass of every row, interleaved batch by batch (each batch decoded by
    every row in turn, the order rotated by one a batch, each with ``seed``), so
    that every row meets the same moments of the machine: (seconds, tokens)."""
    names = list(made)
    seconds, tokens = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0)
    for index, sample in enumerate(samples):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            torch.manual_seed(seed)
            start = time.perf_counter()
            outputs = decode(task, model, made[name], [sample])
            seconds[name] += time.perf_counter() - start
            tokens[name] += sum(map(len, outputs))
    return {name: (seconds[name], tokens[name]) for name in names}


def speed_table(task, model, made: Dict[str, object], samples: List[dict],
                repeats: int, interleave: bool = False) -> List[dict]:
    """Tokens per second of each row, the median of ``repeats`` timed passes
    after one untimed (whole passes in turn, or ``interleave``d batch by batch)."""
    seconds: Dict[str, List[float]] = {name: [] for name in made}
    tokens: Dict[str, int] = {}
    for repeat in range(repeats + 1):  # the first pass warms up, untimed
        for generator in made.values():
            if hasattr(generator, "stats"):
                generator.stats.__init__()
        if interleave:
            timed = interleaved_pass(task, model, made, samples, repeat)
        else:
            timed = {}
            for name, generator in made.items():
                torch.manual_seed(repeat)
                start = time.perf_counter()
                outputs = decode(task, model, generator, samples)
                timed[name] = (time.perf_counter() - start, sum(map(len, outputs)))
        if repeat:
            for name, (spent, count) in timed.items():
                seconds[name].append(spent)
                tokens[name] = count
    rows = []
    for name, generator in made.items():
        stats = getattr(generator, "stats", None)
        speed = tokens[name] / statistics.median(seconds[name])
        rows.append({"row": name, "tokens_per_s": speed, "tokens": tokens[name],
                     "tokens_per_iteration": stats.mean_accepted_tokens if stats else None,
                     "slot_acceptance": stats.slot_acceptance() if stats else None})
    return rows


def print_speed(rows: List[dict]) -> None:
    """The table; ``x stock``: against stock sampling (greedy rows: stock greedy);
    ``x K=0``: against the engine's own sampling on the same backend."""
    speed = {r["row"]: r["tokens_per_s"] for r in rows}
    print(f"{'row':56} {'tok/s':>7} {'x stock':>8} {'x K=0':>6} {'tok/it':>7}  acceptance by slot")
    for r in rows:
        engine = speed.get(f"engine sampling K=0 {r['row'].split()[-1]}")
        versus = "" if engine is None else f"{r['tokens_per_s'] / engine:.2f}"
        stock = speed["stock greedy" if "greedy" in r["row"] else "stock sampling"]
        per_it = "" if r["tokens_per_iteration"] is None else f"{r['tokens_per_iteration']:.2f}"
        slots = " ".join(f"{a:.2f}" for a in (r["slot_acceptance"] or []))
        print(f"{r['row']:56} {r['tokens_per_s']:7.1f} {r['tokens_per_s'] / stock:8.2f} "
              f"{versus:>6} {per_it:>7}  {slots}")


def two_sample(task, model, made, spm, line: str, count: int, k: int, backend: str) -> None:
    from scipy.stats import chi2_contingency

    samples = batches(task, spm, [line] * count, 100)
    torch.manual_seed(0)  # the two samples draw with seeds of their own
    stock = Counter(decode(task, model, made["stock sampling"], samples))
    torch.manual_seed(1)
    spec = Counter(decode(task, model, made[f"SpecDec sampling K={k} {backend}"], samples))
    common = [o for o in set(stock) | set(spec) if stock[o] + spec[o] >= 10]
    rest = [sum(c[o] for o in c if o not in common) for c in (stock, spec)]
    table = [[stock[o] for o in common] + [rest[0]], [spec[o] for o in common] + [rest[1]]]
    result = chi2_contingency(table)
    print(f"\none sentence x {count}: {len(set(stock))} distinct outputs (fairseq), "
          f"{len(set(spec))} (SpecDec K={k} {backend}); chi-square two-sample over {len(common) + 1} "
          f"cells: statistic {result.statistic:.1f}, dof {result.dof}, p = {result.pvalue:.3f}")


def add_input_args(p: argparse.ArgumentParser) -> None:
    """The model, the sentences and the sampling cut (shared with topk_certification.py)."""
    p.add_argument("--model-dir", default="models/gettext-de-en-base")
    p.add_argument("--src-file", required=True)
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--topk", type=int, default=10)


def main(argv: Optional[List[str]] = None) -> int:
    logs.setup(verbose=False)  # fairseq's import-time INFO lines (tensorboardX) stay quiet
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model)

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_input_args(p)
    p.add_argument("--ks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--backends", nargs="+", default=["onnxruntime", "torch"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=1, help="sentences per batch (in input order)")
    p.add_argument("--candidates", type=int, default=1,
                   help="above 1: also SpecDec sampling with draft trees of this width")
    p.add_argument("--repeat-one", type=int, default=2000)
    p.add_argument("--no-ct2", action="store_true", help="leave out the CTranslate2 rows")
    p.add_argument("--fp32-projection", action="store_true",
                   help="ONNX Runtime's sampling rows also with the all-fp32 output projection")
    p.add_argument("--interleave", action="store_true",
                   help="time the rows batch by batch in turn instead of whole passes")
    p.add_argument("--drafters", nargs="*", default=[], choices=["verifier-int8", "verifier-int4"],
                   help="ONNX Runtime's SpecDec rows also with these --spec-drafter")
    p.add_argument("--ct2-dir", default="work/sampling_speed_ct2",
                   help="where the verifier is converted for CTranslate2")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    task, model, spm = load(Path(args.model_dir))
    settings = ShippedModel.at(Path(args.model_dir)).settings
    made = generators(task, model, generation_args(args.topk, settings), args.ks,
                      args.backends, args.candidates, args.fp32_projection, args.drafters)
    if not args.no_ct2:
        made.update(ct2_rows(task, model, Path(args.model_dir), settings, args.topk,
                             args.threads, Path(args.ct2_dir)))
    lines = Path(args.src_file).read_text(encoding="utf-8").splitlines()[: args.sentences]
    from nmt_specdec.evaluation.machine import cpu_model

    print(f"{args.model_dir}, first {len(lines)} lines of {args.src_file}, batch {args.batch_size}, "
          f"--sampling --sampling-topk {args.topk}, {args.threads} thread(s), "
          f"{cpu_model()}, median of {args.repeats} passes"
          f"{' interleaved batch by batch' if args.interleave else ''}")
    print_speed(speed_table(task, model, made, batches(task, spm, lines, args.batch_size),
                            args.repeats, args.interleave))
    if args.repeat_one:
        two_sample(task, model, made, spm, lines[0], args.repeat_one, args.ks[0],
                   args.backends[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
