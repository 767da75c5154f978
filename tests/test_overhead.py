"""The resident memory the runtime does not count (flexnn_ncnn/overhead.py): prepare measures it in a
fresh process, the sidecar carries it, and every plan made from the sidecar leaves room for it beside
the arena and the allocations outside it. (Whether a run's peak RSS stays within the budget is the
benchmark's report: RSS is the OS's measure, not asserted here, except where what it must not hold is
far larger than its noise: a copy of a large input beside the arena, or a profile parsed into an object
per tensor.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import planning, sidecar
from flexnn_ncnn.ncnn_model import read_param
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.planning import ARENA_MARGIN
from flexnn_ncnn.process_memory import reset_peak_rss, status_bytes
from flexnn_ncnn.prepare import prepare_model, write_plan_file
from flexnn_ncnn.session import Session

from helpers import assert_user_error, run_module
from test_runtime import WRITERS


@pytest.fixture(scope="module")
def prepared_at_min(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, sidecar.Sidecar]:
    folder = tmp_path_factory.mktemp("overhead")
    param, bin_, _ = WRITERS["residual"](folder)
    content = prepare_model(param, bin_, None)
    path = folder / f"residual{sidecar.SUFFIX}"
    write_plan_file(content, path)
    return path, content


def test_the_sidecar_carries_the_uncounted_rss_and_its_plan_leaves_room(prepared_at_min: tuple[Path, sidecar.Sidecar]) -> None:
    path, content = prepared_at_min
    assert content.uncounted_rss_bytes > 0  # at least the runtime's code, loaded with the session
    assert content.reserved_bytes == content.outside_bytes + content.uncounted_rss_bytes
    assert sidecar.load(path).uncounted_rss_bytes == content.uncounted_rss_bytes
    smallest = planning.min_feasible_budget(content.profile) + ARENA_MARGIN + content.reserved_bytes
    assert content.plan.budget == smallest
    assert content.plan.arena_bytes + ARENA_MARGIN + content.reserved_bytes <= content.plan.budget


def test_every_plan_made_from_the_sidecar_leaves_room(prepared_at_min: tuple[Path, sidecar.Sidecar], tmp_path: Path) -> None:
    path, content = prepared_at_min
    smallest = content.plan.budget
    out = tmp_path / f"replanned{sidecar.SUFFIX}"
    proc = run_module("plan", str(path), "--budget", str(smallest + 4096), "--ladder", f"{smallest},{2 * smallest}", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    replanned = sidecar.load(out)
    assert replanned.uncounted_rss_bytes == content.uncounted_rss_bytes
    for plan in (replanned.plan, *replanned.ladder):
        assert plan.arena_bytes + ARENA_MARGIN + replanned.reserved_bytes <= plan.budget
    # one byte less than the smallest budget fits the arena, but not the reservation beside it
    assert_user_error(run_module("plan", str(path), "--budget", str(smallest - 1)), "the smallest feasible budget is")
    session = Session(path)
    assert session.reserved_bytes == content.reserved_bytes
    with pytest.raises(planning.InfeasibleBudget) as info:
        session.set_budget(smallest - 1)
    assert info.value.min_feasible_budget == smallest


def test_a_budget_below_the_reservation_names_the_smallest_feasible_one(prepared_at_min: tuple[Path, sidecar.Sidecar]) -> None:
    _, content = prepared_at_min
    with pytest.raises(planning.InfeasibleBudget) as info:
        planning.plan_for_budget(content.profile, content.reserved_bytes, reserved=content.reserved_bytes)
    assert info.value.min_feasible_budget == content.plan.budget


def test_the_measuring_cli_refuses_a_malformed_input(prepared_at_min: tuple[Path, sidecar.Sidecar]) -> None:
    path, _ = prepared_at_min
    assert_user_error(run_module("overhead", str(path), "--input", "data=3,x"), "--input 'data=3,x' is not NAME=D0,D1,...")


def test_the_measuring_cli_says_which_mappings_the_uncounted_bytes_are_in(prepared_at_min: tuple[Path, sidecar.Sidecar]) -> None:
    """--by-mapping: the arena is anonymous memory, and the runtime's code first runs inside the measurement."""
    path, content = prepared_at_min
    shape = ",".join(map(str, reversed(content.inputs["data"])))
    proc = run_module("overhead", str(path), f"--input=data={shape}", "--by-mapping")
    assert proc.returncode == 0, proc.stderr
    measured = json.loads(proc.stdout.splitlines()[-1])
    by_mapping = measured["resident_by_mapping_bytes"]
    assert by_mapping["[anon]"] >= content.plan.arena_bytes
    assert any(name.startswith("_native.") for name in by_mapping), by_mapping
    assert list(by_mapping.values()) == sorted(by_mapping.values(), reverse=True)


