"""One exported graph run by ONNX Runtime on torch tensors bound in place
(:class:`GraphSession`), and the grow-only buffers its outputs go to
(:class:`Scratch`)."""

from __future__ import annotations

import math
from itertools import compress
from operator import is_not
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

# Runtime fusions the sessions leave out. MatMulIntegerToFloat: wrong for the
# encoder's per-row 8-bit products (see GraphSession). SkipLayerNormalization:
# slower than the Add and LayerNormalization it replaces (measured on the 8-bit
# encoder, onnxruntime 1.32).
DISABLED_FUSIONS = ["MatMulIntegerToFloatFusion", "SkipLayerNormFusion"]
# A graph quantized with one activation scale per product (quantize.quantize_sentence)
# is what MatMulIntegerToFloat computes: there the fusion is right.
PER_TENSOR_DISABLED_FUSIONS = ["SkipLayerNormFusion"]
# Spin-waiting of the runtime's worker threads after each call, switched off.
# Between graph calls the host runs the loop's Python and torch's own parallel
# ops (a cache's zeroing): workers spinning on the cores those need make every
# such op wait for the scheduler (docs/results.md, "Threads on the CPU").
SPIN_WAIT = "session.intra_op.allow_spinning"
_NUMPY = {torch.float32: np.float32, torch.int64: np.int64, torch.bool: np.bool_}
_EMPTY = torch.zeros(8, dtype=torch.int64)
_TORCH = {"tensor(float)": torch.float32, "tensor(int64)": torch.int64,
          "tensor(bool)": torch.bool}


class GraphSession:
    """One graph: positional torch inputs in, preallocated torch outputs filled.

    One ``IOBinding`` is kept; a name is re-bound only when its tensor's address,
    shape or type changed since the last call (the cache, the encoder memory and
    the output buffers stay put for a whole batch, so a warm step re-binds only
    the few inputs that move), and a tensor that is the very object bound last
    call is not looked at (a verify call has ~20).
    Buffers passed here are never resized in place. Binding goes
    through the pybind object directly when this onnxruntime has it (the public
    wrapper builds an ``OrtDevice`` per bound tensor, a few microseconds each,
    ~20 per verify call); otherwise through the public API.
    """

    def __init__(self, ort, path: Path, threads: int, declared: Sequence[str],
                 disabled: Sequence[str] = DISABLED_FUSIONS):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry(SPIN_WAIT, "0")  # (one thread: no workers)
        # The fusion of the encoder's per-row 8-bit products (quantize.quantize_rows)
        # into MatMulIntegerToFloat reads one scale for all rows: wrong results
        # (onnxruntime 1.32, tests/unit/test_quantize_rows.py); unfused they are
        # exact. See DISABLED_FUSIONS.
        self.session = ort.InferenceSession(str(path), options,
                                            providers=["CPUExecutionProvider"],
                                            disabled_optimizers=list(disabled))
        self.inputs = [i.name for i in self.session.get_inputs()]
        # run() takes the inputs the graph was declared with; these it still has.
        self.picked = [list(declared).index(name) for name in self.inputs]
        self.outputs = [o.name for o in self.session.get_outputs()]
        # fairseq's int32 lengths etc. are cast to what the graph declares.
        self.input_types = [_TORCH[i.type] for i in self.session.get_inputs()]
        self.binding = self.session.io_binding()
        self._bound: Dict[str, tuple] = {}  # name -> (address, shape, dtype) bound now
        # Per input, then output: the tensor object bound last call, if bound as it
        # is. The same object needs no look at all (the loop's cache, the encoder
        # memory and kept buffers are passed as the same objects step after step).
        self._last: List[Optional[Tensor]] = [None] * (len(self.inputs) + len(self.outputs))
        self.bindings = 0  # names bound so far: a caller can tell its binding is intact
        self._fast = None
        try:  # (pybind binding, C device, pybind session)
            device = ort.OrtDevice.make("cpu", 0)._get_c_device()
            self._fast = (self.binding._iobinding, device, self.session._sess)
        except AttributeError:
            pass

    def run(self, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> None:
        """``inputs`` in the declared order, ``outputs`` in the graph's."""
        tensors = [inputs[i] for i in self.picked] + list(outputs)
        # Most tensors are the very ones bound as they are last call: compared in
        # one pass at C speed, only the others are looked at.
        bound = [self._rebind(slot, tensors[slot]) for slot in
                 compress(range(len(tensors)), map(is_not, tensors, self._last))]
        self.run_bound()
        del bound  # casts and contiguous copies had to outlive the call

    def run_bound(self) -> None:
        """Runs on the tensors bound now (for a caller that knows they are its
        inputs and outputs as they were: :attr:`bindings` unchanged since)."""
        if self._fast is not None:
            self._fast[2].run_with_iobinding(self._fast[0], None)
        else:
            self.session.run_with_iobinding(self.binding)

    def _rebind(self, slot: int, given: Tensor) -> Tensor:
        """Binds input (or output, past the inputs) ``slot`` to ``given``; returns
        the tensor bound, which must live until the call."""
        is_input = slot < len(self.inputs)
        name = self.inputs[slot] if is_input else self.outputs[slot - len(self.inputs)]
        tensor = given
        if is_input and tensor.dtype is not self.input_types[slot]:
            tensor = tensor.to(self.input_types[slot])
        tensor = tensor.contiguous()
        self._bind(is_input, name, tensor)
        # Kept (and so never freed and its id never reused) only when bound as is.
        self._last[slot] = given if tensor is given else None
        return tensor

    def _bind(self, is_input: bool, name: str, tensor: Tensor) -> None:
        shape, dtype = tuple(tensor.shape), _NUMPY[tensor.dtype]
        # An empty tensor has no data pointer, which binding refuses; any valid
        # address serves for zero elements.
        pointer = tensor.data_ptr() or _EMPTY.data_ptr()
        # The same address, shape and type is the same binding: whatever tensor
        # lies there now, the runtime reads (or writes) the right memory.
        key = (pointer, shape, dtype)
        if self._bound.get(name) == key:
            return
        self._bound[name] = key
        self.bindings += 1
        if self._fast is not None:
            binding, device, _ = self._fast
            bind = binding.bind_input if is_input else binding.bind_output
            bind(name, device, dtype, shape, pointer)
        else:
            bind = self.binding.bind_input if is_input else self.binding.bind_output
            bind(name, "cpu", 0, dtype, shape, pointer)


class Scratch:
    """Grow-only flat buffers that a call's outputs are views of: once the largest
    shape has been seen, a step allocates nothing. A view is valid until the
    next call that takes the same name."""

    def __init__(self) -> None:
        self._flat: Dict[str, Tensor] = {}
        self._views: Dict[str, Tuple[tuple, Tensor]] = {}  # name -> the last view taken

    def take(self, name: str, shape: Sequence[int], dtype=torch.float32) -> Tensor:
        shape = tuple(shape)
        last = self._views.get(name)
        if last is not None and last[0] == shape:  # the same view object: binding skips it
            return last[1]
        numel = math.prod(shape)
        flat = self._flat.get(name)
        if flat is None or flat.numel() < numel:
            flat = self._flat[name] = torch.empty(numel, dtype=dtype)
        view = flat[:numel].view(*shape)
        self._views[name] = (shape, view)
        return view
