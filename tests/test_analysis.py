"""Graph order, blob shapes and the per-layer memory estimates the slicer decides by."""

from __future__ import annotations

import logging
import random

import pytest

from model_helpers import STRUCT_PREFIX, corpus, input_shape, load_param, present
from flexnn_ncnn import slice as slice_cli
from flexnn_ncnn.analysis import analyze
from flexnn_ncnn.cli import UserError, run_main
from flexnn_ncnn.ncnn_model import BlobShape, Graph, NcnnParam, infer_shapes, read_param
from flexnn_ncnn.ncnn_model.param import SHAPE_HINT_ID, Layer
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.prepare import RuntimeOptions, prepare_model

pytest.importorskip("ncnn")

CONV_NET = """7767517
5 5
Input            in     0 1 data 0=20 1=12 2=24
Convolution      c3     1 1 data a 0=40 1=3 4=1 5=1 6=8640
Convolution      c1     1 1 a b 0=16 1=1 5=0 6=640
Flatten          f      1 1 b flat
InnerProduct     fc     1 1 flat out 0=10 1=1 2=38400
"""


@pytest.mark.parametrize("name", present("struct:mobilenet_ssd", "struct:shufflenet", "bench:googlenet"))
def test_topological_order_of_shuffled_layers(name):
    """Graph orders layers by their blobs, not their list order (a shuffled file NCNN itself refuses:
    a bottom read before its producer takes a blob slot of its own, so the model is shuffled in memory)."""
    text = load_param(name).format()
    shuffled = list(NcnnParam.parse(text).layers)
    random.Random(0).shuffle(shuffled)
    for param in (NcnnParam.parse(text), NcnnParam(shuffled)):
        graph = Graph.build(param)
        seen = set()
        for layer in graph.order:
            assert all(b in seen for b in layer.bottoms), layer.name
            seen.update(layer.tops)
        assert len(graph.order) == len(param.layers)
    # shuffled or not, the same run order (NCNN's follows the blobs, not the file)
    orders = {tuple(lyr.name for lyr in Graph.build(param).order) for param in (NcnnParam.parse(text), NcnnParam(shuffled))}
    assert len(orders) == 1


def _run_order_cases() -> list[str]:
    return ["zoo:resnet50_fp32", *corpus()]


@pytest.mark.parametrize("name", _run_order_cases())
def test_graph_order_is_the_order_ncnn_runs(name, corpus_files, zoo_exports, tmp_path):
    """The slicer's live bytes follow Graph.order, so it is the order the runtime records NCNN
    running (each missing bottom made first, in bottom order, output by output), not the file's: a
    pnnx ResNet lists each shortcut convolution before the main branch NCNN runs first, and the
    estimate missed the main branch's output live beside the shortcut's (ResNet-152: 0.8 MB)."""
    files = zoo_exports[name.removeprefix("zoo:")] if name.startswith("zoo:") else corpus_files(name)
    param = read_param(files.param)
    graph = Graph.build(param)
    # its transformed weights in tmp_path: a benchmark structure's .param is NCNN's own file, in a folder not ours
    content = prepare_model(files.param, files.bin, None, {graph.inputs[0]: files.input_shape[1:]},
                            RuntimeOptions(threads=1), transformed=tmp_path / "model.transformed")
    names = [layer.name for layer in param.layers]
    assert [lyr.name for lyr in graph.order if lyr.type != "Input"] == [names[i] for i in content.schedule.order]
    if name.startswith("zoo:"):  # the case the file's order gets wrong
        assert [lyr.name for lyr in graph.order] != names


def test_cycle_and_dangling_blob_are_user_errors():
    with pytest.raises(UserError, match="cycle"):
        Graph.build(NcnnParam([Layer("ReLU", "a", ["y"], ["x"]), Layer("ReLU", "b", ["x"], ["y"])]))
    with pytest.raises(UserError, match="produced by no layer"):
        Graph.build(NcnnParam.parse("7767517\n1 2\nReLU a 1 1 x y\n"))


def _write_shape_hints(param: NcnnParam, shapes: dict[str, BlobShape]) -> None:
    """Each layer's top shapes as NCNN's tools record them: per top [dims, w, h, c] (no 4-D blobs here)."""
    for layer in param:
        layer.params.set(SHAPE_HINT_ID, [v for top in layer.tops for v in (shapes[top].dims, shapes[top].w,
                                                                            shapes[top].h, shapes[top].c)])


