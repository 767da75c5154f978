"""What a kernel costs when its layer's weights are streamed on every inference.

Under a budget that cannot hold the model's weights the planner pins what fits, and the loading
thread copies every other layer's transformed weights from MODEL.flexnn.transformed into the arena
on every inference, on the cores the computing threads use. Winograd F(m,3)'s transformed weights
are (m+2)²/9 times the raw 3x3 weights, im2col+GEMM's the raw size, so the kernel that computes
fastest can cost more once streamed. A kernel's estimate is

    MACs / (rate(kernel) × threads)  +  share × streamed bytes / bandwidth

`share` is the part of the model's weights that would stream if every layer kept its fastest
kernel: pinned weights occupy every step, so at most `budget − min_budget` bytes are pinned
(min_budget: the largest step with every layer at its smallest working set), against the sum of
every layer's streamed bytes under its fastest kernel. It is 0 when the budget holds them all, and
the choice is then the compute-first one. (Measured against the smallest streamed bytes instead, a
budget between the two, e.g. 300 MB for ResNet-152, counted nothing as streamed, kept Winograd
everywhere and then streamed half of its 7.1x weights.) The planner pins whole layers by its measured
load time per byte, which the slicer cannot know ahead: the share spreads the streamed bytes evenly
over the layers.

The defaults are what `python -m flexnn_ncnn.slice resnet152.param --input-shape 1,3,224,224
--threads 2 --calibrate` (slicing/calibrate.py) measured on the development machine (2-core x86_64
Xeon, AVX2), rounded; three runs gave 6.50-6.87 GB/s pread from the page cache into a 64 MiB buffer,
21.6-25.4 GMAC/s per thread for NCNN's Winograd and 48.4-53.2 for im2col+GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..analysis import ConvModel, LayerAnalysis

DEFAULT_BANDWIDTH = 6.5e9  # bytes/s
DEFAULT_WINOGRAD_RATE = 25e9  # MAC/s per computing thread, MACs counted as ConvModel.macs does
DEFAULT_GEMM_RATE = 50e9


@dataclass(frozen=True)
class StreamModel:
    """Loader bandwidth and per-kernel compute rates, for `threads` computing threads."""

    bandwidth: float = DEFAULT_BANDWIDTH  # bytes/s the loading thread copies from the page cache into the arena
    winograd_rate: float = DEFAULT_WINOGRAD_RATE  # MAC/s per computing thread (F(6,3) and F(4,3) alike)
    gemm_rate: float = DEFAULT_GEMM_RATE  # MAC/s per computing thread, im2col+GEMM
    threads: int = 1

    def compute_us(self, model: ConvModel, kernel: str) -> float:
        if kernel.startswith("winograd"):
            rate = self.winograd_rate
        elif kernel == "im2col_gemm":
            rate = self.gemm_rate
        else:
            raise ValueError(f"no compute rate for {kernel}")
        return model.macs(kernel) / (rate * self.threads) * 1e6

    def load_us(self, model: ConvModel, kernel: str, share: float) -> float:
        return share * model.streamed_bytes(kernel) / self.bandwidth * 1e6

    def to_json(self) -> dict:
        return {"bandwidth": self.bandwidth, "winograd_rate": self.winograd_rate, "gemm_rate": self.gemm_rate,
                "threads": self.threads}


def streamed_share(analyses: Sequence[LayerAnalysis], pinnable: int) -> float:
    """The part of the weights streamed on every inference with each layer on its fastest kernel, when at
    most `pinnable` bytes are pinned."""
    fastest = sum(a.model.streamed_bytes(a.model.kernels[0]) for a in analyses)
    if fastest <= 0:
        return 0.0
    return max(0.0, 1.0 - max(pinnable, 0) / fastest)
