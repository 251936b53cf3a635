"""``translation_specdec``: fairseq translation plus SpecDec training and decoding.

Adds to fairseq's ``translation`` task:
- optional sequence-level distilled targets for the draft loss (``--distill-data``);
- the decoding flags of :class:`~nmt_specdec.decoding.options.DecodingOptions`
  (``--spec-decoding``, ``--spec-k``, ``--backend``, ``--deterministic``...), as
  fields of the task config because a plugin cannot add fields to fairseq's
  GenerationConfig; :meth:`build_generator` reads them back and calls
  :func:`~nmt_specdec.decoding.build.build_decoder`;
- ``--init-from-ar-checkpoint`` / ``--freeze-verifier`` to train a draft head onto
  an existing stock Transformer.
"""


import contextlib
import logging
import os
from dataclasses import dataclass, field, make_dataclass
from functools import partial
from pathlib import Path
from typing import Optional

import torch
from fairseq import checkpoint_utils
from fairseq.data import data_utils
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from fairseq_plugins import inference_inputs
from fairseq_plugins.cached_states_dataset import CachedStatesDataset
from fairseq_plugins.draft_target_dataset import DraftTargetDataset
from fairseq_plugins.generation_stats import log_stats_at_exit
from nmt_specdec.decoding.build import build_decoder
from nmt_specdec.decoding.options import DecodingOptions, flag_fields
from nmt_specdec.errors import UserError
from nmt_specdec.model.head_file import head_file_weights
from nmt_specdec.model.state_cache import StateCache

logger = logging.getLogger(__name__)


@dataclass
class _TrainingConfig(TranslationConfig):
    """fairseq's translation options plus training a draft head."""

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
    cached_states: Optional[str] = field(
        default=None,
        metadata={"help": "with --freeze-verifier: DIR/SPLIT holds the verifier's encoder "
                          "output and decoder states for each split (written by "
                          "nmt-specdec-add-draft-head); the draft loss reads them instead of "
                          "running the verifier"},
    )
    draft_bf16: bool = field(
        default=False,
        metadata={"help": "compute the training and validation losses under bfloat16 "
                          "autocast (weights, gradients and optimizer stay float32): "
                          "faster where the device multiplies in bfloat16 (CPUs with "
                          "AVX-512 BF16 or AMX, recent GPUs)"},
    )


# The decoding flags are generated from their one declaration (see
# nmt_specdec/decoding/options.py): fairseq builds --flags from fields named as them.
TranslationSpecDecConfig = make_dataclass(
    "TranslationSpecDecConfig", flag_fields(), bases=(_TrainingConfig,),
    namespace={"__module__": __name__,
               "__doc__": "The task's options: translation, training, decoding."})


