"""The torch backend: eager PyTorch on the model's own weights (any device; the GPU path).

- ``adapter``: :class:`TorchBackend`, the :class:`~nmt_specdec.decoding.backends.base.Backend`
  that runs the lean passes of :mod:`nmt_specdec.decoding.passes` eagerly, and
  the draft head's drafter.

Importing this package imports neither the passes nor fairseq (option checks
read :data:`OPTIONS` while a command line is parsed); :func:`create` does.
"""

OPTIONS = frozenset()  # neither --int8 nor --fused-draft
DRAFTERS = ("head",)  # the --spec-drafter kinds its backend makes
CPU_ONLY = False  # any device torch has
HALF = True  # float16 and bfloat16 models


def create(model, tgt_dict, refine_steps=None, **options):
    """The backend for ``model`` (``make_backend`` checked ``options``: none apply;
    ``refine_steps``: the draft head's refinement runs, None for its own)."""
    from nmt_specdec.decoding.backends.torch.adapter import TorchBackend

    return TorchBackend(model, refine_steps)
