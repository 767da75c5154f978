"""Slicing: stock NCNN runs the sliced model to the original's output (the runtime runs it where int8
tiles ask for NCNN's reference layers), every layer fits its limit, and `python -m flexnn_ncnn.slice`
keeps its command-line contract.

Tolerance: max |sliced - original| <= 1e-4 * max |original| (DESIGN.md §5), in fp32 (fp16/bf16
storage and arithmetic off). Slicing changes no arithmetic inside a slice, but stock NCNN picks its
own convolution algorithm per layer from the layer's size: a narrow sub-conv may run Winograd
F(4,3) or F(2,3) where the whole conv ran F(6,3), which rounds differently (measured ~1e-6 relative).
Each model is also compared with Winograd off, where the sums are the same ones.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys

import numpy as np
import pytest

from model_helpers import DETECTION_TYPES, corpus, present, random_input, relative_error, write_model
from helpers import assert_same_detections, assert_user_error, run_module
from flexnn_ncnn import Session
from flexnn_ncnn import slice as slice_cli
from flexnn_ncnn.cli import UserError, run_main
from flexnn_ncnn.ncnn_model import (Graph, ModelBin, NcnnParam, infer_shapes, parse_input_shape, read_bin, read_param)
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.prepare import RuntimeOptions, prepare_model, write_plan_file
from flexnn_ncnn.slicing import KERNEL_CODES, KERNEL_PARAM_ID, TILES_PARAM_ID, Target, slice_model, slicer
from flexnn_ncnn.slicing.policy import SLICING_OF, slice_unit, slice_widths
from flexnn_ncnn.slicing.rewrite import REFERENCE_LAYER_ID

pytest.importorskip("ncnn")

TOLERANCE = 1e-4
HOST16 = Target("host", 16)


def _prepare(param_path, bin_path, input_shape):
    param = read_param(param_path)
    graph = Graph.build(param)
    inputs = {graph.inputs[0]: parse_input_shape(",".join(map(str, input_shape)))}
    return param, read_bin(param, bin_path), graph, infer_shapes(param, graph, inputs, bin_path)


def _budgets(min_budget: int, generous: int) -> list[int]:
    """From the tightest the slicer accepts, through two in between, to one where nothing needs slicing."""
    return [min_budget, min_budget * 5 // 4, min_budget * 3 // 2, generous]


def _check_fits(result) -> None:
    """Each decision's working set fits its limit, with the fewest slices / most tiles the rules give."""
    by_name = {a.layer.name: a for a in result.analyses}
    for d in result.decisions:
        model = by_name[d.layer].model
        assert d.after.total <= d.limit, d
        unit = slice_unit(model, result.target)  # the SIMD width; a head of attention
        assert d.slice_width == d.rows or d.slice_width % unit == 0, d
        if d.slices > 1:  # fewest slices: the next wider width of whole units does not fit
            widths = list(slice_widths(d.rows, unit))
            wider = widths[widths.index(d.slice_width) - 1]
            assert model.cost(d.kernel, wider, d.tiles).total > d.limit, d
        if d.tiles > 1:  # input slicing only when the whole im2col does not fit, then all the tiles allowed
            assert model.cost(d.kernel, d.rows, 1).total > d.limit, d
            assert d.tiles == model.max_tiles(d.kernel, result.target.min_tile_pixels)
        if d.kernel != d.fastest:  # a slower kernel only when every faster one fails even sliced
            for k in model.kernels[:model.kernels.index(d.kernel)]:
                options = [(w, 1) for w in slice_widths(d.rows, unit)] if SLICING_OF[k] == "weights" \
                    else [(d.rows, model.max_tiles(k, result.target.min_tile_pixels))]
                assert all(model.cost(k, w, t).total > d.limit for w, t in options), (d, k)


