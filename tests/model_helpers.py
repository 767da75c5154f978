"""Models and comparisons shared by the model I/O, analysis and slicing tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

# the shared material sits beside the repository (DESIGN.md §5)
BENCHMARK_DIR = Path(__file__).resolve().parents[2] / "shared" / "models" / "ncnn-benchmark"
needs_benchmarks = pytest.mark.skipif(not BENCHMARK_DIR.is_dir(), reason=f"no {BENCHMARK_DIR}")

# input shapes as benchncnn feeds them (models/ncnn-benchmark/README.md), torch NCHW
BENCHMARK_INPUTS = {
    "alexnet": (1, 3, 227, 227), "blazeface": (1, 3, 128, 128), "efficientnet_b0": (1, 3, 224, 224),
    "googlenet": (1, 3, 224, 224), "mnasnet": (1, 3, 224, 224), "mobilenet": (1, 3, 224, 224),
    "mobilenet_ssd": (1, 3, 300, 300), "mobilenet_v2": (1, 3, 224, 224), "proxylessnasnet": (1, 3, 224, 224),
    "resnet18": (1, 3, 224, 224), "resnet50": (1, 3, 224, 224), "shufflenet": (1, 3, 224, 224),
    "shufflenet_v2": (1, 3, 224, 224), "squeezenet": (1, 3, 227, 227), "squeezenet_ssd": (1, 3, 300, 300),
    "vgg16": (1, 3, 224, 224), "vision_transformer": (1, 3, 384, 384), "yolo-fastestv2": (1, 3, 352, 352),
}


@dataclass(frozen=True)
class ModelFiles:
    name: str
    param: Path
    bin: Path
    input_shape: tuple[int, ...]


def zoo_specs() -> dict[str, tuple]:
    """Small instances of the zoo architectures: name -> (constructor, torch input shape)."""
    from flexnn_ncnn.zoo import MLP, resnet, vgg19, vit
    return {
        # small instances of the same architectures; widths keep every slice width a SIMD multiple
        "vgg19": (lambda: vgg19(width=1 / 8, fc_dim=256, pool_size=2, num_classes=10), (1, 3, 32, 32)),
        "resnet50": (lambda: resnet(50, width=8, num_classes=10), (1, 3, 32, 32)),
        "mlp": (lambda: MLP(64, (256, 256), 10), (1, 64)),
        "vit": (lambda: vit(image_size=32, patch=8, dim=64, depth=2, heads=4, mlp_dim=512, num_classes=10), (1, 3, 32, 32)),
    }


def random_input(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """A batch-less NCNN input (c,h,w or w) of the torch shape `shape`."""
    return np.random.default_rng(seed).standard_normal(shape[1:]).astype(np.float32)


def relative_error(ref: np.ndarray, got: np.ndarray) -> float:
    """max |got - ref| / max |ref|: the tolerance measure DESIGN.md §5 uses."""
    assert ref.shape == got.shape
    scale = float(np.abs(ref).max())
    return float(np.abs(got - ref).max()) / scale if scale else float(np.abs(got).max())
