"""Evaluation settings and the grid of decoder configurations."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Tuple

from nmt_specdec.decoding.backends import DEFAULT_BACKEND
from nmt_specdec.decoding.options import VERIFIER_COPIES, VERIFIER_DRAFTER_K, DecodingOptions
from nmt_specdec.errors import UserError


@dataclass(frozen=True)
class EvalConfig:
    """Settings of one evaluation run (mirrors the command-line flags).

    Attributes:
        checkpoint: fairseq checkpoint (``.pt``) to evaluate.
        out: output directory for results.json, results.md and the plot.
        data: fairseq binarized data dir (test split and dictionaries).
        draft_head: a draft head file attached to the checkpoint's verifier.
        split: split of ``data`` to decode.
        source_lang: source language (default: the checkpoint's).
        target_lang: target language (default: the checkpoint's).
        src_file: raw source text, one sentence per line (instead of ``split``).
        ref_file: raw detokenized references, line-aligned with the test set.
        spm_model: SentencePiece model: encodes ``src_file``, decodes binarized
            references and all hypotheses.
        post_process: fairseq ``--post-process`` for hypotheses without ``spm_model``.
        max_sentences: decode only the first N sentences (file order).
        beams: beam sizes of the stock SequenceGenerator (1 is always included).
        max_len_a: fairseq ``--max-len-a``.
        max_len_b: fairseq ``--max-len-b``.
        min_len: fairseq ``--min-len``.
        lenpen: fairseq ``--lenpen``.
        unkpen: fairseq ``--unkpen``.
        grid_k: SpecDec draft block sizes K (empty: the model's draft block size);
            0 is the engine's own greedy decoding (one row, no drafting).
        grid_auto: add ``--spec-k auto`` rows (K chosen per iteration, up to the
            model's draft block size).
        grid_beta: SpecDec top-beta widths.
        grid_tau: SpecDec log-probability margins (beta=1 rows need none).
        grid_candidates: drafts verified per slot (``--spec-candidates``) for K > 0.
        grid_refine_steps: the draft head's refinement runs (``--spec-refine-steps``)
            for K > 0 (empty: the head's own setting alone).
        relaxed_rows: ``all``: the relaxed rows (beta > 1) at every K, auto,
            backend and precision, as the beta=1 rows; ``one``: at the first fixed
            K > 0 on the first backend in fp32 only (one row per beta and tau).
        stock_only: time only the stock generator (any fairseq checkpoint).
        backends: SpecDec backends; every SpecDec row runs on each.
        int8: also run the SpecDec rows of ``onnxruntime`` with ``--int8``.
        fused_draft: also run the onnxruntime SpecDec rows (K > 0) with the draft
            head inside the verify call.
        graphs_off: also run every torch row with ``--cuda-graphs off`` (a GPU's
            static passes eager: what the graphs buy).
        drafters: who drafts the SpecDec rows with K > 0 (``--spec-drafter``);
            the verifier copies' rows (``verifier-int8``, ``verifier-int4``) run on
            fp32 onnxruntime only.
        grid_copy_k: the verifier copies' fixed K (empty: ``grid_k``'s K > 0): a
            copy's drafts are accepted at K far beyond the head's block size.
        ct2: add CTranslate2 greedy rows (fp32 and int8) of the converted verifier,
            on the run's device.
        sampling_topk: add the sampling grid (fairseq's ``--sampling
            --sampling-topk``): stock sampling, the engine's sampling (K=0) and
            SpecDec's speculative sampling at each K > 0 of ``grid_k``, on each
            backend in fp32 (None: no sampling rows).
        precisions: half precisions (``float16``, ``bfloat16``) whose rows are added
            beside the fp32 ones: stock greedy, the engine's torch rows and
            CTranslate2 greedy (where the device supports it) on a copy of the
            model in that precision.
        batch_sizes: sentences per batch; each configuration runs at each size.
        repeats: timed passes per configuration and batch size (median and min-max
            reported).
        order_seed: seed of the random order in which each repeat runs the
            (configuration, batch size) passes (the orders go into results.json).
        warmup_batches: untimed batches each configuration decodes first.
        threads: ``torch.set_num_threads``.
        cpu: decode on the CPU even when CUDA is available.
        profile: add one untimed pass per SpecDec row that splits its time.
        progress: show a progress bar on stderr.
        command: the command line, recorded in results.json.
    """

    checkpoint: str
    out: str
    data: Optional[str] = None
    draft_head: Optional[str] = None
    split: str = "test"
    source_lang: Optional[str] = None
    target_lang: Optional[str] = None
    src_file: Optional[str] = None
    ref_file: Optional[str] = None
    spm_model: Optional[str] = None
    post_process: str = "sentencepiece"
    max_sentences: Optional[int] = None
    beams: Tuple[int, ...] = (1, 5)
    max_len_a: float = 0.0
    max_len_b: int = 200
    min_len: int = 1
    lenpen: float = 1.0
    unkpen: float = 0.0
    grid_k: Tuple[int, ...] = ()
    grid_auto: bool = False
    grid_beta: Tuple[int, ...] = (1, 3, 5)
    grid_tau: Tuple[float, ...] = (1.0, 3.0)
    grid_candidates: Tuple[int, ...] = (1,)
    grid_refine_steps: Tuple[int, ...] = ()
    grid_copy_k: Tuple[int, ...] = ()
    relaxed_rows: str = "all"
    stock_only: bool = False
    backends: Tuple[str, ...] = (DEFAULT_BACKEND,)
    int8: bool = False
    fused_draft: bool = False
    graphs_off: bool = False
    drafters: Tuple[str, ...] = ("head",)
    ct2: bool = False
    sampling_topk: Optional[int] = None
    precisions: Tuple[str, ...] = ()
    batch_sizes: Tuple[int, ...] = (1, 32)
    repeats: int = 5
    order_seed: int = 0
    warmup_batches: int = 1
    threads: int = 1
    cpu: bool = False
    profile: bool = False
    progress: bool = True
    command: Optional[str] = None


@dataclass(frozen=True)
class DecoderSpec:
    """One decoder configuration (a row of the report at each batch size).

    Attributes:
        kind: ``stock`` (fairseq's SequenceGenerator), ``specdec`` or ``ct2``
            (CTranslate2 greedy on the converted verifier).
        beam: stock beam size (1 for SpecDec, which verifies greedily).
        decoding: what a SpecDec row decodes with (K=0: the engine's greedy, no
            drafting; ``auto_k``: K chosen per iteration, up to ``k``); a ct2 row
            reads ``int8`` from it; the defaults for stock rows.
        dtype: the model's precision (``float32``, ``float16``, ``bfloat16``).
        sampling_topk: the row samples among the k likeliest tokens (``--sampling
            --sampling-topk``; a SpecDec row by speculative sampling); 0: greedy or beam.
    """

    kind: str
    beam: int = 1
    decoding: DecodingOptions = DecodingOptions()
    dtype: str = "float32"
    sampling_topk: int = 0

    # What the report reads of ``decoding``: k, beta and tau are None on other rows.
    @property
    def k(self) -> Optional[int]:
        return self.decoding.k if self.kind == "specdec" else None

    @property
    def beta(self) -> Optional[int]:
        return self.decoding.beta if self.kind == "specdec" else None

    @property
    def tau(self) -> Optional[float]:
        return self.decoding.tau if self.kind == "specdec" else None

    @property
    def auto(self) -> bool:
        return self.decoding.auto_k

    @property
    def backend(self) -> str:
        return self.decoding.backend

    @property
    def int8(self) -> bool:
        return self.decoding.int8

    @property
    def fused_draft(self) -> bool:
        return self.decoding.fused_draft

    @property
    def candidates(self) -> int:
        return self.decoding.candidates

    @property
    def drafter(self) -> str:
        return self.decoding.drafter

    @property
    def name(self) -> str:
        """What the row does: ``stock greedy``, ``stock beam5``, ``engine greedy``
        (the SpecDec loop with K=0: no drafting), ``SpecDec K=4 β=1``,
        ``SpecDec K=4 β=3 τ=1``, ``SpecDec auto K≤4 β=1``, ``CTranslate2 greedy int8``;
        rows on another backend than torch end in ``[onnxruntime int8 fused]``, half
        precision rows in ``fp16``/``bf16``; a sampling row says ``sampling top-k``
        where greedy rows say ``greedy`` or ``β``."""
        if self.sampling_topk:
            return self._sampling_name()
        if self.kind == "ct2":
            return f"CTranslate2 greedy {'int8' if self.int8 else SHORT_DTYPE[self.dtype]}"
        half = "" if self.dtype == "float32" else f" {SHORT_DTYPE[self.dtype]}"
        if self.kind == "stock":
            return ("stock greedy" if self.beam == 1 else f"stock beam{self.beam}") + half
        runtime = (" [graphs off]" if self.decoding.cuda_graphs == "off" else "") \
            if self.backend == "torch" else (
            f" [{self.backend}{' int8' if self.int8 else ''}"
            f"{' fused' if self.fused_draft else ''}]")
        if self.k == 0:
            return f"engine greedy{half}{runtime}"
        tau = "" if self.beta == 1 else f" τ={self.tau:g}"
        k = f"auto K≤{self.k}" if self.auto else f"K={self.k}"
        tree = f" C={self.candidates}" if self.candidates > 1 else ""
        drafter = "" if self.drafter == "head" else f" drafter={self.drafter}"
        steps = self.decoding.refine_steps
        refine = "" if steps is None else f" refine×{steps}"
        return f"SpecDec {k}{tree} β={self.beta}{tau}{refine}{drafter}{half}{runtime}"

    def _sampling_name(self) -> str:
        """``stock sampling top-10``, ``engine sampling top-10 [onnxruntime]``,
        ``SpecDec K=2 sampling top-10 [onnxruntime]``, ``SpecDec K=2 sampling
        top-10 drafter=verifier-int8 [onnxruntime]``."""
        how = f"sampling top-{self.sampling_topk}"
        if self.kind == "stock":
            return f"stock {how}"
        runtime = "" if self.backend == "torch" else f" [{self.backend}]"
        if self.k == 0:
            return f"engine {how}{runtime}"
        drafter = "" if self.drafter == "head" else f" drafter={self.drafter}"
        return f"SpecDec K={self.k} {how}{drafter}{runtime}"

    @property
    def role(self) -> str:
        """``stock``, ``ct2`` (CTranslate2), ``engine greedy`` (K=0), ``specdec``, or
        ``sampling`` for every row of the sampling grid."""
        if self.sampling_topk:
            return "sampling"
        if self.kind in ("stock", "ct2"):
            return self.kind
        return "engine greedy" if self.k == 0 else "specdec"

    @property
    def is_baseline(self) -> bool:
        """Stock greedy search in fp32: the reference for speedups and agreement."""
        return (self.kind == "stock" and self.beam == 1 and self.dtype == "float32"
                and not self.sampling_topk)


SHORT_DTYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def specdec(**options) -> DecoderSpec:
    """A SpecDec row decoding with ``options`` (fields of DecodingOptions)."""
    return DecoderSpec("specdec", decoding=DecodingOptions(spec_decoding=True, **options))


def _with(spec: DecoderSpec, **options) -> DecoderSpec:
    return dataclasses.replace(spec, decoding=dataclasses.replace(spec.decoding, **options))


BASELINE = DecoderSpec("stock", beam=1)
ENGINE_GREEDY = specdec(k=0, backend="torch")


def build_grid(cfg: EvalConfig, default_k: Optional[int]) -> List[DecoderSpec]:
    """The configurations to measure: stock beams, then the SpecDec grid.

    Args:
        cfg: the evaluation settings.
        default_k: the model's draft block size (used when ``cfg.grid_k`` is empty).

    Returns:
        Distinct specs, stock beam 1 first. Unless ``stock_only``, the engine's
        greedy (K=0) is always among them: the "vs engine greedy" column
        separates the lean loop's gain from drafting's.
    """
    specs = [BASELINE] + [
        DecoderSpec("stock", beam=b) for b in sorted(set(cfg.beams)) if b != 1
    ]
    if cfg.ct2:
        specs += [DecoderSpec("ct2"), DecoderSpec("ct2", decoding=DecodingOptions(int8=True))]
    if cfg.stock_only:
        return specs + _half_precision_specs(cfg, [])
    grid = _specdec_grid(cfg, default_k)
    for backend in dict.fromkeys(cfg.backends):
        ort = backend == "onnxruntime"
        for int8 in (False, True) if cfg.int8 and ort else (False,):
            for fused in (False, True) if cfg.fused_draft and ort else (False,):
                specs += [_with(spec, backend=backend, int8=int8, fused_draft=fused)
                          for spec in grid
                          # K=0 drafts nothing
                          if not (fused and spec.k == 0)]
                for copy in _copies(cfg) if ort and not fused else ():
                    # auto rows explore up to the copy's own cap, as --spec-k auto does
                    # (which refuses a copy beside --int8's verifier)
                    specs += [_with(spec, backend=backend, int8=int8, drafter=copy)
                              for spec in _copy_grid(cfg, grid) if not (int8 and spec.auto)]
    specs += _half_precision_specs(cfg, grid)
    if cfg.relaxed_rows == "one":
        specs = [spec for spec in specs if _kept_relaxed(spec, cfg)]
    if cfg.graphs_off:
        specs += [_with(spec, cuda_graphs="off") for spec in specs
                  if spec.kind == "specdec" and spec.backend == "torch"]
    return specs + _sampling_specs(cfg, default_k)


def _sampling_specs(cfg: EvalConfig, default_k: Optional[int]) -> List[DecoderSpec]:
    """``--sampling-topk``: stock sampling, then per backend the engine's sampling
    (K=0) and speculative sampling at each K > 0 (fp32, the head drafting; on
    ONNX Runtime with ``--drafters verifier-int8``/``-int4``, the copies too)."""
    if not cfg.sampling_topk:
        return []
    topk = cfg.sampling_topk
    specs = [DecoderSpec("stock", sampling_topk=topk)]
    if cfg.stock_only:
        return specs
    ks = [k for k in _grid_ks(cfg, default_k) if k > 0]
    for backend in dict.fromkeys(cfg.backends):
        specs += [dataclasses.replace(specdec(k=k, backend=backend), sampling_topk=topk)
                  for k in [0, *dict.fromkeys(ks)]]
        for copy in _copies(cfg) if backend == "onnxruntime" else ():
            specs += [dataclasses.replace(specdec(k=k, backend=backend, drafter=copy),
                                          sampling_topk=topk)
                      for k in dict.fromkeys(cfg.grid_copy_k or ks)]
    return specs


def _copy_grid(cfg: EvalConfig, grid: List[DecoderSpec]) -> List[DecoderSpec]:
    """The chain rows of ``grid`` that draft (K > 0, one candidate), for a verifier
    copy: its auto rows up to the copies' cap, its fixed K ``cfg.grid_copy_k``
    where given (each with the first fixed row's settings) instead of the grid's."""
    chains = [spec for spec in grid if spec.k and spec.candidates == 1]
    fixed = [spec for spec in chains if not spec.auto]
    if cfg.grid_copy_k and fixed:
        first = [spec for spec in fixed if spec.k == fixed[0].k]
        fixed = [_with(spec, k=k) for k in cfg.grid_copy_k for spec in first]
    return fixed + [_with(spec, k=VERIFIER_DRAFTER_K) for spec in chains if spec.auto]


def _copies(cfg: EvalConfig) -> List[str]:
    """The verifier copies among ``--drafters``, in the order given."""
    return [drafter for drafter in cfg.drafters if drafter in VERIFIER_COPIES]


def _kept_relaxed(spec: DecoderSpec, cfg: EvalConfig) -> bool:
    """``--relaxed-rows one``: a relaxed row is kept at the first fixed K > 0, on
    the first backend, fp32 (not int8, not fused), the head drafting; every other
    row is kept."""
    if spec.kind != "specdec" or spec.beta == 1:
        return True
    first_k = next((k for k in cfg.grid_k if k > 0), spec.k)
    return (spec.k == first_k and not spec.auto and spec.backend == cfg.backends[0]
            and not spec.int8 and not spec.fused_draft and spec.dtype == "float32"
            and spec.drafter == "head")


def _half_precision_specs(cfg: EvalConfig, grid: List[DecoderSpec]) -> List[DecoderSpec]:
    """Stock greedy, CTranslate2 greedy and the torch grid again in each precision
    of ``cfg.precisions``, whatever ``--backend`` says (the ONNX Runtime backend
    runs fp32 and int8 only)."""
    specs = []
    for dtype in cfg.precisions:
        specs.append(dataclasses.replace(BASELINE, dtype=dtype))
        if cfg.ct2:
            specs.append(DecoderSpec("ct2", dtype=dtype))
        specs += [dataclasses.replace(spec, dtype=dtype) for spec in grid
                  if spec.drafter == "head"]
    return specs


def _grid_ks(cfg: EvalConfig, default_k: Optional[int]) -> Tuple[int, ...]:
    """``--grid-k``, or the model's draft block size where it is not given."""
    return cfg.grid_k or ((default_k,) if default_k else ())


def _specdec_grid(cfg: EvalConfig, default_k: Optional[int]) -> List[DecoderSpec]:
    specs: List[DecoderSpec] = []
    ks = _grid_ks(cfg, default_k)
    if not ks:
        raise UserError("--grid-k is required: the checkpoint has no draft block size")
    specs.append(ENGINE_GREEDY)
    for k in ks:
        for candidates in cfg.grid_candidates if k > 0 else (1,):
            for beta in cfg.grid_beta if k > 0 else (1,):
                for tau in (0.0,) if beta == 1 else cfg.grid_tau:
                    spec = specdec(k=k, beta=beta, tau=float(tau), candidates=candidates,
                                   backend="torch")
                    if spec not in specs:
                        specs.append(spec)
    if cfg.grid_auto:  # K up to the model's draft block size, chosen per iteration
        for beta in cfg.grid_beta:
            for tau in (0.0,) if beta == 1 else cfg.grid_tau:
                specs.append(specdec(k=default_k, auto_k=True, beta=beta, tau=float(tau),
                                     backend="torch"))
    if not cfg.grid_refine_steps:
        return specs
    return [_with(spec, refine_steps=steps) if spec.k else spec
            for spec in specs for steps in (cfg.grid_refine_steps if spec.k else (None,))]
