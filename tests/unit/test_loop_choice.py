""":func:`~nmt_specdec.decoding.loops.choose_loop` picks the loop a batch needs:
the host loops on the CPU under fairseq's plain rules (the single-row loop with
a temperature too), the batched loop elsewhere (a GPU, or options only it
applies); sampling takes the single-row loop or the batched one."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from nmt_specdec.decoding.decision.constraints import Constraints
from nmt_specdec.decoding.loops import (
    choose_loop,
    decode_greedy_rows,
    decode_rows,
    decode_single_row,
)

PLAIN = Constraints(pad=1, eos=2, unk=3)
CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a device name: no GPU needed


def _named(loop):
    """(the loop function, its bound keyword arguments)."""
    run = loop.run
    return (run.func, run.keywords) if isinstance(run, partial) else (run, {})


@pytest.mark.parametrize("rows, k_max, device, rules, expected", [
    (1, 0, CPU, PLAIN, (decode_single_row, {"kept": None})),
    (1, 4, CPU, PLAIN, (decode_single_row, {"kept": None})),
    (8, 0, CPU, PLAIN, (decode_greedy_rows, {})),
    (8, 4, CPU, PLAIN, (decode_rows, {"greedy_on_host": True})),
    (1, 4, CUDA, PLAIN, (decode_rows, {"greedy_on_host": False})),
    (8, 0, CUDA, PLAIN, (decode_rows, {"greedy_on_host": False})),
    (1, 0, CPU, PLAIN._replace(temperature=0.7), (decode_single_row, {"kept": None})),
    (8, 0, CPU, PLAIN._replace(temperature=0.7), (decode_rows, {"greedy_on_host": False})),
    (8, 0, CPU, PLAIN._replace(no_repeat_ngram=3), (decode_rows, {"greedy_on_host": False})),
    (1, 2, CPU, PLAIN._replace(match_source_len=True), (decode_rows, {"greedy_on_host": False})),
])
def test_the_loop_for_a_batch(rows, k_max, device, rules, expected):
    assert _named(choose_loop(rows, k_max, device, rules)) == expected


@pytest.mark.parametrize("rows, device, rules, expected", [
    (1, CPU, PLAIN, (decode_single_row, {"kept": None})),
    (1, CPU, PLAIN._replace(temperature=0.7), (decode_single_row, {"kept": None})),
    (8, CPU, PLAIN, (decode_rows, {})),
    (1, CUDA, PLAIN, (decode_rows, {})),
    (1, CPU, PLAIN._replace(match_source_len=True), (decode_rows, {})),
])
def test_the_loop_for_a_sampled_batch(rows, device, rules, expected):
    from nmt_specdec.decoding.loops import StaticLoop

    chosen = choose_loop(rows, 2, device, rules, static=StaticLoop(), sampling=True)
    assert _named(chosen) == expected


@pytest.mark.parametrize("rows, k_max, device, rules, static_taken", [
    (1, 4, CUDA, PLAIN, True),
    (32, 0, CUDA, PLAIN, True),
    (1, 4, CUDA, PLAIN._replace(temperature=0.7), False),  # only the batched loop applies it
    (8, 2, CUDA, PLAIN._replace(no_repeat_ngram=3), False),
    (1, 4, CPU, PLAIN, False),  # the CPU keeps its host loops
    (8, 4, CPU, PLAIN, False),
])
def test_the_static_loop_on_a_gpu(rows, k_max, device, rules, static_taken):
    from nmt_specdec.decoding.loops import StaticLoop

    static = StaticLoop(graphs=True)
    assert (choose_loop(rows, k_max, device, rules, static=static) is static) == static_taken
