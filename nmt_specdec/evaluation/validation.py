"""The evaluation's settings checked before anything loads: one-line errors."""

from __future__ import annotations

import os

from nmt_specdec.decoding.backends import CPU_BACKEND, check_backend
from nmt_specdec.decoding.options import VERIFIER_COPIES
from nmt_specdec.errors import UserError
from nmt_specdec.evaluation.config import EvalConfig
from nmt_specdec.model_shards import materialize


def validate(cfg: EvalConfig) -> None:
    """Raises :class:`UserError` naming the first bad option."""
    _check_input_options(cfg)
    _check_positive("--repeats", [cfg.repeats])
    _check_positive("--batch-sizes", cfg.batch_sizes)
    _check_positive("--beams", cfg.beams)
    _check_positive("--threads", [cfg.threads])
    for backend in cfg.backends:
        check_backend(backend)
    onnx = {"onnxruntime"} | ({"auto"} if CPU_BACKEND == "onnxruntime" else set())
    for flag, value in (("--int8", cfg.int8), ("--fused-draft", cfg.fused_draft)):
        if value and not onnx & set(cfg.backends):
            raise UserError(f"{flag} needs onnxruntime among --backend")
    for copy in set(cfg.drafters) & set(VERIFIER_COPIES):
        if not onnx & set(cfg.backends):
            raise UserError(f"--drafters {copy} needs onnxruntime among --backend")
    if any(k < 0 for k in cfg.grid_k):
        raise UserError(f"--grid-k values must be >= 0, got {min(cfg.grid_k)}")
    _check_positive("--grid-copy-k", cfg.grid_copy_k)
    _check_positive("--grid-beta", cfg.grid_beta)
    if cfg.relaxed_rows not in ("all", "one"):
        raise UserError(f"--relaxed-rows must be all or one, got {cfg.relaxed_rows}")
    _check_positive("--grid-candidates", cfg.grid_candidates)
    if any(steps < 0 for steps in cfg.grid_refine_steps):
        raise UserError(f"--grid-refine-steps values must be >= 0, got "
                        f"{min(cfg.grid_refine_steps)}")
    if cfg.sampling_topk is not None:
        _check_positive("--sampling-topk", [cfg.sampling_topk])
    if cfg.max_sentences is not None:
        _check_positive("--first-sentences", [cfg.max_sentences])
    if cfg.warmup_batches < 0:
        raise UserError(f"--warmup-batches must be >= 0, got {cfg.warmup_batches}")
    if any(not tau >= 0 for tau in cfg.grid_tau):
        raise UserError(f"--grid-tau values must be >= 0, got {list(cfg.grid_tau)}")
    if (
        not cfg.stock_only
        and any(beta > 1 for beta in cfg.grid_beta)
        and not cfg.grid_tau
    ):
        raise UserError("--grid-tau needs at least one value for --grid-beta > 1")


def _check_input_options(cfg: EvalConfig) -> None:
    if not materialize(cfg.checkpoint).is_file():
        raise UserError(f"--checkpoint: no such file {cfg.checkpoint}")
    for flag, path in (
        ("--src-file", cfg.src_file),
        ("--ref-file", cfg.ref_file),
        ("--spm-model", cfg.spm_model),
    ):
        if path is not None and not os.path.isfile(path):
            raise UserError(f"{flag}: no such file {path}")
    if cfg.data is not None and not os.path.isdir(cfg.data):
        raise UserError(f"--data: no such directory {cfg.data}")
    if cfg.src_file is not None:
        if cfg.ref_file is None or cfg.spm_model is None:
            raise UserError(
                "--src-file needs --ref-file (raw references) and --spm-model "
                "(to encode the source)"
            )
    elif cfg.data is None:
        raise UserError(
            "give a test set: --data DIR [--split test], or --src-file, "
            "--ref-file and --spm-model"
        )
    elif cfg.ref_file is None and cfg.spm_model is None:
        raise UserError(
            "--data without --ref-file needs --spm-model to decode the "
            "binarized references into raw text for BLEU"
        )


def _check_positive(flag: str, values) -> None:
    bad = [v for v in values if v < 1]
    if bad:
        raise UserError(f"{flag} values must be >= 1, got {bad[0]}")
