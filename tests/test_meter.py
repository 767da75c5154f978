"""Measured per-layer memory (flexnn_ncnn/slicing/meter.py): a layer's slice, kernel and tiles run through
NCNN as a one-layer model; the numbers the slicer decides by, measured once per build and configuration,
and a choice whose measurement exceeds its limit is not taken."""

from __future__ import annotations

import numpy as np
import pytest

from flexnn_ncnn.analysis import GROUPED, Cost, analyze
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.ncnn_model import BlobShape, Graph, NcnnParam, infer_shapes
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.prepare import RuntimeOptions
from flexnn_ncnn.slicing import Target, slice_model
from flexnn_ncnn.slicing.meter import LayerMeter
from flexnn_ncnn.slicing.policy import _finest, decide, least_measured

HOST16 = Target("host", 16)

# a padded 3x3 conv at 56x56 (Winograd, im2col tiled or not), a 1x1 conv, and an InnerProduct
NET = """7767517
5 5
Input            in     0 1 data 0=56 1=56 2=32
Convolution      c3     1 1 data a 0=64 1=3 4=1 5=1 6=18432
Convolution      c1     1 1 a b 0=16 1=1 5=0 6=1024
Flatten          f      1 1 b flat
InnerProduct     fc     1 1 flat out 0=10 1=1 2=501760
"""


@pytest.fixture(scope="module")
def analyses():
    param = NcnnParam.parse(NET)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"data": BlobShape(3, 56, 56, 1, 32)})
    return {a.layer.name: a for a in analyze(graph, shapes)}, shapes


def test_a_measured_layer_holds_what_its_kernel_needs(analyses) -> None:
    by_name, shapes = analyses
    meter = LayerMeter(RuntimeOptions(threads=1))
    c3 = by_name["c3"]
    raw = 64 * 32 * 9 * 4
    winograd = meter.cost(c3, "winograd63", 64, 1)
    whole, tiled = meter.cost(c3, "im2col_gemm", 64, 1), meter.cost(c3, "im2col_gemm", 64, 8)
    # Winograd's transformed weights are larger than the raw ones; im2col+GEMM's packed ones are raw-sized
    assert winograd.weights > 2 * raw and raw <= whole.weights < 1.1 * raw + 4096
    # the im2col matrix (K = 288 rows of 3136 pixels) whole, then one tile of it, with no bordered input copy
    assert whole.intermediates >= 288 * 3136 * 4 > tiled.intermediates
    assert tiled.intermediates < 288 * 3136 * 4 // 4
    # half the rows: half the weights, plus the Concat's output a weights-sliced layer writes into
    half = meter.cost(c3, "im2col_gemm", 32, 1)
    assert half.weights < 0.6 * whole.weights and half.intermediates >= 64 * 56 * 56 * 4
    # NCNN keeps an InnerProduct's weights in fp16 where the CPU converts them (x86 F16C, ARM), which the
    # estimate (fp32, stored and packed) does not know: 4x what it holds
    fc = meter.cost(by_name["fc"], "gemm", 10, 1)
    assert 10 * 50176 * 2 <= fc.weights <= 10 * 50176 * 8
    assert meter.measurements == 5


def test_a_configuration_is_measured_once_per_build_and_options(analyses) -> None:
    by_name, shapes = analyses
    first = LayerMeter(RuntimeOptions(threads=1))
    cost = first.cost(by_name["c1"], "im2col_gemm", 16, 1)
    again = LayerMeter(RuntimeOptions(threads=1))  # another slicer run: recalled, not run again
    assert again.cost(by_name["c1"], "im2col_gemm", 16, 1) == cost and again.measurements == 0
    other = LayerMeter(RuntimeOptions(threads=1, packing=False))
    other.cost(by_name["c1"], "im2col_gemm", 16, 1)
    assert other.measurements == 1


def test_a_choice_whose_measurement_exceeds_its_limit_is_not_taken(analyses) -> None:
    """The estimate lets Winograd through; the measurement (here, Winograd measured three times larger
    than estimated, as a kernel's hidden buffers would make it) does not, so the next option is chosen
    and its measured cost is what the decision records."""
    by_name, shapes = analyses
    meter = LayerMeter(RuntimeOptions(threads=1))
    c3 = by_name["c3"]
    limit = c3.model.cost("winograd63", 64).total + 1

    def measure(a, kernel, width, tiles) -> Cost:
        cost = meter.cost(a, kernel, width, tiles)
        return Cost(3 * cost.weights, cost.intermediates) if kernel.startswith("winograd") else cost

    assert decide(c3, limit, HOST16).kernel == "winograd63"
    d = decide(c3, limit, HOST16, measure)
    assert not d.kernel.startswith("winograd") or d.slices > 1
    assert d.after == measure(c3, d.kernel, d.slice_width, d.tiles) and d.after.total <= limit


