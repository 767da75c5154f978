"""Session fixtures for the model I/O, analysis and slicing tests: small pnnx exports of the zoo
models (fp16 and fp32 weight storage) and the NCNN benchmark structures with seeded random weights."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from model_helpers import BENCHMARK_DIR, BENCHMARK_INPUTS, ModelFiles, zoo_specs


@pytest.fixture(scope="session")
def zoo_exports(tmp_path_factory) -> dict[str, ModelFiles]:
    """`{arch}_fp16` / `{arch}_fp32`: pnnx exports of the small zoo models, seeded."""
    import torch
    from flexnn_ncnn.zoo import export_ncnn
    out = tmp_path_factory.mktemp("zoo")
    models = {}
    for arch, (make, shape) in zoo_specs().items():
        torch.manual_seed(0)
        model = make()
        for fp16 in (True, False):
            name = f"{arch}_fp{16 if fp16 else 32}"
            param, bin_ = export_ncnn(model, shape, out, name, fp16=fp16)
            models[name] = ModelFiles(name, param, bin_, shape)
    return models


@pytest.fixture(scope="session")
def bench_bins(tmp_path_factory) -> dict[str, Path]:
    """A seeded random fp32 `.bin` for each small benchmark structure (alexnet, vgg16 and the ViT are
    hundreds of MB: their round trip is tested separately without keeping the file)."""
    from flexnn_ncnn.ncnn_model import read_param
    from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
    out = tmp_path_factory.mktemp("bench")
    bins = {}
    for name in BENCHMARK_INPUTS:
        if name in ("alexnet", "vgg16", "vision_transformer"):
            continue
        path = out / f"{name}.bin"
        with open(path, "wb") as f:
            random_modelbin(read_param(BENCHMARK_DIR / f"{name}.param"), seed=7).write(f)
        bins[name] = path
    return bins


@pytest.fixture
def scratch(tmp_path):
    """A `tmp_path` removed after the test, for files of hundreds of MB (pytest keeps old tmp dirs)."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)
