"""What the timings were measured on: CPU, GPU, threads, library versions, memory."""

from __future__ import annotations

import os
import platform
import resource
import sys
from typing import Optional

import torch

from nmt_specdec.cpu_flags import cpu_flags


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name from /proc/cpuinfo (``platform.processor()`` elsewhere),
    with its x86 family and model numbers: a virtual machine may show only "AMD
    EPYC", whatever its generation (family 25: Zen 3 and 4; 26: Zen 5)."""
    fields = {}
    try:
        with open(cpuinfo, encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if not line.strip():  # the first processor's block is enough
                    break
                fields.setdefault(key, value.strip())
    except OSError:
        pass
    name = next((fields[key] for key in ("model name", "hardware", "cpu model") if key in fields),
                None) or platform.processor() or "unknown"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


# /proc/cpuinfo flag -> the name results tables give the instruction set: ratios
# between runtimes move with these (int8 kernels with VNNI/AMX, bf16 with AVX512-BF16).
ISA_FLAGS = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_vnni", "VNNI"),
             ("avx_vnni", "AVX-VNNI"), ("avx512_bf16", "AVX512-BF16"), ("amx_tile", "AMX"))


def cpu_isa(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The vector instruction sets of this CPU that matter for decoding, e.g.
    ``AVX2 AVX-512 VNNI AVX512-BF16`` ("unknown" without /proc/cpuinfo)."""
    flags = cpu_flags(cpuinfo)
    if flags is None:
        return "unknown"
    return " ".join(name for flag, name in ISA_FLAGS if flag in flags) or "no AVX2"


def native_bf16() -> bool:
    """Whether this machine multiplies bfloat16 natively: a CUDA GPU with bf16, or
    a CPU with AVX512-BF16 or AMX (elsewhere bf16 is emulated, slower than fp32)."""
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    isa = cpu_isa().split()
    return "AVX512-BF16" in isa or "AMX" in isa


def runtime_versions() -> dict:
    """Versions of the runtimes whose rows a table may hold (None: not installed)."""
    versions = {}
    for name in ("onnxruntime", "ctranslate2"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    return versions


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
        "cpu_isa": cpu_isa(),
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
        **runtime_versions(),
    }
