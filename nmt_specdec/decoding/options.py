"""Decoding options, declared once, and fairseq's length rules.

:class:`DecodingOptions` is the one declaration of how to decode: a typed field
per option, each with its help string and the name of its command-line flag in
the field's metadata, all checked in ``__post_init__`` (a one-line
:class:`UserError` naming the flag). Every entry point derives from it:

- fairseq builds its command line, and the task config it saves in checkpoints,
  from a dataclass whose fields are named as the flags. :func:`flag_fields`
  gives those fields and ``fairseq_plugins`` adds them to the task's config.
  They are generated rather than inherited because the two classes differ in
  kind: this one is frozen and typed, fairseq's is mutable, and ``--spec-k``
  is text there (an integer or ``auto``) but ``Optional[int]`` here;
- :func:`add_flags` gives ``nmt-specdec-translate`` the same flags;
- :meth:`DecodingOptions.from_flags` reads the flags back, from fairseq's task
  config or argparse's namespace. The text of ``--spec-k`` is read by
  :func:`parse_spec_k` and nowhere else.

Fields are named as the engine and the paper (Xia et al.) name them (``k``,
``beta``, ``tau``); their flags keep the names fairseq users type
(``--spec-k``, ``--spec-beta``). :func:`nmt_specdec.decoding.build.build_decoder`
turns options and a model into a generator.
"""

import argparse
from dataclasses import dataclass, field, fields
from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

from nmt_specdec.decoding.backends import BACKENDS, DEFAULT_BACKEND, check_backend
from nmt_specdec.decoding.decision.rules import AcceptanceRule, acceptance_rule
from nmt_specdec.errors import UserError

# --spec-drafter: the model's draft head, or the verifier's 8-bit or 4-bit copy.
DRAFTERS = ("head", "verifier-int8", "verifier-int4")
VERIFIER_COPIES = DRAFTERS[1:]
# The largest K of --spec-k auto with --spec-drafter verifier-int8 or -int4: the 4-bit copy's
# fastest fixed K on the gettext test sentences, where a single row's drafts end at an EOS or an
# unsure draft (docs/results.md, "A chain ends at its first EOS draft").
VERIFIER_DRAFTER_K = 10
# --spec-k's value for "choose K per iteration", and its default.
AUTO = "auto"
SPEC_K = "spec_k"


def _option(default: Any, help: str, flag: Optional[str],
            choices: Optional[Tuple[str, ...]] = None) -> Any:
    """A field of :class:`DecodingOptions`: its default, what it does, its flag
    (``spec_beta`` for ``--spec-beta``; None: no flag) and the values it takes."""
    return field(default=default, metadata={"help": help, "flag": flag, "choices": choices})


