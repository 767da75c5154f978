"""The .param reader reads what stock NCNN's `Net::load_param` reads (flexnn_ncnn/ncnn_model/param.py):
the same layers, blobs and wiring for every model the suite has, the same texts accepted (trailing
lines past the header's count, blank lines, a layer header over two lines, spare blob slots) and
refused (too many blobs, too few layers, a zero count)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from flexnn_ncnn.cli import UserError
from flexnn_ncnn.ncnn_model import NcnnParam, read_param
from helpers import run_module
from model_helpers import corpus, param_file
from test_runtime import ZOO

ncnn = pytest.importorskip("ncnn")


def stock_layers(text: str) -> tuple[list[tuple], int] | None:
    """(type, name, bottom names, top names) per layer and the blob slots, as stock NCNN loads `text`;
    None when it refuses it."""
    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    if net.load_param_mem(text) != 0:
        return None
    names = [b.name for b in net.blobs()]
    return [(l.type, l.name, [names[i] for i in l.bottoms], [names[i] for i in l.tops]) for l in net.layers()], len(names)


def our_layers(text: str) -> tuple[list[tuple], int] | None:
    try:
        model = NcnnParam.parse(text)
    except UserError:
        return None
    blobs = int(text.split()[2])  # the header's blob_count: NCNN's slots, named or not
    return [(l.type, l.name, l.bottoms, l.tops) for l in model.layers], blobs


def test_every_corpus_structure_reads_as_ncnn_reads_it(tmp_path: Path) -> None:
    for name in corpus() + corpus(large=True):
        text = param_file(name, tmp_path).read_text()
        assert stock_layers(text) is not None, name
        assert our_layers(text) == stock_layers(text), name


@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_export_reads_as_ncnn_reads_it(name: str, zoo_exports) -> None:
    text = zoo_exports[name].param.read_text()
    assert stock_layers(text) is not None
    assert our_layers(text) == stock_layers(text)


CASES = {
    "trailing line past the count": "7767517\n2 2\nInput data 0 1 data 0=4\nReLU r 1 1 data out\nSigmoid s 1 1 out more\n",
    "blank lines": "7767517\n\n2 2\n\nInput data 0 1 data 0=4\n\n\nReLU r 1 1 data out 0=1.000000e-01\n\n",
    "header over two lines": "7767517\n2 2\nInput data 0 1 data\nReLU r 1 1\ndata out 0=1.000000e-01\n",
    "spare blob slots": "7767517\n2 5\nInput data 0 1 data\nReLU r 1 1 data out\n",
    "crlf": "7767517\r\n2 2\r\nInput data 0 1 data 0=4\r\nReLU r 1 1 data out\r\n",
    "leading blank line": "\n7767517\n1 1\nInput data 0 1 data\n",
    "too many blobs": "7767517\n2 1\nInput data 0 1 data\nReLU r 1 1 data out\n",
    "too few layers": "7767517\n3 2\nInput data 0 1 data\nReLU r 1 1 data out\n",
    "zero layers": "7767517\n0 1\n",
    "zero blobs": "7767517\n1 0\nInput data 0 1 data\n",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_ncnn_accepts_or_refuses_we_do(case: str) -> None:
    assert our_layers(CASES[case]) == stock_layers(CASES[case])


def test_what_ncnn_ignores_is_said_once(caplog) -> None:
    with caplog.at_level(logging.WARNING):
        NcnnParam.parse(CASES["trailing line past the count"], "m.param")
        NcnnParam.parse(CASES["spare blob slots"], "s.param")
    assert [r.getMessage() for r in caplog.records] == [
        "m.param:5: ignoring what follows the 2 layers the header counts, as NCNN does",
        "s.param: header says 5 blobs, the layers name 2: NCNN leaves the other 3 empty"]


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
