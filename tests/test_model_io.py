"""NCNN .param/.bin reading and writing, checked byte for byte and against stock NCNN's loader."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model_helpers import DETECTION_TYPES, corpus, param_file, present, random_input
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.models import generate, read_description
from flexnn_ncnn.ncnn_model import (TAG_FP16, TAG_INT8, Graph, ModelBin, NcnnParam, WeightRecord, WeightSpec,
                                    read_bin, read_param, weight_specs)
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.ncnn_model.stock import run_stock

ncnn = pytest.importorskip("ncnn")

# every weighted layer type NCNN registers, in the configurations its load_model branches on
LAYER_ZOO_PARAM = """7767517
28 31
Input            in               0 1 in 0=8 1=8 2=16
MemoryData       md1              0 1 md1 0=16
MemoryData       md2              0 1 md2 0=16 1=3 21=0
MemoryData       md3              0 1 md3 0=2 1=2 2=4
Convolution      conv             1 1 in c1 0=16 1=3 4=1 5=1 6=2304 9=1
ConvolutionDepthWise dw           1 1 c1 c2 0=16 1=3 4=1 5=0 6=144 7=16
Convolution      conv8            1 1 c2 c3 0=16 1=1 5=1 6=256 8=1
ConvolutionDepthWise dw8          1 1 c3 c4 0=16 1=3 4=1 5=1 6=144 7=16 8=2
Deconvolution    deconv           1 1 c4 c5 0=16 1=2 3=2 5=1 6=1024
DeconvolutionDepthWise ddw        1 1 c5 c6 0=16 1=3 4=1 5=1 6=144 7=16
BatchNorm        bn               1 1 c6 c7 0=16
Scale            scale            1 1 c7 c8 0=16 1=1
PReLU            prelu            1 1 c8 c9 0=16
Bias             bias             1 1 c9 c10 0=16
InstanceNorm     in1              1 1 c10 c11 0=16 1=1.000000e-05 2=1
GroupNorm        gn               1 1 c11 c12 0=4 1=16 2=1.000000e-05 3=1
Padding          pad              1 1 c12 c13 0=1 1=1 2=1 3=1 6=16
Normalize        norm             1 1 c13 c14 0=0 1=0 2=1.000000e-05 3=16
InnerProduct     ip               1 1 c14 ip 0=32 1=1 2=165888
Reshape          rs               1 1 ip r 0=8 1=4
LayerNorm        ln               1 1 r ln 0=8 1=1.000000e-05 2=1
Split            sp               1 4 ln l0 l1 l2 l3
Gemm             gemm             1 1 l0 g 3=1 5=1 6=1 7=4 8=16 9=8 10=4
RMSNorm          rms              1 1 g rms 0=16 1=1.000000e-05 2=1
RNN              rnn              1 1 l1 rnn 0=8 1=64 2=0
GRU              gru              1 1 l2 gru 0=8 1=384 2=2
LSTM             lstm             1 1 l3 lstm 0=4 1=256 2=0 3=8
Embed            embed            1 1 md1 emb 0=8 1=32 2=1 3=256
"""


# stock NCNN's load_model fails on these as it should, then the process dies (SIGSEGV) in the Net it
# leaves half loaded: our reader's refusal is checked alone
STOCK_CRASHES_ON_A_SHORT_BIN = {"bench:mobilenet_ssd_int8", "bench:squeezenet_int8"}


def _load_failure(param: Path, bin_path: Path, capfd) -> str | None:
    """Which layer stock NCNN's loader fails on for this .bin (None if it loads)."""
    net = ncnn.Net()
    assert net.load_param(str(param)) == 0
    ret = net.load_model(str(bin_path))
    err = capfd.readouterr().err
    if ret == 0:
        return None
    m = re.search(r"layer load_model \d+ (\S+) failed", err)
    assert m, err
    return m.group(1)