@dataclass(frozen=True)
class DecodingOptions:
    """How to decode (Xia et al.'s k, beta, tau, and who runs the model calls).

    ``k`` None is ``--spec-k auto``: K chosen per iteration, up to the model's
    draft block size (:func:`nmt_specdec.decoding.build.resolve` makes it a
    number before the engine sees it). Help strings: the fields' metadata.
    """

    spec_decoding: bool = _option(
        False, "decode with speculative draft-and-verify (needs a draft head, or "
        "--spec-drafter verifier-int8)", "spec_decoding")
    k: Optional[int] = _option(
        None, "draft block size K at decoding time: an integer is a fixed K (0 = greedy "
        "decoding with the lean engine); 'auto' (the default) chooses K per iteration, up to "
        "the model's --draft-block-size (5 with --spec-drafter verifier-int8/-int4), from running "
        "acceptance and measured pass costs", SPEC_K)
    auto_k: bool = _option(
        False, "choose K per iteration up to k (what --spec-k auto sets)", None)
    beta: int = _option(
        1, "accept a draft if it is in the verifier's top-beta; 1 = exactly the verifier's "
        "greedy output", "spec_beta")
    tau: float = _option(
        0.0, "... and within tau (log-prob) of the verifier's top-1", "spec_tau")
    candidates: int = _option(
        1, "drafts verified per slot: the head's top-1 chain plus C-1 more candidates per "
        "depth as leaves, all in one verify pass (a tree attention mask); 1 = the chain "
        "alone. Output unchanged at beta=1", "spec_candidates")
    drafter: str = _option(
        "head", "what drafts: head (the model's draft head), verifier-int8 (the verifier's "
        "own 8-bit copy, token by token: no draft head needed, near-oracle acceptance) or "
        "verifier-int4 (its 4-bit copy: cheaper calls, a little less acceptance); the copies "
        "on --backend onnxruntime, fp32. Output unchanged at beta=1", "spec_drafter", DRAFTERS)
    draft_head: str = _option(
        "", "a draft head file (nmt-specdec-add-draft-head writes OUT/head.pt) to attach to "
        "the checkpoint's verifier, the one it was trained on (another is refused): a stock "
        "transformer checkpoint then drafts with it", "draft_head")
    refine_steps: Optional[int] = _option(
        None, "times the draft head's refinement layers run per draft at decoding time "
        "(default: the head's own, as trained with --draft-refine-steps; 0 switches it off): "
        "more runs draft better and cost more. Heads without refinement layers ignore it. "
        "Output unchanged at beta=1", "spec_refine_steps")
    backend: str = _option(
        DEFAULT_BACKEND, f"who runs the model calls of --spec-decoding: {', '.join(BACKENDS)} "
        "(torch: eager, any device; onnxruntime: CPU graphs exported once per checkpoint, "
        "cached in ~/.cache/nmt_specdec/onnx; auto: the faster on the CPU, torch on a GPU)",
        "backend", BACKENDS)
    cuda_graphs: str = _option(
        "on", "on a GPU, decode in static shapes and replay each iteration as a captured CUDA "
        "graph (on), or run the same static passes eagerly (off); the capture costs a few "
        "passes once per shape and K. Same output", "cuda_graphs", ("on", "off"))
    int8: bool = _option(
        False, "with --backend onnxruntime: 8-bit weights in the verifier and draft graphs "
        "(beta=1 stays exactly the int8 verifier's greedy output)", "int8")
    fused_draft: bool = _option(
        False, "with --backend onnxruntime: run the draft head inside the verify call, after "
        "every verified position (one runtime call per iteration; same output)", "fused_draft")
    exact_scores: bool = _option(
        False, "with --backend onnxruntime (fp32): every logit of the verifier's output "
        "projection in fp32, so positional scores equal the torch backend's. By default it "
        "runs in 8 bits and the tokens that decide are certified in fp32: the same output "
        "tokens, scores within ~3e-3, a cheaper verify call at batch 1", "exact_scores")
    deterministic: bool = _option(
        False, "batch-invariant output (greedy only): replay committed tokens in a fixed "
        "shape and recompute mismatches", "deterministic")
    deterministic_window: int = _option(
        32, "positions per fixed-shape replay pass of --deterministic", "deterministic_window")

    def __post_init__(self) -> None:
        if self.k is not None and self.k < 0:
            raise UserError(f"--spec-k must be >= 0, got {self.k}")
        if self.beta < 1:
            raise UserError(f"--spec-beta must be >= 1, got {self.beta}")
        if not self.tau >= 0:  # nan too
            raise UserError(f"--spec-tau must be >= 0, got {self.tau}")
        if self.candidates < 1:
            raise UserError(f"--spec-candidates must be >= 1, got {self.candidates}")
        if self.refine_steps is not None and self.refine_steps < 0:
            raise UserError(f"--spec-refine-steps must be >= 0, got {self.refine_steps}")
        if self.drafter not in DRAFTERS:
            raise UserError(f"--spec-drafter must be one of {', '.join(DRAFTERS)}, "
                            f"got {self.drafter!r}")
        if self.cuda_graphs not in ("on", "off"):
            raise UserError(f"--cuda-graphs must be on or off, got {self.cuda_graphs!r}")
        check_backend(self.backend, self.int8, self.fused_draft)
        if self.deterministic_window < 1:
            raise UserError(f"--deterministic-window must be >= 1, got {self.deterministic_window}")
        self._check_combinations()

    def _check_combinations(self) -> None:
        if self.candidates > 1 and self.deterministic:
            raise UserError("--spec-candidates > 1 does not combine with --deterministic")
        if self.candidates > 1 and self.drafter != "head":
            raise UserError(f"--spec-candidates > 1 needs the draft head (--spec-drafter "
                            f"{self.drafter} proposes one token per slot)")
        if self.auto_k and self.int8 and self.drafter != "head":
            raise UserError(f"--spec-k auto does not choose for --spec-drafter {self.drafter} "
                            "beside --int8's verifier, where its drafting lost at every K measured "
                            "(docs/results.md): give a fixed --spec-k, or drop --int8")
        # Only greedy verification is batch-invariant: with beta > 1 the result would
        # depend on which candidates the batched fast path proposed.
        if self.deterministic and self.spec_decoding and self.beta != 1:
            raise UserError("--deterministic needs --spec-beta 1 (relaxed acceptance depends "
                            "on the drafts the batch happened to propose)")

    @property
    def acceptance(self) -> AcceptanceRule:
        """The draft test of ``beta`` and ``tau`` (:mod:`.decision.rules`)."""
        return acceptance_rule(self.beta, self.tau)

    @classmethod
    def from_flags(cls, flags: Any) -> "DecodingOptions":
        """The options that ``flags`` holds as attributes named as the flags: fairseq's
        task config, argparse's namespace, or ``TranslationSpecDecConfig``.

        Raises:
            UserError: a bad value, naming its flag.
        """
        values = {}
        for option in fields(cls):
            flag = option.metadata["flag"]
            if flag == SPEC_K:
                values[option.name] = parse_spec_k(getattr(flags, flag))
            elif flag is not None:
                values[option.name] = getattr(flags, flag)
        return cls(**values)


