"""The torch backend: today's lean passes (:mod:`..verifier_pass`, :mod:`..draft_pass`)."""

from nmt_specdec.decoding.backends.torch.adapter import TorchBackend, TorchVerifier

__all__ = ["TorchBackend", "TorchVerifier"]
