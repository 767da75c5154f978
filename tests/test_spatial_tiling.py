"""Spatial tiling below the activation floor (issue 16): a block of spatial layers rewritten as a grid of
tiles, each cropping its input with the halo its receptive field needs and padding only where it meets
the image border, equals the untiled block (chains, and residual blocks whose branches read different
regions); under a budget below the floor the slicer tiles, and the
runtime runs the result within the budget, equal to stock NCNN on the original model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import assert_counted_within_budget
from model_helpers import corpus, relative_error
from flexnn_ncnn import Session
from flexnn_ncnn.analysis import analyze
from flexnn_ncnn.bench.floor import activation_floor
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.ncnn_model import BlobShape, Graph, ModelBin, NcnnParam, infer_shapes, parse_input_shape, read_bin, read_param
from flexnn_ncnn.ncnn_model.param import SHAPE_HINT_ID
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.ncnn_model.structures import STRUCTURES
from flexnn_ncnn.prepare import prepare_model, write_plan_file
from flexnn_ncnn.slice import main as slice_main, runtime_only_note
from flexnn_ncnn.slicing import Target, slice_model, spatial
from flexnn_ncnn.slicing.margins import fold_margins
from flexnn_ncnn.slicing.policy import smallest_working_set
from flexnn_ncnn.slicing.rewrite import REFERENCE_LAYER_ID
from flexnn_ncnn.slicing.streaming import StreamModel
from flexnn_ncnn.units import format_size
from test_int8 import int8_of

pytest.importorskip("ncnn")

HOST = Target("host", 16)
TOLERANCE = 1e-4
# padded 3x3 convolutions (one dilated), a full-padding max pooling whose tail pads the odd size, a
# strided depthwise convolution, a padded average pooling and a strided conv with asymmetric pads, on
# an input whose sides are odd and unequal
CHAIN = """7767517
10 10
Input x 0 1 x 0=37 1=29 2=3
Convolution c1 1 1 x c1 0=16 1=3 4=1 5=1 6=432 9=1
Convolution c2 1 1 c1 c2 0=16 1=3 2=2 4=2 5=1 6=2304
ReLU r2 1 1 c2 r2
Pooling p1 1 1 r2 p1 0=0 1=3 2=2
BatchNorm bn 1 1 p1 bn 0=16
ConvolutionDepthWise d1 1 1 bn d1 0=16 1=3 3=2 4=1 5=1 6=144 7=16
Pooling p2 1 1 d1 p2 0=1 1=3 2=1 3=1 6=1
Convolution c3 1 1 p2 c3 0=8 1=3 3=2 4=0 15=1 14=1 16=0 5=1 6=1152
Convolution y 1 1 c3 y 0=4 1=1 5=1 6=32
"""
# TensorFlow-style SAME padding, odd totals (the odd pad after for upper, before for lower): a strided
# SAME_UPPER convolution (-233) on odd sides, a SAME_LOWER 4x4 one (-234), SAME max pooling (pad_mode 2),
# a SAME_LOWER 2x2 average pooling (pad_mode 3: NCNN divides by the whole window, pads counted) and a
# dilated SAME_UPPER 4x4 convolution
SAME = """7767517
6 6
Input x 0 1 x 0=37 1=29 2=3
Convolution c1 1 1 x c1 0=16 1=3 3=2 4=-233 5=1 6=432 9=1
Convolution c2 1 1 c1 c2 0=16 1=4 4=-234 5=1 6=4096
Pooling p1 1 1 c2 p1 0=0 1=3 2=2 5=2
Pooling p2 1 1 p1 p2 0=1 1=2 2=1 5=3
Convolution y 1 1 p2 y 0=4 1=4 2=2 4=-233 5=1 6=1024
"""
# a ResNet-style stem and two residual blocks (the second downsampling, with a strided 1x1 shortcut),
# joined by BinaryOp and Eltwise, and a channel concatenation
RESIDUAL = """7767517
17 20
Input x 0 1 x 0=31 1=27 2=3
Convolution stem 1 1 x stem 0=16 1=3 3=2 4=1 5=1 6=432 9=1
Split s1 1 2 stem s1a s1b
Convolution b1c1 1 1 s1a b1c1 0=16 1=3 4=1 5=1 6=2304 9=1
Convolution b1c2 1 1 b1c1 b1c2 0=16 1=3 4=1 5=1 6=2304
BinaryOp b1add 2 1 b1c2 s1b b1add 0=0
ReLU b1relu 1 1 b1add b1
Split s2 1 2 b1 s2a s2b
Convolution b2c1 1 1 s2a b2c1 0=24 1=3 3=2 4=1 5=1 6=3456 9=1
Convolution b2c2 1 1 b2c1 b2c2 0=24 1=3 4=1 5=1 6=5184
Convolution b2sc 1 1 s2b b2sc 0=24 1=1 3=2 5=1 6=384
Eltwise b2add 2 1 b2c2 b2sc b2add 0=1
Split s3 1 2 b2add s3a s3b
Pooling b3pool 1 1 s3a b3pool 0=0 1=3 2=1 3=1
ConvolutionDepthWise b3dw 1 1 s3b b3dw 0=24 1=5 4=2 5=1 6=600 7=24
Concat b3cat 2 1 b3pool b3dw b3cat 0=0
Convolution y 1 1 b3cat y 0=8 1=1 5=1 6=384
"""
# a VGG-style trunk: two 48-channel convolutions at 192x192 (7 MB each) set the activation floor
VGG = """7767517
12 12
Input data 0 1 data 0=192 1=192 2=3
Convolution c1 1 1 data c1 0=48 1=3 4=1 5=1 6=1296 9=1
Convolution c2 1 1 c1 c2 0=48 1=3 4=1 5=1 6=20736 9=1
Pooling p1 1 1 c2 p1 0=0 1=2 2=2
Convolution c3 1 1 p1 c3 0=64 1=3 4=1 5=1 6=27648 9=1
Convolution c4 1 1 c3 c4 0=64 1=3 4=1 5=1 6=36864 9=1
Pooling p2 1 1 c4 p2 0=0 1=2 2=2
Convolution c5 1 1 p2 c5 0=64 1=3 4=1 5=1 6=36864 9=1
Pooling p3 1 1 c5 p3 0=0 1=2 2=2
Flatten f 1 1 p3 f
InnerProduct fc 1 1 f fc 0=64 1=1 2=2359296 9=1
InnerProduct out 1 1 fc output 0=10 1=1 2=640
"""


def _model(text: str, shape: str, folder: Path, name: str):
    param = NcnnParam.parse(text)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {graph.inputs[0]: parse_input_shape(shape)})
    modelbin = random_modelbin(param, seed=5, storage="fp32")
    paths = folder / f"{name}.param", folder / f"{name}.bin"
    paths[0].write_text(param.format())
    paths[1].write_bytes(modelbin.to_bytes())
    return param, modelbin, graph, shapes, paths


def _write(param, modelbin, folder: Path, name: str) -> tuple[Path, Path]:
    paths = folder / f"{name}.param", folder / f"{name}.bin"
    paths[0].write_text(param.format())
    paths[1].write_bytes(modelbin.to_bytes())
    return paths


def _assert_runs_as_stock(session: Session, param: Path, bin_: Path, blob_in: str, blob_out: str) -> None:
    """Three seeded inputs: the session's output equals stock NCNN's on the original model, and the
    runtime's count holds the budget."""
    for seed in range(1, 4):
        x = np.random.default_rng(seed).standard_normal(session.input_shapes[blob_in]).astype(np.float32)
        ref = run_stock(param, bin_, {blob_in: x}, [blob_out], fp32=False)[blob_out]
        assert relative_error(ref, session.run({blob_in: x})[blob_out]) < TOLERANCE
        assert_counted_within_budget(session.stats())