def parse_spec_k(value: Any) -> Optional[int]:
    """``--spec-k``: an integer K >= 0, or ``auto`` (also None: a checkpoint saved
    before auto was the default) -> None."""
    if value is None or str(value).strip().lower() == AUTO:
        return None
    try:
        k = int(str(value))
    except ValueError:
        raise UserError(f"--spec-k must be an integer >= 0 or 'auto', got {value!r}") from None
    if k < 0:
        raise UserError(f"--spec-k must be >= 0, got {k}")
    return k


def _spec_k_flag(value: str) -> str:
    """argparse's check of ``--spec-k`` (its usage line on a bad value); the text
    is kept for :meth:`DecodingOptions.from_flags`."""
    try:
        parse_spec_k(value)
    except UserError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--spec-k ")) from None
    return value


def _flagged() -> List[Any]:
    return [option for option in fields(DecodingOptions) if option.metadata["flag"]]


def flag_names() -> List[str]:
    """Every decoding flag, as fairseq names its config field (``spec_k``)."""
    return [option.metadata["flag"] for option in _flagged()]


def option_flag(name: str) -> str:
    """The command-line flag of the field ``name`` of :class:`DecodingOptions`
    (``--spec-k`` for ``k``)."""
    return "--" + DecodingOptions.__dataclass_fields__[name].metadata["flag"].replace("_", "-")


def option_help(name: str) -> str:
    """What the field ``name`` of :class:`DecodingOptions` does (its flag's help)."""
    return DecodingOptions.__dataclass_fields__[name].metadata["help"]


