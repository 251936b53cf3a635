"""The draft head's cross-entropy, computed a few rows at a time.

``F.nll_loss(F.log_softmax(logits.float()), target, reduction="sum")`` makes a
float32 copy of the (rows x draft vocabulary) logits, a float32 log-softmax
of it and, in the backward pass, two more tensors of that size: on a CPU,
where the head trains, those passes over memory cost more than the softmax's
arithmetic (a few hundred MB an update at 4,000 draft ids). :func:`summed_nll`
computes the same loss and gradient from the logits as they are (bfloat16
under autocast), a chunk of rows at a time, in float32 within the chunk: the
forward pass keeps one log-sum-exp a row, the backward pass writes the
gradient once.
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK_ELEMENTS = 1 << 17  # float32 values a chunk works on (512 KiB: a core's L2)


def summed_nll(logits: Tensor, target: Tensor, ignore_index: int) -> Tensor:
    """Summed negative log-likelihood of ``target`` (R,) under the softmax of
    ``logits`` (R, V), rows whose target is ``ignore_index`` left out; a float32
    scalar, differentiable in ``logits``."""
    return _SummedNll.apply(logits, target, ignore_index)


def _chunks(rows: int, width: int):
    step = max(1, CHUNK_ELEMENTS // max(width, 1))
    return (slice(start, start + step) for start in range(0, rows, step))


class _SummedNll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, ignore_index: int) -> Tensor:
        lse = torch.empty(logits.size(0), dtype=torch.float32, device=logits.device)
        for rows in _chunks(*logits.shape):
            lse[rows] = torch.logsumexp(logits[rows].float(), dim=-1)
        kept = target.ne(ignore_index)
        picked = logits.gather(1, target.unsqueeze(1)).squeeze(1).float()
        ctx.save_for_backward(logits, target, lse, kept)
        return ((lse - picked) * kept).sum()

    @staticmethod
    def backward(ctx, grad: Tensor):
        logits, target, lse, kept = ctx.saved_tensors
        weight = kept.float() * grad  # d loss / d row
        out = torch.empty_like(logits)
        for rows in _chunks(*logits.shape):
            probs = torch.exp(logits[rows].float() - lse[rows, None])
            probs.scatter_add_(1, target[rows, None],
                               probs.new_full((probs.size(0), 1), -1.0))
            out[rows] = probs.mul_(weight[rows, None])
        return out, None, None
