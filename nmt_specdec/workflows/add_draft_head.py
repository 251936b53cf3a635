"""Add a SpecDec draft head to a trained fairseq Transformer, verifier untouched.

One resumable command (``nmt-specdec-add-draft-head``); its report gives the
training's updates per second and the state cache's size on disk:

1. ``distill``: the verifier translates the training (and valid) source itself,
   greedy by default: with beta=1 SpecDec accepts exactly what the verifier's
   greedy search picks, so that is what the head must learn to draft
   (:mod:`nmt_specdec.workflows.distill`, resumable chunks). The head needs no
   references, so ``--extra-source`` adds monolingual source text (e.g. more
   sentence-like than the training corpus), translated the same way;
2. ``states``: one pass of the frozen verifier over the distilled train and
   valid splits writes its encoder output and decoder states to float16 shards
   (:mod:`nmt_specdec.workflows.cache_states`), so that no training update runs
   the verifier (``--state-cache off``: every update runs it, as before);
3. ``train``: ``fairseq-train`` with ``--init-from-ar-checkpoint
   --freeze-verifier`` (and ``--cached-states``) on the distilled targets; the
   head learns from random cuts of them (:mod:`nmt_specdec.model.draft_examples`);
   ``--budget-minutes`` bounds it and an interrupted run resumes from
   ``checkpoint_last.pt``;
4. ``finish``: ``{out}/model.pt`` (no optimizer state) after checking that every
   verifier weight is bit-identical to the input, the head alone as
   ``{out}/head.pt`` (``--draft-head`` attaches it to the input checkpoint), then
   tokens per iteration and acceptance per slot on the valid split with beta=1.

Each step is an ordinary fairseq command underneath; the flags are logged.
The libraries' INFO logs are shown only with ``-v/--verbose``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List

from nmt_specdec import logs, model_shards
from nmt_specdec.workflows import distill, train_recipe
from nmt_specdec.workflows.verifier_config import read_verifier_config, verifier_arch_flags
from nmt_specdec.data.steps import (
    LOG,
    OneLineParser,
    RecipeError,
    StepChain,
    atomic_text,
    run_command,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
REPORT = "report.json"
STATES = "states"
PRECISIONS = ("auto", "fp32", "bf16")


@dataclass(frozen=True)
class AddHeadConfig:
    """Settings (mirror the command-line flags).

    Attributes:
        checkpoint: stock fairseq ``transformer`` checkpoint (the verifier).
        data: its binarized data (dictionaries, train/valid splits).
        out: working and output directory.
        k: draft block size K the head is trained for (decoding may use less).
        layers: draft-head layers.
        vocab_size: draft vocabulary (most frequent ids; 0 = full).
        refine_layers: layers of the causal refinement pass (0 = none).
        refine_steps: times decoding runs it by default (not a training setting:
            rerun with another value, a run keeps its checkpoints).
        init_head: start the head from this trained head (same verifier; a joint
            checkpoint or a head file); parts it lacks (e.g. refinement) start fresh.
        cuts: training blocks per sentence.
        beam: beam of the distillation (1 = the verifier's greedy output).
        budget_minutes: wall-clock limit of the training step.
        max_tokens: target tokens per training batch.
        lr: peak learning rate (inverse square root schedule).
        soft_weight: weight of the verifier's distribution in the head's targets
            (0: its distilled tokens alone); the distribution is read off the
            cached states through the verifier's own output projection.
        threads: CPU threads.
        valid_sentences: valid sentences decoded for the acceptance report.
        extra_source: raw source-language text, one sentence per line, whose
            verifier translations are added to the head's training data.
        spm_model: SentencePiece model that encodes ``extra_source``.
        extra_max_lines: use at most this many lines of ``extra_source``.
        state_cache: train from the verifier's cached states (False: run the
            verifier in every update).
        precision: "bf16": the losses under bfloat16 autocast (float32 weights
            and optimizer); "fp32"; "auto": bf16 where the training device
            multiplies bfloat16 natively (:func:`~nmt_specdec.evaluation.machine.native_bf16`), else fp32.
    """

    checkpoint: Path
    data: Path
    out: Path
    # Defaults: the settings that won on the gettext verifier (README "Draft
    # heads"): K=4, one layer, every id a draft (a cut vocabulary can never draft
    # the tokens beyond it: docs/results.md, "The draft vocabulary"), lr 2e-3,
    # one refinement layer run once (K=2 decoding: slot 2 reads slot 1's draft).
    k: int = 4
    layers: int = 1
    vocab_size: int = 0
    refine_layers: int = 1
    refine_steps: int = 1
    init_head: Path | None = None
    cuts: int = 4
    beam: int = 1
    budget_minutes: float = 50.0
    max_tokens: int = 4096
    lr: float = 2e-3
    soft_weight: float = 0.0
    threads: int = 2
    valid_sentences: int = 500
    extra_source: Path | None = None
    spm_model: Path | None = None
    extra_max_lines: int = 200_000
    state_cache: bool = True
    precision: str = "auto"

    def validate(self) -> None:
        if not model_shards.materialize(self.checkpoint).is_file():
            raise RecipeError(f"--checkpoint {self.checkpoint} does not exist")
        if not self.data.is_dir():
            raise RecipeError(f"--data {self.data} is not a directory")
        for flag, value in (("--k", self.k), ("--layers", self.layers), ("--cuts", self.cuts),
                            ("--beam", self.beam), ("--threads", self.threads)):
            if value < 1:
                raise RecipeError(f"{flag} must be >= 1, got {value}")
        if self.refine_layers < 0:
            raise RecipeError(f"--refine-layers must be >= 0, got {self.refine_layers}")
        if self.refine_steps < 1:
            raise RecipeError(f"--refine-steps must be >= 1, got {self.refine_steps}")
        if self.init_head is not None and not self.init_head.is_file():
            raise RecipeError(f"--init-head {self.init_head} does not exist")
        if self.budget_minutes <= 0:
            raise RecipeError("--budget-minutes must be > 0")
        if not 0 <= self.soft_weight <= 1:
            raise RecipeError(f"--soft-weight must be in [0, 1], got {self.soft_weight}")
        if self.precision not in PRECISIONS:
            raise RecipeError(f"--precision must be one of {', '.join(PRECISIONS)}, "
                              f"got {self.precision}")
        if self.extra_source is not None:
            if not self.extra_source.is_file():
                raise RecipeError(f"--extra-source {self.extra_source} does not exist")
            if self.spm_model is None or not self.spm_model.is_file():
                raise RecipeError("--extra-source needs --spm-model (the model's "
                                  "SentencePiece model)")


def training_precision(precision: str) -> str:
    """``--precision`` resolved for this machine: "fp32" or "bf16"."""
    from nmt_specdec.evaluation.machine import native_bf16

    if precision in ("fp32", "bf16"):
        return precision
    return "bf16" if native_bf16() else "fp32"  # auto


def train_flags(cfg: AddHeadConfig, data: Path, model_args, src: str, tgt: str,
                save_dir: Path) -> List[str]:
    """``fairseq-train`` flags of the head-only training step."""
    import torch

    from nmt_specdec.checkpoints import plugin_dir

    flags = [
        str(data), "--user-dir", plugin_dir(),
        "--task", "translation_specdec", "-s", src, "-t", tgt,
        "--arch", "specdec_transformer", *verifier_arch_flags(model_args),
        "--draft-layers", str(cfg.layers), "--draft-block-size", str(cfg.k),
        "--draft-vocab-size", str(cfg.vocab_size),
        "--draft-refine-layers", str(cfg.refine_layers),
        "--draft-refine-steps", str(cfg.refine_steps),
        *(["--init-draft-head-from", str(cfg.init_head.resolve())] if cfg.init_head else []),
        "--init-from-ar-checkpoint", str(cfg.checkpoint.resolve()), "--freeze-verifier",
        "--criterion", "specdec_joint_loss", "--label-smoothing", "0.1",
        "--draft-cuts", str(cfg.cuts), "--draft-soft-weight", str(cfg.soft_weight),
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", str(cfg.lr),
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "200", "--clip-norm", "1.0",
        "--max-tokens", str(cfg.max_tokens), "--num-workers", "0", "--seed", "1",
        "--save-dir", str(save_dir), "--no-epoch-checkpoints",
        "--save-interval-updates", "200", "--keep-interval-updates", "1",
        "--validate-interval-updates", "200", "--log-format", "simple", "--log-interval", "25",
        "--stop-time-hours", f"{cfg.budget_minutes / 60:.4f}",
    ]
    if cfg.state_cache:
        flags += ["--cached-states", str((cfg.out / STATES).resolve())]
    if training_precision(cfg.precision) == "bf16":
        flags += ["--draft-bf16"]
    return flags + ([] if torch.cuda.is_available() else ["--cpu"])


def encode_extra_source(cfg: AddHeadConfig, out: Path, src: str, tgt: str) -> None:
    """``--extra-source`` as a binarized ``train1`` source split beside the dictionaries."""
    import sentencepiece
    from fairseq.data import Dictionary

    out.mkdir(parents=True, exist_ok=True)
    for lang in (src, tgt):
        link = out / f"dict.{lang}.txt"
        link.unlink(missing_ok=True)
        os.symlink((cfg.data / f"dict.{lang}.txt").resolve(), link)
    spm = sentencepiece.SentencePieceProcessor(model_file=str(cfg.spm_model))
    pieces = out / "train1.pieces"
    count = 0
    with open(cfg.extra_source, encoding="utf-8", errors="replace") as lines, \
            atomic_text(pieces) as handle:
        for line in lines:
            text = " ".join(line.split())
            if text:
                handle.write(" ".join(spm.encode(text, out_type=str)) + "\n")
                count += 1
            if count >= cfg.extra_max_lines:
                break
    dictionary = Dictionary.load(str(cfg.data / f"dict.{src}.txt"))
    distill.binarize_chunks([pieces], dictionary, out / f"train1.{src}-{tgt}.{src}")
    LOG.info("extra source: %d sentences from %s", count, cfg.extra_source)


def assemble_data(out: Path, folders: Dict[str, Path], src: str, tgt: str) -> None:
    """One data directory with the distilled splits (``folders``: split -> dir)."""
    out.mkdir(parents=True, exist_ok=True)
    links = {f"dict.{lang}.txt": folders["train"] for lang in (src, tgt)}
    for split, folder in folders.items():
        for lang in (src, tgt):
            for ext in ("bin", "idx"):
                links[f"{split}.{src}-{tgt}.{lang}.{ext}"] = folder
    for name, folder in links.items():
        target = out / name
        target.unlink(missing_ok=True)
        os.symlink((folder / name).resolve(), target)


def cache_verifier_states(cfg: AddHeadConfig, data: Path) -> int:
    """The verifier's states over the distilled train and valid splits, in
    ``{out}/states/{split}`` (kept when complete); returns their bytes on disk."""
    import torch

    from nmt_specdec.workflows import cache_states

    torch.set_num_threads(cfg.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    caches = [cache_states.run(cfg.checkpoint, data, split, cfg.out / STATES / split,
                               device=device, max_tokens=cfg.max_tokens * 2)
              for split in ("train", "valid")]
    return sum(cache.disk_bytes() for cache in caches)


def run(cfg: AddHeadConfig) -> Dict:
    """All three steps; returns the report (also ``{out}/report.json``)."""
    cfg.validate()
    model_args, src, tgt = read_verifier_config(cfg.checkpoint, cfg.data)
    chain = StepChain(cfg.out)
    started = time.monotonic()
    splits = {"train": cfg.data, "valid": cfg.data}
    if cfg.extra_source is not None:
        extra = cfg.out / "extra-source"
        chain.run("extra-source", {"file": str(cfg.extra_source), "lines": cfg.extra_max_lines},
                  [extra / f"train1.{src}-{tgt}.{src}.bin"],
                  lambda: encode_extra_source(cfg, extra, src, tgt))
        splits["train1"] = extra  # fairseq concatenates train, train1, ...
    for split, source_dir in splits.items():
        folder = cfg.out / f"distill-{split}"
        dcfg = distill.DistillConfig(data=source_dir, checkpoint=cfg.checkpoint, out=folder,
                                     split=split, beam=cfg.beam, threads=cfg.threads,
                                     batch_size=256)
        chain.run(f"distill-{split}", {"beam": cfg.beam, "checkpoint": str(cfg.checkpoint)},
                  [folder / f"{split}.{src}-{tgt}.{tgt}.bin"],
                  lambda dcfg=dcfg: distill.run(dcfg))
    data = cfg.out / "data"
    assemble_data(data, {split: cfg.out / f"distill-{split}" for split in splits}, src, tgt)
    cache_bytes = cache_verifier_states(cfg, data) if cfg.state_cache else 0
    save_dir = cfg.out / "checkpoints"
    flags = train_flags(cfg, data, model_args, src, tgt, save_dir)
    info = train_recipe.train(flags, save_dir, cfg.out / "train.log", cfg.threads, REPO_ROOT)
    from nmt_specdec.workflows.head_report import (
        acceptance_report,
        finish_checkpoint,
        write_head_beside,
    )

    model_path = cfg.out / "model.pt"
    finish_checkpoint(Path(info.checkpoint), cfg.checkpoint, model_path)
    head_path = write_head_beside(model_path, data)
    report = acceptance_report(model_path, data, "valid", list(range(1, cfg.k + 1)),
                               cfg.valid_sentences, cfg.threads)
    report.update(train=asdict(info), command=" ".join(sys.argv), head_file=str(head_path),
                  state_cache_bytes=cache_bytes, precision=training_precision(cfg.precision),
                  updates_per_second=info.updates_per_second,
                  wall_minutes=(time.monotonic() - started) / 60, config=_jsonable(cfg))
    with atomic_text(cfg.out / REPORT) as handle:
        json.dump(report, handle, indent=1)
    LOG.info("wrote %s (verifier bit-identical to %s) and its head alone, %s (for "
             "--draft-head on %s)", model_path, cfg.checkpoint, head_path, cfg.checkpoint)
    return report


def _jsonable(cfg: AddHeadConfig) -> Dict:
    return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()}


def build_parser() -> argparse.ArgumentParser:
    d = AddHeadConfig(Path("."), Path("."), Path("."))
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, required=True,
                   help="stock fairseq transformer checkpoint (the verifier)")
    p.add_argument("--data", type=Path, required=True, help="its binarized data directory")
    p.add_argument("--out", type=Path, required=True, help="working/output directory")
    for name in ("k", "layers", "vocab_size", "refine_layers", "refine_steps", "cuts", "beam",
                 "max_tokens", "threads", "valid_sentences"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    p.add_argument("--budget-minutes", type=float, default=d.budget_minutes,
                   help="wall-clock limit of the training step")
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--soft-weight", type=float, default=d.soft_weight,
                   help="weight of the verifier's own distribution in the head's targets "
                   "(0: the distilled tokens alone, 1: the distribution alone)")
    p.add_argument("--init-head", type=Path, default=None,
                   help="start the head from this trained head on the same verifier (a joint "
                   "OUT/model.pt or a head file, OUT/head.pt); a refinement it lacks starts "
                   "fresh, first-pass layers beyond its own (--layers) as the identity")
    p.add_argument("--extra-source", type=Path, default=None,
                   help="monolingual source text (one sentence per line) whose verifier "
                   "translations are added to the head's training data")
    p.add_argument("--spm-model", type=Path, default=None,
                   help="SentencePiece model that encodes --extra-source")
    p.add_argument("--extra-max-lines", type=int, default=d.extra_max_lines)
    p.add_argument("--state-cache", choices=("on", "off"), default="on",
                   help="on: one pass of the verifier caches what the head reads (float16 "
                   "shards in OUT/states), and training never runs the verifier; off: every "
                   "update runs it")
    p.add_argument("--precision", choices=PRECISIONS, default=d.precision,
                   help="bf16: train under bfloat16 autocast (float32 weights and "
                   "optimizer); auto: bf16 where the CPU has AVX512-BF16 or AMX or the GPU "
                   "has bf16, else fp32 (bf16 emulated is slower than fp32)")
    logs.add_verbose_flag(p)
    return p


def main(argv: List[str] | None = None) -> int:
    def run_parsed(args: Dict) -> None:
        args["state_cache"] = args["state_cache"] == "on"
        _print(run(AddHeadConfig(**args)))

    return run_command(build_parser(), run_parsed, argv)


def _print(report: Dict) -> None:
    from nmt_specdec.workflows.head_report import format_report

    print(format_report(report))
    cache = report.get("state_cache_bytes") or 0
    print(f"training: {report['train']['updates']} updates in {report['precision']}, "
          f"{report['updates_per_second']:.2f} per second; "
          + (f"verifier states cached: {cache / 2**20:.1f} MiB" if cache
             else "no state cache (the verifier ran in every update)"))


if __name__ == "__main__":  # python -m nmt_specdec.workflows.add_draft_head, as the console script
    sys.exit(main())
