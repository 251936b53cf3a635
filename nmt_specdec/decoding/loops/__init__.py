"""The loops that decode a batch, and the one function that chooses among them.

Every loop is called the same way, ``loop(parts, start)`` with a
:class:`~.steps.LoopParts` and a :class:`~.steps.BatchStart`, runs the same
steps (:mod:`.steps`) and decisions (:mod:`..decision`), and returns
``(tokens, scores, iterations)`` per input row. The loops of dynamic shapes
are functions of the batch's :class:`~.steps.Batch`, which :class:`DynamicLoop`
opens for them; they differ in where a turn decides:

- :func:`~.batched.decode_rows` (:mod:`.batched`): B rows in tensor ops, one
  host read a turn; any batch, any device, every option;
- :func:`~.single_row.decode_single_row` (:mod:`.single_row`): one sentence,
  deciding on the host (numpy views of the scores, Python ints);
- :func:`~.greedy_rows.decode_greedy_rows` (:mod:`.greedy_rows`): a batch that
  never drafts, deciding on the host;
- :class:`~.static_rows.StaticLoop` (:mod:`.static_rows`): the batched loop's
  turn in fixed shapes, finished rows kept and masked, replayed as a CUDA graph
  per K on a GPU.

On the CPU a turn's decision costs less on the host than in small tensor ops;
on a GPU one graph launch and one read a turn are cheaper than anything else.
Tests hold the host loops equal to the batched one token for token, score for
score and iteration for iteration (``tests/integration/test_single_row.py``,
``test_greedy_rows.py``).
"""

from __future__ import annotations

from functools import partial
from typing import Callable, List, Optional, Union

import torch

from nmt_specdec.decoding.decision.constraints import Constraints
from nmt_specdec.decoding.loops.batched import decode_rows
from nmt_specdec.decoding.loops.greedy_rows import decode_greedy_rows
from nmt_specdec.decoding.loops.single_row import RowBuffers, decode_single_row
from nmt_specdec.decoding.loops.static_rows import StaticLoop
from nmt_specdec.decoding.loops.steps import Batch, BatchStart, LoopParts, open_batch

Results = List[Optional[tuple]]


class DynamicLoop:
    """A loop of dynamic shapes as a loop: :func:`~.steps.open_batch`, then ``run``.

    Args:
        run: ``run(parts, batch)``, e.g. :func:`~.batched.decode_rows`.
        settings: keyword arguments of ``run`` (bound once).
    """

    def __init__(self, run: Callable[..., Results], **settings):
        self.run = partial(run, **settings) if settings else run

    def __call__(self, parts: LoopParts, start: BatchStart) -> Results:
        return self.run(parts, open_batch(parts, start))


Loop = Union[DynamicLoop, StaticLoop]


def choose_loop(rows: int, k_max: int, device: torch.device, rules: Constraints,
                kept: Optional[RowBuffers] = None,
                static: Optional[StaticLoop] = None, sampling: bool = False) -> Loop:
    """The loop for a batch of ``rows`` sentences that drafts up to ``k_max``.

    The static loop and the greedy host loop apply fairseq's plain rules only
    (:attr:`~..decision.constraints.Constraints.plain`), the single-row loop a
    temperature too (:attr:`~..decision.constraints.Constraints.per_row`); the
    batched loop applies every option.

    Args:
        device: where the verifier's scores are (host decisions on the CPU only).
        kept: the single-row loop's buffers, kept from sentence to sentence.
        static: the generator's static loop, taken on a GPU (None: the torch
            backend's passes are not there, e.g. another backend).
        sampling: the batch samples (:mod:`.sampled`), which the batched and the
            single-row loop do.
    """
    if rows == 1 and device.type == "cpu" and rules.per_row:
        return DynamicLoop(decode_single_row, kept=kept)
    if sampling:
        return DynamicLoop(decode_rows)
    if static is not None and device.type == "cuda" and rules.plain:
        return static
    on_host = device.type == "cpu" and rules.plain
    if k_max == 0 and on_host:
        return DynamicLoop(decode_greedy_rows)
    return DynamicLoop(decode_rows, greedy_on_host=on_host)


__all__ = ["Loop", "DynamicLoop", "BatchStart", "choose_loop", "decode_rows",
           "decode_single_row", "decode_greedy_rows", "StaticLoop"]
