"""Deconvolution slicing (issue 13): a transposed convolution is cut by output channels like a
Convolution (Split -> sub-Deconvolutions -> Concat), which cuts its weights, its column buffer and its
bordered output alike. Stock NCNN runs the sliced model to the original's output; under a tight budget
the slicer slices the Deconvolution, and its measured working set (meter.py) shrinks with the slices.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from model_helpers import random_input, relative_error, written_text_model
from flexnn_ncnn.analysis import DeconvModel, analyze
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.prepare import RuntimeOptions
from flexnn_ncnn.slicing import Target, slice_model, spatial
from flexnn_ncnn.slicing.meter import LayerMeter

pytest.importorskip("ncnn")

# a decoder stage: upsampling by a 4x4 stride-2 transposed conv (cropped by its padding, with a bias
# and a ReLU), and one written into its output directly (2x2 stride 2, no padding)
UPSAMPLE = """7767517
4 4
Input x 0 1 x 0=24 1=24 2=32
Deconvolution up 1 1 x up 0=64 1=4 3=2 4=1 5=1 6=32768 9=1
Deconvolution up2 1 1 up up2 0=8 1=2 3=2 5=1 6=2048
Convolution out 1 1 up2 y 0=8 1=1 5=1 6=64
"""
TOLERANCE = 1e-4


def _model(tmp_path: Path):
    return written_text_model(UPSAMPLE, (1, 32, 24, 24), 4, tmp_path)


def test_deconvolutions_are_costed_by_output_channel(tmp_path: Path) -> None:
    param, _, graph, shapes = _model(tmp_path)
    models = {a.layer.name: a.model for a in analyze(graph, shapes)}
    up, up2 = models["up"], models["up2"]
    assert isinstance(up, DeconvModel) and isinstance(up2, DeconvModel)
    assert (up.rows, up.k, up.column_per_row) == (64, 32 * 16, 16 * 24 * 24 * 4)
    assert up.bordered_per_row > 0 and up2.bordered_per_row == 0  # only the padded one crops a bordered output
    whole, quarter = up.cost("deconv", 64), up.cost("deconv", 16)
    assert quarter.weights * 4 == whole.weights
    assert quarter.intermediates - up.out_bytes < whole.intermediates / 3  # the concat buffer aside, a quarter


def test_a_tight_budget_slices_the_deconvolutions_and_stock_ncnn_runs_the_result(tmp_path: Path) -> None:
    """At the smallest budget channel slicing reaches (spatial tiling, which goes lower by running the
    decoder as tiles, off)."""
    param, modelbin, graph, shapes = _model(tmp_path)
    target = Target("host", 16)
    untiled = spatial.Tiler(spatial.TiledModel(param, modelbin, graph, shapes, analyze(graph, shapes), ()), target,
                            enabled=False)
    generous = slice_model(param, modelbin, graph, shapes, 1 << 40, target, tiler=untiled)
    assert not generous.sliced
    tight = slice_model(param, modelbin, graph, shapes, generous.min_budget, target, tiler=untiled)
    sliced = {d.layer: d for d in tight.sliced}
    assert "up" in sliced and sliced["up"].slices > 1 and sliced["up"].kernel == "deconv"
    (tmp_path / "s.param").write_text(tight.param.format())
    with open(tmp_path / "s.bin", "wb") as f:
        tight.modelbin.write(f)
    feeds = {"x": random_input((1, 32, 24, 24))}
    ref = run_stock(tmp_path / "a.param", tmp_path / "a.bin", feeds, ["up", "up2", "y"])
    got = run_stock(tmp_path / "s.param", tmp_path / "s.bin", feeds, ["up", "up2", "y"])
    assert all(relative_error(ref[b], got[b]) <= TOLERANCE for b in ("up", "up2", "y"))


def test_the_measured_working_set_of_a_deconvolution_slice_shrinks_with_it(tmp_path: Path) -> None:
    """What NCNN itself allocates for one sub-Deconvolution (one-layer model, recording allocator)."""
    _, _, graph, shapes = _model(tmp_path)
    up = next(a for a in analyze(graph, shapes) if a.layer.name == "up")
    meter = LayerMeter(RuntimeOptions(threads=1, fp16=False))
    whole, quarter = meter.cost(up, "deconv", 64, 1), meter.cost(up, "deconv", 16, 1)
    assert 0 < quarter.weights < whole.weights / 3
    assert quarter.intermediates < whole.intermediates / 2
