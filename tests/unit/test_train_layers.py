"""The draft head's training layers with each sentence's source projected once
(``nmt_specdec.model.train_layers``) train what fairseq's layers train.

A random toy model with a refinement layer, pre-norm and post-norm, blocks cut
from sentences of different lengths (padded sources), several blocks a
sentence: the first-pass and refined logits, and every head parameter's
gradient, equal those of the fairseq layers run on each block's own copy of
the source; a layer option the module does not implement falls back to them.
"""

import pytest
import torch

from nmt_specdec.model import train_layers
from tests.helpers.specdec_toy import random_specdec_model, source_batch

K = 4


def _head_and_blocks(tmp_path, extra_args):
    task, model = random_specdec_model(tmp_path, extra_args=["--draft-refine-layers", "1",
                                                             *extra_args])
    sample = source_batch(task.source_dictionary, [3, 7, 5], seed=4)
    with torch.no_grad():
        encoder_out = model.encoder(**sample["net_input"])
    rows = torch.tensor([0, 0, 1, 1, 1, 2, 0])
    g = torch.Generator().manual_seed(5)
    dim = model.decoder.embed_dim
    blocks = (torch.randn(len(rows), dim, generator=g),
              torch.randint(4, 20, (len(rows),), generator=g),
              torch.randint(0, 6, (len(rows),), generator=g))
    slot_tokens = torch.randint(4, 20, (len(rows), K), generator=g)
    return model.draft_head, encoder_out, rows, blocks, slot_tokens


def _logits_and_grads(head, encoder_out, rows, blocks, slot_tokens):
    head.zero_grad()
    first, refined = head.forward_refined(*blocks, encoder_out, K, rows=rows,
                                          slot_tokens=slot_tokens)
    weights = torch.linspace(-1, 1, first.numel()).view_as(first)
    (first * weights + refined * weights.flip(-1)).sum().backward()
    grads = {name: p.grad.clone() for name, p in head.named_parameters() if p.grad is not None}
    return first.detach(), refined.detach(), grads


@pytest.mark.parametrize("norm", [[], ["--decoder-normalize-before"]], ids=["post", "pre"])
def test_train_layers_trains_what_the_fairseq_layers_train(tmp_path, monkeypatch, norm):
    head, encoder_out, rows, blocks, slot_tokens = _head_and_blocks(tmp_path, norm)
    assert all(map(train_layers.supports, head.all_layers()))
    ours = _logits_and_grads(head, encoder_out, rows, blocks, slot_tokens)
    monkeypatch.setattr(train_layers, "supports", lambda layer: False)
    theirs = _logits_and_grads(head, encoder_out, rows, blocks, slot_tokens)
    torch.testing.assert_close(ours[0], theirs[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours[1], theirs[1], atol=1e-5, rtol=1e-5)
    assert ours[2].keys() == theirs[2].keys()
    assert any("encoder_attn.k_proj" in name for name in ours[2])
    for name, grad in ours[2].items():
        torch.testing.assert_close(grad, theirs[2][name], atol=1e-5, rtol=1e-4, msg=name)


def test_a_layer_option_it_does_not_implement_falls_back(tmp_path, monkeypatch):
    head, encoder_out, rows, blocks, slot_tokens = _head_and_blocks(tmp_path, [])
    layer = head.layers[0]  # --scale-resids: fairseq scales the residual, decoder_layer cannot
    layer.w_resid = torch.nn.Parameter(torch.full((layer.embed_dim,), 0.5), requires_grad=False)
    assert not train_layers.supports(layer)
    with torch.no_grad():
        taken = head.forward_refined(*blocks, encoder_out, K, rows=rows, slot_tokens=slot_tokens)
        monkeypatch.setattr(train_layers, "supports", lambda layer: True)
        forced = head.forward_refined(*blocks, encoder_out, K, rows=rows, slot_tokens=slot_tokens)
        monkeypatch.setattr(train_layers, "supports", lambda layer: False)
        fairseq = head.forward_refined(*blocks, encoder_out, K, rows=rows, slot_tokens=slot_tokens)
    torch.testing.assert_close(taken, fairseq)
    assert not torch.allclose(forced[0], fairseq[0], atol=1e-3)


def test_dropout_from_random_bits_drops_at_the_rate_and_keeps_the_scale():
    torch.manual_seed(0)
    x = torch.full((64, 1000), 2.0, requires_grad=True)
    y = train_layers.dropout(x, 0.1)
    dropped = y.eq(0)
    assert abs(dropped.float().mean().item() - 0.1) < 0.005
    torch.testing.assert_close(y[~dropped], torch.full_like(y[~dropped], 2.0 / 0.9))
    y.sum().backward()
    torch.testing.assert_close(x.grad, (~dropped).float() / 0.9)
    assert not torch.equal(train_layers.dropout(x, 0.1), y)  # fresh draws
    assert train_layers.dropout(x, 0.1, training=False) is x
    assert train_layers.dropout(x, 0.0) is x
