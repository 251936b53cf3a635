"""The batched loop: any batch, any device, chains and trees, one host read a turn.

Per turn, over the B active rows in tensor ops:

1. draft K tokens per row (the drafter reads the verifier's last state);
2. verify the last committed token + K drafts in one cached pass;
3. accept (top-beta and tau on logits) and commit the accepted run + correction
   (:mod:`..decision`);
4. bookkeep: write committed tokens in place, move lengths (rejected drafts
   roll back for free, see :mod:`..cache`), drop finished rows;

until every row has emitted EOS. K=0 is plain greedy decoding. Each iteration
synchronises with the host once (one small tensor read back). On the CPU a
greedy turn decides on the host instead (``greedy_on_host``,
:func:`~.greedy_rows.greedy_turn_on_host`): the tensor path's small ops cost
more there than the decision.

Shapes: B active rows, K draft slots, T buffer width, C model dim, V vocabulary.
"""

from __future__ import annotations

import time
from functools import partial
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from nmt_specdec.decoding.decision.acceptance import accept_drafts, commit_tokens
from nmt_specdec.decoding.decision.constraints import (
    Constraints,
    constrain_logits_,
    repeated_ngram_bans,
    search_rules_,
)
from nmt_specdec.decoding.decision.scores import positional_scores
from nmt_specdec.decoding.decision.tree import resolve_tree
from nmt_specdec.decoding.draft_tree import TreeLayout, move_leaf_keys, tree_layout
from nmt_specdec.decoding.drafters import DraftRequest
from nmt_specdec.decoding.loops.greedy_rows import greedy_turn_on_host
from nmt_specdec.decoding.loops.sampled import sampled_inputs, sampled_scores
from nmt_specdec.decoding.loops.steps import (
    Batch,
    LoopParts,
    Rows,
    certify_rows,
    constrained_scores,
    draft_inputs,
    end_turn,
    plan_turn,
)
from nmt_specdec.decoding.stats import SpecDecStats, Turn, tally_turns


def write_committed_(rows: Rows, tokens: Tensor, scores: Tensor, counts: Tensor) -> None:
    """Writes ``tokens[b, :counts[b]]`` (and scores) after each row's committed ones."""
    slot = torch.arange(tokens.size(1), device=tokens.device).unsqueeze(0)  # (1, K+1)
    write_off = rows.tokens.size(1) - 1
    target = (rows.lengths.unsqueeze(1) + slot).masked_fill(slot >= counts.unsqueeze(1),
                                                             write_off)  # (B, K+1)
    rows.tokens.scatter_(1, target, tokens)
    rows.scores.scatter_(1, target, scores)


def decode_rows(parts: LoopParts, batch: Batch,
                greedy_on_host: bool = False) -> List[Optional[tuple]]:
    """The batched loop: ``(tokens, scores, iterations)`` per input row.

    Args:
        greedy_on_host: a greedy turn decides on numpy views of the scores
            (:func:`~.greedy_rows.greedy_turn_on_host`; the CPU, plain rules).
    """
    rows, cache, cross = batch.rows, batch.cache, batch.cross
    limits, k_max = batch.limits, batch.k_max
    finished: List[Optional[tuple]] = [None] * len(limits)
    index = list(range(len(limits)))  # the host's copy of rows.index
    # Host-side facts that need no synchronisation: every row commits at least
    # one token per turn, so after t turns every row has >= t output tokens.
    turn, longest, uniform = 0, 1, True
    trace: List[Turn] = []  # per turn, (B,) tensors but K: for the stats
    while index:
        started = time.perf_counter()
        active = len(index)
        k, checks = plan_turn(parts, k_max, turn, longest, limits)
        # Rows stay aligned while nothing is drafted, and a single row always is.
        uniform = active == 1 or (uniform and k == 0)
        rows, commit, num_accepted = verify_turn(parts, rows, cache, cross, k, longest, uniform,
                                                 checks, greedy_on_host)
        trace.append(Turn(k, num_accepted, commit.counts, commit.finished))
        turn += 1
        # The one host synchronisation of the iteration: lengths and finished
        # flags of every row (and, for --spec-k auto, the tokens committed).
        pulled = [rows.lengths, commit.finished.long()]
        if parts.k_policy.wants_counts:
            pulled.append(commit.counts)
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


