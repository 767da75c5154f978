"""Inputs are checked against the plan before anything runs: a missing, unknown or misnamed input, a
wrong rank, shape or dtype is one line naming what was expected and what was given (Session.run,
`python -m flexnn_ncnn.run`, the device binary `flexnn-bench`); NCNN would otherwise read past a smaller input inside the arena, where
no sanitizer sees it. The run command also refuses, in one line, an input file that is not a .npy
array, and writes its outputs atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import Session
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.prepare import prepare_model, write_plan_file
import subprocess

from helpers import assert_user_error, built, run_module, stock_output
from test_runtime import assert_close, write_residual

# the residual model takes data (8, 16, 16): name -> (inputs, fragments of the one error line)
GOOD = np.zeros((8, 16, 16), np.float32)
WRONG = {
    "missing": ({}, ["inputs [] given", "prepared for ['data']"]),
    "unknown name": ({"image": GOOD}, ["inputs ['image'] given", "prepared for ['data']"]),
    "extra name": ({"data": GOOD, "image": GOOD}, ["inputs ['data', 'image'] given", "prepared for ['data']"]),
    "rank": ({"data": np.zeros((8, 256), np.float32)}, ["has shape (8, 256)", "prepared for (8, 16, 16) (c, h, w)"]),
    "shape": ({"data": np.zeros((4, 16, 16), np.float32)}, ["has shape (4, 16, 16)", "prepared for (8, 16, 16) (c, h, w)"]),
    "float64": ({"data": GOOD.astype(np.float64)}, ["'data' is float64, expected float32"]),
    "int32": ({"data": GOOD.astype(np.int32)}, ["'data' is int32, expected float32"]),
}


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> tuple[Path, Path, Path, np.ndarray]:
    folder = tmp_path_factory.mktemp("checked")
    param, bin_, x = write_residual(folder)
    path = folder / "residual.flexnn.plan.json"
    write_plan_file(prepare_model(param, bin_, 1 << 30), path)
    return path, param, bin_, x


@pytest.mark.parametrize("shape", [(1, 8, 16, 16), (4, 16, 16)])
def test_prepare_refuses_an_input_shape_of_another_rank_or_channel_count_naming_both(shape, tmp_path: Path) -> None:
    param, bin_, _ = write_residual(tmp_path)
    with pytest.raises(UserError, match=r"input 'data' is given shape \(.*\), the model declares \(8, 16, 16\)"):
        prepare_model(param, bin_, 1 << 30, {"data": shape})


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_wrong_input_is_refused_by_the_session(case: str, plan) -> None:
    path, param, bin_, x = plan
    session = Session(path)
    inputs, fragments = WRONG[case]
    with pytest.raises(UserError) as refused:
        session.run(inputs)
    for fragment in fragments:
        assert fragment in str(refused.value)
    assert_close(session.run({"data": x})["output"], stock_output(param, bin_, x))  # and it runs on


@pytest.mark.parametrize("case", sorted(set(WRONG) - {"missing"}))  # the command requires an --input
def test_a_wrong_input_is_one_line_from_the_run_command(case: str, plan, tmp_path: Path) -> None:
    inputs, fragments = WRONG[case]
    args = []
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / name}.npy"]
    out = tmp_path / "out.npz"
    assert_user_error(run_module("run", str(plan[0]), *args, "--output", str(out)), *fragments)
    assert not out.exists()


# flexnn-bench prepares from its one .npy input: name (input=), rank, shape and dtype -> fragments of its line
BENCH_WRONG = {
    "name": ("input=image", GOOD, "model has no input blob 'image'"),
    "rank": ("input=data", np.zeros((8, 256), np.float32), "data"),
    "shape": ("input=data", np.zeros((4, 16, 16), np.float32), "data"),
    "dtype": ("input=data", GOOD.astype(np.float64), "only float32 (<f4) is supported"),
}


@pytest.mark.parametrize("case", sorted(BENCH_WRONG))
def test_a_wrong_input_is_one_line_and_exit_2_from_flexnn_bench(case: str, plan, tmp_path: Path) -> None:
    path, param, bin_, x = plan
    argument, value, fragment = BENCH_WRONG[case]
    np.save(tmp_path / "in.npy", value)
    program = built("host", "native", "tools", "flexnn-bench")
    proc = subprocess.run([str(program), str(param), str(bin_), str(tmp_path / "in.npy"), "budget=min", argument,
                           "transformed=0", "loops=1", "warmup=0"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], proc.stderr


@pytest.mark.parametrize("content, fragment", [
    (None, "cannot read input"),
    (b"0.5 0.5 0.5 0.5 0.5\n", "is not a .npy array: the magic string is not correct"),
    ("npz", "is not a .npy array: the magic string is not correct"),
])
def test_an_input_file_that_is_not_a_npy_array_is_one_line(content, fragment: str, plan, tmp_path: Path) -> None:
    path = tmp_path / "in.npy"
    if content == "npz":
        with open(path, "wb") as f:
            np.savez(f, data=GOOD)
    elif content is not None:
        path.write_bytes(content)
    assert_user_error(run_module("run", str(plan[0]), "--input", str(path)), fragment, str(path))


def test_the_run_command_writes_its_outputs_whole(plan, tmp_path: Path) -> None:
    path, param, bin_, x = plan
    np.save(tmp_path / "in.npy", x)
    out = tmp_path / "out.npz"
    proc = run_module("run", str(path), "--input", str(tmp_path / "in.npy"), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert_close(np.load(out)["output"], stock_output(param, bin_, x))
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# two inputs that state no shape (as pnnx writes them): the shapes come from the command line
TWO_INPUTS = """7767517
6 6
Input a 0 1 a
Input b 0 1 b
Convolution ca 1 1 a ya 0=8 1=3 4=1 6=216
Convolution cb 1 1 b yb 0=8 1=1 6=24
BinaryOp add 2 1 ya yb sum 0=0
Convolution head 1 1 sum out 0=4 1=1 6=32
"""


@pytest.mark.parametrize("flags", [["a=1,3,12,20", "b=1,3,12,20"], ["b=1,3,12,20", "a=1,3,12,20"], ["1,3,12,20", "1,3,12,20"]],
                         ids=["named", "named-out-of-order", "in-input-order"])
@pytest.mark.parametrize("verb", ["slice", "prepare"])
def test_a_model_with_several_inputs_takes_a_shape_per_input(flags: list[str], verb: str, tmp_path: Path) -> None:
    param, bin_ = tmp_path / "two.param", tmp_path / "two.bin"
    param.write_text(TWO_INPUTS)
    assert run_module("randbin", str(param), "-o", str(bin_), "--seed", "2").returncode == 0
    flag = {"slice": "--input-shape", "prepare": "--shape"}[verb]
    out = {"slice": ["--budget", "min", "-o", str(tmp_path)], "prepare": ["--budget", "min", "-o", str(tmp_path / "two.flexnn.plan.json")]}
    proc = run_module(verb, str(param), *[arg for shape in flags for arg in (flag, shape)], *out[verb])
    assert proc.returncode == 0, proc.stderr
    session = Session(tmp_path / "two.flexnn.plan.json")
    rng = np.random.default_rng(4)
    feeds = {name: rng.standard_normal((3, 12, 20)).astype(np.float32) for name in "ab"}
    ref = run_stock(param, bin_, feeds, ["out"], fp32=False)["out"]
    assert_close(session.run(feeds)["out"], ref)


@pytest.mark.parametrize("flags, fragments", [
    ([], ["the model does not state the shape of input 'a'", "a=1,3,224,224"]),
    (["1,3,12,20"], ["1 shape(s) for 2 input(s) (a, b)", "NAME=SHAPE"]),
    (["a=1,3,12,20"], ["the model does not state the shape of input 'b'"]),
    (["a=1,3,12,20", "c=1,3,12,20"], ["has no input 'c'; its inputs: a, b"]),
    (["a=1,3,12,20", "a=1,3,12,20"], ["gives input 'a' twice"]),
    (["a=1,3,12,20", "1,3,12,20"], ["2 shape(s) for 2 input(s)", "or each as NAME=SHAPE"]),
    (["a=2,3,12,20", "b=1,3,12,20"], ["a batch of 2", "give 1,3,12,20"]),
], ids=["none", "too-few", "one-named", "unknown", "twice", "mixed", "batch"])
def test_shapes_that_do_not_name_every_input_are_one_line(flags: list[str], fragments: list[str], tmp_path: Path) -> None:
    param = tmp_path / "two.param"
    param.write_text(TWO_INPUTS)
    assert run_module("randbin", str(param), "-o", str(tmp_path / "two.bin")).returncode == 0
    for verb, flag in (("slice", "--input-shape"), ("prepare", "--shape")):
        proc = run_module(verb, str(param), *[arg for shape in flags for arg in (flag, shape)], "--budget", "1GB")
        assert_user_error(proc, *fragments)
    assert not list(tmp_path.glob("*.flexnn.*"))  # nothing written
