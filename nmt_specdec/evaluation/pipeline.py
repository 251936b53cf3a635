"""``run(cfg)``: load once, decode every configuration interleaved, score, report.

Steps: runtime (device, threads) -> checkpoint -> test set -> generators ->
warm-up -> interleaved timed passes -> optional profile pass -> BLEU/chrF ->
results.json, results.md, bleu_vs_speedup.png.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import logging
import os
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from nmt_specdec.decoding.backends import resolve_backend
from nmt_specdec.decoding.options import VERIFIER_COPIES
from nmt_specdec.errors import UserError
from nmt_specdec.evaluation import loading, machine, metrics, mismatch, report, runner
from nmt_specdec.evaluation.config import BASELINE, EvalConfig, build_grid
from nmt_specdec.evaluation.ct2 import ct2_supports
from nmt_specdec.evaluation.plot import plot_bleu_vs_speedup
from nmt_specdec.evaluation.profiling import Profile, profile_run
from nmt_specdec.evaluation.runner import Run
from nmt_specdec.evaluation.testset import (
    TestSet,
    check_lengths,
    load_binarized,
    load_raw,
    make_batches,
)
from nmt_specdec.evaluation.time_split import plot_time_split
from nmt_specdec.evaluation.validation import validate

logger = logging.getLogger(__name__)

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
PLOT_PNG = "bleu_vs_speedup.png"
TIME_SPLIT_PNG = "time_split.png"  # with --profile


def run(cfg: EvalConfig) -> dict:
    """Runs the whole evaluation and writes its three files into ``cfg.out``.

    Returns:
        The results (what ``results.json`` holds).
    """
    validate(cfg)
    make_out_dir(cfg.out)  # before decoding: a bad --out must not cost a whole run
    device = setup_runtime(cfg)
    # Rows are labelled by the backend that ran them: resolve `auto` for this device.
    cfg = dataclasses.replace(cfg, backends=tuple(dict.fromkeys(
        resolve_backend(name, device) for name in cfg.backends)))
    started = time.perf_counter()
    model, task = loading.load_checkpoint(cfg, device)
    detokenize = metrics.Detokenizer(
        task.target_dictionary, cfg.spm_model, cfg.post_process
    )
    testset = load_testset(cfg, task, detokenize)
    check_lengths(testset.sources, model.max_positions()[0])
    specs = build_grid(cfg, getattr(model, "draft_block_size", None))
    if not hasattr(model, "draft_head") and set(cfg.drafters) & set(VERIFIER_COPIES):
        # No head to draft with: the copies' rows (and greedy) stand alone.
        specs = [s for s in specs if not (s.kind == "specdec" and s.k and s.drafter == "head")]
    if any(spec.kind == "specdec" for spec in specs):
        loading.check_specdec_supported(task, model, specs)
    specs = [spec for spec in specs if spec.kind != "ct2" or ct2_supports(spec, device)]
    models = precision_copies(model, cfg.precisions)
    runs = build_runs(cfg, task, models, specs, testset, device)
    orders = runner.pass_orders(len(runs), cfg.repeats, cfg.order_seed)
    profiles = decode_all(cfg, task, runs, device, orders)
    rows, signatures = score_runs(runs, testset, detokenize, profiles)
    ties = _greedy_mismatches(models, task, runs, testset)
    results = {
        "schema_version": report.SCHEMA_VERSION,
        "command": cfg.command,
        "config": _config_dict(cfg),
        "machine": machine.machine_info(device),
        "model": _model_info(cfg, model, task),
        "test_set": {
            "description": testset.description,
            "sentences": len(testset),
            "source_tokens": sum(s.numel() for s in testset.sources),
        },
        "timing": _timing_info(cfg, runs, orders, time.perf_counter() - started),
        "memory": _memory_info(runs),
        "signatures": signatures,
        "rows": rows,
        "greedy_mismatches": ties,
    }
    write_outputs(results, cfg.out)
    return results


def _timing_info(cfg: EvalConfig, runs: List[Run], orders: List[List[int]],
                 total_wall_s: float) -> dict:
    """How the passes were scheduled and summarised (results.json's ``timing``)."""
    return {
        "repeats": cfg.repeats,
        "warmup_batches": cfg.warmup_batches,
        "interleaved": True,
        "order": "random",
        "order_seed": cfg.order_seed,
        "orders": [[runs[i].label for i in order] for order in orders],
        "auto_k_state": "reset before every pass",
        "statistic": "median",
        "spread": "min-max",
        "cpu_over_wall": _cpu_over_wall(runs),
        "total_wall_s": total_wall_s,
    }


def setup_runtime(cfg: EvalConfig) -> torch.device:
    """Chooses the device and fixes the thread count (recorded in the results) and
    the seed of the sampling rows' draws (``--order-seed``, as ``--seed``)."""
    if cfg.cpu or not torch.cuda.is_available():
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", torch.cuda.current_device())
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.order_seed)
    return device


