"""The Spec-Verify loop (Xia et al., 2023, Alg. 1) on the lean engine.

Per batch: encode once (fairseq's encoder), pre-allocate the cache and the
token buffers, then repeat

1. draft K tokens per row (the drafter reads the verifier's last state);
2. verify the last committed token + K drafts in one cached pass;
3. accept (top-beta and tau on logits) and commit the accepted run + correction;
4. bookkeep: write committed tokens in place, move lengths (rejected drafts
   roll back for free, see :mod:`.cache`), drop finished rows;

until every row has emitted EOS. K=0 is plain greedy decoding. Each iteration
synchronises with the host once (one small tensor read back).

One sentence on the CPU takes :mod:`.single_row` instead, which decides on the
host, and so does a batch that never drafts (:mod:`.greedy_rows`); the steps
the loops take are :mod:`.steps`, and the generator hands each loop the same
:class:`~.steps.LoopParts` and :class:`~.steps.Batch`.

Shapes: B active rows, K draft slots, T buffer width, C model dim, V vocabulary.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from nmt_specdec.decoding.acceptance import accept_drafts, commit_tokens
from nmt_specdec.decoding.backends import make_backend
from nmt_specdec.decoding.backends.base import Backend, VerifierCalls
from nmt_specdec.decoding.device import attention_kernels, model_device, on_device
from nmt_specdec.decoding.draft_tree import move_leaf_keys, resolve_tree, tree_layout
from nmt_specdec.decoding.drafters import Drafter, DraftRequest
from nmt_specdec.decoding.greedy_rows import decode_greedy_rows, greedy_turn_on_host
from nmt_specdec.decoding.k_policy import KPolicy, make_k_policy
from nmt_specdec.decoding.layout import check_decodable
from nmt_specdec.decoding.options import DecodingOptions, LengthRules, source_lengths
from nmt_specdec.decoding.scoring import (
    Constraints,
    certainty_margin,
    constrain_logits_,
    positional_scores,
    repeated_ngram_bans,
    search_rules_,
)
from nmt_specdec.decoding.single_row import RowBuffers, decode_single_row
from nmt_specdec.decoding.stats import SpecDecStats, tally_turns
from nmt_specdec.decoding.steps import (
    Batch,
    LoopParts,
    Rows,
    constrained_scores,
    draft_inputs,
    end_turn,
    plan_turn,
    start_batch,
)
from nmt_specdec.errors import UserError

# Greedy batches and turns on the CPU decide on the host (:mod:`.greedy_rows`);
# tests switch it off to compare with the shared tensor path.
HOST_GREEDY_TURNS = True


def write_committed_(rows: Rows, tokens: Tensor, scores: Tensor, counts: Tensor) -> None:
    """Writes ``tokens[b, :counts[b]]`` (and scores) after each row's committed ones."""
    slot = torch.arange(tokens.size(1), device=tokens.device).unsqueeze(0)  # (1, K+1)
    write_off = rows.tokens.size(1) - 1
    target = (rows.lengths.unsqueeze(1) + slot).masked_fill(slot >= counts.unsqueeze(1),
                                                             write_off)  # (B, K+1)
    rows.tokens.scatter_(1, target, tokens)
    rows.scores.scatter_(1, target, scores)


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
    """

    def __init__(self, model: nn.Module, tgt_dict, options: DecodingOptions,
                 lengths: LengthRules, drafter: Optional[Drafter] = None,
                 backend: Optional[Backend] = None):
        super().__init__()
        check_decodable(model)  # refuse, at build time, what the engine lacks
        self.model = model
        self.options = options
        self.lengths = lengths
        self.pad, self.eos, self.unk = tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk()
        self.rules = Constraints(self.pad, self.eos, self.unk, lengths.min_len,
                                 lengths.unk_penalty, lengths.temperature,
                                 lengths.no_repeat_ngram, lengths.match_source_len)
        self.backend = backend or make_backend("torch", model, tgt_dict)
        if drafter is None and options.k > 0:
            if options.drafter == "verifier-int8":
                drafter = self.backend.copy_drafter(self.pad)
            elif not hasattr(model, "draft_head"):
                raise UserError("--spec-k > 0 needs a model with a draft head (or "
                                "--spec-drafter verifier-int8)")
            else:
                drafter = self.backend.drafter(self.pad)
        self.drafter = drafter or Drafter()
        self.k_policy: KPolicy = make_k_policy(options)
        self.stats = SpecDecStats()
        self.symbols_to_strip_from_output = {self.eos}
        self.last_cache = None  # the last batch's cache, kept for inspection
        # One row on the CPU decides on the host (:mod:`.single_row`); tests switch it
        # off to compare with the batched loop.
        self.single_row = True
        self._row_buffers: Optional[RowBuffers] = None  # kept from sentence to sentence

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
                             backend: Optional[Backend] = None) -> "SpecDecGenerator":
        """Builds the generator from fairseq's GenerationConfig (``--max-len-a`` etc.)."""
        rules = LengthRules.from_generation_args(args, model, per_sentence=options.deterministic)
        return cls(model, tgt_dict, options, rules, drafter, backend)

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
        self.k_policy.start_batch(max_len.numel())
        # A batch that will not draft (--spec-k 0, or a greedy batch of --spec-k auto)
        # reads no draft state: the torch drafter's would cost its cross keys/values.
        if self.k_policy.may_draft and self.options.k:
            self.drafter.start_batch(sample, encoder_out)
        bos = self.eos if bos_token is None else bos_token
        finished = self.decode(self.lean_verifier(), encoder_out, max_len, bos, started)
        return [[self._fairseq_hypothesis(*item)] for item in finished]

    def decode(self, verifier: VerifierCalls, encoder_out, max_len: Tensor, bos: int,
               started: Optional[float] = None) -> List[tuple]:
        """Runs the loop (after ``k_policy.start_batch``); returns (tokens, scores,
        iterations) per input row. ``started``: when the batch's timing for the K
        policy began (default: now)."""
        started = time.perf_counter() if started is None else started
        parts = LoopParts(self.options, self.rules, self.drafter, self.k_policy, self.stats,
                          verifier)
        batch = start_batch(parts, encoder_out, max_len, bos)
        # Not through nn.Module.__setattr__ (a cost at batch 1: it looks the
        # name up among parameters, buffers and submodules).
        self.__dict__["last_cache"] = batch.cache
        on_host = verifier.embed.device.type == "cpu" and self.rules.plain
        if self.single_row and max_len.numel() == 1 and on_host:
            if self._row_buffers is None:
                self._row_buffers = RowBuffers()
            finished = decode_single_row(parts, batch, self._row_buffers)
        elif batch.k_max == 0 and HOST_GREEDY_TURNS and on_host:
            finished = decode_greedy_rows(parts, batch)
        else:
            finished = decode_rows(parts, batch)
        self.k_policy.end_batch(sum(item[0].numel() for item in finished if item is not None),
                                time.perf_counter() - started)
        return finished

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


