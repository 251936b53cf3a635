"""Draft-head training examples (Xia et al., 2023, Sec. 3.1, training).

Each target is cut at random points m: the first m output tokens count as
committed. At decoding time the draft head then sees the last committed token
c = y_m at position m and the verifier's state that predicted it (the state at
input position m-1 of a teacher-forced pass; none for m = 0, where c is BOS),
and must predict y_{m+1} .. y_{m+K}. Slots past EOS are padding. One frozen
teacher-forced verifier pass gives the states of every cut, so several cuts per
sentence cost little beyond the head itself.

Shapes: B sentences, T target length (with EOS), M cuts per sentence, N = B*M
blocks, K draft slots, C model dim.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor


class DraftCuts(NamedTuple):
    """N draft-training blocks.

    Attributes:
        rows: (N,) sentence of each block.
        states: (N, C) verifier state that predicted the last committed token.
        has_state: (N,) False where the cut is at 0 (the head's start state applies).
        last_tokens: (N,) last committed token (BOS for m = 0).
        positions: (N,) its position m.
        target: (N, K) tokens to draft, ``pad`` past EOS.
    """

    rows: Tensor
    states: Tensor
    has_state: Tensor
    last_tokens: Tensor
    positions: Tensor
    target: Tensor


def sample_cuts(lengths: Tensor, num_cuts: int,
                generator: Optional[torch.Generator] = None) -> Tensor:
    """(B, M) cut points, uniform in ``[0, lengths[b] - 1]`` (EOS is always left to draft)."""
    uniform = torch.rand((lengths.size(0), num_cuts), generator=generator).to(lengths.device)
    return (uniform * lengths.unsqueeze(1).float()).long().clamp(max=lengths.unsqueeze(1) - 1)


def make_draft_cuts(target: Tensor, states: Tensor, num_slots: int, num_cuts: int, *,
                    bos: int, pad: int,
                    generator: Optional[torch.Generator] = None) -> DraftCuts:
    """Cuts each target at ``num_cuts`` random points and builds the blocks.

    Args:
        target: (B, T) target ending in EOS, right-padded.
        states: (B, T, C) verifier states of the teacher-forced pass over
            ``[BOS] + target[:-1]``: ``states[b, i]`` predicts ``target[b, i]``.
        num_slots: K.
        num_cuts: M cuts per sentence (with replacement).
        bos: first decoder input (fairseq uses EOS).
        pad: padding id.
        generator: seeded RNG, so that validation blocks are reproducible.

    Returns:
        The :class:`DraftCuts`, N = B * M blocks.
    """
    batch, width = target.shape
    lengths = target.ne(pad).long().sum(dim=1)  # (B,) incl. EOS
    cuts = sample_cuts(lengths, num_cuts, generator).view(-1)  # (N,)
    rows = torch.arange(batch, device=target.device).repeat_interleave(num_cuts)  # (N,)
    before = (cuts - 1).clamp(min=0)
    has_state = cuts > 0
    last_tokens = torch.where(has_state, target[rows, before], torch.full_like(cuts, bos))
    slot = torch.arange(num_slots, device=target.device).unsqueeze(0)  # (1, K)
    source = cuts.unsqueeze(1) + slot  # (N, K)
    in_target = source < lengths[rows].unsqueeze(1)
    gathered = target[rows.unsqueeze(1), source.clamp(max=width - 1)]
    return DraftCuts(rows, states[rows, before], has_state, last_tokens, cuts,
                     gathered.masked_fill(~in_target, pad))
