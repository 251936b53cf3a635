"""Warm-up and interleaved, timed decoding passes over the whole test set.

Every (configuration, batch size) is one :class:`Run`. Each repeat times every
run once, in a fresh random order (seeded, and recorded in results.json), so
that slow drifts of the machine (thermal, other load) land on every
configuration alike instead of favouring whichever tends to run first (a
rotation by one per repeat keeps most runs in the same neighbourhood).
``--spec-k auto`` rows start every pass from the policy's initial state, as a
fresh ``fairseq-generate`` run does: no pass profits from what an earlier one
learned.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, NamedTuple, Optional

import torch
from torch import nn

from nmt_specdec.decoding.stats import SpecDecStats
from nmt_specdec.evaluation.config import DecoderSpec
from nmt_specdec.evaluation.loading import prepare_model
from nmt_specdec.evaluation.testset import Batch


@dataclass
class Run:
    """One configuration at one batch size, and what its measurements found.

    Attributes:
        spec: the decoder configuration.
        batch_size: sentences per batch.
        generator: the fairseq generator (stock or SpecDec).
        model: the model it decodes with (a half-precision copy for fp16/bf16 rows).
        batches: the test set, collated and on the device.
        seconds: wall time of each timed pass.
        cpu_seconds: CPU time of this process in each timed pass (all threads); with
            one thread, well below ``seconds`` means the machine was busy.
        outputs: sentence index -> output token ids (EOS included), from the first pass.
        target_tokens: output tokens of one pass (EOS included, as fairseq-generate
            counts them).
        stats: SpecDec statistics of the first pass (None for stock).
        cuda_peak_bytes: largest CUDA peak allocation over the passes (None on CPU).
    """

    spec: DecoderSpec
    batch_size: int
    generator: nn.Module
    model: nn.Module
    batches: List[Batch]
    seconds: List[float] = field(default_factory=list)
    cpu_seconds: List[float] = field(default_factory=list)
    outputs: Dict[int, List[int]] = field(default_factory=dict)
    target_tokens: int = 0
    stats: Optional[SpecDecStats] = None
    cuda_peak_bytes: Optional[int] = None

    @property
    def label(self) -> str:
        return f"{self.spec.name} bs{self.batch_size}"

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.seconds)

    @property
    def auto_k(self) -> bool:
        return self.spec.kind == "specdec" and self.spec.auto


class Pass(NamedTuple):
    """One decoding pass: wall and CPU seconds, and fairseq's n-best lists per batch."""

    seconds: float
    cpu_seconds: float
    hypotheses: List[List[List[dict]]]


def synchronize(device: torch.device) -> None:
    """Waits for queued CUDA work, so that wall time covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decode_pass(
    task,
    run: Run,
    device: torch.device,
    batches: Optional[List[Batch]] = None,
) -> Pass:
    """Decodes ``batches`` (default: all of the run's) once, timed.

    Only ``task.inference_step`` (as fairseq-generate calls it) is inside the
    timed region; outputs are read back after the clock stops. Python's garbage
    collector runs just before and is paused inside, so that a collection
    triggered by one configuration's garbage is not charged to the next (cheap
    after :func:`freeze_heap`).

    Returns:
        The pass's wall and CPU time and its hypotheses.
    """
    model = run.model
    prepare_model(model, run.spec)
    if run.spec.kind == "specdec":
        run.generator.stats = SpecDecStats()  # per measurement
    if run.auto_k:  # every pass pays the exploration a fresh run pays
        run.generator.reset_k_policy()
    gc.collect()
    gc.disable()
    try:
        synchronize(device)
        start, cpu_start = time.perf_counter(), time.process_time()
        hypotheses = [
            task.inference_step(run.generator, [model], batch.sample)
            for batch in (run.batches if batches is None else batches)
        ]
        synchronize(device)
        seconds, cpu_seconds = (
            time.perf_counter() - start,
            time.process_time() - cpu_start,
        )
    finally:
        gc.enable()
    return Pass(seconds, cpu_seconds, hypotheses)


def freeze_heap() -> None:
    """Moves every object alive now (fairseq, the model, the batches) out of the
    garbage collector's reach, so that each pass's collection scans only new ones."""
    gc.collect()
    gc.freeze()


def warm_up(
    task,
    runs: Iterable[Run],
    device: torch.device,
    num_batches: int,
    progress,
) -> None:
    """Decodes the first ``num_batches`` batches of every run, untimed."""
    if num_batches == 0:
        return
    for run in progress(list(runs), desc="warm-up"):
        decode_pass(task, run, device, run.batches[:num_batches])


def pass_orders(num_runs: int, repeats: int, seed: int) -> List[List[int]]:
    """A fresh random permutation of the runs for each repeat.

    Args:
        num_runs: runs timed per repeat.
        repeats: timed passes per run.
        seed: seed of ``random.Random`` (the same seed gives the same orders).

    Returns:
        ``repeats`` permutations of ``range(num_runs)``.
    """
    rng = random.Random(seed)
    return [rng.sample(range(num_runs), num_runs) for _ in range(repeats)]


def measure(
    task,
    runs: List[Run],
    device: torch.device,
    orders: List[List[int]],
    progress,
) -> None:
    """Times every run once per order in ``orders`` (see :func:`pass_orders`);
    fills the runs' results."""
    schedule = [(repeat, runs[i]) for repeat, order in enumerate(orders) for i in order]
    bar = progress(schedule, desc="measure")
    for repeat, run in bar:
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(run.label)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        timed = decode_pass(task, run, device)
        # A capture inside a timed pass (a shape or K first met there) is not decoding.
        capture = run.generator.stats.capture_seconds if run.spec.kind == "specdec" else 0.0
        run.seconds.append(timed.seconds - capture)
        run.cpu_seconds.append(timed.cpu_seconds)
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device)
            run.cuda_peak_bytes = max(peak, run.cuda_peak_bytes or 0)
        if repeat == 0:
            record_outputs(run, timed.hypotheses)


def record_outputs(run: Run, hypotheses: List[List[List[dict]]]) -> None:
    """Keeps a pass's best outputs by sentence, their token count and the statistics."""
    for batch, nbest_lists in zip(run.batches, hypotheses):
        for sentence, nbest in zip(batch.ids, nbest_lists):
            run.outputs[sentence] = nbest[0]["tokens"].tolist()
    run.target_tokens = sum(len(tokens) for tokens in run.outputs.values())
    run.stats = run.generator.stats if run.spec.kind == "specdec" else None