def verify_turn(parts: LoopParts, rows: Rows, cache, cross, k: int, longest: int,
                uniform: bool, checks: tuple, greedy_on_host: bool,
                live: Optional[Tensor] = None):
    """One draft -> verify -> accept -> commit -> bookkeep turn of the active rows.

    Args:
        live: (B,) bool, the rows still decoding, where finished rows stay in the
            batch (the static loop): the others commit nothing and keep their
            state. None: every row is live.

    Returns:
        ``(rows, commit, num_accepted)``: the rows after the turn (new lengths and
        states; tokens and scores written in place), the turn's commit and accepted
        drafts per row.
    """
    options = parts.options
    steps = rows.lengths - 1  # committed output tokens; the last one is not cached yet
    last = rows.tokens.gather(1, steps.unsqueeze(1))  # (B, 1)
    tree = k > 0 and options.candidates > 1  # leaves beside the chain (draft_tree)
    inputs = _draft(parts, rows, cache, k, last, tree)  # 1. draft
    # 2. verify
    layout = tree_layout(k, options.candidates, last.device) if tree else None
    offsets = layout.offsets if tree else torch.arange(k + 1, device=steps.device)
    verified = parts.verifier.verify(inputs, steps, longest - 1, cache, cross, uniform, layout)
    if k == 0 and greedy_on_host and verified.decision is None and parts.sampling is None:
        return greedy_turn_on_host(parts.verifier, parts.rules, rows, verified, checks,
                                   options.acceptance.margin)
    logits, lse = _scores(parts, verified, rows, inputs, k, layout,
                          steps.unsqueeze(1) + offsets, checks)
    hidden = verified.hidden  # (B, N, C)
    # 3. accept and commit; a sampled turn decides on perturbed scores
    decided_on = (logits if parts.sampling is None else
                  sampled_scores(parts, verified, logits, lse, rows, offsets))
    if tree:  # from here on the accepted path is a chain of K+1 positions
        acceptance, path, drafts = resolve_tree(decided_on, inputs, k, options.acceptance)
        # Every row moves its path's keys (a chain's onto themselves): deciding
        # which rows took a leaf would cost a host read.
        move_leaf_keys(cache, steps, path, acceptance.num_accepted)
        logits = logits.gather(1, path.unsqueeze(2).expand(-1, -1, logits.size(2)))
        lse = lse.gather(1, path)
        hidden = hidden.gather(1, path.unsqueeze(2).expand(-1, -1, hidden.size(2)))
    else:
        drafts = inputs[:, 1:]  # (B, K)
        acceptance = accept_drafts(decided_on, drafts, options.acceptance)
    commit = commit_tokens(drafts, acceptance, parts.rules.eos, parts.rules.pad)
    scores = positional_scores(logits, lse, commit.tokens)  # (B, K+1)
    if parts.rules.match_source_len:  # fairseq's length-constrained search scores EOS 0
        slots = steps.unsqueeze(1) + torch.arange(scores.size(1), device=steps.device)
        scores = scores.masked_fill(
            commit.tokens.eq(parts.rules.eos) & (slots >= rows.max_len.unsqueeze(1)), 0.0)
    rows = _bookkeep(rows, commit, scores, hidden, acceptance.num_accepted, live)
    return rows, commit, acceptance.num_accepted


def _scores(parts: LoopParts, verified, rows: Rows, inputs: Tensor, k: int,
            layout: Optional[TreeLayout], steps: Tensor, checks: tuple) -> Tuple[Tensor, Tensor]:
    """2. the verifier's constrained scores (B, N, V) and their normaliser (B, N),
    ``steps`` (B, N) the output step each input predicts. The call certifies
    beta = 1's scores; beta > 1 certifies its tests here, sampling its draws."""
    constrain = partial(constrain_logits_, steps=steps, max_len=rows.max_len,
                        rules=parts.rules, check_min_len=checks[0], check_max_len=checks[1])
    if not parts.rules.plain:
        constrain = _with_search_rules(constrain, parts.rules, rows, inputs, layout, steps)
    acceptance = parts.options.acceptance
    certify = acceptance.exact and parts.sampling is None
    logits, lse = constrained_scores(parts.verifier, verified, constrain, acceptance.margin,
                                     temperature=parts.rules.temperature, certify=certify)
    if not certify and parts.sampling is None and verified.bound is not None:
        certify_rows(parts, verified, logits, inputs, k,
                     1 if layout is None else parts.options.candidates)
    return logits, lse


def _draft(parts: LoopParts, rows: Rows, cache, k: int, last: Tensor,
           tree: bool) -> Tensor:
    """1. draft: the verify inputs (``cache``: the verifier's, which a drafter may read)."""
    request = (DraftRequest(rows.tokens[:, :-1], rows.lengths, rows.states, rows.index, k,
                            cache=cache) if k > 0 else None)
    width = parts.options.candidates if tree else 1
    if parts.sampling is not None:
        return sampled_inputs(parts, request, last, rows, width)
    return draft_inputs(parts.drafter, request, last, width)


def _bookkeep(rows: Rows, commit, scores: Tensor, hidden: Tensor, num_accepted: Tensor,
              live: Optional[Tensor]) -> Rows:
    """4. bookkeep: writes the committed tokens and scores in place; the rows' new
    lengths and states (the next draft reads the state that predicted the correction)."""
    counts = commit.counts if live is None else commit.counts * live
    write_committed_(rows, commit.tokens, scores, counts)
    index = num_accepted.view(-1, 1, 1).expand(-1, 1, hidden.size(2))
    states = hidden.gather(1, index).squeeze(1)
    if live is not None:
        states = torch.where(live.unsqueeze(1), states, rows.states)
    return rows._replace(lengths=rows.lengths + counts, states=states)


def _with_search_rules(constrain, rules: Constraints, rows: Rows, inputs: Tensor,
                       layout, steps: Tensor):
    """``constrain`` followed by :func:`~..decision.constraints.search_rules_` for this turn's
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
    tree's sees its ancestors (:class:`~..draft_tree.TreeLayout`)."""
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


def tally_trace(trace: List[Turn], k_max: int) -> Tuple[List[int], List[int], int, int]:
    """Per-slot totals of a batch's turns (:func:`~.stats.tally_turns`, one host read).

    Args:
        trace: per turn, K and (B,) tensors of that turn's active rows.
        k_max: the largest K.

    Returns:
        ``(drafted_per_slot, accepted_per_slot, iterations, tokens)`` for
        :meth:`SpecDecStats.add_tally`.
    """
    return tally_turns(torch.cat([t.accepted.new_full(t.accepted.shape, t.k) for t in trace]),
                       torch.cat([t.accepted for t in trace]),
                       torch.cat([t.committed for t in trace]),
                       torch.cat([t.finished for t in trace]), k_max)
