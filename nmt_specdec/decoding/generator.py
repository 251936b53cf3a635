"""The generator fairseq gets: Spec-Verify translation (Xia et al., 2023, Alg. 1).

Per batch it encodes once (the backend's encoder), applies fairseq's length
rules and hands the batch (:class:`~.loops.steps.BatchStart`) to the loop
:func:`~.loops.choose_loop` picks for it, which allocates its buffers and
repeats draft -> verify -> accept -> commit -> bookkeep until every row has
emitted EOS (K=0: greedy). Results come back as fairseq's hypothesis dicts.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from typing import Dict, List, Optional

import torch
from torch import Tensor, nn

from nmt_specdec.decoding.backends import REFERENCE_BACKEND, check_drafter, make_backend
from nmt_specdec.decoding.backends.base import Backend, VerifierCalls
from nmt_specdec.decoding.decision.constraints import Constraints
from nmt_specdec.decoding.decision.draws import sentence_keys
from nmt_specdec.decoding.decision.sampling import SamplingRule
from nmt_specdec.decoding.device import attention_kernels, model_device, on_device
from nmt_specdec.decoding.drafters import Drafter, check_abilities
from nmt_specdec.decoding.k_policy import KPolicy, make_k_policy
from nmt_specdec.decoding.layout import check_decodable
from nmt_specdec.decoding.loops import BatchStart, Loop, StaticLoop, choose_loop
from nmt_specdec.decoding.loops.single_row import RowBuffers
from nmt_specdec.decoding.loops.steps import LoopParts
from nmt_specdec.decoding.options import DecodingOptions, LengthRules, source_lengths
from nmt_specdec.decoding.stats import SpecDecStats
from nmt_specdec.errors import UserError


class SpecDecGenerator(nn.Module):
    """Draft-and-verify translation with one fairseq model (K=0: greedy).

    Args:
        model: a fairseq encoder-decoder; a ``draft_head`` is needed when K > 0,
            no ``drafter`` is given and ``options.drafter`` is ``head``.
        tgt_dict: target dictionary (special ids come from here).
        options: k, beta, tau.
        lengths: fairseq length rules.
        drafter: what proposes drafts (default: as ``options.drafter`` says).
        backend: who runs the model calls (default: eager torch on the model).
        loop: the loop of every batch (default: :func:`~.loops.choose_loop`'s
            choice per batch).
        sampling: sample as fairseq's ``--sampling`` (speculative sampling when
            K > 0), each sentence's draws keyed by ``torch.initial_seed()`` (what
            ``--seed`` sets) and its ``id``; None: greedy (Spec-Verify).
    """

    def __init__(self, model: nn.Module, tgt_dict, options: DecodingOptions,
                 lengths: LengthRules, drafter: Optional[Drafter] = None,
                 backend: Optional[Backend] = None, loop: Optional[Loop] = None,
                 sampling: Optional[SamplingRule] = None):
        super().__init__()
        self.sampling = sampling
        self._sources_seen: Counter = Counter()  # sampling keys of batches without ids
        check_decodable(model)  # refuse, at build time, what the engine lacks
        self.model = model
        self.options = options
        self.lengths = lengths
        self.pad, self.eos, self.unk = tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk()
        self.rules = Constraints(self.pad, self.eos, self.unk, lengths.min_len,
                                 lengths.unk_penalty, lengths.temperature,
                                 lengths.no_repeat_ngram, lengths.match_source_len)
        self.backend = backend or make_backend(REFERENCE_BACKEND, model, tgt_dict,
                                               refine_steps=options.refine_steps)
        if drafter is None and options.k > 0:
            if options.drafter == "head" and not hasattr(model, "draft_head"):
                raise UserError("--spec-k > 0 needs a model with a draft head (or "
                                "--spec-drafter verifier-int8)")
            check_drafter(self.backend.name, options.drafter)
            drafter = self.backend.drafter(self.pad, options.drafter)
        self.drafter = drafter or Drafter()
        if options.k:  # K > 0 or auto: the drafter must do what the options ask
            check_abilities(self.drafter, options.candidates, sampling is not None)
        self.k_policy: KPolicy = make_k_policy(options)
        self.stats = SpecDecStats()
        self.symbols_to_strip_from_output = {self.eos}
        self.loop = loop
        self._row_buffers = RowBuffers()  # the single-row loop's, kept from sentence to sentence
        # The static loop's workspaces and graphs, kept from batch to batch (torch passes only).
        self._static = (StaticLoop(graphs=options.cuda_graphs == "on")
                        if self.backend.static_passes else None)

    def reset_k_policy(self) -> None:
        """Forgets what ``--spec-k auto`` learned (acceptance, pass costs): the next
        batch starts from the initial state, as a fresh ``fairseq-generate`` run does."""
        self.k_policy = make_k_policy(self.options)

    def lean_verifier(self) -> VerifierCalls:
        """The backend's verifier, rebuilt only when the model's weights have changed."""
        return self.backend.verifier()

    @classmethod
    def from_generation_args(cls, model, tgt_dict, options: DecodingOptions, args,
                             drafter: Optional[Drafter] = None,
                             backend: Optional[Backend] = None,
                             loop: Optional[Loop] = None,
                             sampling: Optional[SamplingRule] = None) -> "SpecDecGenerator":
        """Builds the generator from fairseq's GenerationConfig (``--max-len-a`` etc.)."""
        rules = LengthRules.from_generation_args(args, model, per_sentence=options.deterministic)
        return cls(model, tgt_dict, options, rules, drafter, backend, loop, sampling)

    @torch.no_grad()
    def generate(self, models, sample: dict, prefix_tokens=None, constraints=None,
                 bos_token: Optional[int] = None, **unused) -> List[List[Dict]]:
        """fairseq's generator entry point: one n-best list (of one) per sentence."""
        if prefix_tokens is not None or constraints is not None:
            raise UserError("--spec-decoding does not support --prefix-size or constraints")
        if self.model.training:  # eval() walks every module
            self.model.eval()
        device = model_device(self.model)
        with attention_kernels(device):
            return self._generate(on_device(sample, device), bos_token)

    def _generate(self, sample: dict, bos_token: Optional[int]) -> List[List[Dict]]:
        net_input = sample["net_input"]
        encoder_out = self.backend.encode(net_input)
        sources = (source_lengths(net_input, self.pad, self.eos)
                   if self.lengths.match_source_len else None)
        max_len = self.lengths.max_lengths(net_input["src_tokens"], self.pad, sources)
        # --spec-k auto compares batches that draft with batches that do not: the
        # drafter's per-batch state is part of what drafting costs.
        started = time.perf_counter()
        # The padded width is the longest source: a host int, no device read.
        self.k_policy.start_batch(max_len.numel(), net_input["src_tokens"].size(1))
        k_max = self.options.k if self.k_policy.may_draft else 0
        verifier = self.lean_verifier()
        bos = self.eos if bos_token is None else bos_token
        start = BatchStart(sample, encoder_out, max_len, max_len.tolist(), bos, k_max,
                           self._sentence_keys(sample, max_len))
        loop = self.loop or choose_loop(max_len.numel(), k_max, verifier.embed.device,
                                        self.rules, self._row_buffers, self._static,
                                        self.sampling is not None)
        finished = loop(self._parts(verifier), start)
        self._end_batch(finished, started)
        return [[self._fairseq_hypothesis(*item)] for item in finished]

    @property
    def capture_seconds(self) -> float:
        """Time this generator has spent capturing CUDA graphs, all batches so far."""
        return 0.0 if self._static is None else self._static.capture_seconds

    def _parts(self, verifier: VerifierCalls) -> LoopParts:
        return LoopParts(self.options, self.rules, self.drafter, self.k_policy, self.stats,
                         verifier, self.sampling)

    def _sentence_keys(self, sample: dict, max_len: Tensor) -> Optional[Tensor]:
        """(B,) the sampling draws' key of each sentence: the seed and its ``id``
        (its position in the input); None when nothing samples."""
        if self.sampling is None:
            return None
        ids = sample.get("id")
        if ids is None:
            # fairseq-interactive's batches have no ids, and its row order depends
            # on the batch size: the source and its count among equal sources so far.
            ids = torch.tensor(self._source_ids(sample["net_input"]["src_tokens"]))
        return sentence_keys(torch.initial_seed(), ids.to(max_len.device).long().view(-1))

    def _end_batch(self, finished: List[tuple], started: float) -> None:
        self.k_policy.end_batch(sum(item[0].numel() for item in finished if item is not None),
                                time.perf_counter() - started)

    def _source_ids(self, src_tokens: Tensor) -> List[int]:
        """A 63-bit id per row from its source tokens and how many equal sources
        came before it (equal lines draw independently, as in fairseq)."""
        ids = []
        for row in src_tokens.tolist():
            source = tuple(token for token in row if token != self.pad)
            seen, self._sources_seen[source] = self._sources_seen[source], \
                self._sources_seen[source] + 1
            digest = hashlib.blake2b(repr((source, seen)).encode(), digest_size=8).digest()
            ids.append(int.from_bytes(digest, "little") >> 1)
        return ids

    def _fairseq_hypothesis(self, tokens: Tensor, scores: Tensor, iterations: int) -> Dict:
        """Converts one result to fairseq's hypothesis dict (as SequenceGenerator)."""
        return {
            "tokens": tokens,
            "score": self.lengths.sentence_score(scores),
            "attention": None,
            "alignment": None,
            "positional_scores": scores,
            "iterations": iterations,
            "steps": iterations,  # what fairseq-generate --print-step prints
        }
