"""What the slicer needs to know about the target CPU: its fp32 SIMD width in the sense NCNN packs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..cli import UserError

TARGETS = ("host", "linux-aarch64", "android-arm64")


@dataclass(frozen=True)
class Target:
    name: str
    simd_width: int  # slice widths are multiples of this: 8 on NEON/AVX2, 16 on AVX-512

    @property
    def min_tile_pixels(self) -> int:
        """Smallest im2col tile (output pixels) that keeps the GEMM micro-kernel's four SIMD columns full."""
        return 4 * self.simd_width


def _host_simd_width(cpuinfo: Path = Path("/proc/cpuinfo")) -> int:
    try:
        flags = cpuinfo.read_text()
    except OSError:
        return 8
    return 16 if " avx512f" in flags else 8


def target_for(name: str) -> Target:
    if name == "host":
        return Target(name, _host_simd_width())
    if name in ("linux-aarch64", "android-arm64"):
        return Target(name, 8)
    raise UserError(f"unknown target {name!r}: one of {', '.join(TARGETS)}")
