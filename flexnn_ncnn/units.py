"""Byte sizes as users write them: `100MB` is 10^6-based, `100MiB` is 2^20-based, a bare number is bytes."""

from __future__ import annotations

import re

from .cli import UserError

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9,
    "kib": 2**10, "mib": 2**20, "gib": 2**30,
    "k": 10**3, "m": 10**6, "g": 10**9,
}

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Parse `100MB`, `1.5GiB`, `4096` into a whole number of bytes (> 0)."""
    m = _SIZE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise UserError(f"cannot read size {text!r}: write bytes, or a number with kB/MB/GB (10^3) or KiB/MiB/GiB (2^10)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise UserError(f"size {text!r} must be more than 0 bytes")
    return value


def format_size(n: int) -> str:
    """`123456789` -> `123,456,789 B (117.7 MiB)`: the exact number and a readable one."""
    return f"{n:,} B ({n / 2**20:.1f} MiB)"
