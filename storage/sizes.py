"""Byte counts as people read them, for every message and progress record that names a size."""

from __future__ import annotations

_UNITS = ("KiB", "MiB", "GiB", "TiB")


def format_bytes(value: float) -> str:
    """Bytes in binary units (``1.5 GiB``): a download's 4,694,541,059 is 4.4 GiB; under 1 KiB, ``512 B``."""
    amount, unit = float(value), 0
    while abs(amount) >= 1024 and unit < len(_UNITS):
        amount, unit = amount / 1024, unit + 1
    return f"{int(amount):,} B" if unit == 0 else f"{amount:,.1f} {_UNITS[unit - 1]}"
