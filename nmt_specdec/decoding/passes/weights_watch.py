"""Whether the weights behind a backend's lean copies have changed.

The lean passes (:mod:`.verifier_pass`, :mod:`.draft_pass`) and a graph
backend's exported graphs read a model's weights once; every backend asks this
watch, once per batch, whether to read them again.
"""

from __future__ import annotations

import weakref
from operator import attrgetter
from typing import Optional

from torch import Tensor, nn
from torch.nn.modules.module import (
    register_module_module_registration_hook,
    register_module_parameter_registration_hook,
)

_registrations = 0  # parameters and submodules assigned to any module since import


def _count_registration(*_) -> None:  # a global hook: returns None, changes nothing
    global _registrations
    _registrations += 1


register_module_parameter_registration_hook(_count_registration)
register_module_module_registration_hook(_count_registration)
_DATA_PTR, _VERSION = Tensor.data_ptr, attrgetter("_version")


class WeightsWatch:
    """Tells whether any parameter of ``module`` was updated in place or replaced
    since the last look, so lean copies of its weights are rebuilt only when stale.

    A parameter updated in place changes its ``_version``, a replaced one its
    address, and a submodule added, removed or replaced changes its parent's
    children. Reading all of that from every submodule's dictionaries is a
    visible share of a sentence's time at batch 1. So a look first reads only what
    a batch could have changed without assigning anything: each kept parameter's
    address and version, and the size of each children or parameter dictionary
    that has entries to lose (``del``), in three C-level passes.
    Assigning a parameter or a submodule anywhere (torch's global registration
    hooks count them) sends the next look through the whole walk.
    """

    def __init__(self, module: nn.Module):
        self._watch(module)

    def _watch(self, module: nn.Module) -> None:
        # Weakly: a backend kept per model in a WeakKeyDictionary holds its watch
        # (the dictionaries below hold submodules, never the model itself).
        self._refs = [weakref.ref(m) for m in module.modules()]
        self._params = list(module.parameters())  # no reference to a module
        self._filled = [d for m in module.modules() for d in (m._modules, m._parameters) if d]
        self._key = self._read()
        self._registrations = _registrations
        self._quick = self._quick_read()

    @property
    def module(self) -> Optional[nn.Module]:
        return self._refs[0]()

    def _quick_read(self) -> tuple:
        return (list(map(_DATA_PTR, self._params)), list(map(_VERSION, self._params)),
                list(map(len, self._filled)))

    def _read(self) -> Optional[tuple]:
        key: list = []
        for ref in self._refs:
            m = ref()
            if m is None:
                return None
            key.extend(map(id, m._modules.values()))
            key.extend((p.data_ptr(), p._version) for p in m._parameters.values()
                       if p is not None)
        return tuple(key)

    def changed(self) -> bool:
        """True once after each change (the next look compares with the new state)."""
        if self._registrations == _registrations and self._quick_read() == self._quick:
            return False
        key = self._read()
        if key is not None and key == self._key:  # assignments elsewhere, none here
            self._registrations, self._quick = _registrations, self._quick_read()
            return False
        module = self.module
        if module is not None:
            self._watch(module)
        return True
