"""What a backend provides: the model calls of the Spec-Verify loop, and nothing else.

The loops (:mod:`nmt_specdec.decoding.loops`), acceptance, the K policy and the
cache bookkeeping are shared by every backend. A backend only runs the model:

- ``encode``: the source batch once -> the backend's encoder output (opaque to
  the loop; the drafter and the verifier read it);
- ``verifier().verify``: N new inputs per row against the self-attention cache
  and the encoder memory -> (B, N, C) states and (B, N, V) logits; the new
  keys/values land in the shared :class:`~nmt_specdec.decoding.cache.StaticKVCache`;
- ``drafter``: a :class:`~nmt_specdec.decoding.drafters.Drafter` of the kind
  ``--spec-drafter`` names: every backend runs the NAR draft head (``head``),
  a backend may make more (its package's ``DRAFTERS``);
- ``static_passes``: whether the engine's static loop (fixed shapes, CUDA
  graphs) can run this backend's passes.

``calls`` counts the runtime calls each makes (one per pass), so that the
iteration-cost benchmark can report calls per iteration.

Shapes: B rows, N new positions, C model dim, V vocabulary.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple, Optional, Tuple

from torch import Tensor

from nmt_specdec.decoding.cache import StaticKVCache
from nmt_specdec.errors import UserError


class Verified(NamedTuple):
    """One verifier pass.

    Attributes:
        hidden: (B, N, C) final states; input j's state predicts the token after it.
        logits: (B, N, V) raw logits (no softmax) of those predictions.
        normaliser: (B, N) ``logsumexp`` of ``logits`` when the backend computed
            it in the same call (cheaper there than a separate pass), else None.
        decision: (B, 4) long, beta = 1 acceptance with no length constraint
            (accepted drafts, correction, the input that predicted it, 1 where
            the loop must decide itself: a tie, or pad involved) when the call
            decided it too
            (``--fused-draft``, see :mod:`.onnxruntime.fused`), else None.
        bound: (B, N) when only the logits above it are exact (an 8-bit
            projection certified in fp32, see :mod:`.onnxruntime.projection`):
            no token outside the exact ones scores above it. A decision is the
            exact one where the best constrained logit beats it
            (:func:`~nmt_specdec.decoding.decision.scores.certain`); elsewhere the loop
            takes :meth:`VerifierCalls.exact_logits`. Top-k sampling certifies its
            sample itself (:attr:`VerifierCalls.projection_check`). None: every
            logit exact.
        rounding: (B, N) with ``bound``: how far the exact logits, sums in
            fp32, may lie from their float64 values.
        candidates: (B, N, M) with ``bound``: the ids of the exact logits, the
            largest first (every logit above ``bound`` is one of them).
    """

    hidden: Tensor
    logits: Tensor
    normaliser: Optional[Tensor] = None
    decision: Optional[Tensor] = None
    bound: Optional[Tensor] = None
    rounding: Optional[Tensor] = None
    candidates: Optional[Tensor] = None


class VerifierCalls:
    """The verifier of one backend, ready for a batch.

    Attributes:
        embed: a float tensor whose dtype/device the loop's buffers take; its
            last dimension is C.
    """

    embed: Tensor
    # With a ``bound`` on its calls: the per-token bounds and exact logits a
    # decision that reads more than the best token needs (top-k sampling), an
    # :class:`~.onnxruntime.projection.ProjectionCheck`; None: every logit exact.
    projection_check: Any = None

    def cross_states(self, encoder_out: Any) -> Any:
        """Per-batch encoder keys/values (or whatever the verifier needs) of the batch."""
        raise NotImplementedError

    def keep_rows(self, cross: Any, rows: Tensor) -> Any:
        """``cross`` restricted to ``rows`` (B',), in that order."""
        raise NotImplementedError

    def new_cache(self, batch: int, slots: int) -> StaticKVCache:
        raise NotImplementedError

    def exact_logits(self, hidden: Tensor) -> Tensor:
        """(B, N, V) exact logits of final states (B, N, C): asked for only where a
        :class:`Verified` with a ``bound`` could not certify a decision."""
        raise NotImplementedError

    def verify(self, tokens: Tensor, start: Tensor, start_max: int, cache: StaticKVCache,
               cross: Any, uniform: bool = False, tree: Any = None) -> Verified:
        """Scores N new inputs per row and writes their keys/values into ``cache``.

        Args:
            tokens: (B, N) the last committed token, then the drafts.
            start: (B,) position (= cache slot) of each row's first input.
            start_max: ``max(start)`` as a host int.
            cache: the batch's cache; slots ``< start[b]`` hold row b's prefix.
            cross: from :meth:`cross_states` (after any :meth:`keep_rows`).
            uniform: every row starts at ``start_max``.
            tree: a :class:`~nmt_specdec.decoding.draft_tree.TreeLayout` (inputs at
                tree positions, attending to their ancestors only), or None for a
                chain; a backend that cannot raises :class:`UserError`.
        """
        raise NotImplementedError


class Backend:
    """The model calls of one model on one runtime.

    Attributes:
        name: the ``--backend`` value.
        static_passes: the static loop (:class:`~nmt_specdec.decoding.loops.StaticLoop`)
            runs this backend's lean torch passes on a GPU.
        calls: runtime calls so far, by kind (``encode``, ``verify``, ``draft``).
        runtime_calls: (class, method name) pairs every call into the backend's
            own runtime passes through (profiling times them as the runtime's).
    """

    name = "?"
    static_passes = False
    runtime_calls: Tuple[Tuple[type, str], ...] = ()

    def __init__(self) -> None:
        self.calls: Counter = Counter()

    def encode(self, net_input: dict) -> Any:
        """Encodes a fairseq batch's ``net_input`` once."""
        raise NotImplementedError

    def verifier(self) -> VerifierCalls:
        """The verifier (rebuilt if the model's weights changed since)."""
        raise NotImplementedError

    def drafter(self, pad: int, kind: str = "head"):
        """A :class:`~nmt_specdec.decoding.drafters.Drafter` of ``kind`` (one of its
        package's ``DRAFTERS``, :func:`~nmt_specdec.decoding.backends.check_drafter`;
        ``head``: the model's draft head)."""
        raise NotImplementedError