def _check_boundaries_against_stock(param_path: Path, data: bytes, tmp_path: Path, capfd) -> None:
    """Cut the .bin at each layer's end as we compute it: one byte short, the layer itself fails;
    exactly there, the next weighted layer fails. So every record range equals NCNN's.

    Exceptions from NCNN's own loaders: int8 convolutions index their scales before checking the
    read (a crash, not a failure), and Padding never checks its read, so the failure shows at the
    next layer; their own end is then proven by the next cut instead."""
    param = read_param(param_path)
    layout = ModelBin.parse(param, data).layout()
    int8 = {layer.name for layer in param if layer.params.get_int(8, 0) and layer.type.startswith("Convolution")}
    silent = {layer.name for layer in param if layer.type == "Padding"}
    cut = tmp_path / "cut.bin"
    for i, lw in enumerate(layout):
        end = lw.offset + lw.nbytes
        if lw.layer not in int8 | silent:
            cut.write_bytes(data[:end - 1])
            assert _load_failure(param_path, cut, capfd) == lw.layer
        cut.write_bytes(data[:end])
        expected = next((n.layer for n in layout[i + 1:] if n.layer not in silent), None)
        assert _load_failure(param_path, cut, capfd) == expected


@pytest.mark.parametrize("name", corpus() + corpus(large=True))
def test_structure_param_round_trip_is_byte_identical(name, tmp_path):
    text = param_file(name, tmp_path).read_text()
    param = NcnnParam.parse(text)
    assert param.format() == text
    # a parse of the written text says the same thing
    assert NcnnParam.parse(param.format()).signature() == param.signature()


@pytest.mark.parametrize("name", corpus())
def test_structure_bin_round_trip_and_stock_ncnn_loads_it(name, corpus_files, tmp_path, capfd):
    files = corpus_files(name)
    data = files.bin.read_bytes()
    param = read_param(files.param)
    assert read_bin(param, files.bin).to_bytes() == data
    assert _load_failure(files.param, files.bin, capfd) is None
    short = tmp_path / "short.bin"
    short.write_bytes(data[:-1])
    if name not in STOCK_CRASHES_ON_A_SHORT_BIN:
        assert _load_failure(files.param, short, capfd) is not None
    with pytest.raises(UserError, match="truncated"):
        read_bin(param, short)
    # stock NCNN runs the random weights to a finite output (for SSDs, the boxes before DetectionOutput)
    graph = Graph.build(param)
    blobs = [b for layer in graph.order if layer.type == "DetectionOutput" for b in layer.bottoms] or graph.outputs
    out = run_stock(files.param, files.bin, {graph.inputs[0]: random_input(files.input_shape)}, blobs)
    assert all(np.isfinite(v).all() and v.size for v in out.values())


@pytest.mark.parametrize("name", ["mobilenet_ssd", "yolov3_tiny", "yolov2"])
def test_detector_structures_detect_a_number_of_boxes_that_varies_with_the_input(name, tmp_path):
    """`python -m flexnn_ncnn.models struct:NAME` at the default weight seed and the tests' one: every
    random input gives detections (label, score, box rows), fewer than the SSD's keep_top_k (100), and
    their number changes from one input to the next."""
    for seed in (0, 7):
        d = read_description(generate(f"struct:{name}", tmp_path, seed))
        graph = Graph.build(read_param(d["param"]))
        assert graph.order[-1].type in DETECTION_TYPES and graph.outputs == d["outputs"] == ["output"]
        (blob, shape), = ((i["name"], tuple(i["shape"])) for i in d["inputs"])
        rows = []
        for i in range(8):
            out = run_stock(d["param"], d["bin"], {blob: random_input((1, *shape), i)}, ["output"])["output"]
            assert out.ndim == 2 and out.shape[1] == 6, (seed, i, out.shape)
            rows.append(out.shape[0])
        assert len(set(rows)) >= 3 and max(rows) < 100, (seed, rows)


@pytest.mark.parametrize("name", corpus(large=True))
def test_large_structure_bin_round_trip_and_stock_load(name, scratch, capfd):
    param_path = param_file(name, scratch)
    param = read_param(param_path)
    bin_path = scratch / f"{name}.bin"
    with open(bin_path, "wb") as f:
        random_modelbin(param, seed=3).write(f)
    data = bin_path.read_bytes()
    assert ModelBin.parse(param, data).to_bytes() == data
    assert _load_failure(param_path, bin_path, capfd) is None