def _block_names(graph: Graph, shapes) -> list[tuple[str, str]]:
    return [(graph.order[b.first + 1].name, graph.order[b.last].name) for b in spatial.blocks(graph, shapes)]


def test_blocks_run_between_blobs_crossing_alone(tmp_path: Path) -> None:
    _, _, graph, shapes, _ = _model(CHAIN, "1,3,29,37", tmp_path, "chain")
    # the strided layers end segments: blocks start at the input or after one, and end after one or at y
    assert ("c1", "y") in _block_names(graph, shapes) and ("bn", "d1") in _block_names(graph, shapes)
    _, _, graph, shapes, _ = _model(VGG, "1,3,192,192", tmp_path, "vgg")
    assert {end for _, end in _block_names(graph, shapes)} == {"p1", "p2", "p3"}  # Flatten ends the run
    _, _, graph, shapes, _ = _model(RESIDUAL, "1,3,27,31", tmp_path, "residual")
    assert ("stem", "y") in _block_names(graph, shapes) and ("s1", "b2add") in _block_names(graph, shapes)


def _tiled(text: str, shape: str, grid: tuple[int, int], tmp_path: Path, name: str):
    param, modelbin, graph, shapes, original = _model(text, shape, tmp_path, name)
    layers = graph.order[1:]
    tiled_param, tiled_bin, tiled_shapes = spatial.rewrite(param, shapes, layers, graph.inputs[0], graph.outputs[0],
                                                           *grid, modelbin)
    return param, shapes, original, tiled_param, tiled_shapes, _write(tiled_param, tiled_bin, tmp_path, f"{name}_tiled")


@pytest.mark.parametrize("model", ["chain", "residual", "same"])
@pytest.mark.parametrize("grid", [(2, 2), (3, 3), (1, 4)])
def test_a_tiled_block_equals_the_untiled_one_exactly_at_every_border(model: str, grid: tuple[int, int],
                                                                      tmp_path: Path) -> None:
    """With kernels whose sums do not depend on where a pixel lies (direct convolution), every output
    pixel is bit for bit the untiled one's: the halos, the border-only pads, the pooling tails and the
    branches' own crops are right. With NCNN's default kernels (Winograd blocks fall elsewhere in a
    tile), within rounding."""
    text, shape = {"chain": (CHAIN, "1,3,29,37"), "residual": (RESIDUAL, "1,3,27,31"), "same": (SAME, "1,3,29,37")}[model]
    param, shapes, original, tiled_param, tiled_shapes, tiled = _tiled(text, shape, grid, tmp_path, model)
    assert sum(layer.type == "Crop" for layer in tiled_param) >= grid[0] * grid[1]
    assert runtime_only_note(tiled_param) == ""  # stock NCNN runs it
    x = np.random.default_rng(sum(grid)).standard_normal(shapes["x"].numpy()).astype(np.float32)
    direct = {"winograd": False, "sgemm": False}
    ref, got = (run_stock(*files, {"x": x}, ["y"], **direct)["y"] for files in (original, tiled))
    assert got.shape == ref.shape and np.array_equal(got, ref)
    ref, got = (run_stock(*files, {"x": x}, ["y"])["y"] for files in (original, tiled))
    assert relative_error(ref, got) < TOLERANCE
    # the shapes the rewrite states are NCNN's
    measured = infer_shapes(tiled_param, Graph.build(tiled_param), {"x": shapes["x"]}, tiled[1])
    assert {b: measured[b] for b in tiled_shapes} == tiled_shapes


@pytest.mark.parametrize("model", ["chain", "residual"])
def test_a_tiled_int8_block_equals_the_untiled_one_exactly(model: str, tmp_path: Path) -> None:
    """int8 convolutions (dequantized outputs) quantize each tile's input with the layer's one input
    scale and pad it with zeros only at the image border: integer sums, bit for bit the untiled ones."""
    text, shape = {"chain": (CHAIN, "1,3,29,37"), "residual": (RESIDUAL, "1,3,27,31")}[model]
    text = "\n".join(line + " 8=1" if line.startswith("ConvolutionDepthWise") else line
                     for line in int8_of(text).splitlines()) + "\n"
    param, modelbin, graph, shapes, original = _model(text, shape, tmp_path, model)
    assert ("c1", "y") in _block_names(graph, shapes) or ("stem", "y") in _block_names(graph, shapes)
    x = np.random.default_rng(7).standard_normal(shapes["x"].numpy()).astype(np.float32)
    ref = run_stock(*original, {"x": x}, ["y"])["y"]
    for grid in ((2, 2), (3, 3)):
        tiled_param, tiled_bin, _ = spatial.rewrite(param, shapes, graph.order[1:], "x", "y", *grid, modelbin)
        assert sum(layer.params.get_int(8, 0) == 1 for layer in tiled_param) >= grid[0] * grid[1]
        got = run_stock(*_write(tiled_param, tiled_bin, tmp_path, f"{model}_tiled"), {"x": x}, ["y"])["y"]
        assert np.array_equal(got, ref), grid