# a large input and almost nothing else: global average pooling of 3 x 720 x 720 floats (6.2 MB)
LARGE_INPUT = """7767517
2 2
Input data 0 1 data 0=720 1=720 2=3
Pooling pool 1 1 data output 0=1 4=1
"""


def test_an_inference_copies_its_input_once_into_the_arena(tmp_path: Path) -> None:
    """The session hands the runtime a view of the caller's array: the only copy is the arena's, so a
    warm inference's peak RSS does not grow by another copy of the input."""
    param, bin_ = tmp_path / "pool.param", tmp_path / "pool.bin"
    param.write_text(LARGE_INPUT)
    bin_.write_bytes(b"")
    path = tmp_path / f"pool{sidecar.SUFFIX}"
    write_plan_file(prepare_model(param, bin_, 1 << 30), path)
    session = Session(path)
    x = np.random.default_rng(0).standard_normal((3, 720, 720)).astype(np.float32)
    expected = x.mean(axis=(1, 2))
    session.run({"data": x})  # the arena's pages resident
    assert reset_peak_rss()
    before = status_bytes("VmRSS")
    np.testing.assert_allclose(session.run({"data": x})["output"].reshape(-1), expected, rtol=1e-4)
    assert status_bytes("VmHWM") - before < x.nbytes // 2


LARGE_OUTPUT = """7767517
2 2
Input data 0 1 data 0=720 1=720 2=3
Convolution conv 1 1 data output 0=4 1=1 6=12
"""


def test_an_inference_copies_its_outputs_once_out_of_the_arena(tmp_path: Path) -> None:
    """Each output goes from the arena straight into the array the caller gets (no heap copy in
    between), and the array owns it: a warm inference's peak RSS grows by one copy of the output, and
    an array stays as it was through the next inferences."""
    param, bin_ = tmp_path / "conv.param", tmp_path / "conv.bin"
    param.write_text(LARGE_OUTPUT)
    with open(bin_, "wb") as f:
        random_modelbin(read_param(param), seed=1, storage="fp32").write(f)
    path = tmp_path / f"conv{sidecar.SUFFIX}"
    write_plan_file(prepare_model(param, bin_, 1 << 30), path)
    session = Session(path)
    x = np.random.default_rng(0).standard_normal((3, 720, 720)).astype(np.float32)
    expected = run_stock(param, bin_, {"data": x}, ["output"], fp32=False)["output"]
    session.run({"data": x})  # the arena's pages resident
    assert reset_peak_rss()
    before = status_bytes("VmRSS")
    first = session.run({"data": x})["output"]
    assert status_bytes("VmHWM") - before < first.nbytes * 3 // 2
    kept = first.copy()
    for scale in (2, 3):
        session.run({"data": x * scale})
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(first, expected, rtol=1e-4, atol=1e-5)


# an 8x nearest upsampling: nothing in the arena but its 8 MB output, which the layer writes whole
UPSAMPLING = """7767517
2 2
Input data 0 1 data 0=90 1=90 2=4
Interp up 1 1 data output 0=1 1=8.0 2=8.0
"""


def test_the_uncounted_rss_covers_the_outputs_a_loop_holds_while_the_next_inference_runs(tmp_path: Path) -> None:
    """A loop `outputs = session.run(inputs)` holds one inference's outputs while the next computes its
    own: the measured uncounted RSS covers both copies of the 8 MB output, not one."""
    from flexnn_ncnn.overhead import measure_in_child
    param, bin_ = tmp_path / "up.param", tmp_path / "up.bin"
    param.write_text(UPSAMPLING)
    bin_.write_bytes(b"")
    path = tmp_path / f"up{sidecar.SUFFIX}"
    write_plan_file(prepare_model(param, bin_, None), path)
    output_bytes = 4 * 720 * 720 * 4
    measured = measure_in_child(path, {"data": (4, 90, 90)})
    assert measured["uncounted_rss_bytes"] >= 2 * output_bytes, measured


