"""What the runtime refuses or stops on (DESIGN.md section 7's list): a plan for other model files,
another build or another thread count is refused naming the field; an allocation larger than
planned stops the inference with a message; a .bin truncated during a run is an error; an
infeasible budget is never planned nor run; a plan the checker rejects is never run."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import Session
from flexnn_ncnn.cli import UserError
from helpers import assert_counted_within_budget, assert_user_error, run_module
from helpers import stock_output
from test_runtime import ModelCase, assert_close, budgets_for, prepared, write_residual


@pytest.fixture()
def residual(tmp_path: Path) -> ModelCase:
    param, bin_, x = write_residual(tmp_path)
    return ModelCase("residual", param, bin_, x, stock_output(param, bin_, x))


def column_edit(table: dict, name: str, index: int, change) -> None:
    """table[name] (a column: numbers separated by spaces) with its value at `index` replaced by change(value)."""
    values = table[name].split()
    values[index] = str(change(int(values[index])))
    table[name] = " ".join(values)


def edited(path: Path, edit) -> Path:
    content = json.loads(path.read_text())
    edit(content)
    out = path.with_name("edited." + path.name)
    out.write_text(json.dumps(content))
    return out


def test_plan_for_other_model_files_is_refused(residual: ModelCase, tmp_path: Path) -> None:
    path, _ = prepared(residual, tmp_path)
    data = bytearray(residual.bin.read_bytes())
    data[100] ^= 1
    residual.bin.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"does not match: model\.bin_digest is '\d+:[0-9a-f]{64}', expected"):
        Session(path)


@pytest.mark.parametrize("name, message", [
    ("missing.bin", "model.bin .*missing.bin does not exist"),
    # a name the file system refuses (found by python -m flexnn_ncnn.fuzz: is_file() raised)
    ("x" * 5000, r"model.bin is not a usable file name \(File name too long\)"),
])
def test_a_plan_naming_a_file_that_cannot_be_opened_is_refused_in_one_line(name: str, message: str, residual: ModelCase,
                                                                           tmp_path: Path) -> None:
    path, _ = prepared(residual, tmp_path)
    with pytest.raises(UserError, match=message) as e:
        Session(edited(path, lambda d: d["model"].update(bin=name)))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("record, field, value", [
    ("build", "patch_series_id", "0123456789abcdef"),
    ("build", "runtime_version", "0.0.1"),
    # a profile and layouts made where NCNN dispatched other kernels (here: no AVX2, a smaller L2)
    ("target", "cpu_features", "avx,fma,f16c"),
    ("target", "l2_bytes", 1 << 18),
])
def test_plan_for_another_build_or_cpu_is_refused(record: str, field: str, value, residual: ModelCase, tmp_path: Path) -> None:
    path, _ = prepared(residual, tmp_path)
    other = edited(path, lambda c: c[record].update({field: value}))
    with pytest.raises(UserError, match=rf"does not match: {record}\.{field} is {value!r}, expected"):
        Session(other)


def test_plan_for_another_thread_count_is_refused(residual: ModelCase, tmp_path: Path) -> None:
    path, _ = prepared(residual, tmp_path)
    with pytest.raises(UserError, match=r"target\.threads is 1, expected 2"):
        Session(path, threads=2)


def test_allocation_larger_than_planned_stops_the_inference(residual: ModelCase, tmp_path: Path) -> None:
    path, content = prepared(residual, tmp_path)
    # pretend prepare saw the first activation of the first convolution 64 bytes smaller
    index = next(i for i, t in enumerate(content.profile.tensors) if t.role == "activation" and t.layer == 1)
    shrunk = edited(path, lambda c: column_edit(c["profile"]["tensors"], "size", index, lambda size: size - 64))
    session = Session(shrunk)
    with pytest.raises(UserError, match=r"step 1 \(layer conv1\): activation 0 of \d+ B is larger than planned"):
        session.run({"data": residual.x})


def test_bin_truncated_during_a_run_is_an_error(residual: ModelCase, tmp_path: Path) -> None:
    path, content = prepared(residual, tmp_path)
    session = Session(path, budget=budgets_for(content)["tightest"])
    assert not all(session.plan.tensors[i].pinned for i, t in enumerate(session.profile.tensors) if t.role == "weight")
    assert_close(session.run({"data": residual.x})["output"], residual.ref)
    os.truncate(residual.bin, 8)
    with pytest.raises(UserError, match=r"residual\.bin ended at byte"):
        session.run({"data": residual.x})


def test_infeasible_budget_writes_no_plan_and_names_the_smallest(residual: ModelCase, tmp_path: Path) -> None:
    _, content = prepared(residual, tmp_path)
    # what the arena, its margin and the OpenMP workers need: the same in every prepare of the model
    arena_and_outside = budgets_for(content)["tightest"] - content.uncounted_rss_bytes
    out = tmp_path / "none.plan.json"
    proc = run_module("prepare", str(residual.param), "--budget", str(arena_and_outside - 1), "-o", str(out))
    line = assert_user_error(proc, "is infeasible", "the smallest feasible budget is ")
    # this prepare measured the uncounted RSS again (its own process): the budget named leaves room for it
    smallest = int(re.search(r"the smallest feasible budget is ([\d,]+) B", line)[1].replace(",", ""))
    assert smallest > arena_and_outside
    assert not out.exists()


def test_plan_the_checker_rejects_is_never_run(residual: ModelCase, tmp_path: Path) -> None:
    path, content = prepared(residual, tmp_path)
    tensors = content.profile.tensors
    # two tensors live at the same step, put at the same offset
    a, b = next((i, j) for i, t in enumerate(tensors) for j, u in enumerate(tensors)
                if i < j and t.first_use <= u.last_use and u.first_use <= t.last_use)

    def overlap(c: dict) -> None:
        offset = int(c["plan"]["tensors"]["offset"].split()[a])
        column_edit(c["plan"]["tensors"], "offset", b, lambda _: offset)
    # the runtime checks every plan it is given (Session leaves the sidecar's plans to it)
    with pytest.raises(UserError, match=r"edited\.\S+plan\.json: plan: .* share bytes"):
        Session(edited(path, overlap))


def test_a_damaged_profile_is_refused_by_the_runtime_naming_the_file(residual: ModelCase, tmp_path: Path) -> None:
    """A Session leaves the profile's form to the runtime (the same validate_profile the planner runs)."""
    path, content = prepared(residual, tmp_path)
    index = next(i for i, t in enumerate(content.profile.tensors) if t.role == "intermediate")
    damaged = edited(path, lambda c: column_edit(c["profile"]["tensors"], "last_use", index, lambda last: last + 1))
    with pytest.raises(UserError, match=r"edited\.\S+plan\.json: profile: .*intermediate 0: an intermediate must die with its layer"):
        Session(damaged)


