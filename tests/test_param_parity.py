"""The .param reader reads what stock NCNN's `Net::load_param` reads (flexnn_ncnn/ncnn_model/param.py):
the same layers, wiring and blob slots for every model the suite has (the project's structures, the
zoo exports, the smoke model, every .param in BENCHMARK_DIR when it is there), the same texts
accepted (trailing lines past the header's count, blank lines, blob names over two lines, spare blob
slots, signed counts) and refused (too many blobs, too few layers, a zero count, params on the next
line, over-long names)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import smoke_model
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.models import STRUCT_PREFIX, benchmark_names
from flexnn_ncnn.ncnn_model import NcnnParam, read_param
from flexnn_ncnn.ncnn_model.structures import STRUCTURES
from helpers import run_module
from model_helpers import BENCHMARK_DIR, param_file
from test_runtime import ZOO

ncnn = pytest.importorskip("ncnn")

Loaded = tuple[list[tuple[str, str, list[str], list[str]]], list[str]]


def stock_layers(text: str) -> Loaded | None:
    """(type, name, bottom names, top names) per layer and the name of every blob slot, as stock NCNN
    loads `text`; None when it refuses it."""
    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    if net.load_param_mem(text) != 0:
        return None
    names = [b.name for b in net.blobs()]
    return [(l.type, l.name, [names[i] for i in l.bottoms], [names[i] for i in l.tops]) for l in net.layers()], names


def our_layers(text: str) -> Loaded | None:
    try:
        model = NcnnParam.parse(text)
    except UserError:
        return None
    spare = int(text.split()[2]) - len(model.blob_names)  # slots the header declares and no layer names
    return [(l.type, l.name, l.bottoms, l.tops) for l in model.layers], model.blob_names + [""] * spare


def assert_read_as_ncnn_reads(text: str) -> None:
    assert stock_layers(text) is not None
    assert our_layers(text) == stock_layers(text)


@pytest.mark.parametrize("name", [STRUCT_PREFIX + s for s in STRUCTURES] + benchmark_names(BENCHMARK_DIR))
def test_every_structure_reads_as_ncnn_reads_it(name: str, tmp_path: Path) -> None:
    assert_read_as_ncnn_reads(param_file(name, tmp_path).read_text())


@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_export_reads_as_ncnn_reads_it(name: str, zoo_exports) -> None:
    assert_read_as_ncnn_reads(zoo_exports[name].param.read_text())


def test_the_smoke_model_reads_as_ncnn_reads_it(tmp_path: Path) -> None:
    assert_read_as_ncnn_reads(smoke_model.write(tmp_path)[0].read_text())


TRAILING = "7767517\n2 2\nInput data 0 1 data 0=4\nReLU r 1 1 data out\nSigmoid s 1 1 out more\n"
SPARE = "7767517\n2 5\nInput data 0 1 data\nReLU r 1 1 data out\n"
CASES = {
    "trailing line past the count": TRAILING,
    "blank lines": "7767517\n\n2 2\n\nInput data 0 1 data 0=4\n\n\nReLU r 1 1 data out 0=1.000000e-01\n\n",
    "blob names over two lines": "7767517\n2 2\nInput data 0 1 data\nReLU r 1 1\ndata out 0=1.000000e-01\n",
    # ParamDict reads the rest of the line: a param on the next line is read as the next layer's type
    "params on the next line": "7767517\n2 2\nInput data 0 1 data\n0=4\nReLU r 1 1 data out\n",
    "params on the line past the last layer": "7767517\n2 2\nInput data 0 1 data\nReLU r 1 1 data out\n0=1\n",
    "spare blob slots": SPARE,
    "crlf": "7767517\r\n2 2\r\nInput data 0 1 data 0=4\r\nReLU r 1 1 data out\r\n",
    "leading blank line": "\n7767517\n1 1\nInput data 0 1 data\n",
    "signed counts": "+7767517\n+2 +2\nInput data 0 +1 data\nReLU r 1 1 data out\n",
    "reused top name, a fresh slot": "7767517\n2 2\nInput data 0 1 data\nReLU r 1 1 data data\n",
    "reused top name, too many blobs": "7767517\n2 1\nInput data 0 1 data\nReLU r 1 1 data data\n",
    "external bottom, too many blobs": "7767517\n2 2\nInput data 0 1 data\nBinaryOp add 2 1 data extra out\n",
    "too many blobs": "7767517\n2 1\nInput data 0 1 data\nReLU r 1 1 data out\n",
    "too few layers": "7767517\n3 2\nInput data 0 1 data\nReLU r 1 1 data out\n",
    "zero layers": "7767517\n0 1\n",
    "zero blobs": "7767517\n1 0\nInput data 0 1 data\n",
    "negative top count": "7767517\n1 1\nInput data 0 -1 data\n",
    "name of 255 bytes": f"7767517\n2 2\nInput data 0 1 data\nReLU {'r' * 255} 1 1 data out\n",
    "name of 256 bytes": f"7767517\n2 2\nInput data 0 1 data\nReLU {'r' * 256} 1 1 data out\n",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_ncnn_accepts_or_refuses_we_do(case: str) -> None:
    assert our_layers(CASES[case]) == stock_layers(CASES[case])


def test_what_ncnn_ignores_is_said_once(caplog) -> None:
    with caplog.at_level(logging.WARNING):
        NcnnParam.parse(TRAILING, "m.param")
        NcnnParam.parse(SPARE, "s.param")
    assert [r.getMessage() for r in caplog.records] == [
        "m.param:5: ignoring what follows the 2 layers the header counts, as NCNN does",
        "s.param: header says 5 blobs, the layers take 2: NCNN leaves the other 3 empty"]


def test_written_back_stock_ncnn_loads_it() -> None:
    """Untouched, the text is written back as read, trailing line included; changed, without it."""
    model = NcnnParam.parse(TRAILING)
    assert model.format() == TRAILING
    model.layer("r").params.set(0, 0.5)
    changed = model.format()
    assert "Sigmoid" not in changed
    assert stock_layers(changed) == our_layers(changed) == stock_layers(TRAILING)


def test_a_trailing_line_is_no_obstacle_to_randbin_or_slice(tmp_path: Path) -> None:
    """NCNN's upstream nanodet-m.param holds one line past its layer count."""
    param = tmp_path / "trailing.param"
    param.write_text("7767517\n3 3\nInput data 0 1 data 0=8 1=8 2=3\n"
                     "Convolution conv 1 1 data conv 0=8 1=3 4=1 5=1 6=216\nReLU relu 1 1 conv output\n"
                     "Noop leftover 1 1 output unused\n")
    proc = run_module("randbin", str(param), "-o", str(tmp_path / "trailing.bin"))
    assert proc.returncode == 0, proc.stderr
    proc = run_module("slice", str(param), "--budget", "10MB", "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "ignoring what follows the 3 layers" in proc.stderr
    assert [l.name for l in read_param(tmp_path / "out" / "trailing.flexnn.param")] == ["data", "conv", "relu"]