@pytest.mark.parametrize("name", present("struct:squeezenet", "struct:mobilenet", "struct:resnet", "struct:shufflenet",
                                         "bench:squeezenet", "bench:mobilenet_v2", "bench:resnet18", "bench:shufflenet_v2"))
def test_shape_hints_agree_with_stock_ncnn(name, caplog):
    """NCNN's benchmark structures carry hints written by NCNN's tools; the project's structures get
    them here from one stock run, through the .param text."""
    param = load_param(name)
    graph = Graph.build(param)
    inputs = {graph.inputs[0]: BlobShape.from_numpy(input_shape(name)[1:])}
    if name.startswith(STRUCT_PREFIX):
        _write_shape_hints(param, infer_shapes(param, graph, inputs))
        param = NcnnParam.parse(param.format())
        graph = Graph.build(param)
    with caplog.at_level(logging.INFO, logger="flexnn_ncnn.ncnn_model.shapes"):
        hinted = infer_shapes(param, graph, inputs)
    assert "from the model's shape hints" in caplog.text
    for layer in param:  # without hints the shapes come from running stock NCNN
        if layer.type != "Input":
            layer.params.remove(SHAPE_HINT_ID)
    measured = infer_shapes(param, graph, inputs)
    assert hinted == measured


def test_memory_estimates_per_kernel():
    param = NcnnParam.parse(CONV_NET)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"data": BlobShape(3, 20, 12, 1, 24)})
    assert shapes["a"] == BlobShape(3, 20, 12, 1, 40) and shapes["flat"] == BlobShape(1, 3840)
    by_name = {a.layer.name: a for a in analyze(graph, shapes)}
    c3 = dict(by_name["c3"].candidates())
    assert list(c3) == ["winograd63", "winograd43", "im2col_gemm", "direct"]
    # loading holds the stored weights (and bias) and their transformed copy at once
    stored = 24 * 9 * 40 * 4 + 40 * 4
    assert c3["winograd63"].weights == 64 * 24 * 40 * 4 + stored
    assert c3["winograd43"].weights == 36 * 24 * 40 * 4 + stored
    assert c3["im2col_gemm"].weights == c3["direct"].weights == 24 * 9 * 40 * 4 + stored
    padded = 24 * ((22 * 14 * 4 + 15) // 16 * 16)
    assert c3["direct"].intermediates == padded
    assert c3["im2col_gemm"].intermediates == padded + (24 * 9) * (20 * 12) * 4
    # F(6,3): 4x2 tiles of 6x6 outputs; input bordered to 26x14; transforms of 64 per tile
    assert c3["winograd63"].intermediates == 24 * (26 * 14 * 4) + 64 * 8 * 4 * (24 + 40)
    model = by_name["c3"].model
    # tiled, with explicit zero padding, each slice borders its own band: no padded copy (patch 0002)
    assert model.bands_border
    assert model.cost("im2col_gemm", 40, tiles=4).intermediates == 24 * 9 * 60 * 4
    assert model.cost("winograd63", 16).weights == 64 * 24 * 16 * 4 + 24 * 9 * 16 * 4 + 16 * 4  # transformed + stored
    # a 1x1 stride-1 conv multiplies its input directly: no im2col matrix, no Winograd
    c1 = dict(by_name["c1"].candidates())
    assert list(c1) == ["im2col_gemm", "direct"] and c1["im2col_gemm"].intermediates == 0
    assert dict(by_name["fc"].candidates())["gemm"].weights == (2 * 38400 + 10) * 4
    # live activations while c1 runs: its input a and its output b
    assert by_name["c1"].live_bytes == shapes["a"].nbytes + shapes["b"].nbytes


def test_a_splits_outputs_share_its_inputs_storage():
    """NCNN's Split hands each consumer a reference: one copy lives until the last of them is read."""
    param = NcnnParam.parse("""7767517
6 8
Input            in     0 1 data 0=20 1=12 2=24
Split            sp     1 3 data d0 d1 d2
Convolution      c1     1 1 d0 a 0=16 1=1 6=384
Convolution      c2     1 1 d1 b 0=16 1=1 6=384
BinaryOp         add    2 1 a b s 0=0
Concat           cat    2 1 s d2 out 0=0
""")
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"data": BlobShape(3, 20, 12, 1, 24)})
    by_name = {a.layer.name: a for a in analyze(graph, shapes, caller_inputs=False)}  # `data` made inside
    data, small = shapes["data"].nbytes, shapes["a"].nbytes
    assert by_name["sp"].live_bytes == data
    assert by_name["add"].live_bytes == data + 3 * small
    assert by_name["cat"].live_bytes == data + small + shapes["out"].nbytes
    # as the model run, `data` is the caller's array, which the runtime reads in place: none of it resident
    assert shapes["data"].read_in_place
    assert {a.layer.name: a.live_bytes for a in analyze(graph, shapes)}["add"] == 3 * small


