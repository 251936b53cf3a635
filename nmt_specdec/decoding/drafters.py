"""Drafters: what proposes the K tokens that the verifier checks.

The generator only sees the :class:`Drafter` interface (compare Hugging Face's
``CandidateGenerator``), so the NAR draft head, a test oracle and an
always-wrong stub are interchangeable.

Shapes: B active rows, T buffer width, K draft slots, C model dim.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Tuple

from torch import Tensor

from nmt_specdec.errors import UserError


# A chain drafter's choice of slot i's draft: (B, V) logits, i -> (B,) tokens.
Choice = Callable[[Tensor, int], Tensor]


class DraftRequest(NamedTuple):
    """What a drafter may look at.

    Attributes:
        prefix: (B, T) committed tokens (BOS first), right-padded with ``pad``.
            A view of the engine's buffer: read it, don't keep it.
        lengths: (B,) committed tokens per row, BOS included.
        states: (B, C) the verifier's top-layer state that predicted each row's
            last committed token.
        rows: (B,) index of each active row in the input batch.
        num_slots: K for this iteration.
        anchor: for a single row, what ``states`` and the last token are as host
            ints: (position of the last token, the token, the input of the last
            verify call whose state ``states`` is, -1 for ``start_states``); None
            when the loop does not say (a drafter then reads the tensors).
        cache: the verifier's self-attention cache, its slots exact up to the
            last committed token's, which is not cached yet. A drafter that runs
            a model of the verifier's shape may read it and write the slots from
            the last committed token's on: the next verify call feeds those
            positions and writes them again. None where the loop does not say.
        eos: the end-of-sentence id where the loop takes a chain shorter than
            K (a single row, whose chain ends at its first EOS draft: nothing
            after an EOS is ever committed). A drafter that pays per drafted
            token may then stop at an EOS draft, or wherever its own scores say
            the drafts after are seldom kept, and return fewer than K drafts (at
            least one). None: return K.
    """

    prefix: Tensor
    lengths: Tensor
    states: Tensor
    rows: Tensor
    num_slots: int
    anchor: Optional[Tuple[int, int, int]] = None
    cache: Any = None
    eos: Optional[int] = None


class Drafter:
    """Interface: what every drafter does, start on a batch, follow its rows and
    propose K tokens per row. What only some drafters can do is an ability of its
    own below, checked once when the generator is built (:func:`check_abilities`)."""

    def start_batch(self, sample: dict, encoder_out: Any) -> None:
        """Called once per batch before drafting; default: nothing to prepare."""

    def keep_rows(self, rows: Tensor) -> None:
        """Finished rows left the batch; ``rows`` (B',) are the survivors' old indices."""

    def start_states(self, batch: int, like: Tensor) -> Tensor:
        """(B, C) state that stands for the verifier's before the first token."""
        return like.new_zeros(batch, like.size(-1))

    def propose(self, request: DraftRequest) -> Tensor:
        """Returns (B, K) long draft tokens (fewer only where ``request.eos`` is given)."""
        raise NotImplementedError


class ProposesCandidates(Drafter):
    """Ability: several candidates per slot, for draft trees (``--spec-candidates``)."""

    def propose_candidates(self, request: DraftRequest, count: int) -> Tensor:
        """Returns (B, C, K) long candidates per slot, best first (row 0 is what
        :meth:`propose` would return; see :mod:`nmt_specdec.decoding.draft_tree`)."""
        raise NotImplementedError


class GivesDistribution(Drafter):
    """Ability: the distribution each slot's draft is drawn from, for speculative
    sampling (``--sampling``)."""

    def draft_logits(self, request: DraftRequest) -> Tensor:
        """Returns (B, K, V) the logits of each slot's draft."""
        raise NotImplementedError


class DraftsByChoice(Drafter):
    """Ability: drafts slot after slot, each by a choice the loop gives from the
    slot's own distribution (a chain drafter under ``--sampling``: each slot's
    perturbed argmax, the next slot drafted after that token)."""

    def propose_chosen(self, request: DraftRequest, choose: Choice) -> Tensor:
        """Returns (B, K) long drafts: slot i's is ``choose(logits, i)`` of the
        (B, V) logits the drafter gives slot i after the drafts before it."""
        raise NotImplementedError


class PinsState(Drafter):
    """Ability: a per-batch state that the static loop's captured turns read."""

    def pin_state(self, pin: Callable[[str, list], list]) -> None:
        """Moves this batch's state (a list of tensors) into buffers kept across
        batches, ``state = pin(name, state)``: a captured turn reads them at a
        fixed address."""
        raise NotImplementedError


def check_abilities(drafter: Drafter, candidates: int, sampling: bool) -> None:
    """Refuses, in one line, what the options ask of a drafter that cannot do it."""
    name = type(drafter).__name__
    if candidates > 1 and not isinstance(drafter, ProposesCandidates):
        raise UserError(f"--spec-candidates {candidates}: this drafter ({name}) proposes "
                        "one token per slot")
    if sampling and not isinstance(drafter, (GivesDistribution, DraftsByChoice)):
        raise UserError(f"--sampling with --spec-decoding needs the drafter's distribution, "
                        f"which this drafter ({name}) does not give: use --spec-drafter head")
