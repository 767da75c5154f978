"""Fault injection, the NCNN way (tests/native/fault_injection.cpp): every request prepare's recording
allocators serve is failed in turn, then thrown in turn (each prepare fails, leaves no transformed
file, and the next records the same profile); every request the arena allocators serve in a run is
failed in turn, then thrown (std::bad_alloc) in turn — where the loading thread
builds a layer, where a layer computes, where inputs are copied in —, a plan change finds no memory
for its arena, and runs are delayed at random on both threads. Each faulty run ends in an error, the
next run equals the reference bit for bit, and that reference equals stock NCNN (the sanitizer builds'
NCNN has no AVX/FMA kernels: there within 1e-3 of the wheel's). Under AddressSanitizer
nothing leaks or overruns, under ThreadSanitizer nothing races; the timeout turns a hang into a
failure. Canaries are on throughout. NCNN's own helpers that hold a layer in a raw pointer while
forwarding it (copy_make_border, convert_packing, ...) leak it when the allocator throws: those, and
only those, are suppressed (tests/native/lsan.supp)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_close, built, stock_output
from test_runtime import WRITERS

DELAYED_RUNS = 20
SUPPRESSIONS = Path(__file__).parent / "native" / "lsan.supp"
BUILDS = {"host": "host", "asan": "host-asan", "tsan": "host-tsan"}
TOLERANCE = {"host": 1e-4, "asan": 1e-3, "tsan": 1e-3}


@pytest.mark.parametrize("budget", ["min", "100000000"], ids=["tightest", "generous"])
@pytest.mark.parametrize("model", sorted(WRITERS))
@pytest.mark.parametrize("build", sorted(BUILDS))
def test_every_fault_ends_in_an_error_and_the_next_run_equals_stock(build: str, model: str, budget: str, tmp_path: Path) -> None:
    inject(build, model, budget, tmp_path)


@pytest.mark.parametrize("model", sorted(WRITERS))
@pytest.mark.parametrize("build", ["host", "asan"])
def test_with_mapped_weights_every_fault_ends_in_an_error_and_the_next_run_equals_stock(build: str, model: str, tmp_path: Path) -> None:
    """Mapped weights at the tightest budget: a run that stops early leaves records of layers it
    loaded but did not compute mapped over the arena; the next run finds them given back."""
    inject(build, model, "min", tmp_path, "map_weights=1")


@pytest.mark.parametrize("model", ["convfc", "mlp"])
@pytest.mark.parametrize("build", sorted(BUILDS))
def test_with_computing_threads_loading_every_fault_ends_in_an_error_and_the_next_run_equals_stock(build: str, model: str,
                                                                                                 tmp_path: Path) -> None:
    """loader=computing at the tightest budget: a load that fails on the computing thread, before the layer
    it loads for computes, ends the run (no thread is left waiting for it), and the next run loads again."""
    inject(build, model, "min", tmp_path, "loader=computing")


def inject(build: str, model: str, budget: str, tmp_path: Path, *extra: str) -> None:
    param, bin_, x = WRITERS[model](tmp_path)
    np.save(tmp_path / "in.npy", x)
    program = built(BUILDS[build], "native", "tests_native", "fault_injection")
    proc = subprocess.run([str(program), str(param), str(bin_), str(tmp_path / "in.npy"), "data", "output", "2", budget,
                           str(DELAYED_RUNS), f"transformed={tmp_path / 'model.transformed'}", f"out={tmp_path / 'out.npy'}", *extra],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "LSAN_OPTIONS": f"suppressions={SUPPRESSIONS}:print_suppressions=0"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # sanitizers report on stderr
    report = json.loads(proc.stdout)
    assert report["requests"] > 0 and report["failed"] == report["thrown"] == report["requests"], report
    assert report["prepare_requests"] > 0 and report["prepare_failed"] == 2 * report["prepare_requests"], report
    assert report["delayed_runs"] == DELAYED_RUNS
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.npy", "model.transformed", "out.npy", param.name, bin_.name])
    assert_close(np.load(tmp_path / "out.npy"), stock_output(param, bin_, x), TOLERANCE[build])
