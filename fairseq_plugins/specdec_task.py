"""``translation_specdec``: fairseq translation plus SpecDec training and decoding.

Adds to fairseq's ``translation`` task:
- optional sequence-level distilled targets for the draft loss (``--distill-data``);
- decoding options (``--spec-decoding``, ``--spec-k``, ``--spec-beta``,
  ``--spec-tau``, ``--deterministic``), read by :meth:`build_generator` because a
  plugin cannot add fields to fairseq's GenerationConfig;
- ``--init-from-ar-checkpoint`` / ``--freeze-verifier`` to train a draft head onto
  an existing stock Transformer.
"""


import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq import checkpoint_utils
from fairseq.data import data_utils
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from fairseq_plugins import inference_inputs
from fairseq_plugins.draft_target_dataset import DraftTargetDataset
from fairseq_plugins.generators import build_decoder
from fairseq_plugins.generation_stats import log_stats_at_exit
from nmt_specdec.decoding.backends import BACKENDS, DEFAULT_BACKEND, check_backend
from nmt_specdec.decoding.options import DRAFTERS, parse_spec_k
from nmt_specdec.errors import UserError

logger = logging.getLogger(__name__)


@dataclass
class TranslationSpecDecConfig(TranslationConfig):
    spec_decoding: bool = field(
        default=False,
        metadata={"help": "decode with speculative draft-and-verify (needs a draft head)"},
    )
    spec_k: Optional[str] = field(
        default=None,
        metadata={"help": "draft block size K at decoding time (default: the model's "
                          "--draft-block-size); 0 = greedy decoding with the lean engine; "
                          "'auto' = choose K per iteration (up to the model's) from running "
                          "acceptance and measured pass costs"},
    )
    spec_beta: int = field(
        default=1,
        metadata={"help": "accept a draft if it is in the verifier's top-beta; 1 = exactly "
                          "the verifier's greedy output"},
    )
    spec_tau: float = field(
        default=0.0,
        metadata={"help": "... and within tau (log-prob) of the verifier's top-1"},
    )
    spec_candidates: int = field(
        default=1,
        metadata={"help": "drafts verified per slot: the head's top-1 chain plus C-1 more "
                          "candidates per depth as leaves, all in one verify pass (a tree "
                          "attention mask); 1 = the chain alone. Output unchanged at beta=1"},
    )
    spec_drafter: str = field(
        default="head",
        metadata={"help": "what drafts: head (the model's draft head) or verifier-int8 (the "
                          "verifier's own 8-bit copy, token by token: no draft head needed, "
                          "near-oracle acceptance; --backend onnxruntime, fp32). Output "
                          "unchanged at beta=1"},
    )
    backend: str = field(
        default=DEFAULT_BACKEND,
        metadata={"help": f"who runs the model calls of --spec-decoding: {', '.join(BACKENDS)} "
                          "(torch: eager, any device; onnxruntime: CPU graphs exported once "
                          "per checkpoint, cached in ~/.cache/nmt_specdec/onnx; auto: the "
                          "faster on the CPU, torch on a GPU)"},
    )
    int8: bool = field(
        default=False,
        metadata={"help": "with --backend onnxruntime: 8-bit weights in the verifier and draft "
                          "graphs (beta=1 stays exactly the int8 verifier's greedy output)"},
    )
    fused_draft: bool = field(
        default=False,
        metadata={"help": "with --backend onnxruntime: run the draft head inside the verify "
                          "call, after every verified position (one runtime call per "
                          "iteration; same output)"},
    )
    exact_scores: bool = field(
        default=False,
        metadata={"help": "with --backend onnxruntime (fp32): every logit of the verifier's output "
                          "projection in fp32, so positional scores equal the torch backend's. "
                          "By default it runs in 8 bits and the tokens that decide are "
                          "certified in fp32: the same output tokens, scores within ~3e-3, "
                          "a verify call ~0.2 ms cheaper at batch 1"},
    )
    deterministic: bool = field(
        default=False,
        metadata={"help": "batch-invariant output (greedy only): replay committed tokens "
                          "in a fixed shape and recompute mismatches"},
    )
    deterministic_window: int = field(
        default=32,
        metadata={"help": "positions per fixed-shape replay pass of --deterministic"},
    )
    distill_data: Optional[str] = field(
        default=None,
        metadata={"help": "binarized data dir with sequence-level distilled targets of the "
                          "training split (same order and names); used by the draft loss"},
    )
    verifier_on_distilled: bool = field(
        default=False,
        metadata={"help": "train the verifier on the distilled targets too (default: gold)"},
    )
    init_from_ar_checkpoint: Optional[str] = field(
        default=None,
        metadata={"help": "initialise encoder and verifier from a stock fairseq "
                          "transformer checkpoint (the draft head starts fresh)"},
    )
    init_draft_head_from: Optional[str] = field(
        default=None,
        metadata={"help": "start the draft head from this checkpoint's head (same verifier "
                          "and draft vocabulary); parts it lacks, e.g. refinement layers, "
                          "start fresh"},
    )
    freeze_verifier: bool = field(
        default=False,
        metadata={"help": "train only the draft head; encoder/verifier weights stay "
                          "bit-identical"},
    )


