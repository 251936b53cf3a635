"""CUDA graphs of the static loop's turns: captured on first use, replayed after.

A turn of the static loop (:mod:`.loops.static_rows`) reads and writes only
buffers that live as long as its workspace, with shapes fixed by the workspace's
buckets and K, so one launch of a captured graph replaces its hundreds of
kernel launches and the Python between them. A graph per K is captured the
first time that K runs: the turn runs eagerly once (a real turn, which also
warms up cuBLAS and the allocator), then is captured, which records the
kernels without running them; later turns replay it. Graphs share one memory
pool. On a CPU, or with ``--cuda-graphs off``, every turn runs eagerly.
"""

from __future__ import annotations

import time
import warnings
from typing import Callable, Dict, Hashable, Optional

import torch


class TurnGraphs:
    """The captured turns of one workspace, by key (K).

    Args:
        enabled: capture on CUDA (False: always eager).
        pool: the memory pool the graphs share (``torch.cuda.graph_pool_handle()``);
            None: made at the first capture.
    """

    def __init__(self, enabled: bool, pool=None):
        self.enabled = enabled
        self.pool = pool
        self._graphs: Dict[Hashable, "torch.cuda.CUDAGraph"] = {}
        self.capture_seconds = 0.0  # time spent capturing (not decoding)

    def run(self, key: Hashable, turn: Callable[[], None], device: torch.device) -> None:
        """Runs ``turn`` (which only updates its workspace's buffers in place):
        replays its graph for ``key``, or runs it eagerly (then captures it)."""
        graph = self._graphs.get(key)
        if graph is not None:
            graph.replay()
            return
        turn()
        if self.enabled and device.type == "cuda":
            graph = self._capture(turn)
            if graph is None:  # this workspace's turns run eagerly from now on
                self.enabled = False
            else:
                self._graphs[key] = graph

    def _capture(self, turn: Callable[[], None]) -> Optional["torch.cuda.CUDAGraph"]:
        """The graph of ``turn``, or None (with a warning) where the device refuses
        the capture: decoding goes on eagerly, with the same output."""
        started = time.perf_counter()
        torch.cuda.synchronize()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                turn()  # recorded, not run: the buffers keep the eager turn's values
            torch.cuda.synchronize()
        except RuntimeError as error:
            warnings.warn(f"CUDA graph capture failed, decoding eagerly: "
                          f"{str(error).splitlines()[0]}", RuntimeWarning, stacklevel=3)
            return None
        self.capture_seconds += time.perf_counter() - started
        return graph

    def __len__(self) -> int:
        return len(self._graphs)