def one_conv(channels: int, side: int, params: str):
    """The analysis of a Convolution with `params` reading `channels` x `side` x `side`."""
    param = NcnnParam.parse(f"""7767517
2 2
Input            in     0 1 data 0={side} 1={side} 2={channels}
Convolution      c      1 1 data out {params}
""")
    graph = Graph.build(param)
    return analyze(graph, infer_shapes(param, graph, {"data": BlobShape(3, side, side, 1, channels)}))[1]


def test_a_1x1_conv_whose_packed_input_only_tiles_cut_is_tiled() -> None:
    """ShuffleNetV2's branch5_2_conv1 (116 -> 116, 1x1, 28x28): the estimate counts no intermediates, NCNN
    packs the whole input (0.4 MB) untiled and one tile of it tiled. The whole option's measurement
    (4x its estimate) says nothing of the tiled one's, which fits and is the one chosen."""
    c = one_conv(116, 28, "0=116 1=1 5=1 6=13456 9=1")
    meter = LayerMeter(RuntimeOptions(threads=2))
    whole = meter.cost(c, "im2col_gemm", 116, 1)
    assert whole.intermediates >= 116 * 28 * 28 * 4 > c.model.cost("im2col_gemm", 116, 1).intermediates
    limit = whole.total // 2
    d = decide(c, limit, HOST16, meter.cost)
    assert d is not None and d.kernel == "im2col_gemm" and d.slice_width == 116 and d.tiles > 1
    assert d.after == meter.cost(c, "im2col_gemm", 116, d.tiles) and d.after.total <= limit


# RegNet's grouped 3x3 (groups of 8 of 48 channels): NCNN's grouped layer unpacks its whole input
GROUPED_NET = """7767517
2 2
Input            in     0 1 data 0=56 1=56 2=48
ConvolutionDepthWise g  1 1 data out 0=48 1=3 3=2 4=1 5=1 6=3456 7=6 9=1
"""


def test_where_nothing_measures_within_the_limit_the_least_measured_cut_is_taken() -> None:
    """The estimate of NCNN's grouped layer misses its unpacked input: at a limit its estimate fits, it
    holds more than that measured (4x at elempack 16, 1.9x at 8). No option measures within it, and the
    slicer takes the cut measured least of every kernel's finest, not the estimate's choice, so
    tightening a limit never picks more."""
    param = NcnnParam.parse(GROUPED_NET)
    graph = Graph.build(param)
    g = analyze(graph, infer_shapes(param, graph, {"data": BlobShape(3, 56, 56, 1, 48)}))[1]
    meter = LayerMeter(RuntimeOptions(threads=2))
    estimated = g.model.cost(GROUPED, g.model.rows)
    limit = estimated.total
    assert decide(g, limit, HOST16).kernel == GROUPED
    assert meter.cost(g, GROUPED, g.model.rows, 1).total > limit
    assert decide(g, limit, HOST16, meter.cost) is None
    least = least_measured(g, limit, HOST16, meter.cost)
    assert "nothing measures within the limit" in least.reason
    finest = {option: meter.cost(g, *option) for option in _finest(g, HOST16)}
    assert len({kernel for kernel, _, _ in finest}) > 1
    assert least.after == finest[least.kernel, least.slice_width, least.tiles]
    assert least.after.total == min(cost.total for cost in finest.values())


# an FC head a quarter million inputs wide: one 8-row slice is 8 MB of fp32 weights
WIDE_FC = """7767517
3 3
Input            in     0 1 data 0=64 1=64 2=64
Flatten          f      1 1 data flat
InnerProduct     fc     1 1 flat out 0=16 1=1 2=4194304
"""


def test_the_smallest_budget_the_slicer_names_is_measured_not_estimated() -> None:
    """The estimate holds an InnerProduct's stored and packed weights together, as create_pipeline does
    when it packs them; loaded pre-transformed, NCNN holds the packed ones only. With the meter, the
    bottleneck's need is measured: the slicer's own smallest budget falls by about a slice, and a
    budget the estimate refuses slices."""
    param = NcnnParam.parse(WIDE_FC)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"data": BlobShape(3, 64, 64, 1, 64)})
    modelbin = random_modelbin(param, 0)
    target = Target("host", 8)
    measure = LayerMeter(RuntimeOptions(threads=1, fp16=False)).cost
    estimated = slice_model(param, modelbin, graph, shapes, 1 << 40, target).min_budget
    measured = slice_model(param, modelbin, graph, shapes, 1 << 40, target, measure=measure).min_budget
    slice_bytes = 8 * 262144 * 4
    assert measured <= estimated - 0.9 * slice_bytes, (measured, estimated)
    between = (measured + estimated) // 2
    with pytest.raises(UserError, match="is too small: layer fc"):
        slice_model(param, modelbin, graph, shapes, between, target)
    assert [d.slices for d in slice_model(param, modelbin, graph, shapes, between, target, measure=measure).sliced] == [2]


