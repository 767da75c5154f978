"""`python -m flexnn_ncnn.bench.switch`: one Session switched through budgets (the paper's demo
sequence) keeps outputs equal to stock NCNN and the runtime's count within each budget, and writes
the trace as a time series (JSON, CSV, PNG); the trace is a benchmark (its timings are reported,
never asserted)."""

from __future__ import annotations

import csv
import json
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from flexnn_ncnn.bench.switch import Inference, Switch, SwitchTrace, write_trace
from helpers import assert_user_error, run_module, stock_output
from test_runtime import ModelCase, budgets_for, prepared, write_residual


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's header; fails on anything that is not a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def residual_sidecar(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    param, bin_, x = write_residual(tmp_path)
    path, content = prepared(ModelCase("residual", param, bin_, x, stock_output(param, bin_, x)), tmp_path)
    return path, budgets_for(content)


def test_switching_through_budgets_keeps_outputs_and_memory(tmp_path: Path) -> None:
    path, b = residual_sidecar(tmp_path)
    sequence = [b["middle"], b["generous"], b["tightest"], b["middle"]]

    proc = run_module("bench.switch", str(path), "--budgets", ",".join(map(str, sequence)), "--loops", "1", "--json",
                      "-o", str(tmp_path / "out"))

    assert proc.returncode == 0, proc.stderr
    trace = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["budget"] for r in trace] == sequence
    for record in trace:
        # the count within what the budget leaves it beside the reservation: no slack that cannot fail
        assert record["ok"] and 0 < record["counted_bytes"] <= record["counted_limit_bytes"] < record["budget"]
        assert record["relative_error"] <= 1e-4
        assert record["switch_ms"] >= 0 and record["first_inference_ms"] > 0
    # the time series behind the table: every switch and every inference, and its plot
    series = json.loads((tmp_path / "out" / "residual.switch.json").read_text())
    assert series["steps"] == trace and [s["budget"] for s in series["switches"]] == sequence
    inferences = series["inferences"]
    assert [i["budget"] for i in inferences] == [b for b in sequence for _ in range(2)]
    assert [i["after_switch"] for i in inferences] == [True, False] * len(sequence)
    assert all(0 < i["counted_bytes"] <= i["counted_limit_bytes"] < i["budget"] for i in inferences)
    assert _png_size(tmp_path / "out" / "residual.switch.png")[0] > 0
    assert len((tmp_path / "out" / "residual.switch.csv").read_text().splitlines()) == 1 + len(inferences)


def test_an_infeasible_budget_in_the_sequence_is_one_error_line(tmp_path: Path) -> None:
    path, b = residual_sidecar(tmp_path)
    proc = run_module("bench.switch", str(path), "--budgets", f"{b['middle']},{b['tightest'] - 1}")
    assert_user_error(proc, "infeasible", "smallest feasible budget", "re-slice the model for it")


def _synthetic() -> SwitchTrace:
    """Two switches: 3 MB (three inferences, all within its 2.8 MB limit), then 1 MB (two, the second over
    its 0.95 MB limit)."""
    switches = (Switch(0.0, 3 * 10**6, 5.0), Switch(1.0, 10**6, 7.0))
    inferences = (Inference(0, 0.01, 3 * 10**6, 40.0, 2 * 10**6, 2_500_000, 2_800_000, True, 1e-6),
                  Inference(1, 0.05, 3 * 10**6, 10.0, 2 * 10**6, 2_500_000, 2_800_000, False, None),
                  Inference(2, 0.06, 3 * 10**6, 30.0, 2 * 10**6, 2_500_000, 2_800_000, False, None),
                  Inference(3, 1.01, 10**6, 50.0, 900_000, 900_000, 950_000, True, 2e-6),
                  Inference(4, 1.06, 10**6, 20.0, 900_000, 1_000_000, 950_000, False, None))
    return SwitchTrace(switches, inferences)


def test_steps_summarise_what_followed_each_switch() -> None:
    first, second = _synthetic().steps()
    assert (first.budget, first.switch_ms, first.first_inference_ms, first.latency_median_ms) == (3 * 10**6, 5.0, 40.0, 20.0)
    assert first.ok and first.counted_bytes == 2_500_000 and first.arena_bytes == 2 * 10**6
    # one inference counted over the budget fails the step, even if the others held it
    assert (second.first_inference_ms, second.latency_median_ms, second.ok) == (50.0, 20.0, False)
    wrong = SwitchTrace(_synthetic().switches[:1], (replace(_synthetic().inferences[0], relative_error=1e-3),)).steps()
    assert not wrong[0].ok and wrong[0].latency_median_ms is None  # off stock NCNN; no steady inference


def test_the_series_is_written_as_json_csv_and_png(tmp_path: Path) -> None:
    trace = _synthetic()
    written = write_trace(trace, tmp_path / "model.switch", "model")

    assert sorted(p.name for p in written) == ["model.switch.csv", "model.switch.json", "model.switch.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in written)  # no temporary file left
    data = json.loads((tmp_path / "model.switch.json").read_text())
    assert [s["budget"] for s in data["switches"]] == [3 * 10**6, 10**6]
    assert [i["latency_ms"] for i in data["inferences"]] == [40.0, 10.0, 30.0, 50.0, 20.0]
    assert [s["ok"] for s in data["steps"]] == [True, False]
    rows = list(csv.DictReader((tmp_path / "model.switch.csv").open()))
    assert [(int(r["index"]), float(r["time_s"]), int(r["counted_bytes"]), r["after_switch"]) for r in rows][3:] == [
        (3, 1.01, 900_000, "True"), (4, 1.06, 1_000_000, "False")]
    width, height = _png_size(tmp_path / "model.switch.png")
    assert width > 300 and height > 300


def test_without_matplotlib_the_series_is_still_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("flexnn_ncnn.bench.switch.pyplot", lambda what: None)
    written = write_trace(_synthetic(), tmp_path / "model.switch", "model")
    assert sorted(p.name for p in written) == ["model.switch.csv", "model.switch.json"]
