"""sha256 of a file, read in blocks (checkpoints, exported graphs, corpora), and of
named tensors (a model's weights: the ONNX cache key, a draft head's verifier)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, Tuple

import torch
from torch import Tensor


def file_sha256(path: Path) -> str:
    """Hex sha256 of the file at ``path`` (read 1 MiB at a time)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tensors_sha256(named: Iterable[Tuple[str, Tensor]]) -> str:
    """Hex sha256 over ``(name, tensor)`` pairs in the order given: each name,
    dtype and shape, then the tensor's bytes."""
    digest = hashlib.sha256()
    for name, tensor in named:
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy() if tensor.numel() else b"")
    return digest.hexdigest()
