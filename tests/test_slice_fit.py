"""`slice` for the host target prepares and plans each slicing, tightening and retrying until the
prepared profile plans within the budget (slicing/fit.py), on a real model (tiny ResNet-152).

Every budget leaves room beside the arena for the resident memory the runtime does not count (some
2.6 MB for this model, which each prepare measures; the runtime's libraries are the process's): the first slicing, whose limits count the whole
budget, does not fit, and the next one, sliced for what the arena has, does. The budgets below were
found by running the pipeline: without pre-transformed weights (layers transform on every load, so
their profile holds the transforms' buffers) at 4,000,000 B the first slicing's plan needs some
0.4 MB more and a later one fits; with them (the default) at 650,000 B no slicing fits, and the error
names a budget the fit loop confirmed (some 5.8 MB). They depend on the pinned NCNN, its patches,
the slicer's cost model and this machine's resident memory: if any changes, find them again with
`-v` (the log shows attempts).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import Session, planning
from flexnn_ncnn.ncnn_model import Graph, infer_shapes, parse_input_shapes, read_bin, read_param
from flexnn_ncnn.prepare import RuntimeOptions
from flexnn_ncnn.slicing import target_for
from flexnn_ncnn.slicing import fit
from flexnn_ncnn.slicing.fit import fit_to_budget
from helpers import REPO_ROOT, assert_close, assert_counted_within_budget, assert_user_error, run_module, stock_output

# above the smallest budget by up to RETRY_STEPS of this: a first slicing, made with nothing reserved
# beside the arena, misses
RETRY_ABOVE = 64 * 1024
RETRY_STEPS = 8
NO_FIT = 650_000
# a later prepare measures the uncounted RSS again: it differs by some 10 KB between processes
RSS_NOISE = 256 * 1024


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, np.ndarray]:
    folder = tmp_path_factory.mktemp("zoo")
    proc = run_module("models", "resnet152", "--tiny", "-o", str(folder))
    assert proc.returncode == 0, proc.stderr
    description = json.loads((folder / "resnet152.json").read_text())
    shape = ",".join(map(str, [1, *description["inputs"][0]["shape"]]))
    x = np.random.default_rng(0).standard_normal(description["inputs"][0]["shape"]).astype(np.float32)
    return folder / "resnet152.param", shape, x


def test_an_infeasible_first_slicing_is_tightened_until_the_plan_fits(model, tmp_path: Path) -> None:
    """Just above the smallest budget, the first slicing leaves nothing for what the process holds beside
    the arena; the loop tightens every layer's limit by the shortfall and slices again. Slicings are
    discrete, so which budgets just above the smallest need the retry depends on this machine's
    measurements: the first of a few steps above it that does is the one checked."""
    param, shape, x = model
    search = run_module("slice", str(param), "--budget", "min", "--input-shape", shape, "-o", str(tmp_path / "min"), "--no-pretransform")
    assert search.returncode == 0, search.stderr
    smallest = json.loads((tmp_path / "min" / "resnet152.flexnn.slicing.json").read_text())["min_search"]["smallest"]
    for step in range(1, RETRY_STEPS + 1):
        budget = smallest + step * RETRY_ABOVE
        proc = run_module("slice", str(param), "--budget", str(budget), "--input-shape", shape, "-o", str(tmp_path), "-v",
                          "--no-pretransform")
        assert proc.returncode == 0, proc.stderr
        if "attempt 1" in proc.stderr:
            break
    assert "attempt 1" in proc.stderr and "more" in proc.stderr  # the first slicing did not fit
    assert "slicings prepared" not in proc.stderr  # no progress bar where stderr is not a terminal
    plan = tmp_path / "resnet152.flexnn.plan.json"
    session = Session(plan)
    out = session.run({"in0": x})["out0"]
    assert session.budget == budget
    assert_counted_within_budget(session.stats())
    ref = stock_output(param, param.with_suffix(".bin"), x, "in0", "out0")
    assert_close(out, ref, 1e-4)
    assert not list(tmp_path.glob(".resnet152.slicing-*"))  # the attempts' scratch is gone


def test_no_fitting_slicing_names_a_feasible_budget_and_writes_nothing(model, tmp_path: Path) -> None:
    param, shape, _ = model
    proc = run_module("slice", str(param), "--budget", str(NO_FIT), "--input-shape", shape, "-o", str(tmp_path / "no"), "-v")
    log = [l for l in proc.stderr.splitlines() if l.startswith(("INFO ", "DEBUG "))]
    unlogged = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout,
                                           "\n".join(l for l in proc.stderr.splitlines() if l not in log))
    line = assert_user_error(unlogged, "infeasible", "the smallest feasible budget is ")
    # the search's probes start their reserve from what the loops before measured, and only a probe
    # that misses from there tries again from nothing reserved, as the first loop started
    starts = [l for l in log if "attempt 1 (reserve" in l]
    misses = sum("does not fit" in l for l in log)
    assert starts and "reserve 0 B" in starts[0] and sum("reserve 0 B" in l for l in starts) <= 1 + misses, log
    assert not (tmp_path / "no").exists() or not any((tmp_path / "no").iterdir())
    smallest = int(re.search(r"the smallest feasible budget is ([\d,]+) B", line)[1].replace(",", ""))
    assert smallest > NO_FIT

    proc = run_module("slice", str(param), "--budget", str(smallest + RSS_NOISE), "--input-shape", shape, "-o", str(tmp_path / "yes"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "yes" / "resnet152.flexnn.plan.json").exists()


def run_on_terminal(verb: str, *args: str) -> tuple[int, str, str]:
    """`python -m flexnn_ncnn.<verb> args...` with its stderr on a pseudo-terminal, as a user at a shell
    runs it: (exit code, stdout, what the terminal showed)."""
    terminal, stderr = pty.openpty()
    fcntl.ioctl(stderr, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # rows, columns: a new one has 0x0
    with subprocess.Popen([sys.executable, "-m", f"flexnn_ncnn.{verb}", *args], stdout=subprocess.PIPE, stderr=stderr,
                          text=True, cwd=REPO_ROOT) as proc:
        os.close(stderr)
        shown = bytearray()
        while True:
            try:
                chunk = os.read(terminal, 65536)
            except OSError:  # the child closed the terminal: EIO
                break
            if not chunk:
                break
            shown += chunk
        stdout = proc.stdout.read() if proc.stdout else ""
    os.close(terminal)
    return proc.returncode, stdout, shown.decode(errors="replace")


def test_budget_min_finds_and_reports_the_smallest_budget_it_fits(model, tmp_path: Path) -> None:
    """`--budget min` bisects between the slicer's lower bound and a confirmed budget: the budget it reports
    is the one its sidecar is planned for, and the model runs within it to stock NCNN's output. On a
    terminal, the search shows how many slicings it prepared and the budget it is trying."""
    param, shape, x = model
    code, stdout, shown = run_on_terminal("slice", str(param), "--budget", "min", "--input-shape", shape, "-o",
                                          str(tmp_path / "min"))
    assert code == 0, shown
    status = r"fitting: (\d+) slicings prepared, [\d:]+, (?:the smallest, )?[\d,]+ B \([\d.]+ MiB\)"
    counts = [int(n) for n in re.findall(status, shown)]
    assert counts and max(counts) >= 2, shown
    found = int(re.search(r"smallest budget: ([\d,]+) B .* found in (\d+) probes", stdout)[1].replace(",", ""))
    session = Session(tmp_path / "min" / "resnet152.flexnn.plan.json")
    assert session.budget == found
    assert_close(session.run({"in0": x})["out0"], stock_output(param, param.with_suffix(".bin"), x, "in0", "out0"), 1e-4)
    assert_counted_within_budget(session.stats())


def test_budget_min_needs_this_machine(model, tmp_path: Path) -> None:
    param, shape, _ = model
    proc = run_module("slice", str(param), "--budget", "min", "--target", "linux-aarch64", "--input-shape", shape)
    assert_user_error(proc, "--budget min prepares each candidate here")


def test_the_slicings_tried_are_each_prepared_once_and_leave_no_files_behind(model, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Each slicing the fit loop and the search try is written, prepared and removed: kept, a large
    model's attempts held its weights and transformed weights once per attempt (an int8 VGG-16 of 486 MB
    filled 13 GB of scratch before its answer). Probes and confirmations come back to the same budgets
    and slicings: each slicing is prepared (the model run) once per budget (prepared again, NCNN's
    VGG-16 took 117 prepares and 22 minutes to its smallest budget, a ResNet-18 104 of 51 distinct)."""
    param_path, shape, _ = model
    bin_path = param_path.with_suffix(".bin")
    param = read_param(param_path)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, parse_input_shapes([shape], param, graph, "--input-shape"), bin_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    prepared: list[tuple[str, int | None]] = []  # each slicing prepared: its .param, its budget
    prepare_slicing = fit._prepared

    def counted(result, budget, *args):
        prepared.append((result.param.format(), budget))
        return prepare_slicing(result, budget, *args)
    monkeypatch.setattr(fit, "_prepared", counted)
    with pytest.raises(planning.InfeasibleBudget):  # the loop misses, then the search tries many more
        fit_to_budget(param, read_bin(param, bin_path), graph, shapes, NO_FIT, target_for("host"), RuntimeOptions(), scratch)
    assert not list(scratch.iterdir())
    assert len(prepared) > 1 and len(set(prepared)) == len(prepared)


