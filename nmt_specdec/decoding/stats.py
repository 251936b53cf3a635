"""Decoding statistics: how much each iteration gained."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, NamedTuple, Tuple

import torch
from torch import Tensor

from nmt_specdec.decoding.decision.acceptance import drafts_before_eos


def oracle_tokens_per_iteration(lengths: Iterable[int], k: int) -> float:
    """Tokens per iteration of a drafter that always proposes the verifier's own
    output: each iteration commits K drafts plus the verifier's token, so a
    sentence of n tokens (EOS included) takes ceil(n / (K+1)) iterations. This is
    the ceiling any drafter reaches at that K on those sentences.

    Args:
        lengths: output lengths in tokens, EOS included.
        k: draft block size K.
    """
    lengths = list(lengths)
    iterations = sum(math.ceil(n / (k + 1)) for n in lengths)
    return sum(lengths) / iterations if iterations else 0.0


@dataclass
class SpecDecStats:
    """Running totals over all sentences decoded by one generator.

    Attributes:
        sentences: finished sentences.
        iterations: draft-verify iterations summed over sentences (one per row
            per loop turn, so a sentence's count is its number of verifier calls).
        tokens: committed tokens (EOS included).
        accepted_per_slot: how often draft slot i was accepted (index 0 = slot 1).
        drafted_per_slot: how often draft slot i was proposed.
        k_chosen: loop turns (batch iterations) per drafted K (``--spec-k auto``
            varies it; a fixed K only shrinks near the length limit).
        capture_seconds: time spent capturing CUDA graphs (inside decoding time:
            subtract it for the time decoding itself takes).
    """

    sentences: int = 0
    iterations: int = 0
    tokens: int = 0
    accepted_per_slot: List[int] = field(default_factory=list)
    drafted_per_slot: List[int] = field(default_factory=list)
    k_chosen: Dict[int, int] = field(default_factory=dict)
    capture_seconds: float = 0.0

    def add_tally(self, drafted_per_slot: List[int], accepted_per_slot: List[int],
                  iterations: int, tokens: int) -> None:
        """Adds a batch's totals (the engine counts on the device, reads once)."""
        grow = len(drafted_per_slot) - len(self.drafted_per_slot)
        if grow > 0:
            self.accepted_per_slot += [0] * grow
            self.drafted_per_slot += [0] * grow
        for slot, (drafted, accepted) in enumerate(zip(drafted_per_slot, accepted_per_slot)):
            self.drafted_per_slot[slot] += drafted
            self.accepted_per_slot[slot] += accepted
        self.iterations += iterations
        self.tokens += tokens

    @property
    def mean_accepted_tokens(self) -> float:
        """Committed tokens per iteration (>= 1; at most K+1)."""
        return self.tokens / self.iterations if self.iterations else 0.0

    @property
    def iterations_per_sentence(self) -> float:
        return self.iterations / self.sentences if self.sentences else 0.0

    def slot_acceptance(self) -> List[float]:
        """Share of proposals accepted, per draft slot."""
        return [a / d if d else 0.0 for a, d in zip(self.accepted_per_slot, self.drafted_per_slot)]

    def summary(self) -> str:
        slots = " ".join(f"{rate:.2f}" for rate in self.slot_acceptance()[:8])
        ks = " ".join(f"{k}:{n}" for k, n in sorted(self.k_chosen.items()))
        return (
            f"SpecDec: {self.sentences} sentences, {self.mean_accepted_tokens:.2f} tokens/iteration, "
            f"{self.iterations_per_sentence:.2f} iterations/sentence, "
            f"acceptance by slot [{slots}{' ...' if len(self.accepted_per_slot) > 8 else ''}], "
            f"K chosen (K:turns) [{ks}]"
        )


def tally_turns(k: Tensor, num_accepted: Tensor, counts: Tensor, finished: Tensor,
                k_max: int) -> Tuple[List[int], List[int], int, int]:
    """Per-slot totals of R row-turns (one host read), for :meth:`SpecDecStats.add_tally`.

    Only drafts at or before a committed EOS count (:func:`~.acceptance.drafts_before_eos`).

    Args:
        k, num_accepted, counts, finished: (R,) each row-turn's K, accepted drafts,
            committed tokens and whether it committed EOS.
        k_max: the largest K.

    Returns:
        ``(drafted_per_slot, accepted_per_slot, iterations, tokens)``.
    """
    drafted, accepted = drafts_before_eos(k, num_accepted, counts, finished)
    slots = torch.arange(k_max, device=k.device)
    drafted_per_slot = (drafted.unsqueeze(1) > slots).sum(0)  # (K,)
    accepted_per_slot = (accepted.unsqueeze(1) > slots).sum(0)  # (K,); accepted <= drafted
    values = torch.cat([drafted_per_slot, accepted_per_slot, counts.sum().view(1)]).tolist()
    return values[:k_max], values[k_max: 2 * k_max], int(k.numel()), values[-1]


class Turn(NamedTuple):
    """What one turn did, for the statistics: ints for one row on the host, (B,)
    tensors of the active rows in the batched loop (K is an int in both).

    Attributes:
        k: draft slots K.
        accepted: drafts accepted.
        committed: tokens committed (cut after an EOS).
        finished: whether an EOS was committed.
    """

    k: int
    accepted: Any
    committed: Any
    finished: Any


def tally_host_turns(turns: List[Turn], k_max: int) -> Tuple[List[int], List[int], int, int]:
    """:func:`tally_turns` over one row's turns as host ints (at batch 1 the
    tensor version's dispatch is a visible share of a sentence)."""
    drafted_per_slot, accepted_per_slot = [0] * k_max, [0] * k_max
    for turn in turns:
        # as drafts_before_eos
        drafted = min(turn.committed, turn.k) if turn.finished else turn.k
        for slot in range(drafted):
            drafted_per_slot[slot] += 1
        for slot in range(min(turn.accepted, turn.committed)):
            accepted_per_slot[slot] += 1
    return (drafted_per_slot, accepted_per_slot, len(turns),
            sum(turn.committed for turn in turns))
