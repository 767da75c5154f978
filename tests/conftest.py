"""Session fixtures for the model I/O, analysis, slicing and runtime tests: small pnnx exports of the
zoo models (fp16 and fp32 weight storage) and the small corpus structures with seeded random weights."""

from __future__ import annotations

import os
import shutil
from typing import Callable

import pytest

from model_helpers import BENCHMARK_DIR, ModelFiles, write_model, zoo_specs


@pytest.fixture(scope="session", autouse=True)
def measurement_cache(tmp_path_factory):
    """The suite's measurements (flexnn_ncnn/measured.py) start empty and are shared by its processes,
    not the user's cache: set here, every subprocess inherits it."""
    from flexnn_ncnn.measured import CACHE_ENV
    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("measured"))
    yield
    if before is None:
        os.environ.pop(CACHE_ENV)
    else:
        os.environ[CACHE_ENV] = before


@pytest.fixture(scope="session", autouse=True)
def benchmark_dir_untouched():
    """NCNN's benchmark structures are an input the suite reads in place (model_helpers.param_file): no
    test writes beside them (prepare's default MODEL.transformed beside MODEL.param did)."""
    def listing() -> dict[str, int]:
        return {p.name: p.stat().st_mtime_ns for p in BENCHMARK_DIR.iterdir()} if BENCHMARK_DIR.is_dir() else {}
    before = listing()
    yield
    assert listing() == before, f"tests wrote into {BENCHMARK_DIR}: {sorted(set(listing()) ^ set(before))}"


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
def corpus_files(tmp_path_factory) -> Callable[..., ModelFiles]:
    """`corpus_files(name, storage="fp32")`: a small corpus structure (model_helpers.corpus()) with seeded
    random weights (seed 7), written on first use and kept for the session."""
    out = tmp_path_factory.mktemp("corpus")
    written: dict[tuple[str, str], ModelFiles] = {}

    def files(name: str, storage: str = "fp32") -> ModelFiles:
        if (name, storage) not in written:
            folder = out / storage
            folder.mkdir(exist_ok=True)
            written[name, storage] = write_model(name, folder, 7, storage)
        return written[name, storage]
    return files


@pytest.fixture
def scratch(tmp_path):
    """A `tmp_path` removed after the test, for files of hundreds of MB (pytest keeps old tmp dirs)."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)