def test_run_reads_its_inputs_before_the_model_so_they_are_not_counted_as_its_memory(tmp_path: Path) -> None:
    """`python -m flexnn_ncnn.run` reports the session's peak RSS over idle: the input files it reads
    are the caller's data (as the benchmark makes its inputs first), not the model's memory."""
    param, bin_ = tmp_path / "pool.param", tmp_path / "pool.bin"
    param.write_text(LARGE_INPUT)
    bin_.write_bytes(b"")
    path = tmp_path / f"pool{sidecar.SUFFIX}"
    write_plan_file(prepare_model(param, bin_, 1 << 30), path)
    x = np.random.default_rng(0).standard_normal((3, 720, 720)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = run_module("run", str(path), "--input", f"{tmp_path / 'x.npy'}", "--json")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout.splitlines()[-1])
    assert stats["peak_rss_over_idle_bytes"] - stats["counted_bytes"] < x.nbytes // 2


def _deep_chain(folder: Path, layers: int) -> tuple[Path, Path]:
    """`layers` 3x3 convolutions of 8 channels at 16x16, one after another: tiny weights, many layers."""
    lines = ["Input data 0 1 data 0=16 1=16 2=8"]
    lines += [f"Convolution c{i} 1 1 {'data' if i == 0 else f'b{i - 1}'} b{i} 0=8 1=3 4=1 5=1 6=576 9=1" for i in range(layers)]
    param, bin_ = folder / "chain.param", folder / "chain.bin"
    param.write_text(f"7767517\n{len(lines)} {len(lines)}\n" + "\n".join(lines) + "\n")
    with open(bin_, "wb") as f:
        random_modelbin(read_param(param), seed=3, storage="fp32").write(f)
    return param, bin_


def test_the_smallest_budget_is_measured_on_the_plan_that_runs_there(tmp_path: Path) -> None:
    """The sidecar's reservation is measured on the plan given the whole budget, which keeps every
    layer of a deep chain resident and their NCNN objects on the heap; the plan that runs at the
    smallest budget builds them per inference and holds less. Prepared at that budget, the model is
    accepted (not refused for what the larger plan holds), its plan carries its own measurement, and it
    runs there: outputs equal stock NCNN's, counted memory within what the budget leaves."""
    param, bin_ = _deep_chain(tmp_path, 300)
    at_min = prepare_model(param, bin_, None)
    smallest = at_min.plan.budget
    content = prepare_model(param, bin_, smallest)
    assert content.uncounted_rss_bytes > content.uncounted_for(content.plan)  # the whole-budget plan held more
    assert content.plan.budget == smallest and content.plan.uncounted_rss_bytes is not None
    assert content.plan.arena_bytes + ARENA_MARGIN + content.reserved_for(content.plan) <= smallest
    path = tmp_path / f"chain{sidecar.SUFFIX}"
    write_plan_file(content, path)
    assert sidecar.load(path).plan.uncounted_rss_bytes == content.plan.uncounted_rss_bytes
    session = Session(path)
    assert session.plan.arena_bytes == content.plan.arena_bytes  # the stored plan, not a re-plan
    x = np.random.default_rng(4).standard_normal((8, 16, 16)).astype(np.float32)
    got = session.run({"data": x})["b299"]
    np.testing.assert_allclose(got, run_stock(param, bin_, {"data": x}, ["b299"])["b299"], rtol=1e-3, atol=1e-4)
    stats = session.stats()
    assert stats["counted_bytes"] <= stats["counted_limit_bytes"] == smallest - content.plan.uncounted_rss_bytes
    # the plan CLI keeps the stored plan for its budget; one byte less is refused, naming that budget
    proc = run_module("plan", str(path), "--budget", str(smallest))
    assert proc.returncode == 0, proc.stderr
    # a larger budget, which a re-plan reserving the sidecar's value does not fit, runs the stored plan
    larger = smallest + 64 * 1024
    with pytest.raises(planning.InfeasibleBudget):
        planning.plan_for_budget(content.profile, larger, reserved=content.reserved_bytes)
    session.set_budget(larger)
    assert session.plan.arena_bytes == content.plan.arena_bytes and session.budget == larger
    np.testing.assert_allclose(session.run({"data": x})["b299"], got, rtol=1e-6)
    assert run_module("plan", str(path), "--budget", str(larger)).returncode == 0
    with pytest.raises(planning.InfeasibleBudget) as info:
        prepare_model(param, bin_, smallest - 1)
    assert info.value.min_feasible_budget == smallest
    # between it and what the whole-budget measurement needs, every budget is accepted with a plan that
    # leaves room for its own measurement
    for budget in range(smallest + 64 * 1024, at_min.plan.arena_bytes + ARENA_MARGIN + content.reserved_bytes, 96 * 1024):
        wider = prepare_model(param, bin_, budget)  # its whole-budget plan measured again: it may fit
        assert wider.plan.budget == budget
        assert wider.plan.arena_bytes + ARENA_MARGIN + wider.reserved_for(wider.plan) <= budget