def _one_layer_scratch(text: str, shape: BlobShape, kernel: str, tmp_path, fp16: bool = True) -> tuple[int, int]:
    """A one-layer model (input blob `data`) and its intermediates: the analysis' estimate for `kernel`
    (the layer whole), and what NCNN allocates, as the runtime's profile of it records."""
    param = NcnnParam.parse(text)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"data": shape})
    model = analyze(graph, shapes)[1].model
    estimate = model.cost(kernel, model.rows).intermediates
    (tmp_path / "one.param").write_text(text)
    with open(tmp_path / "one.bin", "wb") as f:
        random_modelbin(param, seed=1).write(f)
    profile = prepare_model(tmp_path / "one.param", tmp_path / "one.bin", 1 << 30,
                            options=RuntimeOptions(threads=1, fp16=fp16)).profile
    return estimate, sum(t.size for t in profile.tensors if t.role == "intermediate")


@pytest.mark.parametrize("region", [0, 1])
def test_lrn_scratch_is_what_ncnn_allocates(region: int, tmp_path) -> None:
    """LRN squares its input and sums the squares across channels (or borders them within one): two
    input-sized scratch blobs, as the runtime's profile of NCNN's own LRN records them."""
    text = f"7767517\n2 2\nInput in 0 1 data 0=37 1=29 2=24\nLRN n 1 1 data out 0={region} 1=5 2=0.0001 3=0.75\n"
    estimate, measured = _one_layer_scratch(text, BlobShape(3, 37, 29, 1, 24), "-", tmp_path, fp16=False)
    assert measured > 0 and abs(estimate - measured) <= 64 * 24, (estimate, measured)


@pytest.mark.parametrize("conv", ["1=3 3=1 4=1", "1=3 3=2 4=1", "1=5 3=2 4=-233", "1=3 3=1 4=0", "1=3 3=1 4=1 8=1"])
def test_a_depthwise_convolutions_bordered_copy_is_what_ncnn_allocates(conv: str, tmp_path) -> None:
    """A padded depthwise convolution computes from a bordered copy of its input (an int8 one from
    its input quantized, then bordered): the estimate is within 1% of what NCNN allocates, as the
    runtime's profile records it, and nothing when it pads nothing."""
    c, w, h, k = 40, 37, 29, int(conv.split()[0].removeprefix("1="))
    text = (f"7767517\n2 2\nInput in 0 1 data 0={w} 1={h} 2={c}\n"
            f"ConvolutionDepthWise d 1 1 data out 0={c} {conv} 5=1 6={c * k * k} 7={c}\n")
    estimate, measured = _one_layer_scratch(text, BlobShape(3, w, h, 1, c), "default", tmp_path)
    assert abs(estimate - measured) <= measured // 100, (estimate, measured)
    assert (measured == 0) == conv.endswith("4=0")


@pytest.mark.parametrize("kernel", [1, 3])
def test_a_requantizing_int8_convolution_is_costed_with_its_scratch(kernel: int, tmp_path) -> None:
    """It quantizes its input, multiplies in int32 and requantizes, as a dequantizing int8 layer does:
    the estimate holds that scratch (at least 40% of what NCNN allocates, as the profile records it;
    never more)."""
    text = (f"7767517\n2 2\nInput in 0 1 data 0=60 1=40 2=32\n"
            f"Convolution c 1 1 data out 0=32 1={kernel} 4={kernel // 2} 6={1024 * kernel * kernel} 8=102\n")
    estimate, measured = _one_layer_scratch(text, BlobShape(3, 60, 40, 1, 32), "int8", tmp_path)
    assert 0.4 * measured <= estimate <= measured, (estimate, measured)


def test_analyze_cli_prints_every_candidate_and_writes_nothing(tmp_path, capsys):
    param = tmp_path / "net.param"
    param.write_text(CONV_NET)
    assert run_main(slice_cli.main, [str(param), "--analyze", "--budget", "1MiB"]) == 0
    out = capsys.readouterr().out
    assert "budget: 1,048,576 B" in out
    c3_rows = out[out.index(" c3 "):out.index(" c1 ")]
    for kernel in ("winograd63", "winograd43", "im2col_gemm", "direct"):
        assert kernel in c3_rows
    assert "limit" in out and sorted(p.name for p in tmp_path.iterdir()) == ["net.param"]
