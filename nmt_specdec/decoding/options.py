"""Decoding options and fairseq's length rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor

from nmt_specdec.errors import UserError


# --spec-drafter: the model's draft head, or the verifier's 8-bit copy.
DRAFTERS = ("head", "verifier-int8")
# --spec-k's default with --spec-drafter verifier-int8 (the fastest K on the
# gettext test sentences, README "Drafting with the verifier's 8-bit copy").
VERIFIER_DRAFTER_K = 4


@dataclass(frozen=True)
class SpecDecOptions:
    """Decoding options (Xia et al.'s k, beta, tau).

    Attributes:
        k: draft block size K; 0 is plain greedy decoding with the same engine.
        beta: top-beta acceptance width; 1 = lossless greedy.
        tau: log-probability margin to the verifier's top-1.
        deterministic: batch-invariant output (see :mod:`nmt_specdec.determinism`).
        auto_k: choose K per iteration (up to ``k``) from acceptance and pass costs.
        candidates: drafts verified per slot: the top-1 chain plus C-1 leaves per
            depth (see :mod:`nmt_specdec.decoding.draft_tree`); 1 = a chain.
        drafter: what proposes the drafts (``--spec-drafter``, :data:`DRAFTERS`):
            ``head``, the model's NAR draft head, or ``verifier-int8``, the
            verifier's own 8-bit copy, token by token
            (:mod:`nmt_specdec.decoding.verifier_drafter`).
    """

    k: int
    beta: int = 1
    tau: float = 0.0
    deterministic: bool = False
    auto_k: bool = False
    candidates: int = 1
    drafter: str = "head"

    def __post_init__(self):
        if self.k < 0:
            raise UserError(f"--spec-k must be >= 0, got {self.k}")
        if self.beta < 1:
            raise UserError(f"--spec-beta must be >= 1, got {self.beta}")
        if not self.tau >= 0:
            raise UserError(f"--spec-tau must be >= 0, got {self.tau}")
        if self.candidates < 1:
            raise UserError(f"--spec-candidates must be >= 1, got {self.candidates}")
        if self.candidates > 1 and self.deterministic:
            raise UserError("--spec-candidates > 1 does not combine with --deterministic")
        if self.drafter not in DRAFTERS:
            raise UserError(f"--spec-drafter must be one of {', '.join(DRAFTERS)}, "
                            f"got {self.drafter!r}")
        if self.candidates > 1 and self.drafter != "head":
            raise UserError(f"--spec-candidates > 1 needs the draft head (--spec-drafter "
                            f"{self.drafter} proposes one token per slot)")


def default_spec_k(model, drafter: str) -> Optional[int]:
    """``--spec-k``'s default: the head's block size, :data:`VERIFIER_DRAFTER_K` for
    the 8-bit copy, None for a head drafter on a model without a head."""
    if drafter == "verifier-int8":
        return VERIFIER_DRAFTER_K
    return getattr(model, "draft_block_size", None) if hasattr(model, "draft_head") else None


def parse_spec_k(value) -> Tuple[Optional[int], bool]:
    """``--spec-k``: an integer K >= 0, or ``auto`` -> (K or None, auto?)."""
    if value is None:
        return None, False
    if str(value).strip().lower() == "auto":
        return None, True
    try:
        k = int(str(value))
    except ValueError:
        raise UserError(f"--spec-k must be an integer >= 0 or 'auto', got {value!r}") from None
    if k < 0:
        raise UserError(f"--spec-k must be >= 0, got {k}")
    return k, False


@dataclass(frozen=True)
class LengthRules:
    """fairseq's length rules: max_len = min(int(a * src_len + b), max_positions - 1).

    fairseq measures ``src_len`` as the padded width of the whole batch; with
    ``per_sentence`` each sentence uses its own length instead (batch-invariant).
    """

    max_len_a: float = 0.0
    max_len_b: int = 200
    max_positions: int = 1024
    min_len: int = 1
    unk_penalty: float = 0.0
    len_penalty: float = 1.0
    per_sentence: bool = False

    @classmethod
    def from_generation_args(cls, args, model, per_sentence: bool = False) -> "LengthRules":
        """Reads fairseq's GenerationConfig (``--max-len-a``, ``--min-len``, ...)."""
        return cls(
            max_len_a=args.max_len_a, max_len_b=args.max_len_b,
            max_positions=model.max_decoder_positions(),
            min_len=args.min_len, unk_penalty=args.unkpen, len_penalty=args.lenpen,
            per_sentence=per_sentence,
        )

    def max_lengths(self, src_tokens: Tensor, pad: int) -> Tensor:
        """(B,) step at which each sentence is forced to emit EOS."""
        own = src_tokens.ne(pad).long().sum(dim=1)
        widths = own.tolist() if self.per_sentence else [src_tokens.size(1)] * len(own)
        limits = [min(int(self.max_len_a * w + self.max_len_b), self.max_positions - 1)
                  for w in widths]
        return torch.tensor(limits, dtype=torch.long, device=src_tokens.device)
