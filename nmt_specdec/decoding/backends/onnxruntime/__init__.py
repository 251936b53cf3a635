"""The ONNX Runtime CPU backend: ``export`` (graphs cached per checkpoint, rebuilt
when stale or corrupt), ``quantize`` (``--int8``) and ``session`` (the model calls).

Importing this package does not import ``onnxruntime``; building the backend does.
"""