def test_a_wide_conv_no_whole_kernel_fits_is_cut_both_ways() -> None:
    """VGG-19's conv4_2 (512 -> 512, 3x3, 28x28) in 8 MB: Winograd's input transform alone is larger at
    any width and its raw weights (9.4 MB) exceed the limit. im2col+GEMM cut by output channels and by
    input tiles is what fits, by its measurement, ahead of the slower direct kernel."""
    c = one_conv(512, 28, "0=512 1=3 4=1 5=1 6=2359296")
    limit = 8_000_000
    meter = LayerMeter(RuntimeOptions(threads=2))
    d = decide(c, limit, HOST16, meter.cost)
    assert d is not None and d.kernel == "im2col_gemm" and d.slice_width < 512 and d.tiles > 1
    assert d.after == meter.cost(c, "im2col_gemm", d.slice_width, d.tiles) and d.after.total <= limit


@pytest.mark.parametrize("pooling", [
    "0=0 1=3 11=3 2=2 12=2 3=1 13=1 5=1",   # ResNet's stem: explicit pads
    "0=0 1=3 11=3 2=2 12=2 3=0 13=0 5=0",   # full padding: a tail up to a whole stride
    "0=0 1=2 11=2 2=2 12=2 3=0 13=0 5=0",   # no pads: a tail along w only (57 is odd)
    "0=0 1=3 11=2 2=2 12=2 3=0 13=0 5=0",   # no pads, no tail: NCNN reads the input as it is
    "0=1 1=3 11=3 2=1 12=1 3=1 13=1 5=1",   # average pooling, explicit pads
    "0=0 1=3 11=3 2=2 12=2 5=2",            # SAME (TensorFlow)
    "0=1 4=1",                              # global
])
def test_a_poolings_bordered_copy_is_what_ncnn_allocates(pooling: str) -> None:
    """analysis.py's cost of a Pooling (a fixed layer: never measured while slicing) is its bordered
    input copy: the estimate is what NCNN's Pooling allocates, measured (to its layout's alignment)."""
    shape = BlobShape(3, 57, 56, 1, 24)
    param = NcnnParam.parse(f"7767517\n2 2\nInput in 0 1 data 0=57 1=56 2=24\nPooling p 1 1 data out {pooling}\n")
    graph = Graph.build(param)
    estimate = analyze(graph, infer_shapes(param, graph, {"data": shape}))[1].model.cost("-")
    measured = LayerMeter(RuntimeOptions(threads=1)).held(param.layers[1], shape)
    assert (estimate.intermediates > 0) == (measured.intermediates > 0)
    assert estimate.intermediates == pytest.approx(measured.intermediates, rel=0.01)


# a Linear on 128 tokens of 1024 features (pnnx's Gemm, B constant and transposed)
TOKENS = """7767517
2 2
Input            in     0 1 x 0=1024 1=128
Gemm             fc     1 1 x y 3=1 5=1 6=1 8=64 9=1024 10=4
"""


def test_a_gemm_cut_into_tiles_of_tokens_packs_one_tile_of_its_input_at_a_time(tmp_path) -> None:
    """NCNN's Gemm packs its input a tile of rows per thread; with one tile for each of 2 threads that
    is the whole input (128 x 1024 fp32, 512 KiB). Cut into tiles of tokens (its constant_TILE_M),
    it holds a few rows' worth, and computes the same output."""
    from flexnn_ncnn.ncnn_model.stock import run_stock
    from flexnn_ncnn.slicing.policy import LayerDecision
    from flexnn_ncnn.slicing.rewrite import GEMM_TILE_M_ID, apply

    param = NcnnParam.parse(TOKENS)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"x": BlobShape(2, 1024, 128)})
    fc = analyze(graph, shapes)[1]
    tiles = fc.model.max_tiles("gemm", HOST16.min_tile_pixels)
    assert tiles == 128 // 16
    meter = LayerMeter(RuntimeOptions(threads=2, fp16=False))
    whole, tiled = meter.cost(fc, "gemm", 64, 1), meter.cost(fc, "gemm", 64, tiles)
    assert whole.intermediates >= 128 * 1024 * 4 > 3 * tiled.intermediates  # 16 rows a thread
    assert tiled.weights == whole.weights
    modelbin = random_modelbin(param, seed=3)
    sliced, sliced_bin, _ = apply(param, modelbin, graph, {"fc": LayerDecision("fc", "Gemm", "gemm", "gemm", 64, 64, tiles, 0,
                                                                        whole, tiled, "test")}, shapes, HOST16.simd_width)
    assert sliced.layer("fc").params.get_int(GEMM_TILE_M_ID, 0) == 16
    for name, files in (("a", (param, modelbin)), ("b", (sliced, sliced_bin))):
        (tmp_path / f"{name}.param").write_text(files[0].format())
        (tmp_path / f"{name}.bin").write_bytes(files[1].to_bytes())
    x = np.random.default_rng(0).standard_normal((128, 1024)).astype(np.float32)
    ref, got = (run_stock(tmp_path / f"{n}.param", tmp_path / f"{n}.bin", {"x": x}, ["y"], num_threads=2)["y"] for n in "ab")
    assert np.array_equal(ref, got)  # the same sums: tiles of rows do not reorder them
