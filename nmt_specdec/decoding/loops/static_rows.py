"""The static loop: every turn the same shapes, so a GPU replays it as one CUDA graph.

The batched loop (:mod:`.batched`) drops finished rows and attends over the
width used so far, so its shapes change every turn and its Python decides
between hundreds of small kernel launches: at batch 1 on a GPU the launches,
not the arithmetic, set the pace. Here a batch decodes in a *workspace* whose
shapes come from buckets (:class:`StaticShape`): rows rounded up to a power of
two, the source to a multiple of :data:`SOURCE_STEP`, the target capacity to a
multiple of :data:`TARGET_STEP`. Inside it

- the encoder memory is padded to the source bucket (padding masked), extra rows
  are finished before they start;
- the cache is fixed (:mod:`..cache`): a pass attends over every slot, masked by
  each row's length;
- finished rows stay, masked (:func:`~.batched.verify_turn`'s ``live``): they
  commit nothing;
- a turn (:func:`~.batched.verify_turn`: draft, verify, accept, commit) writes
  its results, the statistics and the flags the host needs into the workspace's
  buffers, in place, with no host read.

So a turn is a function of the workspace and K alone, captured once per K as a
CUDA graph (:mod:`..graphs`) and replayed; the loop reads one small buffer per
turn. Workspaces, and their graphs, are kept from batch to batch by shape.
The same code runs eagerly on a CPU, where the tests hold it equal to the
batched loop token for token.

Shapes: R workspace rows (B real), S source bucket, T target capacity, C model
dim, K draft slots.
"""

from __future__ import annotations

import time
from typing import Dict, List, NamedTuple, Optional

import torch
from torch import Tensor

from nmt_specdec.decoding.decision.acceptance import drafts_before_eos
from nmt_specdec.decoding.drafters import PinsState
from nmt_specdec.decoding.graphs import TurnGraphs
from nmt_specdec.decoding.loops.batched import verify_turn
from nmt_specdec.decoding.loops.steps import BatchStart, LoopParts, Rows, end_turn, plan_turn
from nmt_specdec.decoding.passes.verifier_pass import EncoderOut, encoder_memory

SOURCE_STEP = 16  # source lengths are padded to a multiple of this
TARGET_STEP = 32  # target capacity: a multiple of this


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


class StaticShape(NamedTuple):
    """A workspace's shape: what a captured turn is specialised to.

    Attributes:
        rows: R, the batch rounded up to a power of two.
        source: S, the source length rounded up to :data:`SOURCE_STEP`.
        slots: T, the cache's slots (committed tokens and one pass's inputs).
        k_max: the largest K the batch drafts.
        dtype, device: the model's.
    """

    rows: int
    source: int
    slots: int
    k_max: int
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, rows: int, source: int, longest_limit: int, k_max: int, candidates: int,
           like: Tensor) -> "StaticShape":
        """The bucket of a batch (``longest_limit``: its largest ``max_len``)."""
        slots = _round_up(longest_limit + k_max * candidates + 2, TARGET_STEP)
        return cls(1 << max(0, rows - 1).bit_length(), _round_up(source, SOURCE_STEP),
                   slots, k_max, like.dtype, like.device)


