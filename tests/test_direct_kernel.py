"""A Convolution the slicer marks direct (param 26=1) runs NCNN's direct kernel.

NCNN chooses a 3x3 stride-1 layer's kernel itself (Winograd when it has more than 8 channels) and reads
no param for the direct one, so the runtime builds and runs a layer so marked with Winograd and
im2col+GEMM off (runtime/planned_layer.cpp). What the slicer chose is then what the meter measures,
what prepare profiles and what runs: raw-sized weights and the bordered input, without Winograd's
transformed weights and tiles. Stock NCNN, which ignores the param, is the oracle for the output.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import assert_close, stock_output
from model_helpers import written_text_model
from flexnn_ncnn import sidecar
from flexnn_ncnn.analysis import analyze
from flexnn_ncnn.ncnn_model import BlobShape, Graph, NcnnParam, infer_shapes
from flexnn_ncnn.prepare import RuntimeOptions, prepare_model, write_plan_file
from flexnn_ncnn.session import Session
from flexnn_ncnn.slicing.meter import LayerMeter

pytest.importorskip("ncnn")

# two padded 3x3 stride-1 convs NCNN would run as Winograd, both marked direct
DIRECT = """7767517
3 3
Input data 0 1 data 0=56 1=56 2=32
Convolution c3 1 1 data a 0=64 1=3 4=1 5=1 6=18432 9=1 26=1
Convolution c3b 1 1 a output 0=24 1=3 4=1 5=1 6=13824 26=1
"""
SHAPE = (1, 32, 56, 56)


def bordered(channels: int) -> int:
    """A 56x56 input with its 1-pixel border: what the direct kernel reads."""
    return channels * 58 * 58 * 4


RTOL = 1e-4


def test_the_meter_measures_the_direct_kernel_not_winograd() -> None:
    param = NcnnParam.parse(DIRECT)
    graph = Graph.build(param)
    c3 = analyze(graph, infer_shapes(param, graph, {"data": BlobShape(3, 56, 56, 1, 32)}))[1]
    meter = LayerMeter(RuntimeOptions(threads=2))
    direct, winograd = meter.cost(c3, "direct", 64, 1), meter.cost(c3, "winograd63", 64, 1)
    raw = 64 * 32 * 9 * 4
    assert raw <= direct.weights < 1.1 * raw + 4096 < winograd.weights
    # the bordered input only; Winograd's transformed input and output tiles are several times it
    assert bordered(32) <= direct.intermediates < 1.1 * bordered(32)
    assert winograd.intermediates > 4 * direct.intermediates
    # what the estimate says of its intermediates
    assert direct.intermediates == pytest.approx(c3.model.cost("direct", 64).intermediates, rel=0.01)


def test_a_direct_layer_is_profiled_and_run_direct_and_equals_stock(tmp_path: Path) -> None:
    written_text_model(DIRECT, SHAPE, 7, tmp_path)
    param, bin_ = tmp_path / "a.param", tmp_path / "a.bin"
    content = prepare_model(param, bin_, None, options=RuntimeOptions(threads=2))
    profile = content.profile
    for step, channels in ((1, 32), (2, 64)):  # c3, c3b
        scratch = sum(t.size for t in profile.tensors if t.layer == step and t.role == "intermediate")
        assert scratch < 1.1 * bordered(channels), (step, scratch)
    weights = sum(t.size for t in profile.tensors if t.role == "weight")
    assert weights < 1.1 * (18432 + 13824) * 4 + 8192
    path = tmp_path / f"a{sidecar.SUFFIX}"
    write_plan_file(content, path)
    session = Session(path, canaries=True)
    for seed in range(1, 4):  # prepare fed its own input
        x = np.random.default_rng(seed).standard_normal(SHAPE[1:]).astype(np.float32)
        assert_close(session.run({"data": x})["output"], stock_output(param, bin_, x), RTOL)
