"""`python -m flexnn_ncnn.randbin`: seeded random weights in exactly NCNN's layout."""

from __future__ import annotations

import numpy as np
import pytest

from model_helpers import input_shape, param_file, present, random_input
from flexnn_ncnn import randbin
from flexnn_ncnn.cli import run_main
from flexnn_ncnn.ncnn_model import TAG_FP16, read_bin, read_param
from flexnn_ncnn.ncnn_model.stock import run_stock

pytest.importorskip("ncnn")


@pytest.mark.parametrize("name", present("struct:squeezenet", "bench:squeezenet"))
def test_same_seed_same_bytes_other_seed_other_bytes(name, tmp_path, capsys):
    param = param_file(name, tmp_path)
    a, b, c = tmp_path / "a.bin", tmp_path / "b.bin", tmp_path / "c.bin"
    assert run_main(randbin.main, [str(param), "-o", str(a), "--seed", "5"]) == 0
    assert run_main(randbin.main, [str(param), "-o", str(b), "--seed", "5"]) == 0
    assert run_main(randbin.main, [str(param), "-o", str(c), "--seed", "6"]) == 0
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert "seed 5" in capsys.readouterr().out
    # stock NCNN loads and runs it to a finite, non-constant output
    out = run_stock(param, a, {"data": random_input(input_shape(name))}, ["output"])["output"]
    assert np.isfinite(out).all() and out.std() > 0


@pytest.mark.parametrize("name", present("struct:mobilenet", "bench:mobilenet_v2"))
def test_fp16_storage_tags_every_weight_record(name, tmp_path):
    param = param_file(name, tmp_path)
    out = tmp_path / "m.bin"
    assert run_main(randbin.main, [str(param), "-o", str(out), "--storage", "fp16"]) == 0
    modelbin = read_bin(read_param(param), out)
    tagged = [r for lw in modelbin for r in lw.records if r.spec.load_type == 0]
    assert tagged and all(r.tag == TAG_FP16 for r in tagged)
    assert all(r.tag is None for lw in modelbin for r in lw.records if r.spec.load_type == 1)
    result = run_stock(param, out, {"data": random_input(input_shape(name))}, ["output"])["output"]
    assert np.isfinite(result).all()


def test_user_errors_exit_2(tmp_path, capsys):
    assert run_main(randbin.main, [str(tmp_path / "missing.param"), "-o", str(tmp_path / "x.bin")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    bad = tmp_path / "bad.param"
    bad.write_text("7767517\n2 2\nInput in 0 1 data\nMyConv c 1 1 data out 0=4\n")
    assert run_main(randbin.main, [str(bad), "-o", str(tmp_path / "x.bin")]) == 2
    assert "unknown layer type 'MyConv'" in capsys.readouterr().err
    assert not (tmp_path / "x.bin").exists()