def _compare_with_stock(files_param, files_bin, result, graph, feeds, tmp_path) -> float:
    out_param, out_bin = tmp_path / "s.param", tmp_path / "s.bin"
    out_param.write_text(result.param.format())
    with open(out_bin, "wb") as f:
        result.modelbin.write(f)
    if any(REFERENCE_LAYER_ID in layer.params for layer in result.param):
        return _compare_in_runtime(files_param, files_bin, out_param, out_bin, graph, feeds)
    # the outputs, and the output of every sliced layer of the model and of a spatially tiled chain (their
    # Concats keep the original blob names)
    original = {layer.name: layer for layer in read_param(files_param)}
    # a detector's rows depend on thresholds: compare the boxes and scores its detection layer reads
    outputs = [b for layer in graph.order if layer.type in DETECTION_TYPES for b in layer.bottoms] or graph.outputs
    rewritten = [d.layer for d in result.sliced] + [t.layers[-1] for t in result.tilings]
    blobs = outputs + [original[name].tops[0] for name in rewritten if name in original]
    # a sliced layer whose residual add now starts its running sum writes no blob of its own: that add's
    # output is compared instead (rewrite.add_partial)
    written, readers = {top for layer in result.param for top in layer.tops}, graph.readers()
    blobs = list(dict.fromkeys(b if b in written else readers[b][0].tops[0] for b in blobs))
    worst = 0.0
    for winograd in (True, False):
        ref = run_stock(files_param, files_bin, feeds, blobs, winograd=winograd)
        got = run_stock(out_param, out_bin, feeds, blobs, winograd=winograd)
        worst = max([worst] + [relative_error(ref[b], got[b]) for b in blobs])
    return worst


def _compare_in_runtime(files_param, files_bin, out_param, out_bin, graph, feeds) -> float:
    """A sliced model whose int8 tiles crop or concatenate int8 blobs asks for NCNN's reference Crop and
    Concat (REFERENCE_LAYER_ID), which only the runtime builds: its outputs, run there (fp32), against
    stock NCNN's on the original (a detector's rows as a set)."""
    plan = out_param.with_suffix(".plan.json")
    write_plan_file(prepare_model(out_param, out_bin, 1 << 34, options=RuntimeOptions(fp16=False)), plan)
    got = Session(plan).run(feeds)
    ref = run_stock(files_param, files_bin, feeds, graph.outputs)
    detections = {layer.tops[0] for layer in graph.order if layer.type in DETECTION_TYPES}
    for blob in detections:
        assert_same_detections(got[blob], ref[blob])
    return max([0.0] + [relative_error(ref[b], got[b]) for b in graph.outputs if b not in detections])


@pytest.mark.parametrize("name", ["vgg19_fp16", "vgg19_fp32", "resnet50_fp16", "resnet50_fp32", "mlp_fp16",
                                  "mlp_fp32", "vit_fp16", "vit_fp32", "gpt2_fp16", "gpt2_fp32"])
def test_sliced_zoo_model_matches_stock_ncnn(name, zoo_exports, tmp_path):
    files = zoo_exports[name]
    param, modelbin, graph, shapes = _prepare(files.param, files.bin, files.input_shape)
    feeds = {graph.inputs[0]: random_input(files.input_shape)}
    generous = slice_model(param, modelbin, graph, shapes, 2**40, HOST16)
    assert not generous.sliced  # nothing is cut when everything fits
    for budget in _budgets(generous.min_budget, 2**40):
        result = slice_model(param, modelbin, graph, shapes, budget, HOST16)
        _check_fits(result)
        if budget == generous.min_budget:
            assert any(d.slices > 1 for d in result.decisions), "the tightest budget must weights-slice something"
        assert _compare_with_stock(files.param, files.bin, result, graph, feeds, tmp_path) <= TOLERANCE
        # the sliced model's own .bin parses against its .param
        assert ModelBin.parse(result.param, result.modelbin.to_bytes()).nbytes == result.modelbin.nbytes


# weights-dominated layers set these structures' peaks: the tightest budget slices them
WEIGHTS_BOUND = {"struct:mobilenet", "struct:squeezenet", "struct:resnet", "struct:shufflenet", "struct:mobilenet_ssd",
                 "struct:yolov3_tiny", "struct:yolov2", "bench:squeezenet", "bench:resnet18", "bench:googlenet",
                 "bench:yolo-fastestv2"}