def test_the_search_runs_no_loop_at_a_budget_a_probe_has_fitted(model, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a probe fits a budget, the bisection needs to know only what fits below it: a probe that
    misses does not confirm a budget its plans named at or above it (what a loop there misses names
    still more, which no later probe, all below, can use). Before this, NCNN's VGG-16 search ran 17 of its
    90 prepares so."""
    param_path, shape, _ = model
    bin_path = param_path.with_suffix(".bin")
    param = read_param(param_path)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, parse_input_shapes([shape], param, graph, "--input-shape"), bin_path)
    events: list[tuple[str, int, bool]] = []  # in order: each loop run (its budget), each probe (its budget, fits)
    loop, probe = fit._loop, fit.Probe

    def recorded_loop(param, modelbin, graph, shapes, budget, *args):
        events.append(("loop", budget, False))
        return loop(param, modelbin, graph, shapes, budget, *args)

    def recorded_probe(budget: int, fits: bool) -> fit.Probe:
        events.append(("probe", budget, fits))
        return probe(budget, fits)
    monkeypatch.setattr(fit, "_loop", recorded_loop)
    monkeypatch.setattr(fit, "Probe", recorded_probe)
    found = fit.smallest_budget(param, read_bin(param, bin_path), graph, shapes, target_for("host"), RuntimeOptions(),
                                tmp_path)
    assert sum(1 for kind, _, fits in events if kind == "probe" and not fits) > 1  # the bisection met misses
    fitted = None  # the least budget a probe fitted so far
    for kind, budget, fits in events:
        if kind == "loop":
            assert fitted is None or budget < fitted, (budget, fitted, events)
        elif fits:
            fitted = min(budget, fitted or budget)
    assert fitted == found.budget


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_slice_stopped_by_a_signal_cleans_up_and_says_so(sig: str, model, tmp_path: Path) -> None:
    """A `timeout` or a closed terminal stops a long search as Ctrl-C does: the prepares' scratch folder
    (hundreds of MB for a large model) is removed, nothing is written, and the exit is one line."""
    param, shape, _ = model
    out = tmp_path / "out"
    with subprocess.Popen([sys.executable, "-m", "flexnn_ncnn.slice", str(param), "--budget", "min", "--input-shape", shape,
                           "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                          env={**os.environ, "FLEXNN_NCNN_CACHE": str(tmp_path / "cache")}) as proc:
        while proc.poll() is None and not list(out.glob(".resnet152.slicing-*/*")):  # a prepare under way
            time.sleep(0.05)
        assert proc.poll() is None, "the search ended before a prepare was seen"
        proc.send_signal(getattr(signal, sig))
        _, stderr = proc.communicate(timeout=120)
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert proc.returncode == 128 + getattr(signal, sig) and lines == [f"error: stopped ({sig})"], (proc.returncode, stderr)
    assert not list(out.iterdir())