class Workspace:
    """The buffers of one :class:`StaticShape`, kept from batch to batch.

    Attributes:
        rows: the rows' buffers (:class:`~.steps.Rows`), updated in place.
        cache: the fixed self-attention cache.
        done: (R,) bool, rows that have committed EOS (padding rows from the start).
        finished_at: (R,) turns a row took to finish.
        turn: (1,) turns so far.
        tally: (2 K_max + 2,) drafted per slot, accepted per slot, row-turns, tokens.
        flags: (2R,) what the host reads after a turn: ``done`` and each row's
            tokens committed (0 for a finished row).
        graphs: the captured turns, by K.
    """

    def __init__(self, shape: StaticShape, parts: LoopParts, pool=None, graphs: bool = True):
        rows, slots, device = shape.rows, shape.slots, shape.device
        like = parts.verifier.embed
        self.shape = shape
        self.cache = parts.verifier.new_cache(rows, slots, fixed=True)
        long = dict(dtype=torch.long, device=device)
        self.rows = Rows(
            index=torch.arange(rows, device=device),
            tokens=torch.zeros(rows, slots + 1, **long),
            scores=torch.zeros(rows, slots + 1, device=device),
            lengths=torch.ones(rows, **long),
            max_len=torch.ones(rows, **long),
            states=like.new_zeros(rows, like.size(-1)),
            keys=torch.zeros(rows, **long),
        )
        self.done = torch.zeros(rows, dtype=torch.bool, device=device)
        self.finished_at = torch.zeros(rows, **long)
        self.turn = torch.zeros(1, **long)
        self.tally = torch.zeros(2 * shape.k_max + 2, **long)
        self.flags = torch.zeros(2 * rows, **long)
        self.slot_ids = torch.arange(max(shape.k_max, 1), device=device)
        self.graphs = TurnGraphs(graphs, pool)
        self.cross = None  # the verifier's encoder keys/values, pinned
        self._pinned: Dict[str, list] = {}

    def pin(self, name: str, tensors: list) -> list:
        """Copies a list of tensors (or of tuples of tensors) into buffers kept by
        this workspace under ``name`` and returns the buffers: what a captured turn
        reads must stay at the same address from batch to batch."""
        kept = self._pinned.get(name)
        if kept is None:
            kept = self._pinned[name] = [_clone(item) for item in tensors]
            return kept
        for buffer, item in zip(kept, tensors):
            _copy(buffer, item)
        return kept

    def start(self, parts: LoopParts, max_len: Tensor, bos: int) -> None:
        """Resets the buffers for a batch of ``max_len.numel()`` real rows."""
        real = max_len.numel()
        rows = self.rows
        rows.tokens.fill_(parts.rules.pad)
        rows.tokens[:, 0] = bos
        rows.scores.zero_()
        rows.lengths.fill_(1)
        rows.max_len.fill_(1)
        rows.max_len[:real] = max_len
        rows.states.copy_(parts.drafter.start_states(self.shape.rows, rows.states))
        self.cache.key.zero_()
        self.cache.value.zero_()
        self.done.fill_(True)
        self.done[:real] = False
        self.finished_at.zero_()
        self.turn.zero_()
        self.tally.zero_()


def _clone(item):
    return item.clone() if isinstance(item, Tensor) else type(item)(*(t.clone() for t in item))


def _copy(buffer, item) -> None:
    if isinstance(buffer, Tensor):
        buffer.copy_(item)
    else:
        for b, t in zip(buffer, item):
            b.copy_(t)


def pad_encoder_out(encoder_out: EncoderOut, rows: int, source: int) -> EncoderOut:
    """fairseq's encoder output padded to ``rows`` rows and ``source`` positions.

    Padded positions are zeros, masked out; a padded row sees one zero vector (a
    row that may attend to nothing would give NaN)."""
    states, padding = encoder_memory(encoder_out)
    length, batch, dim = states.shape
    padded = states.new_zeros(source, rows, dim)
    padded[:length, :batch] = states
    mask = torch.ones(rows, source, dtype=torch.bool, device=states.device)
    mask[:batch, :length] = (False if padding is None else padding)
    mask[batch:, 0] = False
    return {**encoder_out, "encoder_out": [padded], "encoder_padding_mask": [mask]}