# two high-resolution stages a per-pixel Softmax across channels (not a layer a tile runs) separates:
# tiling either leaves the other at its floor
TWO_STAGES = """7767517
11 11
Input data 0 1 data 0=128 1=128 2=3
Convolution a1 1 1 data a1 0=24 1=3 4=1 5=1 6=648 9=1
Convolution a2 1 1 a1 a2 0=24 1=3 4=1 5=1 6=5184 9=1
Pooling pa 1 1 a2 pa 0=0 1=2 2=2
Softmax sm 1 1 pa sm 0=0 1=1
Convolution b1 1 1 sm b1 0=96 1=3 4=1 5=1 6=20736 9=1
Convolution b2 1 1 b1 b2 0=96 1=3 4=1 5=1 6=82944 9=1
Pooling pb2 1 1 b2 pb2 0=0 1=2 2=2
Pooling pb 1 1 pb2 pb 0=1 4=1
Flatten f 1 1 pb f
InnerProduct fc 1 1 f output 0=10 1=1 2=960
"""


def test_below_what_one_tiled_block_reaches_two_are_tiled(tmp_path: Path) -> None:
    param, modelbin, graph, shapes, original = _model(TWO_STAGES, "1,3,128,128", tmp_path, "two")
    analyses = analyze(graph, shapes)
    one = min(o.need for o in spatial.options(graph, shapes, analyses, HOST))
    tiler = spatial.Tiler(spatial.TiledModel(param, modelbin, graph, shapes, analyses, ()), HOST)
    both = tiler.smallest_need()
    assert both < 0.8 * one
    budget = (one + both) // 2
    result = slice_model(param, modelbin, graph, shapes, budget, HOST, tiler=tiler)
    assert sorted(t.layers[-1] for t in result.tilings) == ["pa", "pb2"]
    assert spatial.model_need(result.analyses, HOST) <= budget
    tiled = _write(result.param, result.modelbin, tmp_path, "two_tiled")
    for seed in (1, 2):
        x = np.random.default_rng(seed).standard_normal(shapes["data"].numpy()).astype(np.float32)
        ref, got = (run_stock(*files, {"data": x}, ["output"])["output"] for files in (original, tiled))
        assert relative_error(ref, got) < TOLERANCE


def test_below_what_tiling_reaches_the_refusal_names_both_needs(tmp_path: Path) -> None:
    """A budget below the tiled model's smallest need is refused naming the bottleneck's untiled need
    and what tiling brings it to, the lower bound (not 'no tiling fits' beside a larger number)."""
    param, modelbin, graph, shapes, _ = _model(TWO_STAGES, "1,3,128,128", tmp_path, "two")
    tiler = spatial.Tiler(spatial.TiledModel(param, modelbin, graph, shapes, analyze(graph, shapes), ()), HOST)
    tiled = tiler.smallest_need()
    with pytest.raises(UserError) as info:
        slice_model(param, modelbin, graph, shapes, tiled - 1, HOST, tiler=tiler)
    message = str(info.value)
    assert f"spatial tiling of its blocks brings that to {format_size(tiled)}, not below" in message, message
    assert f"no budget below {format_size(tiled)} is feasible" in message, message


def _unet(shape: str, folder: Path):
    return _model(STRUCTURES["unet"].build().format(), shape, folder, "unet")


@pytest.mark.parametrize("grid", [(2, 2), (3, 3), (1, 4)])
def test_a_tiled_unet_equals_the_untiled_one(grid: tuple[int, int], tmp_path: Path) -> None:
    """A UNet is one block from its input to its head (the skips cross the whole network): the tiles
    run the encoder, a transposed convolution and a bilinear Interp up, and the skip Concats, the
    readers of each upsampled blob cropping what the tile's outputs need. On even tile origins (2x2,
    1x4 of 128x128) every pixel is the untiled one's, bit for bit, with direct kernels; elsewhere NCNN's
    transposed convolution rounds its sums in another order, within 1e-6."""
    param, modelbin, graph, shapes, original = _unet("1,3,128,128", tmp_path)
    assert ("enc1a", "head") in _block_names(graph, shapes)
    tiled_param, tiled_bin, tiled_shapes = spatial.rewrite(param, shapes, graph.order[1:], "data", "output", *grid,
                                                           modelbin)
    tiled = _write(tiled_param, tiled_bin, tmp_path, "unet_tiled")
    assert sum(layer.type == "Deconvolution" for layer in tiled_param) == grid[0] * grid[1]
    x = np.random.default_rng(sum(grid)).standard_normal(shapes["data"].numpy()).astype(np.float32)
    direct = {"winograd": False, "sgemm": False}
    ref, got = (run_stock(*files, {"data": x}, ["output"], **direct)["output"] for files in (original, tiled))
    if grid != (3, 3):  # tiles starting at rows/columns 0, 32, 64, 96
        assert np.array_equal(got, ref)
    assert relative_error(ref, got) < 1e-6
    ref, got = (run_stock(*files, {"data": x}, ["output"])["output"] for files in (original, tiled))
    assert relative_error(ref, got) < TOLERANCE
    measured = infer_shapes(tiled_param, Graph.build(tiled_param), {"data": shapes["data"]}, tiled[1])
    assert {b: measured[b] for b in tiled_shapes} == tiled_shapes


def _assert_whole_model_tiled_equals(text: str, name: str, seed: int, tmp_path: Path) -> tuple[Graph, dict]:
    """`text` (input x0 at 29x37, output out) with every layer after its input run as 2x2 and 3x2 tiles
    equals it under direct convolution (bit-level kernels alike); its graph and shapes."""
    param, modelbin, graph, shapes, original = _model(text, "1,3,29,37", tmp_path, name)
    x = np.random.default_rng(seed).standard_normal(shapes["x0"].numpy()).astype(np.float32)
    for grid in ((2, 2), (3, 2)):
        tiled_param, tiled_bin, _ = spatial.rewrite(param, shapes, graph.order[1:], "x0", "out", *grid, modelbin)
        tiled = _write(tiled_param, tiled_bin, tmp_path, f"{name}_tiled")
        direct = {"winograd": False, "sgemm": False}
        ref, got = (run_stock(*files, {"x0": x}, ["out"], **direct)["out"] for files in (original, tiled))
        assert relative_error(ref, got) < 1e-6, grid
    return graph, shapes


