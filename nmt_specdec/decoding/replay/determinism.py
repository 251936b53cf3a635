"""Batch-invariant decoding by fixed-shape verified replay (after LLM-42).

Float results depend on tensor shapes (kernel choice, reduction blocking), so a
sentence decoded in a batch of 32 can come out differently than alone. Here the
fast batched generator only *proposes* each sentence's tokens. Every committed
token is then taken from a verifier pass whose shapes depend only on that
sentence and a fixed window W:

- the encoder runs on the sentence alone (batch 1, its own length);
- the decoder scores input positions in fixed windows [cW, (c+1)W): one pass
  per window, over the cache of the completed earlier windows.

Within a window, position p only attends to positions <= p (masked keys get
exactly zero weight), so its prediction is a function of the committed tokens
up to p, the source and W alone. Proposed tokens are accepted while they equal
the replay's prediction (greedy, beta = 1); at the first mismatch the replay's
token is committed and the rest is recomputed one token per fixed-shape pass
(divergence is rare: 0.00% of tokens on the reference model).

Only greedy verification is batch-invariant: with beta > 1 the output would
depend on which acceptable draft the batch happened to propose.

Shapes: W window, V vocabulary, S source length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional

import torch
from torch import Tensor, nn

from nmt_specdec.decoding.decision.acceptance import commit_host
from nmt_specdec.decoding.decision.constraints import Constraints, constrain_logits_
from nmt_specdec.decoding.decision.tree import walk_row
from nmt_specdec.decoding.device import attention_kernels, model_device, on_device
from nmt_specdec.decoding.layout import check_decodable
from nmt_specdec.decoding.options import LengthRules
from nmt_specdec.decoding.replay.ragged import compaction_index
from nmt_specdec.decoding.replay.replay_pass import KVCache, verify_block
from nmt_specdec.errors import UserError


class WindowWalk(NamedTuple):
    """Result of checking one window's predictions against its inputs.

    Attributes:
        tokens: newly committed tokens (>= 1).
        scores: their log-probabilities.
        finished: an EOS was committed.
        window_complete: every input of the window is committed, so its cache
            entries are final and can be kept.
    """

    tokens: List[int]
    scores: List[float]
    finished: bool
    window_complete: bool


def walk_window(preds: List[int], scores: List[float], inputs: List[int], first: int,
                eos: int) -> WindowWalk:
    """Accepts proposed inputs while they equal the replay's predictions: the
    engine's walk (:func:`~..decision.tree.walk_row`, a chain) and commit
    (:func:`~..decision.acceptance.commit_host`) under the exact greedy test, a
    draft passing as its position's argmax.

    Args:
        preds: (W,) replay top-1 after each input of the window.
        scores: (W,) log-probability of each prediction.
        inputs: (W,) tokens fed to the window (committed, then proposed, then filler).
        first: index in the window of the last committed input.
        eos: end-of-sentence id.

    Returns:
        The :class:`WindowWalk`.
    """
    new = len(preds) - first  # the last committed input, then the window's proposals
    drafts = inputs[first + 1:]
    passes = [draft == pred for draft, pred in zip(drafts, preds[first:])]
    accepted, correction = walk_row(passes + preds[first:] + inputs[first:], new - 1, 1, new)[:2]
    tokens, finished = commit_host(drafts, accepted, correction, eos)
    # All proposals taken: the prediction after the last input was committed as
    # the correction, and the window's cache entries are final.
    return WindowWalk(tokens, scores[first: first + len(tokens)], finished,
                      not finished and accepted == new - 1)


@dataclass
class ReplayStats:
    """Totals over all replayed sentences.

    Attributes:
        sentences: sentences replayed.
        tokens: tokens committed by the replay.
        recomputed: committed tokens that differ from (or come after a
            divergence from) the fast path's proposal.
        passes: fixed-shape decoder passes.
    """

    sentences: int = 0
    tokens: int = 0
    recomputed: int = 0
    passes: int = 0


class FixedShapeReplay(nn.Module):
    """Re-derives each sentence's tokens in fixed shapes (see module docstring).

    Args:
        model: a fairseq encoder-decoder (the verifier; a draft head is optional).
        tgt_dict: target dictionary.
        lengths: length rules; must be per-sentence.
        window: W, positions per fixed-shape decoder pass.
    """

    def __init__(self, model: nn.Module, tgt_dict, lengths: LengthRules, window: int = 32):
        super().__init__()
        if not lengths.per_sentence:
            raise ValueError("fixed-shape replay needs per-sentence length rules")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        check_decodable(model)  # the replay re-implements the decoder's pass
        self.model, self.lengths, self.window = model, lengths, window
        self.pad, self.eos, self.unk = tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk()
        self.stats = ReplayStats()

    @torch.no_grad()
    def replay(self, src_tokens: Tensor, proposal: List[int], bos: int) -> Dict:
        """Decodes one sentence with the fast path's ``proposal`` as drafts.

        Args:
            src_tokens: (S,) the source with padding removed.
            proposal: tokens proposed by the fast path (EOS included).
            bos: first decoder input.

        Returns:
            ``{"tokens", "positional_scores", "recomputed"}`` for this sentence.
        """
        src = src_tokens.unsqueeze(0)  # (1, S)
        encoder_out = self.model.encoder.forward_torchscript(
            {"src_tokens": src, "src_lengths": src.new_tensor([src.size(1)])})
        max_len = self.lengths.max_lengths(src, self.pad)  # (1,)
        committed, scores = [bos], []
        pending = list(proposal)  # drafts not yet checked
        cache = KVCache(self.model.decoder)
        while True:
            walk = self._verify_window(committed, pending, encoder_out, max_len, cache)
            committed += walk.tokens
            scores += walk.scores
            # Proposals stay useful while the replay agrees with them; after a
            # mismatch they describe another continuation and are dropped.
            taken = len(walk.tokens)
            pending = pending[taken:] if walk.tokens == pending[:taken] else []
            if walk.finished:
                break
        tokens = committed[1:]
        recomputed = len(tokens) - _common_prefix(tokens, proposal)
        self.stats.sentences += 1
        self.stats.tokens += len(tokens)
        self.stats.recomputed += recomputed
        return {"tokens": tokens, "positional_scores": scores, "recomputed": recomputed}

    def _verify_window(self, committed, pending, encoder_out, max_len, cache: KVCache):
        last = len(committed) - 1  # input position of the last committed token
        start = (last // self.window) * self.window
        inputs = (committed[start:] + pending)[: self.window]
        inputs += [self.pad] * (self.window - len(inputs))  # filler, never attended to
        device = max_len.device  # the model's: the replay runs where it lives
        positions = torch.arange(start, start + self.window, device=device).unsqueeze(0)  # (1, W)
        lprobs = verify_block(self.model.decoder, torch.tensor([inputs], device=device),
                              positions.clamp(max=self.lengths.max_positions - 1),
                              encoder_out, cache)
        rules = Constraints(self.pad, self.eos, self.unk, self.lengths.min_len,
                            self.lengths.unk_penalty)
        lprobs = constrain_logits_(lprobs.masked_fill(lprobs.isnan(), -math.inf), positions,
                                   max_len, rules)  # fairseq's NaN guard, then its rules
        values, preds = lprobs[0].max(dim=-1)  # (W,): argmax, greedy's tie-break
        self.stats.passes += 1
        walk = walk_window(preds.tolist(), values.tolist(), inputs,
                           last - start, self.eos)
        if not walk.window_complete:  # keep only completed windows in the cache
            kept = torch.tensor([start], device=device)
            cache.trim(compaction_index(kept, torch.zeros_like(kept), cache.width()))
        return walk


class DeterministicGenerator(nn.Module):
    """Batched fast path, then per-sentence fixed-shape replay of its tokens.

    fairseq's generator interface (``generate``), so ``fairseq-generate`` and
    ``fairseq-interactive`` use it through the task's ``build_generator``.

    Args:
        fast: any generator with fairseq's ``generate`` (SpecDec with beta=1, or
            stock ``SequenceGenerator`` with beam 1); only proposes tokens.
        replay: the :class:`FixedShapeReplay` that commits them.
        tgt_dict: target dictionary.
    """

    def __init__(self, fast: nn.Module, replay: FixedShapeReplay, tgt_dict):
        super().__init__()
        self.fast, self.replay = fast, replay
        self.pad, self.eos = tgt_dict.pad(), tgt_dict.eos()
        self.symbols_to_strip_from_output = {self.eos}

    @property
    def stats(self):
        """The fast path's statistics (SpecDec only; None for stock greedy)."""
        return getattr(self.fast, "stats", None)

    @torch.no_grad()
    def generate(self, models, sample: dict, prefix_tokens=None, constraints=None,
                 bos_token: Optional[int] = None, **kwargs) -> List[List[Dict]]:
        if prefix_tokens is not None or constraints is not None:
            raise UserError("--deterministic does not support --prefix-size or constraints")
        device = model_device(self.replay.model)
        sample = on_device(sample, device)
        # Each sentence's own limits, refused before the fast path runs (fairseq's asserts).
        self.replay.lengths.max_lengths(sample["net_input"]["src_tokens"], self.pad)
        proposals = self.fast.generate(models, sample, bos_token=bos_token, **kwargs)
        self.replay.model.eval()
        with attention_kernels(device):
            return self._replayed(sample, proposals, bos_token)

    def _replayed(self, sample: dict, proposals: List[List[Dict]],
                  bos_token: Optional[int]) -> List[List[Dict]]:
        """Each row's fast output replayed in its fixed shape, in the batch's order."""
        bos = self.eos if bos_token is None else bos_token
        results = []
        for src, hypos in zip(sample["net_input"]["src_tokens"], proposals):
            replayed = self.replay.replay(src[src.ne(self.pad)], hypos[0]["tokens"].tolist(), bos)
            # --print-step: the fast path's iterations (stock greedy: one per token).
            replayed["steps"] = hypos[0].get("steps", len(hypos[0]["tokens"]))
            results.append([self._fairseq_hypothesis(replayed)])
        return results

    def _fairseq_hypothesis(self, replayed: Dict) -> Dict:
        tokens = torch.tensor(replayed["tokens"], dtype=torch.long)
        scores = torch.tensor(replayed["positional_scores"])
        return {
            "tokens": tokens,
            "score": self.replay.lengths.sentence_score(scores),
            "attention": None,
            "alignment": None,
            "positional_scores": scores,
            "recomputed": replayed["recomputed"],
            "steps": replayed["steps"],
        }


def _common_prefix(a: List[int], b: List[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
