"""Sliced models on inputs prepare never saw: every corpus structure (the project's, and NCNN's
benchmark folder's when present) and every zoo export is sliced by `python -m flexnn_ncnn.slice` for
a generous budget and for its smallest feasible one (the budget the slicer names when asked for
too little), then run by the runtime on 20 seeded inputs other than prepare's. Every output equals
stock NCNN's on the original model (default options; a detection head's rows as a set), and the
runtime's count holds the budget after each input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import Session
from flexnn_ncnn import slice as slice_cli
from flexnn_ncnn.ncnn_model import Graph, read_param
from flexnn_ncnn.ncnn_model.stock import run_stock
from helpers import assert_counted_within_budget, assert_same_detections
from flexnn_ncnn.models import BENCH_PREFIX, STRUCT_PREFIX
from model_helpers import DETECTION_TYPES, corpus, write_model
from test_runtime import ZOO, assert_close

INPUT_SEEDS = range(1, 21)  # prepare feeds seed 0
GENEROUS = 1 << 34


def sliced_session(param: Path, bin_: Path, shape: tuple[int, ...], budget: int | str, out: Path, *options: str) -> Session:
    """`python -m flexnn_ncnn.slice` (in this process) for `budget` (bytes, or "min": the smallest a slicing
    fits, found by bisection), then a Session on its sidecar, at the budget it was sliced for."""
    slice_cli.main([str(param), "--bin", str(bin_), "--budget", str(budget), "--input-shape", ",".join(map(str, shape)),
                    "-o", str(out), *options])
    return Session(out / f"{param.name.removesuffix('.param')}.flexnn.plan.json")


def assert_unseen_inputs_equal_stock(param: Path, bin_: Path, shape: tuple[int, ...], tmp_path: Path) -> None:
    graph = Graph.build(read_param(param))
    detections = {layer.tops[0] for layer in graph.order if layer.type in DETECTION_TYPES}
    rows = dict.fromkeys(detections, 0)  # a head that found nothing in every input would compare nothing
    for label, budget in (("generous", GENEROUS), ("smallest", "min")):
        session = sliced_session(param, bin_, shape, budget, tmp_path / label)
        budget = session.budget
        for seed in INPUT_SEEDS:
            x = np.random.default_rng(seed).standard_normal(shape[1:]).astype(np.float32) * (1 + seed % 3)
            feeds = {graph.inputs[0]: x}
            refs = run_stock(param, bin_, feeds, graph.outputs, fp32=False)
            outputs = session.run(feeds)
            for blob, ref in refs.items():
                if blob in detections:
                    assert_same_detections(outputs[blob], ref)
                    rows[blob] += len(ref)
                else:
                    assert_close(outputs[blob], ref)
            assert_counted_within_budget(session.stats())
    assert all(rows[blob] for blob in detections), rows


@pytest.mark.parametrize("name", corpus())
def test_sliced_structures_equal_stock_on_unseen_inputs(name: str, corpus_files, tmp_path: Path) -> None:
    files = corpus_files(name)
    assert_unseen_inputs_equal_stock(files.param, files.bin, files.input_shape, tmp_path)


@pytest.mark.parametrize("name", ZOO)
def test_sliced_zoo_models_equal_stock_on_unseen_inputs(name: str, zoo_exports, tmp_path: Path) -> None:
    model = zoo_exports[name]
    assert_unseen_inputs_equal_stock(model.param, model.bin, model.input_shape, tmp_path)


# the project's AlexNet and VGG-16 are NCNN's benchmark ones, layer for layer: one of each runs
LARGE = [n for n in corpus(large=True) if n.replace(STRUCT_PREFIX, BENCH_PREFIX) == n or n.replace(STRUCT_PREFIX, BENCH_PREFIX)
         not in corpus(large=True)]


@pytest.mark.parametrize("name", LARGE)
def test_sliced_large_structures_equal_stock_on_unseen_inputs(name: str, scratch: Path) -> None:
    """AlexNet, VGG-16 (hundreds of MB of weights, most in FC layers) and NCNN's ViT: written per test."""
    (scratch / "model").mkdir()
    files = write_model(name, scratch / "model", seed=7)
    assert_unseen_inputs_equal_stock(files.param, files.bin, files.input_shape, scratch)