@pytest.mark.parametrize("name", corpus())
def test_sliced_structure_matches_stock_ncnn(name, corpus_files, tmp_path):
    files = corpus_files(name)
    param, modelbin, graph, shapes = _prepare(files.param, files.bin, files.input_shape)
    feeds = {graph.inputs[0]: random_input(files.input_shape)}
    tightest = slice_model(param, modelbin, graph, shapes, 2**40, HOST16).min_budget
    for budget in (tightest, tightest * 3 // 2):
        result = slice_model(param, modelbin, graph, shapes, budget, HOST16)
        _check_fits(result)
        if name in WEIGHTS_BOUND and budget == tightest:
            assert result.sliced or result.tilings  # cut by channels, or spatially
        assert _compare_with_stock(files.param, files.bin, result, graph, feeds, tmp_path) <= TOLERANCE


@pytest.mark.parametrize("name", present("struct:alexnet", "bench:alexnet"))
def test_sliced_alexnet_matches_stock_ncnn(name, scratch):
    # 244 MB of weights, 89% of them in fc6/fc7: the FC weights-slicing case at full size
    files = write_model(name, scratch, seed=5)
    param, modelbin, graph, shapes = _prepare(files.param, files.bin, files.input_shape)
    tightest = slice_model(param, modelbin, graph, shapes, 2**40, HOST16).min_budget
    result = slice_model(param, modelbin, graph, shapes, tightest, HOST16)
    _check_fits(result)
    assert {"fc6", "fc7"} <= {d.layer for d in result.sliced}
    feeds = {"data": random_input(files.input_shape)}
    assert _compare_with_stock(files.param, files.bin, result, graph, feeds, scratch) <= TOLERANCE


def test_tightest_budget_is_the_smallest_accepted(zoo_exports):
    files = zoo_exports["vgg19_fp32"]
    param, modelbin, graph, shapes = _prepare(files.param, files.bin, files.input_shape)
    tightest = slice_model(param, modelbin, graph, shapes, 2**40, HOST16).min_budget
    assert slice_model(param, modelbin, graph, shapes, tightest, HOST16).min_budget == tightest
    with pytest.raises(UserError, match="smallest feasible budget"):
        slice_model(param, modelbin, graph, shapes, tightest - 1, HOST16)
    # the planner's reserve tightens every limit: the same budget then slices differently, still fitting
    loose = slice_model(param, modelbin, graph, shapes, 2 * tightest, HOST16)
    tight = slice_model(param, modelbin, graph, shapes, 2 * tightest, HOST16, reserve=tightest // 2)
    _check_fits(tight)
    assert all(d.limit == e.limit - tightest // 2 for d, e in zip(tight.decisions, loose.decisions))
    assert [(d.kernel, d.slices, d.tiles) for d in tight.decisions] != \
        [(d.kernel, d.slices, d.tiles) for d in loose.decisions]


def test_fp16_slices_carry_the_original_bytes(zoo_exports):
    files = zoo_exports["mlp_fp16"]
    param, modelbin, graph, shapes = _prepare(files.param, files.bin, files.input_shape)
    tightest = slice_model(param, modelbin, graph, shapes, 2**40, HOST16).min_budget
    result = slice_model(param, modelbin, graph, shapes, tightest, HOST16)
    d = next(d for d in result.decisions if d.slices > 1)
    original = modelbin[d.layer].record("weight")
    parts = [result.modelbin[s].record("weight") for s in d.sublayers]
    assert all(p.tag == original.tag and p.storage == "fp16" for p in parts)
    assert np.array_equal(np.concatenate([p.elements() for p in parts]).view(np.uint16),
                          original.elements().view(np.uint16))
    assert [result.param.layer(s).params.get_int(0, 0) for s in d.sublayers] == \
        [min(d.slice_width, d.rows - i * d.slice_width) for i in range(d.slices)]


MATRIX_NET = """7767517
3 3
Input            in     0 1 x 0=8 1=4
Gemm             gemm   1 1 x g 2=0 3=0 4=0 5=1 6=1 7=4 8=48 9=8 10=3
InnerProduct     ip     1 1 g y 0=40 1=1 2=1920
"""


@pytest.mark.parametrize("storage", ["fp32", "fp16"])
def test_untransposed_gemm_and_2d_innerproduct_slices_match_stock_ncnn(storage, tmp_path):
    # Gemm with B stored K x N (transB=0) and a per-element C (broadcast 3) is cut by columns; an
    # InnerProduct on a 2-D input by rows, its output rows joined on the last axis
    from flexnn_ncnn.analysis import Cost
    from flexnn_ncnn.ncnn_model import NcnnParam
    from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
    from flexnn_ncnn.slicing.policy import LayerDecision
    from flexnn_ncnn.slicing.rewrite import apply
    param = NcnnParam.parse(MATRIX_NET)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"x": parse_input_shape("4,8")})
    modelbin = random_modelbin(param, seed=2, storage=storage)
    zero = Cost(0, 0)
    decisions = {"gemm": LayerDecision("gemm", "Gemm", "gemm", "gemm", 48, 16, 1, 0, zero, zero, "test"),
                 "ip": LayerDecision("ip", "InnerProduct", "gemm", "gemm", 40, 16, 1, 0, zero, zero, "test")}
    sliced, sliced_bin, done = apply(param, modelbin, graph, decisions, shapes, HOST16.simd_width)
    assert [len(done[n].sublayers) for n in ("gemm", "ip")] == [3, 3]
    for name, files in (("a", (param, modelbin)), ("b", (sliced, sliced_bin))):
        (tmp_path / f"{name}.param").write_text(files[0].format())
        (tmp_path / f"{name}.bin").write_bytes(files[1].to_bytes())
    feeds = {"x": random_input((1, 4, 8))}
    ref = run_stock(tmp_path / "a.param", tmp_path / "a.bin", feeds, ["g", "y"])
    got = run_stock(tmp_path / "b.param", tmp_path / "b.bin", feeds, ["g", "y"])
    assert ref["y"].shape == (4, 40)
    assert all(relative_error(ref[b], got[b]) <= TOLERANCE for b in ("g", "y"))


def test_slice_widths_are_simd_multiples():
    assert list(slice_widths(100, 16)) == [100, 64, 48, 32, 16]
    assert list(slice_widths(4096, 8))[:4] == [4096, 2048, 1368, 1024]
    assert all(w % 8 == 0 for w in list(slice_widths(4096, 8))[1:])
    assert list(slice_widths(6, 8)) == [6]


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cli_writes_sliced_model_json_and_summary(zoo_exports, tmp_path, capsys, monkeypatch):
    files = zoo_exports["vgg19_fp16"]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # the progress bar shows on a terminal only
    before = (_sha(files.param), _sha(files.bin))
    outdir = tmp_path / "out"
    args = [str(files.param), "--input-shape", "1,3,32,32", "--target", "android-arm64", "-o", str(outdir)]
    assert run_main(slice_cli.main, args + ["--budget", "1GB"]) == 0
    tightest = json.loads((outdir / "vgg19_fp16.flexnn.slicing.json").read_text())["min_budget"]
    assert run_main(slice_cli.main, args + ["--budget", str(tightest)]) == 0
    captured = capsys.readouterr()
    assert f"budget: {tightest:,} B" in captured.out and "weights sliced" in captured.out
    assert "slicing: 100%" in captured.err  # the progress bar over layers, on a terminal
    assert sorted(p.name for p in outdir.iterdir()) == [
        "vgg19_fp16.flexnn.bin", "vgg19_fp16.flexnn.param", "vgg19_fp16.flexnn.slicing.json"]
    assert (_sha(files.param), _sha(files.bin)) == before  # inputs untouched
    plan = json.loads((outdir / "vgg19_fp16.flexnn.slicing.json").read_text())
    assert plan["schema"] == "flexnn-slicing/1" and plan["budget"] == tightest
    assert plan["target"] == {"name": "android-arm64", "simd_width": 8}
    assert plan["inputs"] == {"in0": [32, 32, 3]}
    assert plan["param_ids"] == {"kernel": KERNEL_PARAM_ID, "tiles": TILES_PARAM_ID, "kernel_codes": KERNEL_CODES}
    sliced = read_param(outdir / "vgg19_fp16.flexnn.param")
    for entry in plan["layers"]:
        assert entry["after"]["weights"] + entry["after"]["intermediates"] <= entry["limit"]
        assert entry["slices"] == len(entry["sublayers"]) == math.ceil(entry["rows"] / entry["slice_width"])
        for sub in entry["sublayers"]:  # the runtime reads the kernel and tiles from each conv
            layer = sliced.layer(sub)
            if layer.type == "Convolution":
                assert layer.params.get_int(KERNEL_PARAM_ID, 0) == KERNEL_CODES[entry["kernel"]]
                assert layer.params.get_int(TILES_PARAM_ID, 0) == entry["tiles"]
            if entry["slices"] > 1:
                assert layer.params.get_int(0, 0) % 8 == 0 or layer.params.get_int(0, 0) < 8
    read_bin(sliced, outdir / "vgg19_fp16.flexnn.bin")  # the .bin matches the .param


def test_cli_output_is_replaced_atomically(zoo_exports, tmp_path, monkeypatch, capsys):
    files = zoo_exports["mlp_fp32"]
    outdir = tmp_path / "out"
    args = [str(files.param), "--budget", "1GB", "--input-shape", "1,64", "-o", str(outdir)]
    assert run_main(slice_cli.main, args) == 0
    args[2] = "200kB"  # a second run that would slice, failing while it writes
    old = {p.name: p.read_bytes() for p in outdir.iterdir()}

    write_all = slicer.atomic_write_all

    def fail_midway(f):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    # the sliced .bin's write fails (not the slicer's scratch files: meter.py's one-layer models)
    monkeypatch.setattr(slicer, "atomic_write_all",
                        lambda writers: write_all({p: fail_midway if p.suffix == ".bin" else w for p, w in writers.items()}))
    assert run_main(slice_cli.main, args) == 2
    assert "error: cannot write to" in capsys.readouterr().err
    # neither the .bin nor its .param changed, and no temporary file is left
    assert {p.name: p.read_bytes() for p in outdir.iterdir()} == old


@pytest.fixture
def small_model(tmp_path, zoo_exports):
    files = zoo_exports["mlp_fp32"]
    param, bin_ = tmp_path / "m.param", tmp_path / "m.bin"
    param.write_bytes(files.param.read_bytes())
    bin_.write_bytes(files.bin.read_bytes())
    return param, bin_


def _edit(path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new, 1))