def test_the_session_keeps_the_profile_in_the_runtime_alone(residual: ModelCase, tmp_path: Path) -> None:
    """Its Python side holds no copy of the profile's columns: they are read back from the runtime when
    asked for, equal to the sidecar's, and a re-plan for another budget uses them."""
    path, content = prepared(residual, tmp_path)
    session = Session(path)
    assert "columns" not in vars(session.profile) and session.sidecar.profile is session.profile
    assert session.profile == content.profile and session.profile.columns[0] is not session.profile.columns[0]
    budgets = budgets_for(content)
    session.set_budget(budgets["tightest"] + 4096)
    assert session.plan.budget == budgets["tightest"] + 4096 and session.plan not in (content.plan, *content.ladder)
    assert_close(session.run({"data": residual.x})["output"], residual.ref)


@pytest.mark.parametrize("layer, message", [
    # NCNN's BinaryOp refuses an operation it does not know (its load_param, NCNN_VALIDATION)
    ("BinaryOp op 1 1 data out 0=99 1=1 2=2.0", "layer op: its params are refused by BinaryOp::load_param"),
    # a layer NCNN runs on one blob, given two
    ("ReLU op 2 1 data data2 out", "layer op: ReLU takes one input and one output"),
])
def test_a_layer_ncnn_would_refuse_is_named_in_one_line(tmp_path: Path, layer: str, message: str) -> None:
    """The runtime's Net makes no CPU layer while it parses the .param (PlannedLayer builds each on its
    load): each layer's params are checked by its CPU layer one at a time instead, and a refusal names
    the layer (NCNN's own would print its log line, and "cannot load")."""
    param, bin_ = tmp_path / "bad.param", tmp_path / "bad.bin"
    inputs = "Input data 0 1 data 0=4 1=4 2=2\n" + ("Input data2 0 1 data2 0=4 1=4 2=2\n" if "data2" in layer else "")
    param.write_text(f"7767517\n{inputs.count(chr(10)) + 1} {inputs.count(chr(10)) + 1}\n{inputs}{layer}\n")
    bin_.write_bytes(b"")
    assert_user_error(run_module("prepare", str(param), "--budget", "1MB", "-o", str(tmp_path / "bad.plan.json")), message)


def test_cli_runs_a_plan_and_prints_one_json_line(residual: ModelCase, tmp_path: Path) -> None:
    path, content = prepared(residual, tmp_path)
    np.save(tmp_path / "in.npy", residual.x)
    budget = budgets_for(content)["middle"]
    proc = run_module("run", str(path), "--input", str(tmp_path / "in.npy"), "--output", str(tmp_path / "out.npz"),
                      "--loops", "3", "--budget", str(budget), "--json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    stats = json.loads(lines[0])
    assert stats["inferences"] == 3 and "latency_median_us" in stats
    assert_counted_within_budget(stats)
    assert_close(np.load(tmp_path / "out.npz")["output"], residual.ref)


def test_run_writes_outputs_without_a_copy_of_each(tmp_path: Path) -> None:
    """`run --output` writes a .npz np.load reads as np.savez's, without np.savez's copy of each array into its zip
    entry (an 8 MiB output took 8 MiB more, which a large output's process under a budget does not
    have): what writing allocates stays under a slice of an array."""
    import tracemalloc
    from flexnn_ncnn.files import NPZ_SLICE_BYTES, write_npz
    rng = np.random.default_rng(0)
    arrays = {"output": rng.standard_normal(2 << 20, dtype=np.float32).reshape(32, 256, 256),
              "labels": np.arange(7, dtype=np.int8), "empty": np.zeros((0, 6), np.float32),
              "transposed": rng.standard_normal((5, 3)).T}
    with open(tmp_path / "out.npz", "wb") as f:
        tracemalloc.start()
        try:
            write_npz(f, {"output": arrays["output"]})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < NPZ_SLICE_BYTES, peak
    with open(tmp_path / "all.npz", "wb") as f:
        write_npz(f, arrays)
    loaded = np.load(tmp_path / "all.npz")
    assert list(loaded) == list(arrays)
    for name, array in arrays.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape, name
        assert np.array_equal(loaded[name], array), name


def test_cli_refuses_a_missing_plan_in_one_line(tmp_path: Path) -> None:
    np.save(tmp_path / "in.npy", np.zeros(3, np.float32))
    proc = run_module("run", str(tmp_path / "none.json"), "--input", str(tmp_path / "in.npy"))
    assert_user_error(proc, "cannot read the plan sidecar")
