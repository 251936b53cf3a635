"""Where ``benchmarks/head_start.py`` starts a new draft head: its ``copy`` start
holds the verifier's top decoder layer in every head layer and passes the
verifier's state through unchanged; the verifier itself is left as it was."""

import torch

from benchmarks.head_start import copy_verifier_top, new_head
from tests.helpers.shipped_model import load_model


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def test_copy_start_holds_the_verifiers_top_layer():
    model, _ = load_model()
    verifier = model.decoder
    before = {key: value.clone() for key, value in verifier.state_dict().items()}
    torch.manual_seed(0)
    random = new_head(model.draft_head)
    assert not _same(random.layers[-1].state_dict(), verifier.layers[-1].state_dict())
    head = copy_verifier_top(new_head(model.draft_head))
    tops = verifier.layers[-len(head.layers):]
    assert all(_same(layer.state_dict(), top.state_dict()) for layer, top in zip(head.layers, tops))
    if head.layer_norm is not None and verifier.layer_norm is not None:
        assert _same(head.layer_norm.state_dict(), verifier.layer_norm.state_dict())
    state = torch.randn(3, head.state_proj.in_features)
    assert torch.equal(head.state_proj(state), state)
    assert _same(verifier.state_dict(), before)
