"""``summed_nll`` (the draft head's cross-entropy a few rows at a time) gives the
loss and gradient of ``F.nll_loss(F.log_softmax(logits.float()), ...)``, over
several chunks, with ignored rows, from float32 and bfloat16 logits."""

import pytest
import torch
import torch.nn.functional as F

from nmt_specdec.model import chunked_loss

PAD = 1


def _reference(logits, target):
    return F.nll_loss(F.log_softmax(logits.float(), dim=-1), target, ignore_index=PAD,
                      reduction="sum")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_summed_nll_equals_log_softmax_and_nll(monkeypatch, dtype):
    monkeypatch.setattr(chunked_loss, "CHUNK_ELEMENTS", 7 * 50)  # 7 rows a chunk: 5 chunks
    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(31, 50, generator=g)).to(dtype)
    target = torch.randint(0, 50, (31,), generator=g)
    target[::4] = PAD
    grads = []
    for loss_of in (_reference, lambda x, t: chunked_loss.summed_nll(x, t, PAD)):
        leaf = logits.clone().requires_grad_()
        loss = loss_of(leaf, target)
        (2.5 * loss).backward()
        grads.append((loss.detach(), leaf.grad))
    (ours, our_grad), (theirs, their_grad) = grads[1], grads[0]
    assert ours.dtype == torch.float32 and our_grad.dtype == dtype
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(our_grad.float(), their_grad.float())
    assert our_grad[::4].abs().sum() == 0  # ignored rows get no gradient
    assert our_grad[1:4].abs().sum() > 0


def _soft_reference(logits, target, teacher, soft):
    mixed = (1 - soft) * F.one_hot(target, logits.size(-1)).float() \
        + soft * torch.softmax(teacher.float(), dim=-1)
    rows = -(mixed * F.log_softmax(logits.float(), dim=-1)).sum(-1)
    return (rows * target.ne(PAD)).sum()


@pytest.mark.parametrize("soft", [0.5, 1.0])
def test_soft_labels_equal_the_mixture_cross_entropy(monkeypatch, soft):
    """With the teacher's logits the target is (1 - soft) * one-hot + soft *
    softmax(teacher): the loss and its gradient as the dense formula gives them."""
    monkeypatch.setattr(chunked_loss, "CHUNK_ELEMENTS", 7 * 50)
    g = torch.Generator().manual_seed(1)
    logits = 3 * torch.randn(31, 50, generator=g)
    teacher = 3 * torch.randn(31, 50, generator=g)
    target = torch.randint(0, 50, (31,), generator=g)
    target[::5] = PAD
    grads = []
    for loss_of in (lambda x: _soft_reference(x, target, teacher, soft),
                    lambda x: chunked_loss.summed_nll(x, target, PAD, teacher, soft)):
        leaf = logits.clone().requires_grad_()
        loss = loss_of(leaf)
        loss.backward()
        grads.append((loss.detach(), leaf.grad))
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(grads[1][1], grads[0][1])
    hard = chunked_loss.summed_nll(logits, target, PAD)
    assert not torch.allclose(grads[1][0], hard)  # the teacher changes the loss
