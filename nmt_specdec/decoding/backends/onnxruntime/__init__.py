"""The ONNX Runtime CPU backend: ``export`` (graphs traced from
:mod:`nmt_specdec.decoding.passes`, cached per checkpoint, rebuilt when stale or
corrupt), ``graphs`` and ``fused`` (the traced modules), ``projection`` (the
certified 8-bit output projection), ``quantize`` (``--int8``), ``session`` (the
model calls), ``drafters`` (the draft graph as a drafter) and ``verifier_drafter``
(``--spec-drafter verifier-int8``: the verifier's 8-bit copy as a drafter).

Importing this package does not import ``onnxruntime``; building the backend does.
"""
