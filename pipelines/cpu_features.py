"""What the CPU is and offers: its vendor, and native bf16 matrix units.

- bf16 autocast on a CPU with bf16 dot-product/matrix instructions (x86 AVX512-BF16 or AMX,
  Arm's BF16 extension) roughly halves a training step; on a CPU without them PyTorch emulates
  bf16 and the step gets slower, so the trainer only chooses bf16 by default where the units exist.
- The vendor decides which library runs fp32 linear layers fastest (``dense/cpu_linear.py``):
  MKL picks its kernels by vendor, oneDNN by instruction set.

Linux reports both in /proc/cpuinfo; elsewhere we report none (no bf16, vendor unknown).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})  # x86 AVX512-BF16 / AMX; Arm BF16


def _fields(cpuinfo: str, keys: tuple[str, ...]) -> list[str]:
    """The values of the ``key: value`` lines of a /proc/cpuinfo text whose key is in ``keys``."""
    values = []
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            values.append(value.strip())
    return values


def bf16_flags(cpuinfo: str) -> set[str]:
    """The bf16 instruction-set flags listed in a /proc/cpuinfo text (x86 `flags`, Arm `Features`)."""
    found: set[str] = set()
    for value in _fields(cpuinfo, ("flags", "Features")):
        found.update(BF16_FLAGS.intersection(value.split()))
    return found


def vendor_id(cpuinfo: str) -> str | None:
    """The x86 vendor string of a /proc/cpuinfo text (``GenuineIntel``, ``AuthenticAMD``), or None."""
    vendors = _fields(cpuinfo, ("vendor_id",))
    return vendors[0] if vendors else None


def _cpuinfo() -> str:
    try:
        return CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


@cache
def cpu_has_bf16_units() -> bool:
    """True when this machine's CPU has native bf16 arithmetic (read once per process)."""
    return bool(bf16_flags(_cpuinfo()))


@cache
def cpu_vendor() -> str | None:
    """This machine's x86 CPU vendor (read once per process); None on other CPUs or systems."""
    return vendor_id(_cpuinfo())
