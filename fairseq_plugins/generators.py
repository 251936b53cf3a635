"""Which generator a ``translation_specdec`` decode uses, from the task options.

- plain: fairseq's own generator (stock ``SequenceGenerator`` etc.);
- ``--spec-decoding``: :class:`SpecDecGenerator`;
- ``--deterministic``: either of the greedy ones above as the fast path, wrapped
  in the fixed-shape replay of :mod:`nmt_specdec.decoding.replay.determinism`.
"""

import logging

from nmt_specdec.decoding.backends import make_backend
from nmt_specdec.decoding.loop import SpecDecGenerator
from nmt_specdec.decoding.options import (
    LengthRules,
    SpecDecOptions,
    default_spec_k,
    parse_spec_k,
)
from nmt_specdec.decoding.replay.determinism import DeterministicGenerator, FixedShapeReplay
from nmt_specdec.errors import UserError

logger = logging.getLogger(__name__)


def build_decoder(cfg, models, tgt_dict, args, stock=None):
    """Returns the generator for ``cfg`` (the task config) and generation ``args``.

    Args:
        stock: the generator fairseq's ``translation`` task built (None with
            ``--spec-decoding``).
    """
    if cfg.spec_decoding:
        fast = _spec_generator(cfg, models, tgt_dict, args)
    else:
        if cfg.int8 or cfg.fused_draft or cfg.backend == "onnxruntime":
            logger.warning("--backend/--int8 apply to --spec-decoding (--spec-k 0: greedy); "
                           "fairseq's own generator runs in torch")
        fast = stock
    if not cfg.deterministic:
        return fast
    return _deterministic(cfg, models, tgt_dict, args, fast)


def _spec_generator(cfg, models, tgt_dict, args) -> SpecDecGenerator:
    if len(models) != 1:
        raise UserError("--spec-decoding decodes with one model, not an ensemble")
    model = models[0]
    has_head = hasattr(model, "draft_head")
    drafter = getattr(cfg, "spec_drafter", "head")
    k, auto = parse_spec_k(cfg.spec_k)
    if k is None:  # default, or the upper bound of auto
        k = default_spec_k(model, drafter)
        k = -1 if k is None else k
    if k != 0 and not has_head and drafter == "head":
        raise UserError(
            "--spec-decoding needs a checkpoint with a draft head; train one with --arch "
            "specdec_transformer_* (or add one to this model with nmt-specdec-add-draft-head); "
            "--spec-drafter verifier-int8 drafts without one; --spec-k 0 decodes greedily "
            "with the lean engine"
        )
    if getattr(args, "beam", 1) != 1:
        logger.warning("--spec-decoding verifies greedily: --beam %s is ignored "
                       "(use --spec-beta/--spec-tau to relax)", args.beam)
    options = SpecDecOptions(k=k, beta=cfg.spec_beta, tau=cfg.spec_tau,
                             deterministic=cfg.deterministic, auto_k=auto and k > 0,
                             candidates=cfg.spec_candidates, drafter=drafter)
    # beta > 1 reads every token within tau of the best: an 8-bit projection certifies
    # that for few positions (22% of calls redone at tau=2), so it takes the fp32 one.
    exact = getattr(cfg, "exact_scores", False) or cfg.spec_beta > 1
    backend = make_backend(cfg.backend, model, tgt_dict, cfg.int8, cfg.fused_draft, exact)
    return SpecDecGenerator.from_generation_args(model, tgt_dict, options, args,
                                                 backend=backend)


def _deterministic(cfg, models, tgt_dict, args, fast) -> DeterministicGenerator:
    # Only greedy verification is batch-invariant: with beta > 1 or a beam the
    # result would depend on which candidates the batched fast path proposed.
    if cfg.spec_decoding and cfg.spec_beta != 1:
        raise UserError("--deterministic needs --spec-beta 1 (relaxed acceptance depends "
                        "on the drafts the batch happened to propose)")
    if not cfg.spec_decoding and (getattr(args, "beam", 1) != 1 or getattr(args, "sampling", False)):
        raise UserError("--deterministic replays greedy decoding: use --beam 1 without "
                        "--sampling")
    if len(models) != 1:
        raise UserError("--deterministic decodes with one model, not an ensemble")
    model = models[0]
    rules = LengthRules.from_generation_args(args, model, per_sentence=True)
    replay = FixedShapeReplay(model, tgt_dict, rules, window=cfg.deterministic_window)
    return DeterministicGenerator(fast, replay, tgt_dict)
