"""Where SpecDec's time goes: encoder, draft, verify, and bookkeeping.

The generator is left untouched: for one untimed pass, its model calls are
wrapped with a clock (the backend's ``encode``, the drafter's ``propose`` and
the verifier's ``verify``: states and vocabulary logits, on any backend).
Everything else (acceptance, scores, commit, row bookkeeping, fairseq's
collation of outputs) is bookkeeping. On ONNX Runtime the time inside the
runtime's own run calls (every graph: encoder, verify, draft, the 8-bit copy)
is clocked too, across the components: what the Python around them costs is
the rest. On CUDA each wrapped call synchronizes,
so that its kernels are charged to it; the profiled pass is therefore a little
slower than the timed ones and is reported separately.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, Optional

import torch

from nmt_specdec.evaluation.runner import Run, decode_pass, synchronize

COMPONENTS = ("encoder", "draft", "verify")
RUNTIME = "runtime"  # inside the graph runtime's run calls (it overlaps the components)
_MISSING = object()


@dataclass(frozen=True)
class Profile:
    """Seconds of one profiled pass, split by component.

    Attributes:
        total: wall time of the pass.
        encoder: encoder forward passes.
        draft: drafter proposals.
        verify: verifier decoder passes.
        runtime: inside ONNX Runtime's run calls, whichever component made them
            (None on a backend without a graph runtime).
    """

    total: float
    encoder: float
    draft: float
    verify: float
    runtime: Optional[float] = None

    @property
    def bookkeeping(self) -> float:
        """Everything outside the model calls."""
        return max(0.0, self.total - self.encoder - self.draft - self.verify)

    def as_dict(self) -> Dict[str, float]:
        parts = {name: getattr(self, name) for name in (*COMPONENTS, "bookkeeping")}
        total = self.total or 1.0
        if self.runtime is not None:
            parts[RUNTIME] = self.runtime
        return {
            "total_s": self.total,
            **{f"{name}_s": value for name, value in parts.items()},
            **{f"{name}_share": value / total for name, value in parts.items()},
        }


class _Clock:
    """Accumulates the wall time of wrapped calls, per component."""

    def __init__(self, device: torch.device):
        self.device = device
        self.seconds = {name: 0.0 for name in COMPONENTS}

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            synchronize(self.device)
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            synchronize(self.device)
            self.seconds[name] += time.perf_counter() - start
            return result

        return timed


@contextmanager
def instrumented(generator, device: torch.device) -> Iterator[_Clock]:
    """Wraps the generator's model calls with a clock; restores them on exit."""
    clock = _Clock(device)
    backend, drafter, verifier = generator.backend, generator.drafter, generator.lean_verifier()
    patches = [(backend, "encode", "encoder"), (drafter, "propose", "draft"),
               (verifier, "verify", "verify")]
    runtime = getattr(backend, "runtime_calls", ())  # every graph's calls go through them
    patches += [(owner, attr, RUNTIME) for owner, attr in runtime]
    if runtime:
        clock.seconds[RUNTIME] = 0.0
    # Instance attributes that existed before (rather than class methods) come back.
    saved = [vars(owner).get(attr, _MISSING) for owner, attr, _ in patches]
    for owner, attr, component in patches:
        setattr(owner, attr, clock.wrap(component, getattr(owner, attr)))
    try:
        yield clock
    finally:
        for (owner, attr, _), value in zip(patches, saved):
            if value is _MISSING:
                delattr(owner, attr)  # the class's method shows through again
            else:
                setattr(owner, attr, value)


def profile_run(task, run: Run, device: torch.device) -> Profile:
    """One untimed, instrumented pass of a SpecDec run over the whole test set."""
    with instrumented(run.generator, device) as clock:
        total = decode_pass(task, run, device).seconds
    return Profile(total=total, **clock.seconds)
