"""The Spec-Verify generator (Xia et al., 2023, Alg. 1), batched and KV-cached.

Per batch: encode once, then loop draft -> verify -> accept -> commit -> trim ->
bookkeep until every sentence has emitted EOS. Rows advance by different
amounts each iteration; finished rows leave the active batch and ``rows`` maps
the survivors back to input order. With ``beta=1`` the output equals fairseq's
greedy ``SequenceGenerator`` (beam 1) token for token, up to float rounding.

Shapes: B active rows, K draft slots, T hypothesis length (BOS included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional

import torch
from torch import Tensor, nn

from nmt_specdec.acceptance import accept_drafts, commit_tokens, constrain_lprobs
from nmt_specdec.drafters import DraftHeadDrafter, Drafter, DraftRequest
from nmt_specdec.errors import UserError
from nmt_specdec.ragged import append_ragged, compaction_index, left_pad
from nmt_specdec.stats import SpecDecStats
from nmt_specdec.verifier import KVCache, verify_block


@dataclass(frozen=True)
class SpecDecOptions:
    """Decoding options (Xia et al.'s k, beta, tau).

    Attributes:
        k: draft block size K.
        beta: top-beta acceptance width; 1 = lossless greedy.
        tau: log-probability margin to the verifier's top-1.
        deterministic: batch-invariant output (see :mod:`nmt_specdec.determinism`).
    """

    k: int
    beta: int = 1
    tau: float = 0.0
    deterministic: bool = False

    def __post_init__(self):
        if self.k < 1:
            raise UserError(f"--spec-k must be >= 1, got {self.k}")
        if self.beta < 1:
            raise UserError(f"--spec-beta must be >= 1, got {self.beta}")
        if not self.tau >= 0:
            raise UserError(f"--spec-tau must be >= 0, got {self.tau}")


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


class Hypotheses(NamedTuple):
    """Active rows. ``tokens``/``scores`` are right-padded, BOS in column 0.

    Attributes:
        rows: (B,) index in the input batch.
        tokens: (B, T) committed tokens.
        scores: (B, T) verifier log-probability of each committed token (0 for BOS).
        lengths: (B,) used length of each row, BOS included.
        max_len: (B,) EOS is forced at this output step.
        iterations: (B,) verifier calls so far.
    """

    rows: Tensor
    tokens: Tensor
    scores: Tensor
    lengths: Tensor
    max_len: Tensor
    iterations: Tensor


def start_hypotheses(max_len: Tensor, bos: int) -> Hypotheses:
    batch = max_len.size(0)
    ones = torch.ones(batch, dtype=torch.long, device=max_len.device)
    return Hypotheses(
        rows=torch.arange(batch, device=max_len.device),
        tokens=ones.new_full((batch, 1), bos),
        scores=torch.zeros(batch, 1, device=max_len.device),
        lengths=ones,
        max_len=max_len,
        iterations=torch.zeros_like(ones),
    )


def keep_rows(hyps: Hypotheses, keep: Tensor) -> Hypotheses:
    """Drops rows: every field is indexed with ``keep`` (B',)."""
    return Hypotheses(*(field.index_select(0, keep) for field in hyps))


class SpecDecGenerator(nn.Module):
    """Draft-and-verify translation with one fairseq SpecDec model.

    Args:
        model: a ``specdec_transformer`` (encoder, AR decoder, ``draft_head``).
        tgt_dict: target dictionary (special ids come from here).
        options: k, beta, tau, deterministic.
        lengths: fairseq length rules.
        drafter: what proposes drafts (default: the model's draft head).
    """

    def __init__(self, model: nn.Module, tgt_dict, options: SpecDecOptions,
                 lengths: LengthRules, drafter: Optional[Drafter] = None):
        super().__init__()
        self.model = model
        self.options = options
        self.lengths = lengths
        self.pad, self.eos, self.unk = tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk()
        self.drafter = drafter or DraftHeadDrafter(model.draft_head, self.pad)
        self.stats = SpecDecStats()
        self.symbols_to_strip_from_output = {self.eos}

    @classmethod
    def from_generation_args(cls, model, tgt_dict, options: SpecDecOptions, args,
                             drafter: Optional[Drafter] = None) -> "SpecDecGenerator":
        """Builds the generator from fairseq's GenerationConfig (``--max-len-a`` etc.)."""
        rules = LengthRules.from_generation_args(args, model, per_sentence=options.deterministic)
        return cls(model, tgt_dict, options, rules, drafter)

    @torch.no_grad()
    def generate(self, models, sample: dict, prefix_tokens=None, constraints=None,
                 bos_token: Optional[int] = None, **unused) -> List[List[Dict]]:
        """fairseq's generator entry point: one n-best list (of one) per sentence."""
        if prefix_tokens is not None or constraints is not None:
            raise UserError("--spec-decoding does not support --prefix-size or constraints")
        self.model.eval()
        net_input = sample["net_input"]
        encoder_out = self.model.encoder.forward_torchscript(net_input)
        max_len = self.lengths.max_lengths(net_input["src_tokens"], self.pad)
        self.drafter.start_batch(sample)
        bos = self.eos if bos_token is None else bos_token
        finished = self.decode(encoder_out, start_hypotheses(max_len, bos))
        return [[self._fairseq_hypothesis(*item)] for item in finished]

    def decode(self, encoder_out, hyps: Hypotheses) -> List[tuple]:
        """Runs the draft-verify loop; returns (tokens, scores, iterations) per input row."""
        cache = KVCache(self.model.decoder)
        finished: List[Optional[tuple]] = [None] * hyps.rows.numel()
        while hyps.rows.numel() > 0:
            hyps, done = self._iteration(hyps, encoder_out, cache)
            if done.any():
                self._collect(hyps, done, finished)
                keep = (~done).nonzero().squeeze(1)
                hyps = keep_rows(hyps, keep)
                cache.keep_rows(keep)
                encoder_out = self.model.encoder.reorder_encoder_out(encoder_out, keep)
        return finished

    def _iteration(self, hyps: Hypotheses, encoder_out, cache: KVCache):
        steps = hyps.lengths - 1  # output tokens so far; the last one is not cached yet
        # No draft is useful past the max length, where only EOS is allowed.
        k = int(min(self.options.k, int((hyps.max_len - steps).max())))
        # 1. draft
        request = DraftRequest(left_pad(hyps.tokens, hyps.lengths, self.pad), encoder_out,
                               hyps.rows, k)
        drafts = self.drafter.propose(request) if k > 0 else steps.new_zeros(steps.size(0), 0)
        # 2. verify the last committed token + K drafts in one cached pass
        last = hyps.tokens.gather(1, steps.unsqueeze(1))  # (B, 1)
        offsets = torch.arange(k + 1, device=steps.device).unsqueeze(0)
        predicted_step = steps.unsqueeze(1) + offsets  # (B, K+1)
        positions = predicted_step.clamp(max=self.lengths.max_positions - 1)
        old_width = cache.width()
        lprobs = verify_block(self.model.decoder, torch.cat([last, drafts], 1), positions,
                              encoder_out, cache)
        lprobs = constrain_lprobs(lprobs, predicted_step, hyps.max_len, pad=self.pad,
                                  eos=self.eos, unk=self.unk, min_len=self.lengths.min_len,
                                  unk_penalty=self.lengths.unk_penalty)
        # 3. accept and 4. commit
        acceptance = accept_drafts(lprobs, drafts, self.options.beta, self.options.tau)
        commit = commit_tokens(drafts, acceptance, self.eos, self.pad)
        scores = lprobs.gather(2, commit.tokens.unsqueeze(2)).squeeze(2)  # (B, K+1)
        # 5. trim: keep the cache entries of the inputs that are now committed
        cache.trim(compaction_index(steps, commit.counts, old_width))
        self.stats.record_iteration(acceptance.accepted, commit.counts)
        hyps = hyps._replace(
            tokens=append_ragged(hyps.tokens, hyps.lengths, commit.tokens, commit.counts, self.pad),
            scores=append_ragged(hyps.scores, hyps.lengths, scores, commit.counts, 0.0),
            lengths=hyps.lengths + commit.counts,
            iterations=hyps.iterations + 1,
        )
        return hyps, commit.finished

    def _collect(self, hyps: Hypotheses, done: Tensor, finished: List[Optional[tuple]]) -> None:
        """6. bookkeep: stores finished rows at their input position."""
        for i in done.nonzero().squeeze(1).tolist():
            end = int(hyps.lengths[i])
            finished[int(hyps.rows[i])] = (
                hyps.tokens[i, 1:end], hyps.scores[i, 1:end], int(hyps.iterations[i])
            )
            self.stats.sentences += 1

    def _fairseq_hypothesis(self, tokens: Tensor, scores: Tensor, iterations: int) -> Dict:
        """Converts one result to fairseq's hypothesis dict (as SequenceGenerator)."""
        score = scores.sum() / (tokens.numel() ** self.lengths.len_penalty)
        return {
            "tokens": tokens,
            "score": score,
            "attention": None,
            "alignment": None,
            "positional_scores": scores,
            "iterations": iterations,
        }