def load_testset(cfg: EvalConfig, task, detokenize: metrics.Detokenizer) -> TestSet:
    if cfg.src_file is not None:
        encode = detokenize.encoder(task.source_dictionary)
        return load_raw(cfg.src_file, cfg.ref_file, encode, cfg.max_sentences)
    return load_binarized(task, cfg.split, detokenize, cfg.ref_file, cfg.max_sentences)


def precision_copies(model: nn.Module, precisions) -> Dict[str, nn.Module]:
    """The model by precision name: itself for float32, a cast copy for each of
    ``precisions`` (their rows decode with the copy, the fp32 rows keep theirs)."""
    copies = {"float32": model}
    for name in precisions:
        # (A copy of an eval-mode model is in eval mode; fairseq's generation-only
        # models return None from eval().)
        copies[name] = copy.deepcopy(model).to(getattr(torch, name))
    return copies


def build_runs(
    cfg: EvalConfig,
    task,
    models: Dict[str, nn.Module],
    specs,
    testset: TestSet,
    device: torch.device,
) -> List[Run]:
    """One run per (configuration, batch size); generators are built once per spec."""
    generators = {
        spec: loading.build_generator(task, models[spec.dtype], spec, cfg) for spec in specs
    }
    runs = []
    for batch_size in sorted(set(cfg.batch_sizes)):
        batches = make_batches(task, testset.sources, batch_size, device)
        runs += [Run(spec, batch_size, generators[spec], models[spec.dtype], batches)
                 for spec in specs]
    return runs


def decode_all(
    cfg: EvalConfig,
    task,
    runs: List[Run],
    device: torch.device,
    orders: List[List[int]],
) -> Dict[Tuple, Profile]:
    """Warm-up, interleaved timed passes (one per order), then the optional
    profile passes."""
    progress = _progress_bar(cfg.progress)
    runner.freeze_heap()
    try:
        runner.warm_up(task, runs, device, cfg.warmup_batches, progress)
        runner.measure(task, runs, device, orders, progress)
        return profile_runs(task, runs, device, progress) if cfg.profile else {}
    finally:
        gc.unfreeze()


def profile_runs(
    task, runs: List[Run], device: torch.device, progress
) -> Dict[Tuple, Profile]:
    """One instrumented pass per SpecDec run (after, and apart from, the timed ones)."""
    chosen = [run for run in runs if run.spec.kind == "specdec"]
    return {
        (run.spec, run.batch_size): profile_run(task, run, device)
        for run in progress(chosen, desc="profile")
    }


def score_runs(
    runs: List[Run],
    testset: TestSet,
    detokenize: metrics.Detokenizer,
    profiles: Dict[Tuple, Profile],
) -> Tuple[List[dict], dict]:
    """Report rows (by batch size, then configuration) and sacreBLEU signatures.
    A sampling row is compared with stock sampling and with the engine's sampling
    (K=0) at its batch size; no sample is compared with greedy's output."""
    baselines = {(run.batch_size, run.spec.sampling_topk): run for run in runs
                 if run.spec == BASELINE or (run.spec.kind == "stock"
                                             and run.spec.sampling_topk)}
    # "vs engine greedy" compares with the engine's greedy on the same backend and
    # in the same precision.
    engine_greedy = {_greedy_key(run): run for run in runs
                     if run.spec.kind == "specdec" and run.spec.k == 0}
    rows, signatures = [], {}
    for run in runs:
        baseline = baselines[run.batch_size, run.spec.sampling_topk]
        hypotheses = [
            detokenize(tokens) for tokens in metrics.in_order(run.outputs, len(testset))
        ]
        scores = metrics.corpus_scores(hypotheses, testset.references)
        signatures = {"bleu": scores.bleu_signature, "chrf": scores.chrf_signature}
        differs = (None if run.spec.sampling_topk else
                   metrics.count_differences(run.outputs, baseline.outputs))
        rows.append(
            report.make_row(
                run,
                baseline,
                scores,
                differs,
                len(testset),
                profiles.get((run.spec, run.batch_size)),
                _engine_greedy_for(run, engine_greedy),
            )
        )
    return rows, signatures


def _engine_greedy_for(run: Run, engine_greedy: Dict[Tuple, Run]) -> Optional[Run]:
    """SpecDec rows: the engine greedy of their backend (and CUDA graphs on or off);
    stock and CTranslate2 rows: the torch one (else any) at the same batch size."""
    if run.spec.kind == "specdec":
        return engine_greedy.get(_greedy_key(run))
    topk = run.spec.sampling_topk
    same_batch = [r for key, r in engine_greedy.items()
                  if key[0] == run.batch_size and key[-1] == topk]
    return (engine_greedy.get((run.batch_size, "torch", False, run.spec.dtype, "on", topk))
            or engine_greedy.get((run.batch_size, "torch", False, "float32", "on", topk))
            or next(iter(same_batch), None))


