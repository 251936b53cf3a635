"""The generators' device: where a batch's inputs go and which attention kernels run.

- A batch comes from fairseq's collater on the CPU; ``fairseq-generate`` moves it to
  the GPU itself, a caller of ``generate`` (the hub, a test, a notebook) may not. The
  generators move it to the model's device.
- On CUDA, ``scaled_dot_product_attention`` with a mask, in half precision, goes to
  cuDNN first (torch 2.11 on an H100), and cuDNN builds an execution plan for every
  new shape. Decoding makes a new shape every iteration (the keys grow by one), so
  each step paid a plan: fp16 greedy ran 24x slower than fp32 at batch 32. The
  decoding passes leave cuDNN out; FlashAttention, the memory-efficient kernel and
  the math fallback need no plan.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# Every kernel but cuDNN's, in torch's own order of preference.
DECODING_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                      SDPBackend.MATH]


def model_device(model: nn.Module) -> torch.device:
    """Where ``model``'s weights are (read at every batch: a model may move between)."""
    return next(model.parameters()).device


def on_device(sample: dict, device: torch.device) -> dict:
    """``sample`` with its ``net_input`` tensors on ``device`` (itself if already there)."""
    net_input = sample["net_input"]
    if net_input["src_tokens"].device == device:
        return sample
    moved = {name: value.to(device) if torch.is_tensor(value) else value
             for name, value in net_input.items()}
    return {**sample, "net_input": moved}


def attention_kernels(device: torch.device) -> ContextManager:
    """The attention kernels decoding allows on ``device``: on CUDA all but cuDNN's
    (see the module's docstring); elsewhere torch's choice."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return sdpa_kernel(DECODING_ATTENTION)
