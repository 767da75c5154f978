"""What the tests share: running a CLI verb as a user would, and the one-line error contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from flexnn_ncnn.ncnn_model.stock import run_stock

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_ROOT = REPO_ROOT / "build"
# the cross-built binaries' runner; huge pages off so the emulator's resident memory is repeatable
QEMU = [sys.executable, str(Path(__file__).with_name("without_huge_pages.py")), "qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]


def run_module(verb: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m flexnn_ncnn.<verb> args...` in a fresh process."""
    return subprocess.run([sys.executable, "-m", f"flexnn_ncnn.{verb}", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd or REPO_ROOT)


def assert_user_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit code 2, exactly one `error: ...` line on stderr (no traceback) holding every fragment."""
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def built(target: str, *parts: str) -> Path:
    """A file of `target`'s build; fails (not skips) when missing: the test command builds first."""
    path = BUILD_ROOT.joinpath(target, *parts)
    assert path.exists(), f"{path} is missing: run `python -m flexnn_ncnn.build --target {target}` first"
    return path


def stock_output(param: Path, bin_: Path, x: np.ndarray, blob_in: str = "data", blob_out: str = "output") -> np.ndarray:
    """The oracle: stock NCNN (the `ncnn` wheel) with its default options."""
    return run_stock(param, bin_, {blob_in: x}, [blob_out], fp32=False)[blob_out]


def assert_close(got: np.ndarray, ref: np.ndarray, rtol: float) -> None:
    """Finite, same shape, and max abs difference within rtol x max|ref|."""
    assert got.shape == ref.shape
    assert np.all(np.isfinite(got))
    err = float(np.max(np.abs(got - ref)))
    assert err <= rtol * float(np.max(np.abs(ref))), f"max abs diff {err} vs max|ref| {np.max(np.abs(ref))}"


def assert_same_detections(got: np.ndarray, ref: np.ndarray, rtol: float = 1e-4) -> None:
    """A detection head's (label, score, box) rows: the same rows as a set (boxes whose scores tie may
    come in either order), each of `got` matched to a distinct row of `ref` with its label and every
    column within rtol x that column's max|ref|. A head with nothing above its threshold may pass its
    input through (YoloDetectionOutput returns the feature map): compared element by element."""
    assert got.shape == ref.shape
    if ref.size == 0:
        return
    if ref.ndim != 2:
        assert_close(got, ref, rtol)
        return
    tolerance = rtol * np.maximum(np.abs(ref).max(axis=0), 1e-30)
    unmatched = np.ones(len(ref), bool)
    for row in got:
        distance = (np.abs(ref - row) / tolerance).max(axis=1)  # in tolerances, the worst column
        close = np.flatnonzero(unmatched & (ref[:, 0] == row[0]) & (distance <= 1))
        assert close.size, f"no row of the reference matches {row}"
        unmatched[close[np.argmin(distance[close])]] = False


def assert_counted_within_budget(stats: dict) -> None:
    """The runtime's own count (arena + outside it) within what the budget leaves it: the budget less
    the resident memory the plan reserves for what the runtime does not count. No other slack."""
    assert 0 < stats["counted_bytes"] <= stats["counted_limit_bytes"], stats
