"""What the timings were measured on: CPU, GPU, threads, library versions, memory."""

from __future__ import annotations

import os
import platform
import resource
import sys
from typing import Optional

import torch


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def gpu_name(device: torch.device) -> Optional[str]:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def machine_info(device: torch.device) -> dict:
    """Everything needed to tell two result files' machines apart."""
    import fairseq
    import sacrebleu

    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "device": str(device),
        "gpu": gpu_name(device),
        "cuda_version": torch.version.cuda if device.type == "cuda" else None,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "fairseq": getattr(fairseq, "__version__", "unknown"),
        "sacrebleu": sacrebleu.__version__,
    }
