"""Synthetic planner profiles shaped like NCNN's ResNet-152 and (sliced) VGG-19 at 224x224, fp32.

Stand-ins until the runtime's prepare step records real profiles: layers follow NCNN's fused
param style (conv with bias and ReLU, Split sharing its input, Eltwise, Pooling, InnerProduct);
each conv allocates a padded input and an im2col/GEMM tile as intermediates; load times assume
1 GB/s storage and compute times 20 GFLOP/s. VGG-19's FC layers are weights-sliced into sub-layers
of at most `FC_SLICE_BYTES` and its im2col tiles capped at `IM2COL_TILE_BYTES`, as the slicer would.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from .. import planning

FLOAT = 4
LOAD_BYTES_PER_US = 1000.0  # 1 GB/s
FLOPS_PER_US = 20_000.0  # 20 GFLOP/s
FC_SLICE_BYTES = 16 * 10**6
IM2COL_TILE_BYTES = 8 * 10**6


class _Builder:
    """Appends layers in execution order; an activation's last use grows as consumers are added."""

    def __init__(self) -> None:
        self.tensors: list[dict] = []
        self.layers: list[planning.LayerCost] = []

    def layer(self, inputs: Sequence[int], outputs: Sequence[int], weights: Sequence[int] = (), scratch: Sequence[int] = (),
              flops: float = 0.0) -> list[int]:
        """Adds a layer reading activations `inputs`; returns the ids of its new output activations."""
        index = len(self.layers)
        for a in inputs:
            self.tensors[a]["last_use"] = index
        ids = []
        for role, sizes in (("weight", weights), ("activation", outputs), ("intermediate", scratch)):
            for ordinal, size in enumerate(sizes):
                if role == "activation":
                    ids.append(len(self.tensors))
                self.tensors.append({"layer": index, "role": role, "ordinal": ordinal, "size": int(size),
                                     "first_use": index, "last_use": index})
        self.layers.append(planning.LayerCost(sum(weights) / LOAD_BYTES_PER_US, flops / FLOPS_PER_US))
        return ids

    def conv(self, x: int, shape: tuple[int, int, int], out_c: int, k: int, stride: int = 1) -> tuple[int, tuple[int, int, int]]:
        c, h, w = shape
        oh, ow = (h + stride - 1) // stride, (w + stride - 1) // stride
        weights = [out_c * c * k * k * FLOAT, out_c * FLOAT]
        scratch = [c * (h + k - 1) * (w + k - 1) * FLOAT] if k > 1 else []
        scratch.append(min(c * k * k * oh * ow * FLOAT, IM2COL_TILE_BYTES) if k > 1 or stride > 1 else c * min(oh * ow, 64) * FLOAT)
        (y,) = self.layer([x], [out_c * oh * ow * FLOAT], weights, scratch, 2.0 * out_c * c * k * k * oh * ow)
        return y, (out_c, oh, ow)

    def inner_product(self, x: int, inputs: int, outputs: int) -> int:
        """Weights-sliced: sub-layers of at most FC_SLICE_BYTES, then a Concat."""
        rows = max(1, FC_SLICE_BYTES // (inputs * FLOAT))
        parts = []
        for start in range(0, outputs, rows):
            n = min(rows, outputs - start)
            parts += self.layer([x], [n * FLOAT], [n * inputs * FLOAT, n * FLOAT], [], 2.0 * n * inputs)
        if len(parts) == 1:
            return parts[0]
        return self.layer(parts, [outputs * FLOAT])[0]

    def profile(self) -> planning.Profile:
        return planning.Profile(tuple(planning.TensorUse(**t) for t in self.tensors), tuple(self.layers))


def resnet152() -> planning.Profile:
    b = _Builder()
    (x,) = b.layer([], [3 * 224 * 224 * FLOAT])
    x, shape = b.conv(x, (3, 224, 224), 64, 7, 2)
    (x,) = b.layer([x], [64 * 56 * 56 * FLOAT], flops=64 * 56 * 56 * 9)
    shape = (64, 56, 56)
    for stage, (blocks, width) in enumerate(zip((3, 8, 36, 3), (64, 128, 256, 512))):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 0 else 1
            # Split shares its input: the branches read x itself
            y, s = b.conv(x, shape, width, 1, stride)
            y, s = b.conv(y, s, width, 3)
            y, s = b.conv(y, s, width * 4, 1)
            shortcut = b.conv(x, shape, width * 4, 1, stride)[0] if block == 0 else x
            (x,) = b.layer([shortcut, y], [width * 4 * s[1] * s[2] * FLOAT], flops=s[0] * s[1] * s[2])
            shape = s
    (x,) = b.layer([x], [2048 * FLOAT], flops=2048 * 49)
    x = b.inner_product(x, 2048, 1000)
    b.layer([x], [1000 * FLOAT], flops=3000)
    return b.profile()


def vgg19() -> planning.Profile:
    b = _Builder()
    (x,) = b.layer([], [3 * 224 * 224 * FLOAT])
    shape = (3, 224, 224)
    for repeat, width in zip((2, 2, 4, 4, 4), (64, 128, 256, 512, 512)):
        for _ in range(repeat):
            x, shape = b.conv(x, shape, width, 3)
        c, h, w = shape
        shape = (c, h // 2, w // 2)
        (x,) = b.layer([x], [c * shape[1] * shape[2] * FLOAT], flops=c * h * w)
    x = b.inner_product(x, 512 * 7 * 7, 4096)
    x = b.inner_product(x, 4096, 4096)
    x = b.inner_product(x, 4096, 1000)
    b.layer([x], [1000 * FLOAT], flops=3000)
    return b.profile()


def scaled(profile: planning.Profile, copies: int) -> planning.Profile:
    """`copies` runs of `profile` back to back, as one longer profile (a size stress for the planner)."""
    tensors, layers = [], []
    for k in range(copies):
        shift = k * len(profile.layers)
        tensors += [replace(t, layer=t.layer + shift, first_use=t.first_use + shift, last_use=t.last_use + shift) for t in profile.tensors]
        layers += profile.layers
    return planning.Profile(tuple(tensors), tuple(layers))


PROFILES = {"resnet152": resnet152, "vgg19": vgg19}