@pytest.mark.parametrize("layer", [
    "Interp u 1 1 x y 0=1 1=4.0 2=4.0",               # nearest, by 4
    "Interp u 1 1 x y 0=2 3=58 4=74",                 # bilinear, to twice the size
    "Deconvolution u 1 1 x y 0=8 1=3 3=2 4=1 5=1 6=576",  # stride 2, padded: the tile's outputs are cropped
    "DeconvolutionDepthWise u 1 1 x y 0=8 1=4 3=2 4=1 5=1 6=128 7=8",
])
def test_an_upsampling_layer_in_a_tile_equals_the_whole_one(layer: str, tmp_path: Path) -> None:
    text = f"7767517\n4 4\nInput x0 0 1 x0 0=37 1=29 2=3\nConvolution c 1 1 x0 x 0=8 1=3 4=1 5=1 6=216\n{layer}\n" \
           "Convolution h 1 1 y out 0=4 1=3 4=1 5=1 6=288\n"
    _assert_whole_model_tiled_equals(text, "up", 3, tmp_path)


@pytest.mark.parametrize("region", ["0=0 1=5", "0=1 1=5", "0=1 1=4", "0=1 1=3"])
def test_an_lrn_in_a_tile_equals_the_whole_one(region: str, tmp_path: Path) -> None:
    """LRN over channels (region 0: GoogLeNet's, AlexNet's) normalises each pixel by its own channels: a
    tile runs it as it runs a ReLU. Within a channel (region 1: ZF's, an odd or even window) it borders
    any input with zeros itself: a tile runs it on the rows and columns its outputs need, and its
    reader crops off the outputs the tile's own zeros changed, so no block may end at it."""
    text = "7767517\n4 4\nInput x0 0 1 x0 0=37 1=29 2=3\nConvolution c 1 1 x0 x 0=16 1=3 4=1 5=1 6=432\n" \
           f"LRN n 1 1 x y {region} 2=0.5 3=0.75\nConvolution h 1 1 y out 0=4 1=3 4=1 5=1 6=576\n"
    graph, shapes = _assert_whole_model_tiled_equals(text, "lrn", 4, tmp_path)
    assert _block_names(graph, shapes) == [("c", "h")]
    if region.startswith("0=1"):
        tiles = spatial._geometry(graph.order[1:], shapes, "out", spatial.Region(10, 20, 10, 20))
        size = int(region[-1])
        assert tiles.regions["y"] == spatial.Region(9 - size // 2, 21 + (size - 1 - size // 2), 9 - size // 2,
                                                    21 + (size - 1 - size // 2))
        assert tiles.reads[("h", 0)] == spatial.Region(9, 21, 9, 21)  # the halo the tile's zeros changed is cropped
        lone = text.replace("4 4", "3 3").replace("\nConvolution h 1 1 y out 0=4 1=3 4=1 5=1 6=576", "").replace(" x y ", " x out ")
        _, _, graph, shapes, _ = _model(lone, "1,3,29,37", tmp_path, "lrn_last")
        assert ("c", "n") not in _block_names(graph, shapes)


# ZF's stem: LRN within channels after each strided convolution; Pooling's tail pads 24 to 13
ZF_STEM = """7767517
8 8
Input data 0 1 data 0=192 1=192 2=3
Convolution conv1 1 1 data c1 0=48 1=7 3=2 4=3 5=1 6=7056 9=1
LRN norm1 1 1 c1 n1 0=1 1=3 2=0.5 3=0.75
Pooling pool1 1 1 n1 p1 1=3 2=2 3=1
Convolution conv2 1 1 p1 c2 0=64 1=5 3=2 4=2 5=1 6=76800 9=1
LRN norm2 1 1 c2 n2 0=1 1=3 2=0.5 3=0.75
Pooling pool2 1 1 n2 p2 1=3 2=2 3=1
InnerProduct fc 1 1 p2 output 0=10 1=1 2=108160
"""


def test_a_zf_stem_runs_its_lrns_in_tiles_at_its_smallest_budget(tmp_path: Path) -> None:
    """At its smallest budget the stem's LRNs run inside tiles, and the runtime equals stock NCNN on
    inputs other than prepare's."""
    _, _, _, _, (param_path, bin_path) = _model(ZF_STEM, "1,3,192,192", tmp_path, "zf")
    out = tmp_path / "sliced"
    assert slice_main([str(param_path), "--budget", "min", "--threads", "2", "-o", str(out)]) == 0
    tiled = [line.split()[1] for line in (out / "zf.flexnn.param").read_text().splitlines()[2:] if line.startswith("LRN")]
    assert any(name.startswith("norm1.flexnn_t") for name in tiled), tiled
    session = Session(out / "zf.flexnn.plan.json")
    for seed in range(1, 4):
        x = np.random.default_rng(seed).uniform(-1, 1, (3, 192, 192)).astype(np.float32) * seed
        ref = run_stock(param_path, bin_path, {"data": x}, ["output"], fp32=False)["output"]
        assert relative_error(ref, session.run({"data": x})["output"]) < TOLERANCE
        assert_counted_within_budget(session.stats())


def test_a_channel_shuffle_in_a_tile_equals_the_whole_one(tmp_path: Path) -> None:
    """ShuffleChannel permutes each pixel's channels (ShuffleNet's units): a tile runs it as it runs a
    ReLU, so a ShuffleNet stage is one block."""
    text = "7767517\n4 4\nInput x0 0 1 x0 0=37 1=29 2=3\nConvolution c 1 1 x0 x 0=12 1=3 4=1 5=1 6=324\n" \
           "ShuffleChannel s 1 1 x y 0=3\nConvolution h 1 1 y out 0=4 1=3 4=1 5=1 6=432\n"
    graph, shapes = _assert_whole_model_tiled_equals(text, "shuffle", 6, tmp_path)
    assert _block_names(graph, shapes) == [("c", "h")]


# ShuffleNetV2's unit: the channels split (uneven here: 4 and 8), one part through a padded depthwise
# convolution, concatenated back and shuffled
SLICED_UNIT = ("7767517\n8 10\nInput x0 0 1 x0 0=37 1=29 2=3\nConvolution c 1 1 x0 x 0=12 1=3 4=1 5=1 6=324\n"
               "Slice s 1 2 x a b -23300=2,4,-233\nConvolutionDepthWise d 1 1 b e 0=8 1=3 4=1 5=1 6=72 7=8\n"
               "ReLU r 1 1 e f\nConcat cat 2 1 a f y\nShuffleChannel sh 1 1 y z 0=2\n"
               "Convolution h 1 1 z out 0=4 1=3 4=1 5=1 6=432\n")


def test_a_channel_slice_in_a_tile_equals_the_whole_one(tmp_path: Path) -> None:
    """A Slice along channels cuts each pixel's channels: every part of a tile holds the tile's region
    (the union of what their readers read), so a ShuffleNetV2 stage is one block; tiles' shape hints
    are each part's own."""
    graph, shapes = _assert_whole_model_tiled_equals(SLICED_UNIT, "slice", 8, tmp_path)
    assert _block_names(graph, shapes) == [("c", "h")]
    param, modelbin, graph, shapes, _ = _model(SLICED_UNIT, "1,3,29,37", tmp_path, "slice_hinted")
    for layer in param:
        layer.params.set(SHAPE_HINT_ID, [v for top in layer.tops for v in (3, shapes[top].w, shapes[top].h, shapes[top].c)])
    tiled_param, tiled_bin, _ = spatial.rewrite(param, shapes, graph.order[1:], "x0", "out", 2, 2, modelbin)
    files = _write(tiled_param, tiled_bin, tmp_path, "slice_hinted_tiled")
    measured = infer_shapes(tiled_param, Graph.build(tiled_param), {"x0": shapes["x0"]}, files[1])
    slices = [layer for layer in tiled_param if layer.type == "Slice"]
    assert len(slices) == 4
    for layer in slices:
        assert layer.params.get_array(SHAPE_HINT_ID) == [v for top in layer.tops for v in
                                                        (3, measured[top].w, measured[top].h, measured[top].c)]


@pytest.mark.parametrize("padding", [
    "Padding pad 1 1 x y 0=1 1=2 2=1 3=2 5=0.5",  # BlazeFace's before a strided convolution, with a value
    "Padding pad 1 1 x y 8=4",                     # BlazeFace's shortcut: channels added behind
])
def test_a_constant_padding_in_a_tile_equals_the_whole_one(padding: str, tmp_path: Path) -> None:
    """A tile pads with the constant only where it meets the image border; inside, it reads its halo."""
    text = f"7767517\n4 4\nInput x0 0 1 x0 0=37 1=29 2=3\nConvolution c 1 1 x0 x 0=8 1=3 4=1 5=1 6=216\n{padding}\n" \
           "ConvolutionDepthWise h 1 1 y out 0=CH 1=3 3=2 5=1 6=KW 7=CH\n"
    channels = 12 if "8=4" in padding else 8
    text = text.replace("CH", str(channels)).replace("KW", str(9 * channels))
    graph, shapes = _assert_whole_model_tiled_equals(text, "pad", 5, tmp_path)
    assert _block_names(graph, shapes) == [("c", "h")]
    _, _, graph, shapes, _ = _model(text.replace("pad 1 1 x y", "pad 1 1 x y 4=1"), "1,3,29,37", tmp_path, "edge")
    assert ("c", "h") not in _block_names(graph, shapes)  # replicated borders: a tile's are not the image's


@pytest.mark.parametrize("upsampling", [
    "Interp u 1 1 x y 0=2 1=2.0 2=2.0 6=1",       # align_corners
    "Interp u 1 1 x y 0=3 1=2.0 2=2.0",           # bicubic
    "Interp u 1 1 x y 0=1 1=3.0 2=3.0",           # not a power of two
    "Interp u 1 1 x y 0=1 1=2.01 2=2.01",         # twice the size, but NCNN samples at 1 / 2.01
    "Deconvolution u 1 1 x y 0=8 1=1 3=2 6=64",  # a kernel narrower than its stride: outputs no input reaches
])
def test_upsampling_a_tile_cannot_reproduce_ends_a_block(upsampling: str, tmp_path: Path) -> None:
    text = f"7767517\n4 4\nInput x0 0 1 x0 0=16 1=16 2=3\nConvolution c 1 1 x0 x 0=8 1=3 4=1 6=216\n" \
           f"{upsampling}\nConvolution h 1 1 y out 0=4 1=3 4=1 6=288\n"
    _, _, graph, shapes, _ = _model(text, "1,3,16,16", tmp_path, "up")
    assert all(end != "h" or start == "h" for start, end in _block_names(graph, shapes))


def test_no_block_ends_at_an_upsampling_layer(tmp_path: Path) -> None:
    """A tile's sink is its grid cell: an upsampling layer's copy writes more than that."""
    text = "7767517\n4 4\nInput x0 0 1 x0 0=16 1=16 2=3\nConvolution c 1 1 x0 x 0=8 1=3 4=1 6=216\n" \
           "Interp u 1 1 x y 0=1 1=2.0 2=2.0\nSoftmax s 1 1 y out 0=0\n"
    _, _, graph, shapes, _ = _model(text, "1,3,16,16", tmp_path, "up")
    assert all(end != "u" for _, end in _block_names(graph, shapes))


# int8 from q on: a strided depthwise and a padded 3x3 convolution requantize (param 8 > 100), h
# dequantizes; the block from q to dw ends at an int8 blob (y), the one from c to h starts at it
INT8_CHAIN = """7767517
5 5
Input x0 0 1 x0 0=37 1=29 2=3
Convolution q 1 1 x0 x 0=8 1=3 4=1 6=216 8=102
ConvolutionDepthWise dw 1 1 x y 0=8 1=3 3=2 4=1 6=72 7=8 8=101
Convolution c 1 1 y z 0=16 1=3 4=1 6=1152 8=102
Convolution h 1 1 z out 0=4 1=3 4=1 6=576 8=2
"""
# q's int8 output read by a padded 3x3 and a 1x1 convolution: a tile's 1x1 reads a crop of it
INT8_BRANCHES = """7767517
7 9
Input x0 0 1 x0 0=37 1=29 2=3
Convolution q 1 1 x0 x 0=8 1=1 6=24 8=102
Split s 1 2 x xa xb
Convolution c 1 1 xa y 0=8 1=3 4=1 6=576 8=2
Convolution d 1 1 xb z 0=8 1=1 6=64 8=2
BinaryOp add 2 1 y z sum 0=0
Convolution h 1 1 sum out 0=4 1=3 4=1 6=288
"""


def tiled_blocks(text: str, blocks: list[tuple[str, str]], grid: tuple[int, int], tmp_path: Path
                 ) -> tuple[NcnnParam, ModelBin, dict[str, BlobShape]]:
    """`text` (input x0 at 29x37) with each of `blocks` (first, last layer) rewritten as `grid` tiles, one
    after another: the tiled model's param, weights and blob shapes."""
    param, modelbin, graph, shapes, _ = _model(text, "1,3,29,37", tmp_path, "tiled_blocks")
    for first, last in blocks:
        names = [layer.name for layer in param]
        layers = param.layers[names.index(first):names.index(last) + 1]
        param, modelbin, shapes = spatial.rewrite(param, shapes, layers, layers[0].bottoms[0], layers[-1].tops[0], *grid, modelbin)
    return param, modelbin, shapes


@pytest.mark.parametrize("text, blocks, grid", [
    (INT8_CHAIN, [("q", "dw")], (2, 2)), (INT8_CHAIN, [("c", "h")], (2, 2)), (INT8_CHAIN, [("c", "h")], (3, 2)),
    (INT8_CHAIN, [("q", "dw"), ("c", "h")], (2, 2)), (INT8_BRANCHES, [("q", "h")], (2, 2)),
], ids=["to-int8", "from-int8-2x2", "from-int8-3x2", "from-int8-tiles", "crops-int8"])
def test_tiles_crop_and_concatenate_int8_blobs(text: str, blocks: list[tuple[str, str]], grid: tuple[int, int],
                                               tmp_path: Path) -> None:
    """A block may start and end at a requantizing layer's int8 output, even as an earlier block's
    tiles concatenated, and its tiles may crop one: the Crops and Concats of int8 blobs carry
    REFERENCE_LAYER_ID, so the runtime computes them with NCNN's reference Crop and Concat (the CPU
    ones read an int8 blob's packs as floats, and crash), the others do not. The tiled model, run by
    the runtime, equals stock NCNN's int8 output on the original model."""
    graph, shapes, original = _model(text, "1,3,29,37", tmp_path, "int8")[2:]
    assert set(blocks) <= set(_block_names(graph, shapes))
    assert [o for o in spatial.options(graph, shapes, analyze(graph, shapes), HOST) if blocks[0][0] in o.layers]
    param, modelbin, shapes = tiled_blocks(text, blocks, grid, tmp_path)
    int8_blobs = {"x", "y", "z"} if text == INT8_CHAIN else {"x", "xa", "xb"}
    marked = {layer.name: (REFERENCE_LAYER_ID in layer.params, layer.bottoms[0].split(".flexnn")[0] in int8_blobs)
              for layer in param if layer.type in ("Crop", "Concat")}
    assert any(int8 for _, int8 in marked.values()) and all(mark == int8 for mark, int8 in marked.values()), marked
    # stock NCNN would read those layers' int8 packs as floats: slice says the model is the runtime's
    assert f"{sum(mark for mark, _ in marked.values())} Crop/Concat layers of int8" in runtime_only_note(param)
    plan = tmp_path / "int8_tiled.plan.json"
    write_plan_file(prepare_model(*_write(param, modelbin, tmp_path, "int8_tiled"), 1 << 30), plan)
    session = Session(plan)
    for seed in range(1, 4):  # prepare fed seed 0's standard normal
        x = np.random.default_rng(seed).standard_normal(shapes["x0"].numpy()).astype(np.float32) * seed
        ref = run_stock(*original, {"x0": x}, ["out"], fp32=False)["out"]
        assert relative_error(ref, session.run({"x0": x})["out"]) < TOLERANCE, seed


def test_a_requantizing_layer_runs_in_a_tile_like_any_layer(tmp_path: Path) -> None:
    """Inside a tile a requantizing layer's int8 output feeds the next layer as it does untiled: the
    tiled model, with no Crop or Concat of int8, equals the whole one in stock NCNN."""
    text = "7767517\n4 4\nInput x0 0 1 x0 0=37 1=29 2=3\nConvolution q 1 1 x0 x 0=8 1=1 6=24 8=102\n" \
           "Convolution c 1 1 x y 0=8 1=3 4=1 6=576 8=2\nConvolution h 1 1 y out 0=4 1=3 4=1 6=288\n"
    _assert_whole_model_tiled_equals(text, "q", 6, tmp_path)


def test_tiles_hold_less_than_the_whole_layers(tmp_path: Path) -> None:
    param, modelbin, graph, shapes, _ = _model(VGG, "1,3,192,192", tmp_path, "vgg")
    analyses = analyze(graph, shapes)
    whole = max(a.live_bytes for a in analyses)
    assert whole >= 2 * shapes["c1"].nbytes  # c2 reads and writes a 7 MB blob
    option = min(spatial.options(graph, shapes, analyses, HOST), key=lambda o: o.need)
    tiled_param, _, tiled_shapes = option.apply(param, modelbin, graph, shapes)
    tiled = analyze(Graph.build(tiled_param), tiled_shapes)
    assert max(a.live_bytes for a in tiled) < whole / 2
    assert option.recompute > 1


def test_below_the_activation_floor_the_slicer_tiles_and_the_runtime_equals_stock(tmp_path: Path) -> None:
    param, modelbin, graph, shapes, (param_path, bin_path) = _model(VGG, "1,3,192,192", tmp_path, "vgg")
    untiled = slice_model(param, modelbin, graph, shapes, 1 << 40, HOST)
    assert not untiled.tilings
    out = tmp_path / "sliced"
    budget = 11_000_000
    assert slice_main([str(param_path), "--budget", str(budget), "--threads", "2", "-o", str(out)]) == 0
    session = Session(out / "vgg.flexnn.plan.json")
    assert session.budget == budget
    floor = activation_floor(Session(_prepared_untiled(param_path, tmp_path)).profile)
    assert budget < floor, (budget, floor)
    sliced = (out / "vgg.flexnn.param").read_text()
    assert "Crop" in sliced and "flexnn_t1_1" in sliced
    for seed in range(1, 6):
        x = np.random.default_rng(seed).standard_normal((3, 192, 192)).astype(np.float32) * seed
        ref = run_stock(param_path, bin_path, {"data": x}, ["output"], fp32=False)["output"]
        assert relative_error(ref, session.run({"data": x})["output"]) < TOLERANCE
        assert_counted_within_budget(session.stats())


# the VGG trunk of an SSD: its PriorBox reads the image's size at the end, so the input stays live
# beside every block (the 6 MB convolutions at 160x160 still set the floor)
SSD_TRUNK = """7767517
9 11
Input data 0 1 data 0=160 1=160 2=3
Split sd 1 2 data d0 d1
Convolution c1 1 1 d0 c1 0=48 1=3 4=1 5=1 6=1296 9=1
Convolution c2 1 1 c1 c2 0=48 1=3 4=1 5=1 6=20736 9=1
Pooling p1 1 1 c2 p1 0=0 1=2 2=2
Convolution c3 1 1 p1 c3 0=16 1=3 4=1 5=1 6=6912 9=1
Split sf 1 2 c3 f0 f1
Convolution output 1 1 f0 output 0=8 1=3 4=1 5=1 6=1152
PriorBox priors 2 1 f1 d1 priors -23300=1,30.0 -23302=1,2.0 9=-233 10=-233 13=0.5
"""


def test_a_model_reading_its_input_again_at_the_end_is_tiled_from_its_first_layer(tmp_path: Path) -> None:
    """An SSD's input is live to its last PriorBox: blocks run beside it, from the first convolution."""
    param, modelbin, graph, shapes, (param_path, bin_path) = _model(SSD_TRUNK, "1,3,160,160", tmp_path, "ssd")
    assert ("c1", "p1") in _block_names(graph, shapes)
    budget = 9_000_000
    floor = activation_floor(Session(_prepared_untiled(param_path, tmp_path)).profile)
    assert budget < floor, (budget, floor)
    out = tmp_path / "sliced"
    assert slice_main([str(param_path), "--budget", str(budget), "--threads", "2", "-o", str(out)]) == 0
    assert "c1.flexnn_t1_1" in (out / "ssd.flexnn.param").read_text()
    session = Session(out / "ssd.flexnn.plan.json")
    for seed in range(1, 4):
        x = np.random.default_rng(seed).standard_normal((3, 160, 160)).astype(np.float32)
        ref = run_stock(param_path, bin_path, {"data": x}, ["output", "priors"], fp32=False)
        got = session.run({"data": x})
        for name in ("output", "priors"):
            assert relative_error(ref[name], got[name].reshape(ref[name].shape)) < TOLERANCE, name
        assert_counted_within_budget(session.stats())


def _prepared_untiled(param_path: Path, tmp_path: Path, *args: str) -> Path:
    """The model sliced for a budget that needs no tiling: its profile's activation floor is the model's."""
    out = tmp_path / "untiled"
    assert slice_main([str(param_path), "--budget", "200MB", "--threads", "2", "-o", str(out), *args]) == 0
    return out / f"{param_path.stem}.flexnn.plan.json"


def test_a_unet_below_its_activation_floor_runs_tiled_equal_to_stock(tmp_path: Path) -> None:
    """At 256x256 the UNet's floor (its full-resolution skip, upsampled blob and their concatenation
    alive at once) is above 16 MB; tiled whole, it runs in 16 MB, equal to stock NCNN."""
    _, _, _, _, (param_path, bin_path) = _unet("1,3,256,256", tmp_path)
    shape = ["--input-shape", "1,3,256,256"]
    floor = activation_floor(Session(_prepared_untiled(param_path, tmp_path, *shape)).profile)
    budget = 16_000_000
    assert budget < floor, (budget, floor)
    out = tmp_path / "sliced"
    assert slice_main([str(param_path), "--budget", str(budget), "--threads", "2", "-o", str(out), *shape]) == 0
    sliced = (out / "unet.flexnn.param").read_text()
    assert "up2.flexnn_t1_1" in sliced and "up1.flexnn_t1_1" in sliced
    _assert_runs_as_stock(Session(out / "unet.flexnn.plan.json"), param_path, bin_path, "data", "output")


def test_analyze_lists_the_tiling_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, _, _, (param_path, _) = _model(VGG, "1,3,192,192", tmp_path, "vgg")
    assert slice_main([str(param_path), "--analyze", "--budget", "11MB"]) == 0
    out = capsys.readouterr().out
    assert "spatial tiling or split" in out and "c1..p1" in out and "3x3" in out


def test_a_hinted_model_keeps_true_shape_hints(tmp_path: Path) -> None:
    """NCNN reads shape hints (param -23330) when it builds a layer: the tiles' hints are their own shapes."""
    param, modelbin, graph, shapes, _ = _model(CHAIN, "1,3,29,37", tmp_path, "chain")
    for layer in param:
        s = shapes[layer.tops[0]]
        layer.params.set(SHAPE_HINT_ID, [3, s.w, s.h, s.c])
    tiled_param, tiled_bin, tiled_shapes = spatial.rewrite(param, shapes, graph.order[1:], "x", "y", 2, 3, modelbin)
    files = _write(tiled_param, tiled_bin, tmp_path, "hinted")
    measured = infer_shapes(tiled_param, Graph.build(tiled_param), {"x": shapes["x"]}, files[1])
    hinted = [layer for layer in tiled_param if SHAPE_HINT_ID in layer.params and layer.type != "Input"]
    assert len(hinted) > 2 * 3 * 9
    for layer in hinted:
        dims, w, h, c = layer.params.get_array(SHAPE_HINT_ID)
        assert (dims, w, h, c) == (3, measured[layer.tops[0]].w, measured[layer.tops[0]].h, measured[layer.tops[0]].c)


@pytest.mark.parametrize("name", corpus())
def test_an_options_need_bounds_its_tiled_models_analysis(name: str, corpus_files) -> None:
    """The need each option is costed at (tile by tile) is at least what the slicer then finds in the
    tiled model: at the smallest budget it names, every layer of the tiled model fits its limit."""
    files = corpus_files(name)
    param = read_param(files.param)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {graph.inputs[0]: parse_input_shape(",".join(map(str, files.input_shape)))},
                          files.bin)
    modelbin = read_bin(param, files.bin)
    for option in spatial.options(graph, shapes, analyze(graph, shapes), HOST):
        tiled_param, _, tiled_shapes = option.apply(param, modelbin, graph, shapes)
        tiled = analyze(Graph.build(tiled_param), tiled_shapes)
        assert max(a.live_bytes + smallest_working_set(a, HOST) for a in tiled) <= option.need, option


def test_a_budget_the_untiled_model_fits_is_sliced_as_without_tiling(tmp_path: Path) -> None:
    """Tiling options lower the smallest budget, never what a budget above the untiled smallest gets
    (the same rewrite, the same streamed share)."""
    param, modelbin, graph, shapes, _ = _model(VGG, "1,3,192,192", tmp_path, "vgg")
    stream = StreamModel(6.5e9, 50e9, 25e9, 2)
    model = spatial.TiledModel(param, modelbin, graph, shapes, analyze(graph, shapes), ())
    off = spatial.Tiler(model, HOST, enabled=False)
    untiled = slice_model(param, modelbin, graph, shapes, 1 << 40, HOST, tiler=off).min_budget
    assert slice_model(param, modelbin, graph, shapes, 1 << 40, HOST).min_budget < untiled
    for budget in (untiled, untiled * 5 // 4):
        plain = slice_model(param, modelbin, graph, shapes, budget, HOST, stream=stream, tiler=off)
        with_options = slice_model(param, modelbin, graph, shapes, budget, HOST, stream=stream)
        assert not with_options.tilings and with_options.streamed_share == plain.streamed_share
        assert with_options.param.format() == plain.param.format()


# Caffe's TensorFlow-SAME emulation (MobileNetV2-SSDLite): a Slice cuts a margin row off, and a Noop
# with no outputs (Caffe's Silence) consumes the margin, so no blob is left unread; NCNN never runs it
SILENCED = """7767517
7 7
Input x 0 1 x 0=64 1=63 2=3
Convolution c1 1 1 x c1 0=32 1=3 5=1 6=864 9=1
Slice s 1 2 c1 margin body -23300=2,1,-233 1=1
Convolution c2 1 1 body c2 0=32 1=3 4=1 5=1 6=9216 9=1
Convolution c3 1 1 c2 c3 0=32 1=3 4=1 5=1 6=9216 9=1
Convolution y 1 1 c3 y 0=4 1=1 5=1 6=128
Noop silence 1 0 margin
"""


def test_a_layer_without_outputs_is_never_tiled_and_the_model_runs_at_its_smallest_budget(tmp_path: Path) -> None:
    _, _, graph, _, (param_path, bin_path) = _model(SILENCED, "1,3,63,64", tmp_path, "silenced")
    assert graph.outputs == ["y"]
    out = tmp_path / "sliced"
    assert slice_main([str(param_path), "--budget", "min", "--threads", "2", "-o", str(out)]) == 0
    _assert_runs_as_stock(Session(out / "silenced.flexnn.plan.json"), param_path, bin_path, "x", "y")


# TensorFlow's SAME padding of strided convolutions as converters write it (MobileNetV2-SSDLite):
# pads of 2 on every side, then the first row and column cut off for a Silence to read
MARGINS = """7767517
9 11
Input x 0 1 x 0=97 1=96 2=3
Convolution c1 1 1 x c1/pad 0=32 1=3 3=2 4=2 5=1 6=864
Slice s1 1 2 c1/pad m1 c1/tmp -23300=2,1,-233 1=1
Slice s2 1 2 c1/tmp m2 c1 -23300=2,1,-233 1=2
Clip r1 1 1 c1 r1 0=0.000000e+00 1=6.000000e+00
ConvolutionDepthWise dw 1 1 r1 dw/pad 0=32 1=3 3=2 4=2 5=1 6=288 7=32
Slice s3 1 2 dw/pad m3 dw -23300=2,1,-233 1=-2
Convolution y 1 1 dw y 0=8 1=1 5=1 6=256
Noop silence 3 0 m1 m2 m3
"""


def test_margins_cut_off_a_convolution_fold_into_its_pads(tmp_path: Path) -> None:
    param, modelbin, _, _, (param_path, bin_path) = _model(MARGINS, "1,3,96,97", tmp_path, "margins")
    folded = fold_margins(param)
    assert [layer.type for layer in folded] == ["Input", "Convolution", "Clip", "ConvolutionDepthWise", "Convolution"]
    pads = {layer.name: tuple(layer.params.get_int(i, -1) for i in (4, 15, 14, 16)) for layer in folded}
    assert pads["c1"] == (0, 2, 0, 2) and pads["dw"] == (2, 2, 0, 2)  # left, right, top, bottom
    folded_path, folded_bin = _write(folded, modelbin, tmp_path, "folded")  # the same weights in the same order
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((3, 96, 97)).astype(np.float32)
        ref = run_stock(param_path, bin_path, {"x": x}, ["y"])["y"]
        got = run_stock(folded_path, folded_bin, {"x": x}, ["y"])["y"]
        assert ref.shape == got.shape == (8, 24, 26) and relative_error(ref, got) < 1e-6


@pytest.mark.parametrize("change", ["the margin an output", "a pad short of a stride"])
def test_other_slices_are_not_folded(change: str) -> None:
    text = (MARGINS.replace("Noop silence 3 0 m1 m2 m3", "Noop silence 2 0 m1 m2")
            if change == "the margin an output" else MARGINS.replace("3=2 4=2 5=1 6=864", "3=2 4=1 5=1 6=864"))
    folded = fold_margins(NcnnParam.parse(text))
    kept = "s3" if change == "the margin an output" else "s1"
    assert kept in [layer.name for layer in folded]


def test_a_strided_convolution_with_tensorflow_margins_is_tiled_at_its_smallest_budget(tmp_path: Path) -> None:
    _, _, _, _, (param_path, bin_path) = _model(MARGINS, "1,3,96,97", tmp_path, "margins")
    out = tmp_path / "sliced"
    assert slice_main([str(param_path), "--budget", "min", "--threads", "2", "-o", str(out)]) == 0
    sliced = read_param(out / "margins.flexnn.param")
    assert not any(layer.type in ("Slice", "Noop") for layer in sliced)
    assert sum(layer.type == "ConvolutionDepthWise" for layer in sliced) > 1  # tiles run copies of the block
    _assert_runs_as_stock(Session(out / "margins.flexnn.plan.json"), param_path, bin_path, "x", "y")

