"""The torch backend: eager PyTorch on the model's own weights (any device; the GPU path).

- ``adapter``: :class:`TorchBackend`, the :class:`~nmt_specdec.decoding.backends.base.Backend`
  that runs the lean passes of :mod:`nmt_specdec.decoding.passes` eagerly, and
  the draft head's drafter.
"""

from nmt_specdec.decoding.backends.torch.adapter import TorchBackend, TorchVerifier

__all__ = ["OPTIONS", "TorchBackend", "TorchVerifier", "create"]

OPTIONS = frozenset()  # neither --int8 nor --fused-draft


def create(model, tgt_dict, **options) -> TorchBackend:
    """The backend for ``model`` (``make_backend`` checked ``options``: none apply)."""
    return TorchBackend(model)