@pytest.mark.parametrize("case, message", [
    ("truncated bin", "truncated at layer"),
    ("wrong magic", "magic 7767517"),
    ("counts disagree", "layer 4 of 5: expected"),
    ("unknown weighted layer", "unknown layer type 'FancyProduct'"),
    ("budget 0", "must be more than 0 bytes"),
    ("budget too small", "smallest feasible budget"),
    ("missing bin", "no such file"),
    ("bad input shape", "input shape"),
    ("NCNN refuses the param", "stock NCNN cannot load this .param"),
])
def test_cli_user_errors_exit_2_with_one_line(case, message, small_model, tmp_path):
    param, bin_ = small_model
    budget = "1GB"
    if case == "truncated bin":
        bin_.write_bytes(bin_.read_bytes()[:-1])
    elif case == "wrong magic":
        _edit(param, "7767517", "7767518")
    elif case == "counts disagree":
        _edit(param, "4 4", "5 4")
    elif case == "unknown weighted layer":
        _edit(param, "InnerProduct", "FancyProduct")
    elif case == "budget 0":
        budget = "0"
    elif case == "budget too small":
        budget = "1kB"
    elif case == "missing bin":
        bin_.unlink()
    elif case == "NCNN refuses the param":  # a Softmax written before NCNN fixed its axis (fixbug0 unset)
        _edit(param, "4 4", "5 5")
        param.write_text(param.read_text() + "Softmax                  prob                     1 1 out0 prob 0=1\n")
    shape = "1,three,3" if case == "bad input shape" else "1,64"
    proc = run_module("slice", str(param), "--budget", budget, "--input-shape", shape, "-o", str(tmp_path / "out"))
    assert_user_error(proc, message)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# pnnx's export of torch.stack along the batch axis (it warns "not supported"): a Concat along axis
