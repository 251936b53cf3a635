"""``build_decoder``: decoding options and a model in, a generator out.

Every entry point gets its generator here: the fairseq task's
``build_generator`` (``fairseq-generate``, ``-interactive``, the hub),
``nmt-specdec-translate`` and ``nmt-specdec-evaluate``. So each rule about what
can decode what is written once:

- without ``--spec-decoding``: fairseq's own generator, which the caller builds
  (beam search, sampling and the rest stay fairseq's; :func:`fairseq_generator`);
- ``--spec-decoding``: :class:`SpecDecGenerator` on the chosen backend, with K
  resolved against the model by :func:`resolve`, the one place that refuses a
  checkpoint without a draft head;
- ``--deterministic``: either of them wrapped in the fixed-shape replay of
  :mod:`nmt_specdec.decoding.replay.determinism`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from torch import nn

from nmt_specdec.decoding.backends import cpu_only, make_backend
from nmt_specdec.decoding.decision.sampling import SamplingRule
from nmt_specdec.decoding.generation_config import refuse_unsupported
from nmt_specdec.decoding.layout import check_decodable
from nmt_specdec.decoding.generator import SpecDecGenerator
from nmt_specdec.decoding.options import (
    VERIFIER_COPIES,
    VERIFIER_DRAFTER_K,
    DecodingOptions,
    LengthRules,
)
from nmt_specdec.decoding.replay.determinism import DeterministicGenerator, FixedShapeReplay
from nmt_specdec.errors import UserError
from nmt_specdec.model.head_file import attach_head_file

logger = logging.getLogger(__name__)

NO_DRAFT_HEAD = (
    "--spec-decoding needs a checkpoint with a draft head, and this one has none; train one "
    "with --task translation_specdec --arch specdec_transformer_* (or add one to this model "
    "with nmt-specdec-add-draft-head); --spec-drafter verifier-int8 drafts without one, "
    "--spec-k 0 decodes greedily with the lean engine (nmt-specdec-evaluate: --drafters "
    "verifier-int8, or --stock-only for fairseq's generator alone)"
)


def build_decoder(model: nn.Module, tgt_dict, options: DecodingOptions, generation_args,
                  stock: Optional[Callable[[], Any]] = None,
                  generator_arguments: Optional[Mapping[str, Any]] = None) -> Any:
    """The generator that decodes as ``options`` say.

    Args:
        model: one model (eval mode, on its device and in its precision).
        tgt_dict: the target dictionary (special ids).
        options: the decoding options.
        generation_args: fairseq's GenerationConfig (``--beam``, ``--max-len-a``...).
        stock: builds fairseq's own generator, called when not
            ``options.spec_decoding``.
        generator_arguments: what fairseq passed ``build_generator`` besides
            (``lm_model``, ``prefix_allowed_tokens_fn``, ``seq_gen_cls``).

    Raises:
        UserError: what cannot decode this way, in one line
            (:mod:`.generation_config` for fairseq's options).
    """
    if options.spec_decoding or options.deterministic:
        refuse_unsupported(generation_args, options.deterministic, generator_arguments)
        check_decodable(model)
    if options.draft_head:
        _attach_head(model, options)
    LengthRules.from_generation_args(generation_args, model).refuse_impossible()
    if options.spec_decoding:
        fast = _spec_generator(model, tgt_dict, options, generation_args)
    else:
        if options.int8 or options.fused_draft or cpu_only(options.backend):
            logger.warning("--backend/--int8 apply to --spec-decoding (--spec-k 0: greedy); "
                           "fairseq's own generator runs in torch")
        if stock is None:
            raise ValueError("build_decoder without --spec-decoding needs fairseq's generator")
        fast = stock()
    if not options.deterministic:
        return fast
    return _deterministic(model, tgt_dict, options, generation_args, fast)


def _attach_head(model: nn.Module, options: DecodingOptions) -> None:
    """Attaches ``--draft-head`` to the model once (a command may build several
    generators on one model); warns where nothing drafts with it."""
    if not options.spec_decoding or options.drafter != "head":
        logger.warning("--draft-head drafts for --spec-decoding with --spec-drafter head: "
                       "ignored here")
        return
    if getattr(model, "draft_head_file", None) != options.draft_head:
        attach_head_file(model, Path(options.draft_head))
        model.draft_head_file = options.draft_head


def fairseq_generator(task, model: nn.Module, generation_args) -> Callable[[], Any]:
    """Builds fairseq's generator for ``task``: :class:`FairseqTask`'s own
    ``build_generator``, not the plugin's, whose options come from the task config."""
    from fairseq.tasks import FairseqTask

    return functools.partial(FairseqTask.build_generator, task, [model], generation_args)


def resolve(model: nn.Module, options: DecodingOptions) -> DecodingOptions:
    """``options`` as ``model`` decodes them: K a number. ``--spec-k auto`` (k None)
    takes the model's draft block size as its upper bound (:data:`VERIFIER_DRAFTER_K`
    for the 8-bit copy).

    A K above the head's draft block size is lowered to it, with one warning:
    slots past it were never trained.

    Raises:
        UserError: the draft head must draft and the checkpoint has none, or K
            reaches the model's target positions.
    """
    k, auto = options.k, options.auto_k
    if k is None:
        k, auto = largest_k(model, options.drafter), True
    if k is None or (k != 0 and options.drafter == "head" and not hasattr(model, "draft_head")):
        raise UserError(NO_DRAFT_HEAD)
    if k >= model.max_decoder_positions():
        raise UserError(f"--spec-k {k} must be below the model's "
                        f"{model.max_decoder_positions()} target positions")
    if options.drafter == "head" and k > 0 and k > model.draft_block_size:
        logger.warning("--spec-k %d: this draft head was trained to draft %d tokens; "
                       "decoding with --spec-k %d", k, model.draft_block_size,
                       model.draft_block_size)
        k = model.draft_block_size
    return dataclasses.replace(options, k=k, auto_k=auto and k > 0)


def largest_k(model: nn.Module, drafter: str) -> Optional[int]:
    """auto's upper bound: None for the head's drafts on a model without a head."""
    if drafter in VERIFIER_COPIES:
        return VERIFIER_DRAFTER_K
    return model.draft_block_size if hasattr(model, "draft_head") else None


def _spec_generator(model: nn.Module, tgt_dict, options: DecodingOptions,
                    args) -> SpecDecGenerator:
    sampling = sampling_rule(args)
    if sampling is not None:
        check_sampling(options)
    options = resolve(model, options)
    if args.beam != 1:
        logger.warning("--spec-decoding verifies greedily: --beam %s is ignored "
                       "(use --spec-beta/--spec-tau to relax)", args.beam)
    # Sampling with a top-p cut or none reads every probability: the fp32 projection.
    # beta > 1 and a top-k cut certify their decisions on the 8-bit one on the host
    # (decision/certified.py).
    exact = options.exact_scores or (sampling is not None and not sampling.certifiable)
    backend = make_backend(options.backend, model, tgt_dict, options.int8, options.fused_draft,
                           exact, options.refine_steps)
    return SpecDecGenerator.from_generation_args(model, tgt_dict, options, args,
                                                 backend=backend, sampling=sampling)


def sampling_rule(args) -> Optional[SamplingRule]:
    """fairseq's ``--sampling`` settings as the engine's rule (None: no sampling)."""
    if not args.sampling:
        return None
    if args.sampling_topp > 1:
        raise UserError(f"--sampling-topp must be at most 1, got {args.sampling_topp}")
    return SamplingRule(topk=args.sampling_topk, topp=args.sampling_topp)


def check_sampling(options: DecodingOptions) -> None:
    """Refuses, in one line, what speculative sampling cannot take (docs/engine.md,
    "Speculative sampling"). Drafting never changes the sample, so any
    ``--spec-k`` (auto too) is taken."""
    if options.beta != 1 or options.tau != 0:
        raise UserError("--spec-beta/--spec-tau relax greedy verification; --sampling "
                        "keeps exactly the sampled tokens: drop them")
    if options.fused_draft:
        raise UserError("--fused-draft drafts the head's greedy tokens inside the verify call; "
                        "--sampling draws them from its distribution: drop --fused-draft")
    if options.int8:
        raise UserError("--int8 scores a sentence differently in batches of other sizes, so its "
                        "sample would depend on its batch: drop --int8 with --sampling")


def _deterministic(model: nn.Module, tgt_dict, options: DecodingOptions, args,
                   fast) -> DeterministicGenerator:
    # Only greedy is batch-invariant: a beam or sampling depends on the batch.
    if not options.spec_decoding and (args.beam != 1 or args.sampling):
        raise UserError("--deterministic replays greedy decoding: use --beam 1 without "
                        "--sampling")
    rules = LengthRules.from_generation_args(args, model, per_sentence=True)
    replay = FixedShapeReplay(model, tgt_dict, rules, window=options.deterministic_window)
    return DeterministicGenerator(fast, replay, tgt_dict)