@pytest.mark.parametrize("name", present("struct:resnet", "struct:shufflenet", "bench:shufflenet_v2"))
def test_structure_record_boundaries_match_stock_ncnn(name, corpus_files, tmp_path, capfd):
    files = corpus_files(name)
    _check_boundaries_against_stock(files.param, files.bin.read_bytes(), tmp_path, capfd)


@pytest.mark.parametrize("storage", ["fp32", "fp16"])
def test_layer_zoo_record_boundaries_match_stock_ncnn(storage, tmp_path, capfd):
    param_path = tmp_path / "zoo.param"
    param_path.write_text(LAYER_ZOO_PARAM)
    param = read_param(param_path)
    data = random_modelbin(param, seed=1, storage=storage).to_bytes()
    _check_boundaries_against_stock(param_path, data, tmp_path, capfd)
    bin_path = tmp_path / "zoo.bin"
    bin_path.write_bytes(data)
    blobs = ["rms", "rnn", "gru", "lstm", "emb", "md2", "md3"]
    out = run_stock(param_path, bin_path, {"in": random_input((1, 16, 8, 8))}, blobs)
    assert all(np.isfinite(v).all() for v in out.values())


def test_pnnx_exports_round_trip_and_record_boundaries(zoo_exports, tmp_path, capfd):
    for name, files in zoo_exports.items():
        text, data = files.param.read_text(), files.bin.read_bytes()
        param = NcnnParam.parse(text)
        assert param.format() == text, name
        modelbin = ModelBin.parse(param, data)
        assert modelbin.to_bytes() == data, name
        storages = {r.storage for lw in modelbin for r in lw.records if r.spec.load_type == 0}
        assert storages == ({"fp16"} if name.endswith("fp16") else {"fp32"}), name
    # Convolution, InnerProduct, Gemm, MultiHeadAttention, LayerNorm, MemoryData, in fp16 and fp32
    for name in ("vit_fp16", "vit_fp32"):
        _check_boundaries_against_stock(zoo_exports[name].param, zoo_exports[name].bin.read_bytes(), tmp_path, capfd)


def test_param_values_arrays_hints_and_strings():
    param = NcnnParam.parse(
        "7767517\n2 2\n"
        "Input in 0 1 data -23330=4,3,8,8,3 0=8 1=8 2=3\n"
        'Custom c 1 1 data out 0=1 1=2.5 2=1e-3 3=1,2,3 4=0.5,1.5 -23305=2,7,8 6=abc 7="x y"\n')
    custom = param.layer("c").params
    assert custom.get(0, None) == 1 and isinstance(custom.get(1, None), float) and custom.get(2, None) == 1e-3
    assert custom.get(3, None) == [1, 2, 3] and custom.get(4, None) == [0.5, 1.5]
    assert custom.get(5, None) == [7, 8]  # -23305 is id 5 in the old array form
    assert custom.get(6, None) == "abc" and custom.get(7, None) == "x y"
    assert param.layer("in").params.get_array(30) == [3, 8, 8, 3]  # the count is not an element
    # a changed layer is re-formatted; the others keep their exact text
    custom.set(1, 3.0)
    text = param.format()
    assert "Input in 0 1 data -23330=4,3,8,8,3 0=8 1=8 2=3\n" in text and "1=3.000000e+00" in text
    assert NcnnParam.parse(text).layer("c").params.get(1, None) == 3.0


_scalar = st.integers(-2**31, 2**31 - 1) | st.floats(-1e30, 1e30, allow_nan=False)
_value = _scalar | st.lists(_scalar, min_size=1, max_size=6) | st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(0, 29), _value, max_size=8))
def test_param_values_survive_write_and_read(values):
    param = NcnnParam.parse("7767517\n1 1\nInput in 0 1 data\n")
    layer = param.layer("in")
    for pid, value in values.items():
        layer.params.set(pid, value)
    again = NcnnParam.parse(param.format()).layer("in").params
    for pid, value in values.items():
        got = again.get(pid, None)
        if isinstance(value, list):  # an array with a float in it is written all-float
            as_float = any(isinstance(v, float) for v in value)
            assert got == pytest.approx([float(v) if as_float else v for v in value], rel=1e-6)
        else:
            assert got == pytest.approx(value, rel=1e-6) if isinstance(value, float) else got == value


