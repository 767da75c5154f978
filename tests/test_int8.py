"""int8 models (int8_scale_term, param 8): `randbin` writes valid int8 records (int8 weights scaled per
output row, fp32 weight and input scales), the slicer costs int8 layers by their one-byte weights and
weights-slices int8 Convolution/InnerProduct with their weight scales (the input scale carried to every
slice), and the sliced int8 model, run by the runtime, equals stock NCNN's int8 output."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flexnn_ncnn.ncnn_model import Graph, ModelBin, infer_shapes, parse_input_shape, read_bin, read_param
from flexnn_ncnn.ncnn_model.modelbin import TAG_INT8
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.slicing import Target, slice_model
from flexnn_ncnn.slicing.rewrite import REFERENCE_LAYER_ID
from flexnn_ncnn.slicing.target import target_for
from helpers import assert_counted_within_budget
from test_runtime import assert_close
from test_unseen_inputs import sliced_session


def resnet_fc(side: int, width: int, fc_rows: int) -> str:
    """ResNet-style: a stem, a residual block of 1x1 convolutions (`width` channels at side x side), and
    an FC head whose first layer (`fc_rows` rows) reads the flattened 64 x side x side features."""
    features = 64 * side * side
    return f"""7767517
11 12
Input data 0 1 data 0={side} 1={side} 2=3
Convolution stem 1 1 data stem 0={width} 1=3 4=1 5=1 6={27 * width} 9=1
Split s1 1 2 stem s1a s1b
Convolution b1c1 1 1 s1a b1c1 0={width} 1=1 5=1 6={width * width} 9=1
Convolution b1c2 1 1 b1c1 b1c2 0={width} 1=1 5=1 6={width * width}
BinaryOp b1add 2 1 b1c2 s1b b1add 0=0
ReLU b1relu 1 1 b1add b1
Convolution expand 1 1 b1 expand 0=64 1=1 5=1 6={64 * width} 9=1
Flatten flat 1 1 expand flat
InnerProduct fc1 1 1 flat fc1 0={fc_rows} 1=1 2={fc_rows * features} 9=1
InnerProduct fc2 1 1 fc1 output 0=10 1=1 2={10 * fc_rows}
"""


SHAPE = (1, 3, 32, 32)
HOST = Target("host", 16)
# at 32x32, fc1's weights (65536 x 64) set the model's memory
RESNET_FC = resnet_fc(32, 32, 64)
# The twin the acceptance compares: at 128x128, fc1 reads a million features per row: one SIMD-wide
# slice of its rows (8 of them on AVX2 and NEON, 16 on AVX-512) sets the smallest budget, 32 or 64 MB in
# fp32, 8 or 16 MB in int8. fc1 has two slices' rows on any host: with fewer it cannot be cut at all.
TWIN_SHAPE = (1, 3, 128, 128)
RESNET_FC_WIDE = resnet_fc(128, 16, 2 * target_for("host").simd_width)


def int8_of(text: str, requantized: tuple[str, ...] = ()) -> str:
    """The same network with every Convolution and InnerProduct in int8: dequantized outputs, except
    the `requantized` layers', which stay int8 (int8_scale_term 101, as ncnn2int8 fuses a requantize
    into a layer whose readers take int8)."""
    def term(line: str) -> str:
        words = line.split()
        return f" 8={101 if words[1] in requantized else 1}" if words[:1] in (["Convolution"], ["InnerProduct"]) else ""
    return "\n".join(line + term(line) for line in text.splitlines()) + "\n"


def write(folder: Path, name: str, text: str) -> tuple[Path, Path]:
    param, bin_ = folder / f"{name}.param", folder / f"{name}.bin"
    param.write_text(text)
    with open(bin_, "wb") as f:
        random_modelbin(read_param(param), seed=3).write(f)
    return param, bin_


def test_randbin_writes_int8_records_stock_ncnn_computes_with(tmp_path: Path) -> None:
    fp32 = write(tmp_path, "fp32", RESNET_FC)
    int8 = write(tmp_path, "int8", int8_of(RESNET_FC))
    weights = read_bin(read_param(int8[0]), int8[1])
    assert all(weights[name].record("weight").tag == TAG_INT8 for name in ("stem", "b1c1", "expand", "fc1", "fc2"))
    assert int8[1].stat().st_size * 3 < fp32[1].stat().st_size
    x = np.random.default_rng(1).standard_normal(SHAPE[1:]).astype(np.float32)
    ref, got = (run_stock(p, b, {"data": x}, ["output"], fp32=False)["output"] for p, b in (fp32, int8))
    # the same weights, quantized: close to the fp32 twin, not equal to it
    assert 0 < np.abs(got - ref).max() <= 0.2 * np.abs(ref).max()


def test_int8_slices_to_a_third_of_its_fp32_twin_and_equals_stock(tmp_path: Path) -> None:
    """The int8 twin's smallest budget is at most a third of the fp32 one's: its FC head streams int8
    weights, a byte each, and the features it reads are int8 too (`expand` requantizes); the runtime's
    own resident memory beside the arena (about 2 MB) is what keeps it above a quarter."""
    fp32 = write(tmp_path, "fp32", RESNET_FC_WIDE)
    int8 = write(tmp_path, "int8", int8_of(RESNET_FC_WIDE, requantized=("expand",)))
    # the fp32 twin in fp32 (NCNN would otherwise store its InnerProduct weights in fp16 on x86)
    runs = {"fp32": (fp32, ("--no-fp16",)), "int8": (int8, ())}
    sessions = {name: sliced_session(*files, TWIN_SHAPE, "min", tmp_path / name, *options) for name, (files, options) in runs.items()}
    smallest = {name: s.budget for name, s in sessions.items()}
    assert 3 * smallest["int8"] <= smallest["fp32"], smallest
    arena = {name: s.plan.arena_bytes for name, s in sessions.items()}
    assert 3 * arena["int8"] <= arena["fp32"], arena
    sliced = read_param(tmp_path / "int8" / "int8.flexnn.param")
    fc1 = [l for l in sliced if l.name.startswith("fc1.flexnn") and l.type == "InnerProduct"]
    assert len(fc1) > 1 and all(l.params.get_int(8, 0) == 1 for l in fc1)
    assert not [l for l in sliced if l.params.get_int(8, 0) and 26 in l.params]  # NCNN picks int8 kernels itself
    session = sessions["int8"]
    for seed in range(1, 6):
        x = np.random.default_rng(seed).standard_normal(TWIN_SHAPE[1:]).astype(np.float32)
        assert_close(session.run({"data": x})["output"], run_stock(*int8, {"data": x}, ["output"], fp32=False)["output"])
        assert_counted_within_budget(session.stats())


def test_the_slicer_costs_int8_weights_at_a_byte_each(tmp_path: Path) -> None:
    """The slicer's own smallest budget (fc1 cut to one SIMD-wide slice, activations included) of the
    int8 twin is a third of the fp32 one's or less."""
    lower = {name: slicer_minimum(*write(tmp_path, name, text)) for name, text in (("fp32", RESNET_FC), ("int8", int8_of(RESNET_FC)))}
    assert 3 * lower["int8"] <= lower["fp32"], lower