class StaticLoop:
    """The static loop, with its workspaces (and graphs) kept from batch to batch.

    Args:
        graphs: capture each turn as a CUDA graph on CUDA (``--cuda-graphs``).
    """

    def __init__(self, graphs: bool = True):
        self.graphs = graphs
        self._spaces: Dict[StaticShape, Workspace] = {}
        self._pool = None

    @property
    def capture_seconds(self) -> float:
        """Time spent capturing graphs so far (all workspaces)."""
        return sum(space.graphs.capture_seconds for space in self._spaces.values())

    def __call__(self, parts: LoopParts, start: BatchStart) -> List[Optional[tuple]]:
        """The loop of a batch: the encoder output padded to the buckets of its
        workspace's shape, the drafter started on it (when the batch drafts), then
        :meth:`_decode`."""
        states, _ = encoder_memory(start.encoder_out)
        shape = StaticShape.of(len(start.limits), states.size(0), max(start.limits),
                               start.k_max, parts.options.candidates, parts.verifier.embed)
        encoder_out = pad_encoder_out(start.encoder_out, shape.rows, shape.source)
        if start.k_max:
            parts.drafter.start_batch(start.sample, encoder_out)
        captured = self.capture_seconds
        finished = self._decode(parts, encoder_out, start, shape)
        parts.stats.capture_seconds += self.capture_seconds - captured
        return finished

    def _decode(self, parts: LoopParts, encoder_out: EncoderOut, start: BatchStart,
                shape: StaticShape) -> List[Optional[tuple]]:
        """``(tokens, scores, iterations)`` per real row; ``encoder_out`` already padded
        and the drafter started on it. Host reads: one a turn, one after the last."""
        limits = start.limits
        space = self._workspace(shape, parts)
        space.start(parts, start.max_len, start.bos)
        space.cross = space.pin("cross", parts.verifier.cross_states(encoder_out))
        if shape.k_max and isinstance(parts.drafter, PinsState):
            parts.drafter.pin_state(space.pin)
        real = len(limits)
        active = list(range(real))
        turn = 0
        while active:
            started = time.perf_counter()
            k, _ = plan_turn(parts, shape.k_max, turn, 1, [limits[i] for i in active])
            space.graphs.run(k, lambda: _static_turn(parts, space, k), shape.device)
            turn += 1
            flags = space.flags.tolist()  # the one host read of the turn
            committed = flags[shape.rows:]
            end_turn(parts, k, [committed[i] for i in active] if parts.k_policy.wants_counts
                     else [], started)
            active = [i for i in active if not flags[i]]
        return _collect(parts, space, real)

    def _workspace(self, shape: StaticShape, parts: LoopParts) -> Workspace:
        space = self._spaces.get(shape)
        if space is None:
            if self.graphs and shape.device.type == "cuda" and self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            space = self._spaces[shape] = Workspace(shape, parts, self._pool, self.graphs)
        return space


def _static_turn(parts: LoopParts, space: Workspace, k: int) -> None:
    """One turn over the whole workspace, results written into its buffers in place
    (no host read, no shape that depends on a value: capturable)."""
    live = ~space.done
    rows, commit, num_accepted = verify_turn(parts, space.rows, space.cache, space.cross, k,
                                             1, False, (True, True), False, live=live)
    counts = commit.counts * live
    space.rows.lengths.copy_(rows.lengths)
    space.rows.states.copy_(rows.states)
    space.turn.add_(1)
    newly = commit.finished & live
    space.finished_at.copy_(torch.where(newly, space.turn, space.finished_at))
    space.done.logical_or_(newly)
    drafted, accepted = drafts_before_eos(torch.full_like(counts, k), num_accepted, counts,
                                          commit.finished)
    rows_count = space.shape.rows
    space.flags[:rows_count].copy_(space.done)
    space.flags[rows_count:].copy_(counts)  # for --spec-k auto (0 for a finished row)
    _tally(space, drafted, accepted, counts, live)


def _tally(space: Workspace, drafted: Tensor, accepted: Tensor, counts: Tensor,
           live: Tensor) -> None:
    """Adds the live rows' turn to the statistics buffer (as :func:`~..stats.tally_turns`:
    only drafts at or before a committed EOS count, from :func:`drafts_before_eos`)."""
    k_max = space.shape.k_max
    if k_max:
        slots = space.slot_ids
        space.tally[:k_max].add_(((drafted * live).unsqueeze(1) > slots).sum(0))
        space.tally[k_max: 2 * k_max].add_(((accepted * live).unsqueeze(1) > slots).sum(0))
    space.tally[-2].add_(live.sum())
    space.tally[-1].add_(counts.sum())


def _collect(parts: LoopParts, space: Workspace, real: int) -> List[Optional[tuple]]:
    """The real rows' results and the batch's statistics (one host read)."""
    values = torch.cat([space.rows.lengths[:real], space.finished_at[:real],
                        space.tally]).tolist()
    lengths, turns, values = values[:real], values[real: 2 * real], values[2 * real:]
    finished = [(space.rows.tokens[i, 1:end].clone(), space.rows.scores[i, 1:end].clone(),
                 turns[i]) for i, end in enumerate(lengths)]
    parts.stats.sentences += real
    k_max = space.shape.k_max
    parts.stats.add_tally(values[:k_max], values[k_max: 2 * k_max], values[-2], values[-1])
    return finished