# -233, on which stock NCNN itself divides by zero
NCNN_CRASHES = """7767517
9 10
Input        in0      0 1 in0
Convolution  conv     1 1 in0 1 0=16 1=3 11=3 12=1 13=1 14=1 2=1 3=1 4=1 5=1 6=432 9=1
Slice        split    1 2 1 2 3 -23300=2,8,-233 1=1
Concat       stack    2 1 2 3 4 0=-233
Reduction    mean     1 1 4 5 0=3 1=0 -23303=2,2,3 4=0 5=1
Squeeze      squeeze  1 1 5 6 -23303=1,0
InnerProduct fc       1 1 6 7 0=16 1=1 2=256
Softmax      softmax  1 1 7 8 0=0 1=1
Reduction    sum      1 1 8 out0 0=0 1=0 -23303=0 4=0 5=1
"""


def test_a_model_stock_ncnn_crashes_on_is_refused_in_one_line(tmp_path):
    """slice first runs stock NCNN (the blob shapes) in a child process: its crash names the signal."""
    from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
    param = NcnnParam.parse(NCNN_CRASHES)
    (tmp_path / "m.param").write_text(param.format())
    (tmp_path / "m.bin").write_bytes(random_modelbin(param, seed=0).to_bytes())
    proc = run_module("slice", str(tmp_path / "m.param"), "--budget", "min", "--input-shape", "1,3,16,16",
                      "-o", str(tmp_path / "out"))
    assert_user_error(proc, "stock NCNN crashed (SIGFPE) running the model to measure its blob shapes")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("sig, said", [("SIGSEGV", "it crashed (SIGSEGV)"), ("SIGKILL", "it was stopped (SIGKILL)")])