def _greedy_key(run: Run) -> Tuple:
    return (run.batch_size, run.spec.backend, run.spec.int8, run.spec.dtype,
            run.spec.decoding.cuda_graphs, run.spec.sampling_topk)


def _greedy_mismatches(models: Dict[str, nn.Module], task, runs: List[Run],
                       testset: TestSet) -> List[dict]:
    """Where a beta=1 SpecDec row differs from its greedy reference, and why.

    fp32 rows: logit gaps against stock greedy (near-ties, else a bug). A half-
    precision model rounds by pass shape, so its rows are compared with the engine
    greedy of the same precision, with gaps read at that precision. An int8
    verifier is another model: its rows must equal *its* greedy (the int8 engine
    greedy row of the same backend and batch size); their differences from fp32
    stock greedy are quantization, counted in the table's ``!= greedy`` column.
    """
    baselines = {run.batch_size: run for run in runs if run.spec == BASELINE}
    greedy = {_greedy_key(run): run for run in runs
              if run.spec.kind == "specdec" and run.spec.k == 0}
    found = []
    for run in runs:
        if run.spec.kind != "specdec" or run.spec.beta != 1 or run.spec.sampling_topk:
            continue
        reference = greedy.get(_greedy_key(run))
        if run.spec.int8:
            if reference is not None and reference is not run:
                differs = metrics.count_differences(run.outputs, reference.outputs)
                if differs:
                    found.append({"decoder": run.spec.name, "batch_size": run.batch_size,
                                  "int8_reference": reference.spec.name, "differs": differs,
                                  "tree": run.spec.candidates > 1})
            continue
        if run.spec.dtype == "float32":
            reference = baselines[run.batch_size]
        elif reference is None or reference is run:
            continue
        for gap in mismatch.logit_gaps(models[run.spec.dtype], testset.sources,
                                       reference.outputs, run.outputs,
                                       task.target_dictionary.eos()):
            found.append({"decoder": run.spec.name, "batch_size": run.batch_size,
                          "reference": reference.spec.name, **gap})
    return found


def make_out_dir(out_dir: str) -> None:
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as err:
        raise UserError(f"--out: cannot create {out_dir}: {err}") from err
    if not os.access(out_dir, os.W_OK):
        raise UserError(f"--out: {out_dir} is not writable")


def write_outputs(results: dict, out_dir: str) -> None:
    report.write_json(results, os.path.join(out_dir, RESULTS_JSON))
    with open(os.path.join(out_dir, RESULTS_MD), "w", encoding="utf-8") as handle:
        handle.write(report.markdown_report(results))
    plot_bleu_vs_speedup(results["rows"], os.path.join(out_dir, PLOT_PNG))
    plot_time_split(results["rows"], os.path.join(out_dir, TIME_SPLIT_PNG))  # --profile


def _model_info(cfg: EvalConfig, model: nn.Module, task) -> dict:
    return {
        "checkpoint": os.path.abspath(cfg.checkpoint),
        "class": type(model).__name__,
        "task": getattr(task.cfg, "_name", type(task).__name__),
        "source_lang": task.cfg.source_lang,
        "target_lang": task.cfg.target_lang,
        "draft_block_size": getattr(model, "draft_block_size", None),
        "parameters": loading.parameter_counts(model),
    }


def _cpu_over_wall(runs: List[Run]) -> float:
    """Process CPU time / wall time over all timed passes (about the thread count
    on an idle CPU; lower means other processes took cores from the timing)."""
    return sum(map(sum, (r.cpu_seconds for r in runs))) / sum(
        map(sum, (r.seconds for r in runs))
    )


def _memory_info(runs: List[Run]) -> dict:
    """Process peak RSS (all configurations together) and the largest CUDA peak."""
    peaks = [run.cuda_peak_bytes for run in runs if run.cuda_peak_bytes is not None]
    return {
        "peak_rss_mib": machine.peak_rss_mib(),
        "cuda_peak_mib": max(peaks) / 2**20 if peaks else None,
    }


def _config_dict(cfg: EvalConfig) -> dict:
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return {name: list(v) if isinstance(v, tuple) else v for name, v in values.items()}


def _progress_bar(enabled: bool) -> Callable:
    if not enabled:
        return lambda items, desc=None: items
    from tqdm import tqdm

    return lambda items, desc=None: tqdm(
        items, desc=desc, unit="pass", dynamic_ncols=True
    )