def _sliced(param_path: Path, bin_path: Path, budget: int):
    param = read_param(param_path)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"data": parse_input_shape(",".join(map(str, SHAPE)))}, bin_path)
    return slice_model(param, read_bin(param, bin_path), graph, shapes, budget, HOST)


def slicer_minimum(param_path: Path, bin_path: Path) -> int:
    """The slicer's own smallest budget: every layer cut as far as it goes, activations included."""
    return _sliced(param_path, bin_path, 1 << 40).min_budget


def test_a_sliced_int8_layer_equals_the_whole_one_in_stock_ncnn(tmp_path: Path) -> None:
    """Each slice computes its rows with their own weight scales and the layer's input scale: stock NCNN
    gives the sliced model the whole one's output, bit for bit in int8 arithmetic."""
    param_path, bin_path = write(tmp_path, "int8", int8_of(RESNET_FC))
    result = _sliced(param_path, bin_path, slicer_minimum(param_path, bin_path))
    assert {d.layer for d in result.sliced} >= {"fc1"}
    out_param, out_bin = tmp_path / "s.param", tmp_path / "s.bin"
    out_param.write_text(result.param.format())
    with open(out_bin, "wb") as f:
        result.modelbin.write(f)
    assert ModelBin.parse(result.param, out_bin.read_bytes()).nbytes == result.modelbin.nbytes
    x = np.random.default_rng(2).standard_normal(SHAPE[1:]).astype(np.float32)
    ref = run_stock(param_path, bin_path, {"data": x}, ["output"])["output"]
    got = run_stock(out_param, out_bin, {"data": x}, ["output"])["output"]
    assert np.array_equal(got, ref)


# a requantizing 3x3 int8 convolution (param 8 = 101: int8 output, read by an int8 1x1 convolution):
# NCNN's int8 Winograd holds its weights transformed, 8.4 MB for 295 KB of int8 weights
REQUANTIZING = """7767517
4 4
Input data 0 1 data 0=28 1=28 2=64
Convolution conv1 1 1 data c1 0=512 1=3 4=1 5=1 6=294912 9=1 8=101
Convolution conv2 1 1 c1 c2 0=16 1=1 5=1 6=8192 8=1
Pooling gap 1 1 c2 output 0=1 4=1
"""


def test_a_requantizing_layer_is_weights_sliced_and_equals_stock(tmp_path: Path) -> None:
    """Its slices requantize their rows with the layer's output scale, and their int8 outputs are
    concatenated by NCNN's reference Concat (its CPU one reads int8 packs as floats): at 6 MB, below
    what the whole layer needs, the runtime's output equals stock NCNN's on the original model."""
    files = write(tmp_path, "requantizing", REQUANTIZING)
    session = sliced_session(*files, (1, 64, 28, 28), "6MB", tmp_path / "sliced", "--threads", "1")
    sliced = read_param(tmp_path / "sliced" / "requantizing.flexnn.param")
    slices = [l for l in sliced if l.name.startswith("conv1.flexnn") and l.type == "Convolution"]
    assert len(slices) > 1 and all(l.params.get_int(8, 0) == 101 for l in slices)
    (concat,) = [l for l in sliced if l.name == "conv1.flexnn_concat"]
    assert concat.params.get_int(REFERENCE_LAYER_ID, 0) == 1
    for seed in range(1, 5):
        x = np.random.default_rng(seed).standard_normal((64, 28, 28)).astype(np.float32) * (1 + seed % 3)
        assert_close(session.run({"data": x})["output"], run_stock(*files, {"data": x}, ["output"], fp32=False)["output"])
        assert_counted_within_budget(session.stats())