def decode_rows(parts: LoopParts, batch: Batch) -> List[Optional[tuple]]:
    """The batched loop (any batch, trees, any device): one host read per iteration.

    Returns:
        ``(tokens, scores, iterations)`` per input row.
    """
    rows, cache, cross, limits, k_max = batch
    finished: List[Optional[tuple]] = [None] * len(limits)
    index = list(range(len(limits)))  # the host's copy of rows.index
    # Host-side facts that need no synchronisation: every row commits at least
    # one token per turn, so after t turns every row has >= t output tokens.
    turn, longest, uniform = 0, 1, True
    trace: List[tuple] = []  # (K, accepted, committed, finished) per turn, for the stats
    while index:
        started = time.perf_counter()
        active = len(index)
        k, checks = plan_turn(parts, k_max, turn, longest, limits)
        # Rows stay aligned while nothing is drafted, and a single row always is.
        uniform = active == 1 or (uniform and k == 0)
        rows, commit, num_accepted = _turn(parts, rows, cache, cross, k, longest, uniform, checks)
        trace.append((k, num_accepted, commit.counts, commit.finished))
        turn += 1
        # The one host synchronisation of the iteration: lengths and finished
        # flags of every row (and, for --spec-k auto, the drafts committed,
        # none past an EOS).
        pulled = [rows.lengths, commit.finished.long()]
        if parts.k_policy.wants_counts:
            pulled.append(commit.counts - 1)
        flags = torch.cat(pulled).tolist()
        lengths, done = flags[:active], flags[active: 2 * active]
        end_turn(parts, k, flags[2 * active:], started)
        if any(done):
            kept = [i for i, flag in enumerate(done) if not flag]
            _collect(parts.stats, rows, done, lengths, index, turn, finished)
            index, limits = [index[i] for i in kept], [limits[i] for i in kept]
            lengths = [lengths[i] for i in kept]
            keep = torch.tensor(kept, dtype=torch.long, device=rows.max_len.device)
            rows = Rows(*(field.index_select(0, keep) for field in rows))
            cache.keep_rows(keep)
            cross = parts.verifier.keep_rows(cross, keep)
            if k_max > 0:  # else the drafter was not started on this batch
                parts.drafter.keep_rows(keep)
        longest = max(lengths, default=1)
    if trace:  # a few tensor ops, one read
        parts.stats.add_tally(*tally_trace(trace, k_max))
    return finished


