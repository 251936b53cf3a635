"""The batched loop reads the device back once per iteration (a GPU's pace setter).

Every host read of a tensor (``tolist``, ``item``, ``bool``/``int`` of a tensor,
``nonzero``, ``numpy``, ``cpu``) waits for the device to finish its queued work.
Counted on the CPU with a ``TorchFunctionMode``, which sees each such call
wherever it is made: the loop may make one per iteration, plus two per batch
(the length limits before the first iteration, the statistics after the last).
fairseq's own encoder reads are not the loop's and are not counted.
"""

from __future__ import annotations

import collections

import pytest
import torch
from torch.overrides import TorchFunctionMode

from nmt_specdec.decoding.options import DecodingOptions
from tests.helpers.shipped_model import hand_written_sources, load_model, shipped_generator

READS = {"tolist", "item", "__bool__", "__int__", "__float__", "__index__", "nonzero",
         "numpy", "cpu"}
PER_BATCH = 2  # max_len.tolist() before the loop, the statistics' tally after it
# Functions whose reads only their CPU branch makes (on a GPU they stay on the device):
# acceptance.argmax_last takes numpy's argmax for CPU scores, torch's for CUDA ones.
CPU_ONLY = {"argmax_last"}


class HostReads(TorchFunctionMode):
    """Counts host reads made from nmt_specdec's own code, by module."""

    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in READS:
            caller = _caller()
            if caller is not None:
                self.count[caller] += 1
        return func(*args, **(kwargs or {}))


def _caller():
    import inspect

    for frame in inspect.stack()[2:]:
        if "/nmt_specdec/" in frame.filename:
            if frame.function in CPU_ONLY:
                return None
            return frame.filename.split("/nmt_specdec/")[1]
        if "/torch/" not in frame.filename:
            return None  # fairseq's or the test's own read
    return None


@pytest.fixture(scope="module")
def shipped():
    model, task = load_model()
    sources = hand_written_sources(task, 8)
    dataset = task.build_dataset_for_inference(sources, [len(s) for s in sources])
    return model, task, dataset.collater([dataset[i] for i in range(len(sources))])


@pytest.mark.parametrize("options", [
    DecodingOptions(k=0), DecodingOptions(k=2), DecodingOptions(k=3, candidates=2),
    DecodingOptions(k=4, auto_k=True),
], ids=["greedy", "chain", "tree", "auto"])
@pytest.mark.parametrize("static", [False, True], ids=["batched", "static"])
def test_one_host_read_per_iteration(shipped, options, static) -> None:
    from nmt_specdec.decoding.loops import DynamicLoop, StaticLoop, decode_rows

    model, task, batch = shipped
    # The tensor loops, a GPU's paths at any batch (on the CPU one sentence, a
    # greedy batch and a greedy turn decide on the host): the batched loop, and
    # the static loop (eager here) whose turns a GPU replays as CUDA graphs.
    loop = StaticLoop(graphs=False) if static else DynamicLoop(decode_rows)
    generator = shipped_generator(model, task, options=options, loop=loop)
    generator.generate([model], batch)  # warm: first-batch work is not the loop's
    turns = sum(generator.stats.k_chosen.values())
    with HostReads() as reads:
        generator.generate([model], batch)
    turns = sum(generator.stats.k_chosen.values()) - turns
    assert turns > 5
    assert sum(reads.count.values()) == turns + PER_BATCH, dict(reads.count)
