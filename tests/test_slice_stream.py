"""The stream-aware kernel choice (slicing/streaming.py): with part of the weights streamed on every
inference, a Winograd layer whose transformed weights cost more to load than im2col+GEMM's extra
compute runs im2col+GEMM (Convolution param 26 = 2); when the budget can pin every weight, or with
the choice off, the kernels are the compute-first ones. Deterministic: the bandwidth and compute
rates are given, never measured here.

The model: `a`, a 16-channel 3x3 conv at 56x56 (little weight, much compute), then four 256-channel
3x3 convs at 7x7 (2.36 MB raw each, 16.8 MB as Winograd F(6,3)). With the rates below (1 thread)
each `b` costs 0.88 ms compute + its share of 16.8 MB as Winograd, 0.78 ms + its share of 2.36 MB
as im2col+GEMM; `a` 0.09 ms as Winograd, 0.19 ms as im2col+GEMM.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import Session
from flexnn_ncnn.ncnn_model import Graph, NcnnParam, infer_shapes, parse_input_shape
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.slicing import KERNEL_CODES, KERNEL_PARAM_ID, Target, slice_model
from flexnn_ncnn.slicing.streaming import StreamModel
from helpers import run_module
from model_helpers import relative_error

pytest.importorskip("ncnn")

NET = """7767517
8 8
Input        in 0 1 x 0=56 1=56 2=16
Convolution  a  1 1 x ya 0=16 1=3 4=1 5=1 6=2304
Pooling      p  1 1 ya yp 0=0 1=8 2=8
Convolution  e  1 1 yp ye 0=256 1=1 5=1 6=4096
Convolution  b1 1 1 ye y1 0=256 1=3 4=1 5=1 6=589824
Convolution  b2 1 1 y1 y2 0=256 1=3 4=1 5=1 6=589824
Convolution  b3 1 1 y2 y3 0=256 1=3 4=1 5=1 6=589824
Convolution  b4 1 1 y3 y4 0=256 1=3 4=1 5=1 6=589824
"""
STREAM = StreamModel(bandwidth=5e9, winograd_rate=19e9, gemm_rate=37e9, threads=1)
STREAM_ARGS = ["--stream-bandwidth", "5GB", "--compute-rates", "winograd=19,im2col_gemm=37", "--threads", "1"]
TIGHT = 8_000_000  # im2col+GEMM fits each b whole, Winograd only sliced; the b weights do not all fit
TIGHTER = 4_000_000  # im2col+GEMM fits each b only weights-sliced
GENEROUS = 1_000_000_000
HOST16 = Target("host", 16)
BIG = ("b1", "b2", "b3", "b4")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("stream")
    param = NcnnParam.parse(NET)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"x": parse_input_shape("1,16,56,56")})
    modelbin = random_modelbin(param, seed=3)
    (folder / "net.param").write_text(param.format())
    (folder / "net.bin").write_bytes(modelbin.to_bytes())
    return folder, param, modelbin, graph, shapes


def _kernels(result) -> dict[str, str]:
    return {d.layer: d.kernel for d in result.decisions}


def _kernel_params(param: NcnnParam) -> dict[str, int]:
    return {layer.name: layer.params.get_int(KERNEL_PARAM_ID, 0) for layer in param if layer.type == "Convolution"}


@pytest.mark.parametrize("budget, how, slices", [(TIGHT, "whole", 1), (TIGHTER, "weights sliced", 2)])
def test_streamed_large_weight_layers_run_im2col_small_ones_keep_winograd(model, tmp_path: Path, budget: int, how: str,
                                                                          slices: int) -> None:
    folder, param, modelbin, graph, shapes = model
    result = slice_model(param, modelbin, graph, shapes, budget, HOST16, stream=STREAM)
    assert 0 < result.streamed_share < 1
    kernels = _kernels(result)
    assert kernels["a"] == "winograd63" and all(kernels[b] == "im2col_gemm" for b in BIG), kernels
    by_name = {d.layer: d for d in result.decisions}
    for b in BIG:
        d = by_name[b]
        assert d.fastest == "winograd63" and d.changed and d.slices == slices and d.after.total <= d.limit
        assert "streamed" in d.reason and "winograd63" in d.reason and f"im2col_gemm {how}" in d.reason, d.reason
    assert "streamed" in by_name["a"].reason  # kept, with both estimates
    written = _kernel_params(result.param)  # every sub-layer of a b is forced to im2col+GEMM
    assert written["a"] == KERNEL_CODES["winograd63"]
    assert {code for name, code in written.items() if name.startswith("b")} == {KERNEL_CODES["im2col_gemm"]}
    assert len([name for name in written if name.startswith("b")]) == slices * len(BIG)
    # the rewrite still computes the original's output (stock NCNN ignores param 26)
    feeds = {"x": np.random.default_rng(0).standard_normal((16, 56, 56)).astype(np.float32)}
    (tmp_path / "s.param").write_text(result.param.format())
    (tmp_path / "s.bin").write_bytes(result.modelbin.to_bytes())
    ref = run_stock(folder / "net.param", folder / "net.bin", feeds, ["y4"])["y4"]
    got = run_stock(tmp_path / "s.param", tmp_path / "s.bin", feeds, ["y4"])["y4"]
    assert relative_error(ref, got) <= 1e-4


def test_off_switch_and_pinnable_weights_keep_the_compute_first_kernels(model) -> None:
    _, param, modelbin, graph, shapes = model
    off = slice_model(param, modelbin, graph, shapes, TIGHT, HOST16)
    assert off.stream is None and off.streamed_share == 0
    assert all(_kernels(off)[b] == "winograd63" for b in BIG)  # weights-sliced Winograd
    assert any(d.slices > 1 for d in off.decisions if d.layer in BIG)
    # every weight fits beside the largest step: nothing is streamed, nothing changes
    generous = slice_model(param, modelbin, graph, shapes, GENEROUS, HOST16, stream=STREAM)
    assert generous.streamed_share == 0 and not generous.sliced
    assert _kernels(generous) == _kernels(slice_model(param, modelbin, graph, shapes, GENEROUS, HOST16))
    # with a loader this fast and Winograd computing faster (0.42 ms), streamed bytes no longer decide
    fast = slice_model(param, modelbin, graph, shapes, TIGHT, HOST16, stream=StreamModel(5e12, 40e9, 37e9, 1))
    assert [(d.kernel, d.slices) for d in fast.decisions] == [(d.kernel, d.slices) for d in off.decisions]


def test_cli_options_reach_the_decisions_json_and_param(model, tmp_path: Path) -> None:
    folder = model[0]
    base = [str(folder / "net.param"), "--budget", str(TIGHT), "--input-shape", "1,16,56,56", "--target", "android-arm64"]
    proc = run_module("slice", *base, *STREAM_ARGS, "-o", str(tmp_path / "on"))
    assert proc.returncode == 0, proc.stderr
    assert "of the weights streamed on every inference with the fastest kernels" in proc.stdout and "im2col_gemm whole" in proc.stdout
    decisions = json.loads((tmp_path / "on" / "net.flexnn.slicing.json").read_text())
    assert decisions["stream"]["bandwidth"] == 5e9 and decisions["stream"]["threads"] == 1
    assert 0 < decisions["stream"]["streamed_share"] < 1
    assert {e["layer"]: e["kernel"] for e in decisions["layers"]}["b1"] == "im2col_gemm"
    assert _kernel_params(NcnnParam.parse((tmp_path / "on" / "net.flexnn.param").read_text()))["b1"] == 2

    proc = run_module("slice", *base, *STREAM_ARGS, "--no-stream-aware", "-o", str(tmp_path / "off"))
    assert proc.returncode == 0, proc.stderr
    assert "stream-aware kernel choice: off" in proc.stdout
    decisions = json.loads((tmp_path / "off" / "net.flexnn.slicing.json").read_text())
    assert decisions["stream"] is None
    assert {e["layer"]: e["kernel"] for e in decisions["layers"]}["b1"] == "winograd63"

    # mapped weights are not copied: kernels by compute alone, unless a bandwidth is given
    rates = ["--compute-rates", "winograd=19,im2col_gemm=37", "--threads", "1"]
    proc = run_module("slice", *base, *rates, "--map-weights", "-o", str(tmp_path / "mapped"))
    assert proc.returncode == 0, proc.stderr
    assert "stream-aware kernel choice: off" in proc.stdout
    assert json.loads((tmp_path / "mapped" / "net.flexnn.slicing.json").read_text())["stream"] is None
    proc = run_module("slice", *base, *STREAM_ARGS, "--map-weights", "-o", str(tmp_path / "mapped-bw"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "mapped-bw" / "net.flexnn.slicing.json").read_text())["stream"]["bandwidth"] == 5e9

    proc = run_module("slice", *base, "--compute-rates", "winograd=19", "-o", str(tmp_path / "bad"))
    assert proc.returncode == 2 and "--compute-rates" in proc.stderr


def test_host_run_of_the_stream_aware_slicing_matches_stock(model, tmp_path: Path) -> None:
    # the patched runtime runs im2col+GEMM where param 26 = 2 says so: outputs still equal stock NCNN's
    folder = model[0]
    proc = run_module("slice", str(folder / "net.param"), "--budget", str(TIGHT), "--input-shape", "1,16,56,56",
                      *STREAM_ARGS, "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    decisions = json.loads((tmp_path / "net.flexnn.slicing.json").read_text())
    assert any(e["kernel"] == "im2col_gemm" and e["fastest"] == "winograd63" for e in decisions["layers"])
    x = np.random.default_rng(1).standard_normal((16, 56, 56)).astype(np.float32)
    out = Session(tmp_path / "net.flexnn.plan.json").run({"x": x})["y4"]
    ref = run_stock(folder / "net.param", folder / "net.bin", {"x": x}, ["y4"])["y4"]
    assert relative_error(ref, out) <= 1e-4


def test_streamed_bytes_and_macs_per_kernel() -> None:
    from flexnn_ncnn.analysis import ConvModel
    m = ConvModel(256, 256, 3, 3, (1, 1), (1, 1), (14, 14), (1, 1, 1, 1), (14, 14), False, 256 * 14 * 14 * 4)
    raw = 256 * 256 * 9 * 4
    assert m.streamed_bytes("im2col_gemm") == m.streamed_bytes("direct") == raw
    # NCNN (no shape hints) transforms for F(4,3) above 32 channels, whichever Winograd the slicer names
    assert m.ncnn_winograd_m() == 4 and m.streamed_bytes("winograd63") * 9 == m.streamed_bytes("winograd43") * 9 == raw * 36
    small = ConvModel(32, 32, 3, 3, (1, 1), (1, 1), (56, 56), (1, 1, 1, 1), (56, 56), False, 32 * 56 * 56 * 4)
    assert small.ncnn_winograd_m() == 6
    assert m.macs("im2col_gemm") == 256 * 9 * 256 * 14 * 14
    assert m.macs("winograd63") == 64 * 3 * 3 * 256 * 256 and m.macs("winograd43") == 36 * 4 * 4 * 256 * 256
    assert STREAM.compute_us(m, "im2col_gemm") == pytest.approx(m.macs("im2col_gemm") / 37e9 * 1e6)
    assert STREAM.load_us(m, "winograd63", 0.5) == pytest.approx(0.5 * m.streamed_bytes("winograd63") / 5e9 * 1e6)


def test_calibrate_prints_the_options_and_writes_nothing(model, tmp_path: Path) -> None:
    folder = model[0]
    before = sorted(p.name for p in folder.iterdir())
    proc = run_module("slice", str(folder / "net.param"), "--input-shape", "1,16,56,56", "--threads", "1", "--calibrate")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"--stream-bandwidth \d+\.\d\dGB --compute-rates winograd=\d+\.\d,im2col_gemm=\d+\.\d$", proc.stdout.strip())
    assert sorted(p.name for p in folder.iterdir()) == before
    # with mapped weights, the bandwidth is that of mapping the records (calibrate.map_bandwidth)
    proc = run_module("slice", str(folder / "net.param"), "--input-shape", "1,16,56,56", "--threads", "1", "--calibrate",
                      "--map-weights")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"--stream-bandwidth \d+\.\d\dGB --compute-rates", proc.stdout)
    assert sorted(p.name for p in folder.iterdir()) == before
    proc = run_module("slice", str(folder / "net.param"), "--input-shape", "1,16,56,56", "--target", "android-arm64",
                      "--calibrate")
    assert proc.returncode == 2 and "--target host" in proc.stderr
