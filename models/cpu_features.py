"""What the CPU offers training: native bf16 matrix units.

bf16 autocast on a CPU with bf16 dot-product/matrix instructions (x86 AVX512-BF16 or AMX,
Arm's BF16 extension) roughly halves a training step; on a CPU without them PyTorch emulates
bf16 and the step gets slower, so the trainer only chooses bf16 by default where the units exist.
Linux reports the instruction sets in /proc/cpuinfo; elsewhere we report none (full precision).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})  # x86 AVX512-BF16 / AMX; Arm BF16


def bf16_flags(cpuinfo: str) -> set[str]:
    """The bf16 instruction-set flags listed in a /proc/cpuinfo text (x86 `flags`, Arm `Features`)."""
    found: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            found.update(BF16_FLAGS.intersection(value.split()))
    return found


@cache
def cpu_has_bf16_units() -> bool:
    """True when this machine's CPU has native bf16 arithmetic (read once per process)."""
    try:
        return bool(bf16_flags(CPUINFO.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False
