"""The torch backend: eager PyTorch on the model's own weights (any device; the GPU path).

- ``adapter``: :class:`TorchBackend`, the :class:`~nmt_specdec.decoding.backends.base.Backend`
  over the lean passes below, and the draft head's drafter;
- ``layers``: a fairseq decoder layer's weights, fused, and one batch-first pass
  over new positions (``scaled_dot_product_attention``);
- ``verifier_pass`` / ``draft_pass``: the verifier and the draft head as lean
  passes that return hidden states (the ONNX Runtime backend exports these);
- ``replay_pass``: the verifier on fairseq's incremental state, for the
  fixed-shape replay of ``--deterministic`` (not part of the interface).
"""

from nmt_specdec.decoding.backends.torch.adapter import TorchBackend, TorchVerifier

__all__ = ["TorchBackend", "TorchVerifier"]
