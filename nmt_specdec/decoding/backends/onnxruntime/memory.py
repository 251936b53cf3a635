"""One batch's encoder output as the ONNX graphs take it (:class:`Memory`)."""

from __future__ import annotations

from typing import List, NamedTuple, Optional

from torch import Tensor


class Memory(NamedTuple):
    """One batch's encoder output as the graphs take it.

    Attributes:
        mask: (B, 1, 1, S) bool, True where the source may be attended.
        cross: per verifier layer, key then value, (B, H, S, D) each.
        draft: the same for the draft head's layers (empty until
            :meth:`OrtBackend.draft_memory` makes them for a drafter).
        states: (B, S, C) the encoder's output, where there is a draft head.
    """

    mask: Tensor
    cross: List[Tensor]
    draft: List[Tensor]
    states: Optional[Tensor] = None

    def keep_rows(self, rows: Tensor) -> "Memory":
        return Memory(self.mask.index_select(0, rows),
                      [t.index_select(0, rows) for t in self.cross],
                      [t.index_select(0, rows) for t in self.draft])