def test_a_child_ended_by_a_signal_is_named_by_it(sig: str, said: str) -> None:
    """A child process's error (cli.child_error) names the signal that ended it, not what it printed before:
    a crash as such, a signal sent to stop it (the OOM killer's SIGKILL) as stopped."""
    import subprocess
    from flexnn_ncnn.cli import child_error
    proc = subprocess.run([sys.executable, "-c", f"import os, signal; print('working'); os.kill(os.getpid(), signal.{sig})"],
                          capture_output=True, text=True)
    assert child_error(proc) == said


# pnnx's export of torch.einsum('bij,bkj->bik') with the batch of 1 dropped: the equation keeps three
# indices for in0, a 2-D blob, so NCNN's Einsum reads past it (stock NCNN gives NaN one run, 1e29 the next)
NCNN_READS_PAST = """7767517
6 8
Input      in0    0 1 in0
Split      split  1 3 in0 1 2 3
Reshape    flat   1 1 1 4 6="0w,-1"
Gemm       gemm   1 1 4 5 10=4 2=0 3=1 4=0 5=1 6=1 7=10 8=24 9=24
Reshape    back   2 1 5 3 6 6="0w,1h,1c"
Einsum     einsum 2 1 6 2 out0 -23300=12,105,106,108,44,105,107,108,45,62,105,106,107
"""


# pnnx's export of `torch.relu(x)[:, :, -40:-2] * 2` for x of 1x8x30, fed as NCNN's 1x8x30: the Crop keeps the
# start -40, which NCNN resolves to 30 - 40 = -10 (torch clamps it to 0): the output's first row starts 10 values
# before the blob (stock NCNN gives 38 values a row, the first ten of them garbage)
NCNN_READS_BEFORE = """7767517
4 4
Input      in0     0 1 in0
ReLU       relu_0  1 1 in0 1
Crop       slice_0 1 1 1 2 -23310=1,-2 -23311=1,2 -23309=1,-40
BinaryOp   mul_0   1 1 2 out0 0=2 1=1 2=2.0
"""


@pytest.mark.parametrize("pretransform", [True, False])
@pytest.mark.parametrize("text, shape", [(NCNN_READS_PAST, "1,10,24"), (NCNN_READS_BEFORE, "1,1,8,30")],
                         ids=["past", "before"])
def test_a_model_stock_ncnn_reads_outside_is_refused_in_one_line(tmp_path, pretransform, text, shape):
    """prepare runs NCNN twice on the same input: a model whose two results differ reads memory it does not hold,
    and is refused before any plan rests on its profile (it crashed the uncounted-memory run, or was blamed on the
    pre-transformed weights). Each run fills its buffers and shadows before and past them with a pattern of its
    own, so the refusal, to the digit, does not depend on what the heap held: twice the same line."""
    from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
    param = NcnnParam.parse(text)
    (tmp_path / "m.param").write_text(param.format())
    (tmp_path / "m.bin").write_bytes(random_modelbin(param, seed=0).to_bytes())
    refusals = []
    for attempt in range(2):
        out = tmp_path / f"out{attempt}"
        proc = run_module("slice", str(tmp_path / "m.param"), "--budget", "10MB", "--input-shape", shape,
                          "--threads", "2", *([] if pretransform else ["--no-pretransform"]), "-o", str(out))
        line = assert_user_error(proc, "NCNN gives the same input two different results", "re-export it")
        refusals.append(line[line.index("NCNN gives"):])
        assert not out.exists() or not any(p.name.endswith(".plan.json") for p in out.iterdir())
    assert refusals[0] == refusals[1] and "differs by" in refusals[0], refusals