def _turn(parts: LoopParts, rows: Rows, cache, cross, k: int, longest: int, uniform: bool,
          checks: tuple):
    """One draft -> verify -> accept -> commit -> bookkeep turn of the active rows."""
    options = parts.options
    steps = rows.lengths - 1  # committed output tokens; the last one is not cached yet
    last = rows.tokens.gather(1, steps.unsqueeze(1))  # (B, 1)
    tree = k > 0 and options.candidates > 1  # leaves beside the chain (draft_tree)
    # 1. draft
    request = (DraftRequest(rows.tokens[:, :-1], rows.lengths, rows.states, rows.index, k)
               if k > 0 else None)
    inputs = draft_inputs(parts.drafter, request, last, options.candidates if tree else 1)
    # 2. verify
    layout = tree_layout(k, options.candidates, last.device) if tree else None
    offsets = layout.offsets if tree else torch.arange(k + 1, device=steps.device)
    verified = parts.verifier.verify(inputs, steps, longest - 1, cache, cross, uniform, layout)
    if (k == 0 and HOST_GREEDY_TURNS and verified.logits.device.type == "cpu"
            and verified.decision is None and parts.rules.plain):
        return greedy_turn_on_host(parts.verifier, parts.rules, rows, verified, checks,
                                   certainty_margin(options.beta, options.tau))
    constrain = partial(constrain_logits_, steps=steps.unsqueeze(1) + offsets,
                        max_len=rows.max_len, rules=parts.rules, check_min_len=checks[0],
                        check_max_len=checks[1])
    if not parts.rules.plain:
        constrain = _with_search_rules(constrain, parts.rules, rows, inputs, layout,
                                       steps.unsqueeze(1) + offsets)
    logits, lse = constrained_scores(parts.verifier, verified, constrain,
                                     certainty_margin(options.beta, options.tau),
                                     temperature=parts.rules.temperature)
    hidden = verified.hidden  # (B, N, C)
    # 3. accept and commit
    if tree:  # from here on the accepted path is a chain of K+1 positions
        acceptance, path, drafts = resolve_tree(logits, inputs, k, options.beta, options.tau)
        # Every row moves its path's keys (a chain's onto themselves): deciding
        # which rows took a leaf would cost a host read.
        move_leaf_keys(cache, steps, path, acceptance.num_accepted)
        logits = logits.gather(1, path.unsqueeze(2).expand(-1, -1, logits.size(2)))
        lse = lse.gather(1, path)
        hidden = hidden.gather(1, path.unsqueeze(2).expand(-1, -1, hidden.size(2)))
    else:
        drafts = inputs[:, 1:]  # (B, K)
        acceptance = accept_drafts(logits, drafts, options.beta, options.tau)
    commit = commit_tokens(drafts, acceptance, parts.rules.eos, parts.rules.pad)
    scores = positional_scores(logits, lse, commit.tokens)  # (B, K+1)
    if parts.rules.match_source_len:  # fairseq's length-constrained search scores EOS 0
        slots = steps.unsqueeze(1) + torch.arange(scores.size(1), device=steps.device)
        scores = scores.masked_fill(
            commit.tokens.eq(parts.rules.eos) & (slots >= rows.max_len.unsqueeze(1)), 0.0)
    # 4. bookkeep: the next draft reads the state that predicted the correction
    write_committed_(rows, commit.tokens, scores, commit.counts)
    index = acceptance.num_accepted.view(-1, 1, 1).expand(-1, 1, hidden.size(2))
    rows = rows._replace(lengths=rows.lengths + commit.counts,
                         states=hidden.gather(1, index).squeeze(1))
    return rows, commit, acceptance.num_accepted