@pytest.mark.parametrize("text, message", [
    ("7767518\n1 1\nInput in 0 1 data\n", "magic"),
    ("7767517\n2 1\nInput in 0 1 data\n", "layer 1 of 2: expected"),
    ("7767517\n2 1\nInput in 0 1 data\nReLU r 1 1 data out\n", "too many blobs"),
    ("7767517\n0 1\n", "each 1 to 1000000"),
    ("7767517\n1 1\nInput in 0 2 data\n", "fewer blobs"),
    ("7767517\n1 1\nInput in 0 1 data a=1\n", "parameter id"),
    ("7767517\n1 1\nInput in 0 1 data 0=1.2.3\n", "cannot read number"),
    ("7767517\n1 1\nInput in 0 1 data -23300=3,1,2\n", "declares 3 elements"),
])
def test_malformed_param_is_a_user_error(text, message):
    with pytest.raises(UserError, match=message):
        NcnnParam.parse(text)


def test_unknown_weighted_layer_type_is_a_user_error():
    param = NcnnParam.parse("7767517\n2 2\nInput in 0 1 data\nMyConv c 1 1 data out 0=4\n")
    with pytest.raises(UserError, match="unknown layer type 'MyConv'.*a custom layer"):
        weight_specs(param.layer("c"))
    with pytest.raises(UserError, match="unknown layer type"):
        ModelBin.parse(param, b"\0" * 64)


def test_a_model_of_inputs_alone_is_a_user_error():
    param = NcnnParam.parse("7767517\n1 1\nInput in 0 1 data 0=8\n")
    with pytest.raises(UserError, match="no layer but its inputs"):
        Graph.build(param)


def test_an_operator_pnnx_left_unconverted_is_named_as_such():
    """pnnx writes an operator it cannot convert under its torch name (here torch.var): the error says so."""
    param = NcnnParam.parse("7767517\n2 2\nInput in 0 1 data\ntorch.var torch.var_4 1 1 data out\n")
    with pytest.raises(UserError, match="'torch.var', an operator the exporter \\(pnnx\\) could not convert"):
        weight_specs(param.layer("torch.var_4"))


def test_bin_with_extra_bytes_is_a_user_error():
    param = NcnnParam.parse("7767517\n2 2\nInput in 0 1 data\nBias b 1 1 data out 0=4\n")
    assert ModelBin.parse(param, bytes(16)).nbytes == 16
    with pytest.raises(UserError, match="4 bytes left"):
        ModelBin.parse(param, bytes(20))


def test_record_tags_decode_and_pad_as_ncnn_reads_them():
    spec = WeightSpec("weight", 5, 0)
    values = np.arange(5, dtype=np.float32) - 2
    fp16 = WeightRecord.from_float32(spec, values, "fp16")
    assert fp16.to_bytes()[:4] == TAG_FP16.to_bytes(4, "little") and fp16.nbytes == 4 + 12  # 10 bytes padded to 12
    assert np.array_equal(fp16.to_float32(), values)
    int8 = WeightRecord.from_elements(spec, TAG_INT8, np.array([1, -2, 3, -4, 5], np.int8))
    assert int8.nbytes == 4 + 8 and int8.storage == "int8"
    table = np.linspace(-1, 1, 256, dtype=np.float32).tobytes()
    param = NcnnParam.parse("7767517\n2 2\nInput in 0 1 data\nInnerProduct ip 1 1 data out 0=1 1=0 2=5\n")
    quantized = (0x00010000).to_bytes(4, "little") + table + bytes([0, 1, 2, 3, 4, 0, 0, 0])
    for record in (fp16, int8):
        data = record.to_bytes()
        assert ModelBin.parse(param, data).to_bytes() == data
    assert ModelBin.parse(param, quantized)["ip"].records[0].storage == "quantized"