@register_task("translation_specdec", dataclass=TranslationSpecDecConfig)
class TranslationSpecDecTask(TranslationTask):
    cfg: TranslationSpecDecConfig

    def __init__(self, cfg: TranslationSpecDecConfig, src_dict, tgt_dict):
        _check_options(cfg)
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
        self._load_dataset(split, epoch, combine, **kwargs)
        if self.cfg.cached_states:
            self.datasets[split] = CachedStatesDataset(
                self.datasets[split], _open_cache(self.cfg.cached_states, split), split)

    def _load_dataset(self, split, epoch=1, combine=False, **kwargs):
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

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if not self.cfg.draft_bf16:
            return super().train_step(sample, model, criterion, optimizer, update_num,
                                      ignore_grad)
        # fairseq's step with the forward under autocast (the backward replays its dtypes).
        model.train()
        model.set_num_updates(update_num)
        with _autocast(self.cfg, sample):
            loss, sample_size, logging_output = criterion(model, sample)
        if ignore_grad:
            loss *= 0
        optimizer.backward(loss)
        return loss, sample_size, logging_output

    def valid_step(self, sample, model, criterion):
        with _autocast(self.cfg, sample):
            return super().valid_step(sample, model, criterion)

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
            if not self.cfg.init_from_ar_checkpoint and not from_checkpoint:
                # Training only: a checkpoint loaded to decode keeps its weights anyway.
                logger.info("--freeze-verifier without --init-from-ar-checkpoint: the "
                            "verifier keeps its current (e.g. resumed) weights")
        return model

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        # Read at every call: the hub and scripts set options on the config after setup.
        options = DecodingOptions.from_flags(self.cfg)
        stock = partial(super().build_generator, models, args, seq_gen_cls,
                        extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
        model = _one_model(models, options)
        passed = {"lm_model": (extra_gen_cls_kwargs or {}).get("lm_model"),
                  "prefix_allowed_tokens_fn": prefix_allowed_tokens_fn,
                  "seq_gen_cls": seq_gen_cls}
        return log_stats_at_exit(
            build_decoder(model, self.target_dictionary, options, args, stock, passed))


def _one_model(models, options: DecodingOptions):
    """The model the engine decodes with; fairseq's own generator takes ensembles."""
    if len(models) != 1:
        for flag, used in (("--spec-decoding", options.spec_decoding),
                           ("--deterministic", options.deterministic)):
            if used:
                raise UserError(f"{flag} decodes with one model, not an ensemble")
    return models[0]


def _check_options(cfg: TranslationSpecDecConfig) -> None:
    """What fairseq-train/-generate/-interactive refuse before loading a model."""
    options = DecodingOptions.from_flags(cfg)
    if options.k is not None and options.k >= cfg.max_target_positions:
        raise UserError(f"--spec-k {options.k} must be below --max-target-positions "
                        f"{cfg.max_target_positions}")


def _autocast(cfg: TranslationSpecDecConfig, sample) -> contextlib.AbstractContextManager:
    """``--draft-bf16``: bfloat16 autocast on the batch's device (else nothing)."""
    if not cfg.draft_bf16:
        return contextlib.nullcontext()
    tokens = (sample or {}).get("target")
    device = tokens.device.type if torch.is_tensor(tokens) else "cpu"
    return torch.autocast(device_type=device, dtype=torch.bfloat16)


def _open_cache(root: str, split: str) -> StateCache:
    try:
        return StateCache(Path(root) / split)
    except ValueError as error:
        raise UserError(f"--cached-states: {error}") from None


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
    # A head file (HEAD.pt, e.g. a shipped head), else a checkpoint with a head.
    head = head_file_weights(model, Path(path), "--init-draft-head-from")
    if head is None:
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
    # The refinement pass may start fresh, and so may first-pass layers past the
    # file's, which start as the identity: the deeper head begins as the file's.
    added = _added_layers(head, missing)
    unfit = list(unexpected) + [k for k in missing if not k.startswith("refine_")
                                and _layer_index(k) not in added]
    if unfit:
        raise UserError(f"--init-draft-head-from {path} does not fit this head "
                        f"(parts that differ: {unfit[:3]})")
    for index in sorted(added):
        _start_as_identity(model.draft_head.layers[index], path)
    logger.info("draft head from %s (%d tensors fresh: %s)", path, len(missing),
                sorted({k.split(".")[0] for k in missing}) or "none")



def _layer_index(key: str) -> int:
    """The first-pass layer a head weight belongs to (-1: none)."""
    parts = key.split(".")
    return int(parts[1]) if parts[0] == "layers" and parts[1].isdigit() else -1


def _added_layers(head: dict, missing) -> set:
    """First-pass layers the model has after all of the head file's (missing whole)."""
    depth = 1 + max((_layer_index(k) for k in head), default=-1)
    return {i for i in map(_layer_index, missing) if i >= depth}


def _start_as_identity(layer, path: str) -> None:
    """Zeroes what a pre-norm decoder layer adds to its residual stream (the two
    attention outputs and the second feed-forward matrix), so the layer passes
    its input through unchanged and training grows it from there."""
    if not layer.normalize_before:
        raise UserError(f"--init-draft-head-from {path}: layers added to a head must be "
                        "pre-norm (--decoder-normalize-before) to start as the identity")
    with torch.no_grad():
        for linear in (layer.self_attn.out_proj, layer.encoder_attn.out_proj, layer.fc2):
            linear.weight.zero_()
            if linear.bias is not None:
                linear.bias.zero_()
