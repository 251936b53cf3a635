"""What the engine does with each of fairseq's generation options.

``fairseq-generate`` and ``fairseq-interactive`` hand every generator fairseq's
``GenerationConfig`` (``--beam``, ``--temperature``, ``--sampling``...) and, from
``fairseq-generate``, an LM to fuse. The engine either honours an option exactly
as ``SequenceGenerator`` with beam 1 does, or refuses it when the generator is
built, in one line naming the option: nothing is ignored silently.

:data:`OUTCOMES` lists every field of ``GenerationConfig`` with its outcome;
``tests/integration/test_fairseq_differential.py`` walks the dataclass and fails
on a field missing here, and compares every honoured option with fairseq's own
generator. ``docs/engine.md`` prints the same table.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional

from nmt_specdec.errors import UserError

HONOURED, REFUSED = "honoured", "refused"


class Outcome(NamedTuple):
    """What the engine does with one option.

    Attributes:
        kind: :data:`HONOURED` or :data:`REFUSED`.
        note: how it is honoured, or why it is refused.
        refused_if: for a refused option, whether a value is refused (None:
            any value other than fairseq's default, given as ``default``).
        default: fairseq's default of the option.
    """

    kind: str
    note: str
    refused_if: Optional[Callable[[Any], bool]] = None
    default: Any = None


def _honoured(note: str) -> Outcome:
    return Outcome(HONOURED, note)


def _refused(note: str, default: Any = None,
             refused_if: Optional[Callable[[Any], bool]] = None) -> Outcome:
    return Outcome(REFUSED, note, refused_if, default)


_NOT_SEARCH = "not read by a translation generator (fairseq's SequenceGenerator ignores it too)"

OUTCOMES: Dict[str, Outcome] = {
    "beam": _honoured("SpecDec is the beam-1 search; a --beam above 1 decodes at beam 1 and says "
                      "so in one warning line (fairseq's default is 5: pass --beam 1)"),
    "nbest": _refused("SpecDec returns one hypothesis per sentence", 1, lambda v: v > 1),
    "max_len_a": _honoured("as SequenceGenerator (the batch's padded source width)"),
    "max_len_b": _honoured("as SequenceGenerator"),
    "min_len": _honoured("as SequenceGenerator; above the longest output allowed: refused, as "
                         "fairseq refuses it"),
    "match_source_len": _honoured("each output is as long as its source (src_lengths), EOS "
                                  "scored 0, as fairseq's length-constrained search"),
    "unnormalized": _honoured("the score is the sum of positional scores"),
    "lenpen": _honoured("score = sum / length ** lenpen"),
    "unkpen": _honoured("subtracted from unk's log-probability"),
    "temperature": _honoured("logits divided by it before the softmax (scores; with --unkpen "
                             "or --spec-beta > 1, tokens too)"),
    "no_repeat_ngram_size": _honoured(
        "a token that would repeat an n-gram of the prefix (drafts included) is blocked, on "
        "every device; 1 is refused (it blocks EOS, which fairseq's prefix starts with)"),
    "no_early_stop": _honoured(_NOT_SEARCH + "; deprecated"),
    "no_beamable_mm": _honoured(_NOT_SEARCH + " (BeamableMM is fconv's)"),
    "replace_unk": _honoured("applied by fairseq-generate after decoding, as for "
                             "SequenceGenerator (no alignment, as there)"),
    "sacrebleu": _honoured("scoring, after decoding"),
    "score_reference": _refused("scores the reference with fairseq's SequenceScorer: drop "
                                "--spec-decoding", False),
    "prefix_size": _refused("forced target prefixes are not implemented", 0),
    "sampling": _honoured("speculative sampling: every token distributed exactly as fairseq's "
                          "--sampling --beam 1 samples it; keyed by --seed and the sentence's "
                          "position, so the same at any batch size (a fixed K and a chain of "
                          "drafts; refused with --deterministic, --fused-draft, "
                          "--spec-candidates > 1, --spec-beta/--spec-tau)"),
    "sampling_topk": _honoured("as fairseq's (top-k of the tempered, constrained "
                               "distribution), for the verifier and the drafts alike"),
    "sampling_topp": _honoured("as fairseq's (the smallest set reaching p; takes precedence "
                               "over --sampling-topk)"),
    "constraints": _refused("lexically constrained decoding is not implemented", None),
    "diverse_beam_groups": _refused("diverse beam search is not implemented", -1,
                                    lambda v: v > 0),
    "diverse_beam_strength": _honoured("read only with --diverse-beam-groups (refused)"),
    "diversity_rate": _refused("diverse siblings search is not implemented", -1.0,
                               lambda v: v > -1),
    "print_alignment": _refused("SpecDec computes no attention alignment", None),
    "print_step": _honoured("fairseq-generate prints the iterations each sentence took (I-)"),
    "lm_path": _refused("LM fusion is not implemented", None),
    "lm_weight": _honoured("read only with --lm-path (refused)"),
    "iter_decode_eos_penalty": _honoured(_NOT_SEARCH),
    "iter_decode_max_iter": _honoured(_NOT_SEARCH),
    "iter_decode_force_max_iter": _honoured(_NOT_SEARCH),
    "iter_decode_with_beam": _honoured(_NOT_SEARCH),
    "iter_decode_with_external_reranker": _honoured(_NOT_SEARCH),
    "retain_iter_history": _honoured(_NOT_SEARCH),
    "retain_dropout": _refused("decoding runs in eval mode, without dropout", False),
    "retain_dropout_modules": _honoured("read only with --retain-dropout (refused)"),
    "decoding_format": _honoured(_NOT_SEARCH),
    "no_seed_provided": _honoured("fairseq's own bookkeeping"),
    "eos_token": _honoured(_NOT_SEARCH + " (speech-to-speech tasks)"),
    "beam_mt": _honoured(_NOT_SEARCH + " (two-pass speech models)"),
    "max_len_a_mt": _honoured(_NOT_SEARCH + " (two-pass speech models)"),
    "max_len_b_mt": _honoured(_NOT_SEARCH + " (two-pass speech models)"),
    "lenpen_mt": _honoured(_NOT_SEARCH + " (two-pass speech models)"),
}

# What fairseq passes to build_generator besides the config.
GENERATOR_ARGUMENTS: Dict[str, str] = {
    "lm_model": "LM fusion is not implemented",
    "prefix_allowed_tokens_fn": "prefix-constrained decoding is not implemented",
    "seq_gen_cls": "--spec-decoding builds its own generator",
}

# Honoured only by the batched tensor loop; --deterministic's replay refuses them.
NOT_REPLAYED = {"temperature": 1.0, "no_repeat_ngram_size": 0, "match_source_len": False}


def flag(name: str) -> str:
    """``--no-repeat-ngram-size`` for ``no_repeat_ngram_size``."""
    return "--" + name.replace("_", "-")


def refuse_unsupported(args: Any, deterministic: bool,
                       arguments: Optional[Mapping[str, Any]] = None) -> None:
    """Raises on the first refused option set in ``args`` (fairseq's
    GenerationConfig) or ``arguments`` (what ``build_generator`` got besides).

    Args:
        deterministic: the output is replayed (``--deterministic``), which
            honours fewer options (:data:`NOT_REPLAYED`).

    Raises:
        UserError: one line naming the option.
    """
    for name, outcome in OUTCOMES.items():
        if outcome.kind != REFUSED:
            continue
        value = getattr(args, name)
        refused = (outcome.refused_if(value) if outcome.refused_if
                   else value != outcome.default)
        if refused:
            raise UserError(f"{flag(name)} {value} is not supported with --spec-decoding or "
                            f"--deterministic: {outcome.note}")
    for name, note in GENERATOR_ARGUMENTS.items():
        if (arguments or {}).get(name) is not None:
            raise UserError(f"{name} is not supported with --spec-decoding or "
                            f"--deterministic: {note}")
    if args.temperature <= 0:
        raise UserError(f"--temperature must be > 0, got {args.temperature}")
    if args.no_repeat_ngram_size == 1:
        raise UserError("--no-repeat-ngram-size 1 blocks EOS (fairseq's target prefix starts "
                        "with it), so no sentence could end: use 2 or more")
    if deterministic and args.sampling:
        raise UserError("--sampling is not supported with --deterministic, which replays "
                        "greedy decoding; a sample is batch-invariant already (its draws "
                        "are keyed by --seed and the sentence's position)")
    if deterministic:
        for name, default in NOT_REPLAYED.items():
            if getattr(args, name) != default:
                raise UserError(f"{flag(name)} is not supported with --deterministic "
                                "(its fixed-shape replay applies the length, unk and pad "
                                "rules only)")


def add_sampling_flags(parser) -> None:
    """fairseq's sampling flags, for a command that is not fairseq's
    (``nmt-specdec-translate``): the same names, defaults and meaning."""
    parser.add_argument("--sampling", action="store_true", help="sample each token instead of "
                        "taking the best (with --spec-decoding: speculative sampling, the same "
                        "sample)")
    parser.add_argument("--sampling-topk", type=int, default=-1, metavar="K",
                        help="sample among the K likeliest tokens (-1: all)")
    parser.add_argument("--sampling-topp", type=float, default=-1.0, metavar="P",
                        help="sample among the smallest set of tokens whose probability "
                        "reaches P (-1: all)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="divide the logits by it before the softmax")
    parser.add_argument("--seed", type=int, default=None, help="seed of the sampling draws "
                        "(default: a fresh one per run)")


def seed_torch(seed: Optional[int]) -> None:
    """Seeds torch as fairseq's ``--seed`` does (None: leaves it unseeded)."""
    if seed is not None:
        import torch

        torch.manual_seed(seed)
