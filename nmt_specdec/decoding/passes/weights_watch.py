"""Whether the weights behind a backend's lean copies have changed.

The lean passes (:mod:`.verifier_pass`, :mod:`.draft_pass`) and a graph
backend's exported graphs read a model's weights once; every backend asks this
watch, once per batch, whether to read them again.
"""

from __future__ import annotations

import weakref
from typing import Optional

from torch import nn


class WeightsWatch:
    """Tells whether any parameter of ``module`` was updated in place or replaced
    since the last look, so lean copies of its weights are rebuilt only when stale.

    Walking the submodules (``module.parameters()``) costs ~0.2 ms on the shipped
    model, once per batch: ~2% of a sentence at batch 1. The walk is done once
    here; a look reads each kept submodule's own parameter and child dicts
    (~0.1 ms, 155 modules and 183 parameters): a parameter updated in place
    changes its ``_version``, a replaced one its address, and a submodule added,
    removed or replaced changes its parent's children, after which the
    submodules are walked again.
    """

    def __init__(self, module: nn.Module):
        # Weakly: a backend kept per model in a WeakKeyDictionary holds its watch.
        self._refs = [weakref.ref(m) for m in module.modules()]
        self._key = self._read()

    @property
    def module(self) -> Optional[nn.Module]:
        return self._refs[0]()

    def _read(self) -> Optional[tuple]:
        key: list = []
        for ref in self._refs:
            m = ref()
            if m is None:  # a submodule went away: something was replaced
                return None
            key.extend(map(id, m._modules.values()))
            key.extend((p.data_ptr(), p._version) for p in m._parameters.values()
                       if p is not None)
        return tuple(key)

    def changed(self) -> bool:
        """True once after each change (the next look compares with the new state)."""
        key = self._read()
        if key is not None and key == self._key:
            return False
        module = self.module
        if module is not None:
            self._refs = [weakref.ref(m) for m in module.modules()]
            self._key = self._read()
        return True
