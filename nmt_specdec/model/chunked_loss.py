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

from typing import Optional

import torch
from torch import Tensor

CHUNK_ELEMENTS = 1 << 17  # float32 values a chunk works on (512 KiB: a core's L2)


def summed_nll(logits: Tensor, target: Tensor, ignore_index: int,
               teacher: Optional[Tensor] = None, soft: float = 0.0) -> Tensor:
    """Summed cross-entropy of ``logits`` (R, V) against ``target`` (R,), rows
    whose target is ``ignore_index`` left out; a float32 scalar, differentiable
    in ``logits``.

    With ``teacher`` (R, V) logits and ``soft`` in (0, 1], a row's target is
    the mixture ``(1 - soft) * onehot(target) + soft * softmax(teacher)``: the
    verifier's whole distribution as soft labels (Hinton et al., 2015;
    DistillSpec), the teacher read, never trained."""
    if teacher is None or soft == 0:
        teacher, soft = None, 0.0
    elif not 0 < soft <= 1 or teacher.shape != logits.shape:
        raise ValueError(f"soft must be in (0, 1] and teacher shaped {tuple(logits.shape)}")
    return _SummedNll.apply(logits, target, ignore_index, teacher, float(soft))


def _chunks(rows: int, width: int):
    step = max(1, CHUNK_ELEMENTS // max(width, 1))
    return (slice(start, start + step) for start in range(0, rows, step))


def _teacher_probs(teacher: Tensor, rows: slice) -> Tensor:
    return torch.softmax(teacher[rows].float(), dim=-1)


class _SummedNll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, ignore_index: int,
                teacher: Optional[Tensor], soft: float) -> Tensor:
        lse = torch.empty(logits.size(0), dtype=torch.float32, device=logits.device)
        expected = torch.zeros_like(lse)  # sum_v p_teacher(v) * logit(v), per row
        for rows in _chunks(*logits.shape):
            chunk = logits[rows].float()
            lse[rows] = torch.logsumexp(chunk, dim=-1)
            if teacher is not None:
                expected[rows] = (_teacher_probs(teacher, rows) * chunk).sum(-1)
        kept = target.ne(ignore_index)
        picked = logits.gather(1, target.unsqueeze(1)).squeeze(1).float()
        ctx.save_for_backward(logits, target, lse, kept, teacher)
        ctx.soft = soft
        return ((lse - (1 - soft) * picked - soft * expected) * kept).sum()

    @staticmethod
    def backward(ctx, grad: Tensor):
        logits, target, lse, kept, teacher = ctx.saved_tensors
        soft = ctx.soft
        weight = kept.float() * grad  # d loss / d row
        out = torch.empty_like(logits)
        for rows in _chunks(*logits.shape):
            probs = torch.exp(logits[rows].float() - lse[rows, None])
            if teacher is not None:
                probs.sub_(_teacher_probs(teacher, rows), alpha=soft)
            probs.scatter_add_(1, target[rows, None],
                               probs.new_full((probs.size(0), 1), soft - 1.0))
            out[rows] = probs.mul_(weight[rows, None])
        return out, None, None, None, None