@register_task("translation_specdec", dataclass=TranslationSpecDecConfig)
class TranslationSpecDecTask(TranslationTask):
    cfg: TranslationSpecDecConfig

    def __init__(self, cfg: TranslationSpecDecConfig, src_dict, tgt_dict):
        _validate_decoding_options(cfg)
        super().__init__(cfg, src_dict, tgt_dict)

    # -- hostile raw input: see fairseq_plugins/inference_inputs.py --

    @classmethod
    def setup_task(cls, cfg: TranslationSpecDecConfig, **kwargs):
        inference_inputs.tolerate_invalid_stdin()
        try:
            return super().setup_task(cfg, **kwargs)
        except FileNotFoundError as err:
            raise UserError(f"data directory {cfg.data}: no such file {err.filename} "
                            "(it needs dict.SRC.txt and dict.TGT.txt from "
                            "fairseq-preprocess)") from None

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        return inference_inputs.interactive_tokens(self, lines, encode_fn)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        return inference_inputs.inference_dataset(self, src_tokens, src_lengths, constraints)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        distill = self.cfg.distill_data if split == self.cfg.train_subset else None
        if distill and self.cfg.verifier_on_distilled:
            # Both losses learn from distilled targets: load them as the split itself.
            data = self.cfg.data
            self.cfg.data = distill
            try:
                super().load_dataset(split, epoch, combine, **kwargs)
            finally:
                self.cfg.data = data
            return
        super().load_dataset(split, epoch, combine, **kwargs)
        if distill:
            self.datasets[split] = DraftTargetDataset(
                self.datasets[split], self._load_distilled_targets(distill, split)
            )

    def _load_distilled_targets(self, path: str, split: str):
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        prefix = os.path.join(path, f"{split}.{src}-{tgt}.{tgt}")
        dataset = data_utils.load_indexed_dataset(prefix, self.tgt_dict, self.cfg.dataset_impl)
        if dataset is None:
            raise UserError(f"--distill-data: no binarized targets at {prefix}.{{bin,idx}}")
        return dataset

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if self.cfg.init_from_ar_checkpoint and not from_checkpoint:
            _load_ar_weights(model, self.cfg.init_from_ar_checkpoint)
        if self.cfg.init_draft_head_from and not from_checkpoint:
            _load_head_weights(model, self.cfg.init_draft_head_from)
        if self.cfg.freeze_verifier:
            if not hasattr(model, "freeze_verifier"):
                raise UserError("--freeze-verifier needs --arch specdec_transformer*")
            model.freeze_verifier()
        return model

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        stock = None
        if not self.cfg.spec_decoding:
            stock = super().build_generator(
                models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn
            )
        return log_stats_at_exit(
            build_decoder(self.cfg, models, self.target_dictionary, args, stock))


def _validate_decoding_options(cfg: TranslationSpecDecConfig) -> None:
    k, _ = parse_spec_k(cfg.spec_k)
    if k is not None and k >= cfg.max_target_positions:
        raise UserError(f"--spec-k {k} must be below --max-target-positions "
                        f"{cfg.max_target_positions}")
    if cfg.spec_beta < 1:
        raise UserError(f"--spec-beta must be >= 1, got {cfg.spec_beta}")
    check_backend(cfg.backend, cfg.int8, cfg.fused_draft)
    if cfg.spec_drafter not in DRAFTERS:
        raise UserError(f"--spec-drafter must be one of {', '.join(DRAFTERS)}, "
                        f"got {cfg.spec_drafter!r}")
    if cfg.deterministic_window < 1:
        raise UserError(f"--deterministic-window must be >= 1, got {cfg.deterministic_window}")
    if cfg.spec_tau < 0:
        raise UserError(f"--spec-tau must be >= 0, got {cfg.spec_tau}")
    if cfg.freeze_verifier and not cfg.init_from_ar_checkpoint:
        logger.info("--freeze-verifier without --init-from-ar-checkpoint: the verifier "
                    "keeps its current (e.g. resumed) weights")


def _load_ar_weights(model, path: str) -> None:
    """Copies a stock Transformer's weights into the encoder and verifier."""
    if not os.path.exists(path):
        raise UserError(f"--init-from-ar-checkpoint: no such file {path}")
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    missing, unexpected = model.load_state_dict(state["model"], strict=False)
    not_draft = [k for k in missing if not k.startswith("draft_head.")]
    if not_draft or unexpected:
        raise UserError(
            f"--init-from-ar-checkpoint {path} does not match this architecture "
            f"(missing {not_draft[:3]}, unexpected {list(unexpected)[:3]})"
        )
    logger.info("initialised encoder and verifier from %s", path)


def _load_head_weights(model, path: str) -> None:
    """Copies a trained draft head's weights into the model's (a warm start)."""
    if not os.path.exists(path):
        raise UserError(f"--init-draft-head-from: no such file {path}")
    if not hasattr(model, "draft_head"):
        raise UserError("--init-draft-head-from needs --arch specdec_transformer*")
    weights = checkpoint_utils.load_checkpoint_to_cpu(path)["model"]
    prefix = "draft_head."
    head = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
    if not head:
        raise UserError(f"--init-draft-head-from {path} has no draft head")
    try:
        missing, unexpected = model.draft_head.load_state_dict(head, strict=False)
    except RuntimeError as err:  # shapes differ: another verifier or draft vocabulary
        raise UserError(f"--init-draft-head-from {path} does not fit this head "
                        f"({str(err).splitlines()[-1].strip()})") from None
    # Only the refinement pass may start fresh: a first pass of another depth
    # would be half copied.
    unfit = list(unexpected) + [k for k in missing if not k.startswith("refine_")]
    if unfit:
        raise UserError(f"--init-draft-head-from {path} does not fit this head "
                        f"(parts that differ: {unfit[:3]})")
    logger.info("draft head from %s (%d tensors fresh: %s)", path, len(missing),
                sorted({k.split(".")[0] for k in missing}) or "none")