def flag_fields() -> List[Tuple[str, Any, Any]]:
    """``(name, type, field)`` of every flag, for a fairseq config (``make_dataclass``).

    ``--spec-k`` is text there, ``auto`` or an integer, and None in checkpoints
    saved before ``auto`` was its default.
    """
    made = []
    for option in _flagged():
        flag = option.metadata["flag"]
        kind, default = (Optional[str], AUTO) if flag == SPEC_K else (option.type, option.default)
        made.append((flag, kind, field(default=default, metadata={"help": option.metadata["help"]})))
    return made


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Adds every decoding flag to an argparse parser (read back by
    :meth:`DecodingOptions.from_flags` on the parsed namespace)."""
    for option in _flagged():
        flag, help = option.metadata["flag"], option.metadata["help"]
        name = "--" + flag.replace("_", "-")
        if option.type is bool:  # every switch is off by default
            parser.add_argument(name, action="store_true", help=help)
        elif flag == SPEC_K:
            parser.add_argument(name, default=AUTO, metavar="K", type=_spec_k_flag, help=help)
        else:
            kind = int if option.type == Optional[int] else option.type
            parser.add_argument(name, type=kind, default=option.default,
                                choices=option.metadata["choices"], help=help)


@dataclass(frozen=True)
class LengthRules:
    """fairseq's length and score rules: max_len = min(int(a * src_len + b),
    max_positions - 1); the sentence score is the positional scores' sum divided
    by length ** len_penalty (``normalize``; ``--unnormalized``: the sum);
    ``temperature`` and ``no_repeat_ngram`` as :class:`~.scoring.Constraints`.

    fairseq measures ``src_len`` as the padded width of the whole batch; with
    ``per_sentence`` each sentence uses its own length instead (batch-invariant).
    ``match_source_len`` makes each sentence exactly as long as its source
    (fairseq's ``LengthConstrainedBeamSearch``: EOS forbidden before, forced at).
    """

    max_len_a: float = 0.0
    max_len_b: int = 200
    max_positions: int = 1024
    min_len: int = 1
    unk_penalty: float = 0.0
    len_penalty: float = 1.0
    per_sentence: bool = False
    match_source_len: bool = False
    normalize: bool = True
    temperature: float = 1.0
    no_repeat_ngram: int = 0

    @classmethod
    def from_generation_args(cls, args, model, per_sentence: bool = False) -> "LengthRules":
        """Reads fairseq's GenerationConfig (``--max-len-a``, ``--min-len``, ...)."""
        return cls(
            max_len_a=args.max_len_a, max_len_b=args.max_len_b,
            max_positions=model.max_decoder_positions(),
            min_len=args.min_len, unk_penalty=args.unkpen, len_penalty=args.lenpen,
            per_sentence=per_sentence,
            match_source_len=args.match_source_len, normalize=not args.unnormalized,
            temperature=args.temperature, no_repeat_ngram=args.no_repeat_ngram_size,
        )

    def max_lengths(self, src_tokens: Tensor, pad: int,
                    source_lengths: Optional[Tensor] = None) -> Tensor:
        """(B,) step at which each sentence is forced to emit EOS.

        Args:
            source_lengths: (B,) :func:`source_lengths`, which ``match_source_len``
                reads.

        Raises:
            UserError: ``min_len`` above the limit (fairseq asserts it per batch).
        """
        if self.match_source_len:
            limits = [min(n, self.max_positions - 1) for n in source_lengths.tolist()]
            self._refuse_min_len_above(max(limits, default=self.min_len))
        else:
            if self.per_sentence:
                widths = src_tokens.ne(pad).long().sum(dim=1).tolist()
            else:  # the batch's width: no tensor op
                widths = [src_tokens.size(1)] * src_tokens.size(0)
            limits = [self._limit(w) for w in widths]
            self._refuse_min_len_above(min(limits, default=self.min_len))
        return torch.tensor(limits, dtype=torch.long, device=src_tokens.device)

    def refuse_impossible(self) -> None:
        """Refuses, before any batch, ``min_len`` above every output length a fixed
        limit allows (fairseq's SequenceGenerator asserts it at its first batch). A
        limit that grows with the source (``max_len_a`` > 0, ``match_source_len``)
        is checked per batch by :meth:`max_lengths`."""
        if not self.match_source_len and self.max_len_a == 0:
            self._refuse_min_len_above(self._limit(0))

    def _limit(self, width: int) -> int:
        return min(int(self.max_len_a * width + self.max_len_b), self.max_positions - 1)

    def _refuse_min_len_above(self, longest: int) -> None:
        if self.min_len > longest:
            raise UserError(f"--min-len {self.min_len} is above the longest output allowed "
                            f"({longest}: --max-len-a/--max-len-b, --match-source-len, the "
                            "model's positions); fairseq refuses it too")

    def sentence_score(self, positional_scores: Tensor) -> Tensor:
        """The hypothesis score fairseq reports (and ranks by)."""
        total = positional_scores.sum()
        if not self.normalize:
            return total
        return total / (positional_scores.numel() ** self.len_penalty)


def source_lengths(net_input: dict, pad: int, eos: int) -> Tensor:
    """(B,) source lengths as SequenceGenerator reads them: ``src_lengths`` when the
    batch has them (fairseq's datasets count the EOS), else the tokens that are
    neither pad nor EOS."""
    if net_input.get("src_lengths") is not None:
        return net_input["src_lengths"].view(-1)
    src_tokens = net_input["src_tokens"]
    return (src_tokens.ne(eos) & src_tokens.ne(pad)).long().sum(dim=1)
