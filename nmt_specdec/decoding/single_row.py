"""One sentence on the CPU: the loop of :mod:`.loop`, deciding on the host.

At batch 1 on a CPU, an iteration of the batched loop (SpecDec K=2 on ONNX
Runtime) spent ~0.6 ms outside the runtime's ~1.5 ms: ~120 small tensor ops
(acceptance, commit, the EOS cut, per-row writes and gathers) that exist to
serve B rows at once, each a few microseconds of dispatch on tensors of a
handful of elements. For one row the host keeps the committed tokens in a list
and decides with Python ints. At beta = 1 it also decides on numpy views of the
verifier's scores (:func:`greedy_accept`: a max, an argmax and a gather over
the (N, V) block): acceptance, constraint and score reads of a K=2 C=2 tree
iteration took ~230 us as tensor ops, ~130 us this way (in the loop); the
model calls, the length constraints and any other criterion (top-beta, tau)
stay the shared tensor code.

Used by :meth:`~.loop.SpecDecGenerator.decode` for a batch of one on the CPU,
chains and draft trees alike (batches take the batched loop; on a GPU its
single host read per iteration is cheaper than these few).
Tested equal to the batched loop token for token, score for score, iteration
for iteration (``tests/integration/test_single_row.py``), and :func:`greedy_accept`
equal to the shared acceptance on random and tied scores.

Shapes: K draft slots, N = K + 1 verified positions, V vocabulary.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from nmt_specdec.decoding.acceptance import drafts_pass
from nmt_specdec.decoding.backends.base import VerifierCalls
from nmt_specdec.decoding.draft_tree import (
    flatten_candidates,
    move_leaf_keys,
    parent_list,
    resolve_tree,
    tree_layout,
    walk_row,
)
from nmt_specdec.decoding.drafters import DraftRequest
from nmt_specdec.decoding.scoring import (
    certain,
    certainty_margin,
    constrain_logits_,
    normaliser,
)
from nmt_specdec.decoding.stats import tally_turns

if TYPE_CHECKING:
    from nmt_specdec.decoding.loop import SpecDecGenerator


def decode_single_row(gen: "SpecDecGenerator", verifier: VerifierCalls, encoder_out,
                      max_len: Tensor, bos: int) -> List[tuple]:
    """``gen.decode`` for one row: ``[(tokens, scores, iterations)]``."""
    options, rules, eos = gen.options, gen.rules, gen.eos
    k_max, limit, candidates = options.k, int(max_len[0]), options.candidates
    # As the batched loop: committed <= max_len + 1, then K*C inputs.
    width = limit + k_max * candidates + 2
    cross = verifier.cross_states(encoder_out)
    cache = gen._cache = verifier.new_cache(1, width)
    rows = gen._start_rows(max_len, bos, width, verifier.embed)
    # The drafter reads the committed tokens and length from these buffers; the
    # host writes them through numpy views (a scalar write, no tensor op).
    prefix, lengths, states = rows.tokens[:, :-1], rows.lengths, rows.states
    host_tokens, host_length = rows.tokens.numpy(), lengths.numpy()
    start = lengths.new_zeros(1)  # (1,) the verify call's first position, kept
    host_start = start.numpy()
    inputs: Dict[int, Tensor] = {}  # N -> (1, N) verify inputs, kept (stable bindings)
    offsets = torch.arange(k_max + 1)
    committed, scores = [bos], [0.0]
    margin = certainty_margin(options.beta, options.tau)
    turns: List[tuple] = []  # (K, accepted drafts, committed, finished) per turn
    final = -1  # the input of the last verify call whose state ``states`` is (-1: the start)
    while True:
        started = time.perf_counter()
        length = len(committed)  # BOS included; the last token is not cached yet
        turn = len(turns)
        k = gen.k_policy.choose(max(0, min(k_max, limit - turn)), 1)
        checks = (turn < rules.min_len, length - 1 + k >= limit)
        tree = tree_layout(k, candidates) if k > 0 and candidates > 1 else None
        tokens = inputs.get(k + 1)
        if tokens is None:
            tokens = inputs[k + 1] = lengths.new_zeros(1, k + 1)
        tokens[0, 0] = committed[-1]
        if k > 0:
            request = DraftRequest(prefix, lengths, states, rows.index, k,
                                   (length - 1, committed[-1], final))
            if tree is None:
                tokens[0, 1:] = gen.drafter.propose(request)[0]
            else:  # the chain and its leaves, flat in verify order
                tokens = flatten_candidates(tokens[:, :1], gen.drafter.propose_candidates(
                    request, candidates))
        host_start[0] = length - 1
        verified = verifier.verify(tokens, start, length - 1, cache, cross, True, tree)
        logits = verified.logits.float()  # (1, N, V): numpy has no bfloat16
        lse = verified.normaliser if verified.normaliser is not None else normaliser(logits)
        flat = logits[0].detach().numpy()  # (N, V), the same memory as ``logits``
        constrained = any(checks) or bool(rules.unk_penalty)  # beyond "never pad"
        decided = _decided(verified.decision, options.beta == 1 and not constrained, tokens, k)
        if decided is None:
            steps = (start.unsqueeze(1) + (offsets[: k + 1] if tree is None else tree.offsets)
                     if constrained else None)
            _constrain(logits, flat, steps, max_len, rules, checks)
            if verified.bound is not None and not certain(
                    flat.max(-1), verified.bound[0].numpy(), margin):
                # An 8-bit score may matter here: this call's scores again, in fp32.
                logits.copy_(verifier.exact_logits(verified.hidden))
                lse = normaliser(logits)
                _constrain(logits, flat, steps, max_len, rules, checks)
            decided = (greedy_accept(flat, tokens[0].tolist(), k,
                                     candidates if tree is not None else 1)
                       if options.beta == 1 else _accept(logits, tokens, k, tree, options))
        num_accepted, correction, leaf_taken, path, proposed = decided
        if leaf_taken:
            move_leaf_keys(cache, start, torch.tensor([path]), torch.tensor([num_accepted]))
        final = path[num_accepted]
        new = proposed[:num_accepted] + [correction]
        finished = eos in new
        if finished:  # the batched loop's cut after the first EOS
            new = new[: new.index(eos) + 1]
        count = len(new)
        # The flat input whose scores predicted each committed token (a chain: 0..).
        where = list(path[:count])
        # Committed tokens are never pad: where the call decided (raw scores), their
        # raw scores are the constrained ones.
        scores += (flat[where, new] - lse[0].detach().numpy()[where]).tolist()
        host_tokens[0, length: length + count] = new
        committed += new
        host_length[0] = length + count
        # The state that predicted the correction: the next draft reads it.
        states = verified.hidden[:, final]
        turns.append((k, num_accepted, count, finished))
        gen.stats.k_chosen[k] = gen.stats.k_chosen.get(k, 0) + 1
        # Drafts committed, none past an EOS: what drafting K bought this sentence.
        gen.k_policy.observe([count - 1] if gen.k_policy.wants_counts else [], k,
                             time.perf_counter() - started)
        if finished:
            break
    gen.stats.sentences += 1
    gen.stats.add_tally(*tally_turns(*map(torch.tensor, zip(*turns)), k_max))
    return [(torch.tensor(committed[1:]), torch.tensor(scores[1:], dtype=rows.scores.dtype),
             len(turns))]


def _constrain(logits: Tensor, flat: np.ndarray, steps: Optional[Tensor], max_len: Tensor,
               rules, checks: tuple) -> None:
    """The length constraints (``steps``: the step each input predicts, None when
    none applies) or else only "never pad", as a column write on the host."""
    if steps is not None:
        constrain_logits_(logits, steps, max_len, rules, *checks)
    else:
        flat[:, rules.pad] = -math.inf


def greedy_accept(flat: np.ndarray, inputs: List[int], depth: int, width: int
                  ) -> Tuple[int, int, bool, List[int], List[int]]:
    """beta = 1 for one row, in numpy: what :func:`~.draft_tree.resolve_tree` (and,
    for a chain, :func:`~.acceptance.accept_drafts`) decide, without a tensor op.

    A draft passes when it is its parent's argmax (the first index of the best
    score: greedy's own tie-break, in numpy as in torch) and is not -inf; the
    correction is the argmax at the end of the path.

    Args:
        flat: (N, V) constrained scores (float32).
        inputs: the N verified inputs (last committed token, then the drafts).
        depth, width: K and C (1: a chain).

    Returns:
        ``(accepted drafts, correction, leaf taken, path (K+1), drafts of the path (K))``.
    """
    parents = list(parent_list(depth, width))  # node j+1's parent input
    top1 = flat.argmax(axis=1)  # (N,)
    drafted = flat[parents, inputs[1:]]
    passes = (top1[parents] == inputs[1:]) & np.isfinite(drafted)
    decided = walk_row(passes.tolist() + top1.tolist() + inputs, depth, width, len(inputs))
    accepted, correction, leaf = decided[:3]
    path, drafts = decided[3: 4 + depth], decided[4 + depth:]
    return accepted, correction, bool(leaf), path, drafts


def _decided(decision: Optional[Tensor], usable: bool, tokens: Tensor, k: int):
    """The verify call's own beta = 1 decision (``--fused-draft``) as
    :func:`greedy_accept` returns it, or None: no decision, a length or unk
    constraint applies (``usable`` False), or the graph flagged it (the
    correction's score is tied: the shared code orders ties; or pad is a row's
    argmax or a draft: the graph reads unconstrained scores)."""
    if decision is None or not usable:
        return None
    accepted, correction, final, tie = decision[0].tolist()
    if tie:
        return None
    path = list(range(k + 1))
    if final > k:  # a leaf (leaves follow the chain's K+1 inputs)
        path[accepted] = final
    inputs = tokens[0].tolist()
    return accepted, correction, final > k, path, [inputs[i] for i in path[1:]]


def _accept(logits: Tensor, tokens: Tensor, k: int, tree, options):
    """Any beta and tau, by the shared tensor code, as :func:`greedy_accept` returns it."""
    if tree is not None:
        outcome = resolve_tree(logits, tokens, k, options.beta, options.tau)
        path = outcome.path[0].tolist()
        return (int(outcome.acceptance.num_accepted[0]), int(outcome.acceptance.correction[0]),
                path != list(range(k + 1)), path, outcome.drafts[0].tolist())
    num_accepted, proposed = 0, tokens[0, 1:].tolist()
    if k > 0:
        for passed in drafts_pass(logits[:, :k], tokens[:, 1:], options.beta,
                                  options.tau)[0].tolist():
            if not passed:
                break
            num_accepted += 1
    return (num_accepted, int(logits[0, num_accepted].argmax()), False,
            list(range(k + 1)), proposed)
