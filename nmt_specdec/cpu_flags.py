"""The CPU's instruction-set flags, as Linux lists them in /proc/cpuinfo.

Two layers read them: the 8-bit export (whether the runtime's integer products
can take 8-bit weights, :func:`has_vnni`) and the machine facts a results table
names (``nmt_specdec.evaluation.machine``)."""

from __future__ import annotations

from typing import FrozenSet, Optional

# VNNI adds the u8 x s8 products of four pairs in 32 bits; without it ONNX
# Runtime's x86 kernel adds two pairs in 16 bits first (vpmaddubsw), which
# saturates for 8-bit weights.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni")


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> Optional[FrozenSet[str]]:
    """The first processor's flags (None where there is no /proc/cpuinfo, or no
    x86 ``flags`` line in it)."""
    try:
        with open(cpuinfo, encoding="utf-8") as handle:
            line = next((line for line in handle if line.startswith("flags")), None)
    except OSError:
        return None
    return None if line is None else frozenset(line.split(":", 1)[1].split())


def has_vnni(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU has VNNI (AVX512-VNNI or AVX-VNNI); False where unknown."""
    flags = cpu_flags(cpuinfo)
    return flags is not None and any(flag in flags for flag in VNNI_FLAGS)