def _with_search_rules(constrain, rules: Constraints, rows: Rows, inputs: Tensor,
                       layout, steps: Tensor):
    """``constrain`` followed by :func:`~.scoring.search_rules_` for this turn's
    inputs (the n-gram bans read each row's prefix on the host)."""
    bans = []
    if rules.no_repeat_ngram:
        lengths = rows.lengths.tolist()
        prefixes = [tokens[:n] for tokens, n in zip(rows.tokens.tolist(), lengths)]
        bans = repeated_ngram_bans(prefixes, _seen_drafts(inputs.tolist(), layout),
                                   rules.no_repeat_ngram)

    def constrain_all(logits: Tensor) -> Tensor:
        constrain(logits)
        return search_rules_(logits, steps, rows.max_len, rules, bans)
    return constrain_all


def _seen_drafts(inputs: List[List[int]], layout) -> List[List[List[int]]]:
    """Per row and verify input, the drafted inputs on its path (itself included;
    input 0 is the last committed token). A chain's input j sees inputs 1..j; a
    tree's sees its ancestors (:class:`~.draft_tree.TreeLayout`)."""
    new = len(inputs[0])
    if layout is None:
        paths = [list(range(1, j + 1)) for j in range(new)]
    else:
        ancestors = layout.ancestors.tolist()
        paths = [[a for a in range(1, new) if ancestors[j][a]] for j in range(new)]
    return [[[row[a] for a in path] for path in paths] for row in inputs]


def _collect(stats: SpecDecStats, rows: Rows, done: List[int], lengths: List[int],
             index: List[int], iterations: int, finished: List[Optional[tuple]]) -> None:
    """Stores the finished rows at their input position (host lists: no read).

    Args:
        done, lengths, index: per active row, the flags, committed lengths and
            input positions the iteration's read brought back.
        iterations: turns so far (every row started at the batch's first turn).
    """
    for i, flag in enumerate(done):
        if flag:
            end = lengths[i]
            finished[index[i]] = (rows.tokens[i, 1:end].clone(),
                                  rows.scores[i, 1:end].clone(), iterations)
            stats.sentences += 1


def tally_trace(trace: List[tuple], k_max: int) -> Tuple[List[int], List[int], int, int]:
    """Per-slot totals of a batch's turns (:func:`~.stats.tally_turns`, one host read).

    Args:
        trace: per turn ``(K, num_accepted, committed, finished)``, the last three
            (B,) for that turn's active rows.
        k_max: the largest K.

    Returns:
        ``(drafted_per_slot, accepted_per_slot, iterations, tokens)`` for
        :meth:`SpecDecStats.add_tally`.
    """
    return tally_turns(torch.cat([t[1].new_full(t[1].shape, t[0]) for t in trace]),
                       torch.cat([t[1] for t in trace]), torch.cat([t[2] for t in trace]),
                       torch.cat([t[3] for t in trace]), k_max)
