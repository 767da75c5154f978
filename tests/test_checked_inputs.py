"""Inputs are checked against the plan before anything runs: a wrong name, rank, shape or dtype is
one line naming what was expected and what was given (Session.run, `python -m flexnn_ncnn.run`);
NCNN would otherwise read past a smaller input inside the arena, where no sanitizer sees it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import Session
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.prepare import prepare_model, write_plan_file
from helpers import assert_user_error, run_module, stock_output
from test_runtime import assert_close, write_residual

# the residual model takes data (8, 16, 16)
WRONG = {
    "name": ({"image": np.zeros((8, 16, 16), np.float32)}, ["inputs ['image'] given", "prepared for ['data']"]),
    "rank": ({"data": np.zeros((8, 256), np.float32)}, ["has rank (8, 256)", "prepared for (8, 16, 16)"]),
    "shape": ({"data": np.zeros((4, 16, 16), np.float32)}, ["has shape (4, 16, 16)", "prepared for (8, 16, 16)"]),
    "dtype": ({"data": np.zeros((8, 16, 16), np.float64)}, ["'data' is float64, expected float32"]),
}


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> tuple[Path, Path, Path, np.ndarray]:
    folder = tmp_path_factory.mktemp("checked")
    param, bin_, x = write_residual(folder)
    path = folder / "residual.flexnn.plan.json"
    write_plan_file(prepare_model(param, bin_, 1 << 30), path)
    return path, param, bin_, x


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


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_wrong_input_is_one_line_from_the_run_command(case: str, plan, tmp_path: Path) -> None:
    path = plan[0]
    inputs, fragments = WRONG[case]
    (name, value), = inputs.items()
    np.save(tmp_path / "in.npy", value)
    out = tmp_path / "out.npz"
    proc = run_module("run", str(path), "--input", f"{name}={tmp_path / 'in.npy'}", "--output", str(out))
    assert_user_error(proc, *fragments)
    assert not out.exists()


def test_the_run_command_writes_its_outputs_whole(plan, tmp_path: Path) -> None:
    path, param, bin_, x = plan
    np.save(tmp_path / "in.npy", x)
    out = tmp_path / "out.npz"
    proc = run_module("run", str(path), "--input", str(tmp_path / "in.npy"), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert_close(np.load(out)["output"], stock_output(param, bin_, x))
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
