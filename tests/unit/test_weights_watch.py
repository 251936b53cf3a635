"""WeightsWatch: the backends' cheap check that their lean copies of the weights are stale."""

import torch
from torch import nn

from nmt_specdec.decoding.passes.weights_watch import WeightsWatch


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.Linear(3, 3)))


def test_unchanged_weights_are_not_stale():
    model = _model()
    watch = WeightsWatch(model)
    assert not watch.changed()
    model(torch.randn(2, 3))  # a forward pass updates nothing
    assert not watch.changed()


def test_every_kind_of_change_is_seen_once():
    model = _model()
    watch = WeightsWatch(model)
    with torch.no_grad():
        model[1][0].bias.add_(1)  # trained in place, deep inside
    assert watch.changed() and not watch.changed()
    model[0].weight = nn.Parameter(torch.zeros(3, 3))  # a parameter replaced
    assert watch.changed() and not watch.changed()
    model[1][0] = nn.Linear(3, 3)  # a submodule replaced
    assert watch.changed() and not watch.changed()
    model.append(nn.Linear(3, 3))  # a submodule added
    assert watch.changed() and not watch.changed()
    with torch.no_grad():
        model[2].weight.mul_(2)  # ... and it is watched from then on
    assert watch.changed()


def test_the_watch_does_not_keep_the_model_alive():
    import gc
    import weakref

    model = _model()
    watch = WeightsWatch(model)
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None and watch.module is None


def test_a_removed_submodule_is_seen_and_assignments_elsewhere_are_not_changes():
    model = _model()
    watch = WeightsWatch(model)
    other = _model()  # modules built and assigned elsewhere: not a change here
    other[0].weight = nn.Parameter(torch.zeros(3, 3))
    assert not watch.changed()
    del model[1][0]  # removed without anything assigned (no registration hook runs)
    assert watch.changed() and not watch.changed()
    with torch.no_grad():
        model[0].weight.data = torch.ones(3, 3)  # new storage, same Parameter object
    assert watch.changed() and not watch.changed()
