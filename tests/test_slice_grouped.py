"""Grouped convolutions (issue 13): NCNN runs a ConvolutionDepthWise with 1 < group < channels as one
Convolution per group and holds every group's transformed weights at once; under a budget that does
not hold them the slicer runs the groups apart (Split -> per group a Crop of its channels ->
Convolution -> Concat), each group cut like any Convolution. Depthwise convolutions stay whole. Stock
NCNN runs the result to the original's outputs, and so does the runtime at the smallest budget."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn.analysis import GROUPED, Cost, FixedModel, GroupedConvModel, analyze
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.ncnn_model import Graph, NcnnParam, read_param
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.prepare import prepare_model
from flexnn_ncnn.slicing import Target, slice_model, spatial
from flexnn_ncnn.slicing.policy import LayerDecision
from flexnn_ncnn.slicing.rewrite import apply
from flexnn_ncnn.slicing.streaming import StreamModel
from helpers import assert_counted_within_budget
from model_helpers import random_input, relative_error, written_text_model
from test_runtime import assert_close
from test_unseen_inputs import sliced_session

pytest.importorskip("ncnn")

# AlexNet's conv4 and head in small: a 3x3 conv of two groups, a 1x1 conv of four groups (ShuffleNet
# v1's), a depthwise conv, a plain one and an FC layer whose weights (19 MB) a small budget streams
GROUPED_MODEL = """7767517
6 6
Input x 0 1 x 0=12 1=12 2=256
ConvolutionDepthWise g2 1 1 x g2 0=256 1=3 4=1 5=1 6=294912 7=2 9=1
ConvolutionDepthWise g4 1 1 g2 g4 0=64 1=1 5=1 6=4096 7=4
ConvolutionDepthWise dw 1 1 g4 dw 0=64 1=3 4=1 5=1 6=576 7=64
Convolution out 1 1 dw y 0=8 1=1 5=1 6=512
InnerProduct fc 1 1 y z 0=4096 1=1 2=4718592
"""
SHAPE = (1, 256, 12, 12)
SHAPE_REGNET = (1, 48, 40, 40)
TARGET = Target("host", 16)
TOLERANCE = 1e-4


def _model(tmp_path: Path):
    return written_text_model(GROUPED_MODEL, SHAPE, 5, tmp_path)


def test_grouped_convolutions_are_costed_per_group_and_depthwise_ones_not(tmp_path: Path) -> None:
    _, _, graph, shapes = _model(tmp_path)
    models = {a.layer.name: a.model for a in analyze(graph, shapes)}
    g2, g4 = models["g2"], models["g4"]
    assert isinstance(g2, GroupedConvModel) and isinstance(g4, GroupedConvModel)
    assert (g2.groups, g2.group.cin, g2.group.cout, g2.rows) == (2, 128, 128, 128)
    assert (g4.groups, g4.group.cin, g4.group.cout) == (4, 64, 16)
    assert isinstance(models["dw"], FixedModel)
    assert g2.kernels[0] == GROUPED
    # NCNN holds every group's weights; a group run apart holds its own, beside its channels and the outputs
    whole = g2.group.cost(g2.group.kernels[0], g2.rows)
    assert g2.cost(GROUPED, g2.rows).weights == 2 * whole.weights
    apart = g2.cost("im2col_gemm", 16)
    assert apart.weights * 16 == g2.group.cost("im2col_gemm", 128).weights * 2 and apart.weights < whole.weights / 4


# a depthwise conv with a channel multiplier, an int8 grouped conv and one whose param 0 is an array
OTHERS = """7767517
4 4
Input x 0 1 x 0=12 1=12 2=32
ConvolutionDepthWise mult 1 1 x mult 0=64 1=3 4=1 5=1 6=576 7=32
ConvolutionDepthWise q 1 1 mult q 0=64 1=1 5=1 6=2048 7=2 8=1
Convolution bad 1 1 q y -23300=2,8,8 1=1 6=512
"""


def test_depthwise_int8_grouped_layers_stay_whole_and_an_unreadable_param_names_its_layer(tmp_path: Path) -> None:
    _, _, graph, shapes = written_text_model(OTHERS.replace("-23300=2,8,8", "0=8"), (1, 32, 12, 12), 5, tmp_path)
    models = {a.layer.name: a.model for a in analyze(graph, shapes)}
    assert not isinstance(models["mult"], GroupedConvModel) and not isinstance(models["q"], GroupedConvModel)
    bad = Graph.build(NcnnParam.parse(OTHERS))  # the same blobs, so the same shapes
    with pytest.raises(UserError, match=r"layer bad \(Convolution\): parameter 0 is \[8, 8\], expected a number"):
        analyze(bad, shapes)


def test_a_tight_budget_runs_the_groups_apart_and_stock_ncnn_runs_the_result(tmp_path: Path) -> None:
    param, modelbin, graph, shapes = _model(tmp_path)
    untiled = spatial.Tiler(spatial.TiledModel(param, modelbin, graph, shapes, analyze(graph, shapes), ()), TARGET,
                            enabled=False)
    generous = slice_model(param, modelbin, graph, shapes, 1 << 40, TARGET, tiler=untiled)
    assert not generous.sliced and {d.kernel for d in generous.decisions if d.type == "ConvolutionDepthWise"} == {GROUPED}
    tight = slice_model(param, modelbin, graph, shapes, generous.min_budget, TARGET, tiler=untiled)
    g2 = next(d for d in tight.decisions if d.layer == "g2")
    assert g2.kernel != GROUPED and g2.slices > 1 and len(g2.sublayers) == 2 * g2.slices
    layers = {layer.name: layer for layer in tight.param}
    assert "g2" not in layers and layers["dw"].type == "ConvolutionDepthWise"
    assert [layers[f"g2.flexnn_group_crop{i}"].type for i in range(2)] == ["Crop", "Crop"]
    assert all(layers[name].type == "Convolution" for name in g2.sublayers)
    (tmp_path / "s.param").write_text(tight.param.format())
    with open(tmp_path / "s.bin", "wb") as f:
        tight.modelbin.write(f)
    feeds = {"x": random_input(SHAPE)}
    blobs = ["g2", "g4", "y", "z"]
    ref = run_stock(tmp_path / "a.param", tmp_path / "a.bin", feeds, blobs)
    got = run_stock(tmp_path / "s.param", tmp_path / "s.bin", feeds, blobs)
    assert all(relative_error(ref[b], got[b]) <= TOLERANCE for b in blobs)


def test_a_streamed_grouped_convolution_runs_its_groups_apart_to_load_them_pre_transformed(tmp_path: Path) -> None:
    """Where the grouped layer fits but its weights stream on every inference: NCNN's grouped layer would
    transform every group's raw weights on every load, a group's Convolution loads pre-transformed ones."""
    param, modelbin, graph, shapes = _model(tmp_path)
    untiled = spatial.Tiler(spatial.TiledModel(param, modelbin, graph, shapes, analyze(graph, shapes), ()), TARGET,
                            enabled=False)
    budget = 12_000_000  # holds g2 grouped (9.9 MB estimated), not every weight as well
    pinned = slice_model(param, modelbin, graph, shapes, budget, TARGET, tiler=untiled)
    assert next(d for d in pinned.decisions if d.layer == "g2").kernel == GROUPED
    streamed = slice_model(param, modelbin, graph, shapes, budget, TARGET, tiler=untiled, stream=StreamModel())
    assert 0 < streamed.streamed_share < 1
    g2 = next(d for d in streamed.decisions if d.layer == "g2")
    assert g2.kernel != GROUPED and "groups apart" in g2.reason and g2.after.total <= g2.limit, g2
    # g4's weights (17 KB) are less than its input and output, which running it apart would copy
    assert next(d for d in streamed.decisions if d.layer == "g4").kernel == GROUPED
    assert {layer.type for layer in streamed.param if layer.name.startswith("g2.")} == {"Split", "Crop", "Convolution", "Concat"}


def test_a_budget_below_what_the_grouped_layer_holds_slices_and_the_runtime_equals_stock(tmp_path: Path) -> None:
    """`slice` on the host (measured kernels, prepared and planned) at 5 MB, which NCNN's grouped conv
    alone exceeds (7.9 MB measured), run on unseen inputs."""
    _model(tmp_path)
    param, bin_ = tmp_path / "a.param", tmp_path / "a.bin"
    session = sliced_session(param, bin_, SHAPE, 5_000_000, tmp_path / "min", "--threads", "2")
    decisions = {d["layer"]: d for d in json.loads((tmp_path / "min" / "a.flexnn.slicing.json").read_text())["layers"]}
    grouped = decisions["g2"]["before"]
    assert decisions["g2"]["kernel"] != GROUPED
    assert session.budget < grouped["weights"] + grouped["intermediates"], (session.budget, grouped)
    graph = Graph.build(read_param(param))
    for seed in range(1, 6):
        x = np.random.default_rng(seed).standard_normal(SHAPE[1:]).astype(np.float32)
        ref = run_stock(param, bin_, {"x": x}, graph.outputs, fp32=False)
        got = session.run({"x": x})
        assert_close(got["z"], ref["z"])
        assert_counted_within_budget(session.stats())



# RegNet's grouped 3x3: groups of 8 of 48 channels, which NCNN packs by 16 on AVX-512 (by 8 or 4 elsewhere)
REGNET_BLOCK = """7767517
2 2
Input x 0 1 x 0=40 1=40 2=48
ConvolutionDepthWise g 1 1 x y 0=48 1=3 3=2 4=1 5=1 6=3456 7=6 9=1
"""


def test_a_group_off_the_input_s_pack_is_cropped_through_the_aligned_channels_around_it(tmp_path: Path) -> None:
    """NCNN's Crop of channels off the input's pack unpacks the whole input first: each group of 8 is
    cropped from the 16 channels around it, so no step holds an unpacked copy of the whole input (the
    profile prepare records, on a host packing by 16 or less), and stock NCNN runs the result to the
    original's output."""
    param, modelbin, graph, shapes = written_text_model(REGNET_BLOCK, SHAPE_REGNET, 5, tmp_path)
    apart = LayerDecision("g", "ConvolutionDepthWise", "im2col_gemm", GROUPED, 8, 8, 1, 0, Cost(0, 0), Cost(0, 0), "test")
    sliced, sliced_bin, _ = apply(param, modelbin, graph, {"g": apart}, shapes, TARGET.simd_width)
    crops = [layer for layer in sliced if layer.type == "Crop"]
    assert len(crops) == 12 and sum(layer.name.endswith("_aligned") for layer in crops) == 6
    (tmp_path / "s.param").write_text(sliced.format())
    with open(tmp_path / "s.bin", "wb") as f:
        sliced_bin.write(f)
    content = prepare_model(tmp_path / "s.param", tmp_path / "s.bin", None, {"x": SHAPE_REGNET[1:]})
    names = [layer.name for layer in sliced]  # schedule.order indexes the param's layers
    crop_steps = {step for step, index in enumerate(content.schedule.order, 1) if names[index].startswith("g.flexnn_group_crop")}
    whole_input = shapes["x"].nbytes
    for step in crop_steps:
        held = sum(t.size for t in content.profile.tensors if t.role == "intermediate" and t.layer == step)
        assert held < whole_input // 2, (names[content.schedule.order[step - 1]], held, whole_input)
    x = random_input(SHAPE_REGNET)
    ref = run_stock(tmp_path / "a.param", tmp_path / "a.bin", {"x": x}, ["y"])
    got = run_stock(tmp_path / "s.param", tmp_path / "s.bin", {"x": x}, ["y"])
    assert relative_error(ref["y"], got["y"]) <= TOLERANCE
