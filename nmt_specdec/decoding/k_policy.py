"""How many tokens to draft this iteration (``--spec-k N`` or ``--spec-k auto``)."""

from __future__ import annotations

from torch import Tensor

from nmt_specdec.decoding.options import SpecDecOptions


class KPolicy:
    """Fixed K: always the largest K allowed (``limit``)."""

    def choose(self, limit: int, batch: int) -> int:
        """K for this iteration, at most ``limit``, for ``batch`` active rows."""
        return limit

    def observe(self, num_accepted: Tensor, k: int) -> None:
        """Sees the (B,) accepted drafts of an iteration that drafted ``k``."""


def make_k_policy(options: SpecDecOptions) -> KPolicy:
    return KPolicy()
