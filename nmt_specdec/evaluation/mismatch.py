"""Why a beta=1 output differs from stock greedy: the verifier's logit gap there.

SpecDec with beta=1 commits the verifier's top-1 at every step, as greedy search
does, but it scores several positions per pass (other shapes, other float
rounding). Where the two top candidates are nearly tied, rounding can flip the
choice and the sentences diverge from there on. For each differing sentence this
module reports the first differing step and the gap between the two tokens'
logits under a teacher-forced pass over the common prefix: a near-tie has a gap
of a few 1e-6 (float32 rounding); anything above :data:`NEAR_TIE_LOGIT_GAP`
would be a bug. A half-precision model rounds far more coarsely
(:func:`near_tie_gap`), and its beta=1 rows are compared with its own greedy.
"""

from __future__ import annotations

from typing import Dict, List

import torch
from torch import Tensor, nn

# A beta=1 difference from stock greedy is rounding only if the two tokens' logits
# were closer than the two decoders' float32 deviation. On the shipped Ding model
# the lean pass and fairseq's decoder differ by at most 9.5e-6 per logit (|logit|
# <= 14, i.e. ~10 float32 ulps; 200 test sentences, teacher-forced), and float32
# verifiers of this size stay within a few 1e-5. 1e-4 is 10x the measured
# deviation, yet natural gaps that small are rare (none among 2375 greedy steps
# there; the smallest was 8.5e-4), so a flip above it points at a bug.
NEAR_TIE_LOGIT_GAP = 1e-4


def near_tie_gap(dtype: torch.dtype, logit: float) -> float:
    """The largest gap that rounding explains, for a model of this precision.

    float32: :data:`NEAR_TIE_LOGIT_GAP`. Half precision rounds every activation to
    8 (bfloat16) or 11 (float16) significant bits, so two pass shapes (or two
    batch sizes) can move a logit by a few units in its last place: a gap within
    4 units of the last place of the logit itself (0.125 at |logit| = 8 in
    bfloat16; measured flips on the shipped model: 0 to 0.0625) is a near-tie.
    """
    if dtype == torch.float32:
        return NEAR_TIE_LOGIT_GAP
    return 4 * torch.finfo(dtype).eps * max(1.0, abs(logit))


def first_difference(a: List[int], b: List[int]) -> int:
    """Index of the first position where ``a`` and ``b`` differ (or the shorter length)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


@torch.no_grad()
def logit_gaps(model: nn.Module, sources: List[Tensor], reference: Dict[int, List[int]],
               other: Dict[int, List[int]], bos: int, limit: int = 20) -> List[Dict]:
    """The logit gap at the first difference of each differing sentence (at most ``limit``).

    Args:
        model: the fairseq encoder-decoder (the verifier), eval mode.
        sources: (S,) source tensor per sentence id.
        reference, other: sentence id -> output tokens (EOS included).
        bos: first decoder input.

    Returns:
        ``{"sentence", "step", "reference_token", "other_token", "logit_gap", "near_tie"}``
        per sentence (``near_tie``: the gap is below :func:`near_tie_gap` for the
        model's precision).
    """
    device = next(model.parameters()).device
    rows = []
    for sentence in sorted(i for i in reference if reference[i] != other.get(i)):
        a, b = reference[sentence], other[sentence]
        step = first_difference(a, b)
        if step >= min(len(a), len(b)):
            continue  # one is a prefix of the other: a length rule, not a tie
        src = sources[sentence].unsqueeze(0).to(device)  # (1, S)
        encoder_out = model.encoder(src, src_lengths=torch.tensor([src.size(1)], device=device))
        prev = torch.tensor([[bos] + a[:step]], device=device)  # (1, step+1)
        logits, _ = model.decoder(prev, encoder_out=encoder_out)
        last = logits[0, -1].float()
        gap = abs(float(last[a[step]] - last[b[step]]))
        limit = near_tie_gap(logits.dtype, float(last[a[step]]))
        rows.append({"sentence": sentence, "step": step, "reference_token": a[step],
                     "other_token": b[step], "logit_gap": gap, "near_tie": gap < limit})
        if len(rows) >= limit:
            break
    return rows
