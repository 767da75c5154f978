"""`python -m flexnn_ncnn.bench.switch`: one Session switched through budgets (the paper's demo
sequence) keeps outputs equal to stock NCNN and the runtime's count within each budget; the trace
is a benchmark (its timings are reported, never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import assert_user_error, run_module, stock_output
from test_runtime import ModelCase, budgets_for, prepared, write_residual


def residual_sidecar(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    param, bin_, x = write_residual(tmp_path)
    path, content = prepared(ModelCase("residual", param, bin_, x, stock_output(param, bin_, x)), tmp_path)
    return path, budgets_for(content)


def test_switching_through_budgets_keeps_outputs_and_memory(tmp_path: Path) -> None:
    path, b = residual_sidecar(tmp_path)
    sequence = [b["middle"], b["generous"], b["tightest"], b["middle"]]

    proc = run_module("bench.switch", str(path), "--budgets", ",".join(map(str, sequence)), "--loops", "1", "--json")

    assert proc.returncode == 0, proc.stderr
    trace = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["budget"] for r in trace] == sequence
    for record in trace:
        assert record["ok"] and record["counted_bytes"] <= record["budget"] and record["relative_error"] <= 1e-4
        assert record["switch_ms"] >= 0 and record["first_inference_ms"] > 0


def test_an_infeasible_budget_in_the_sequence_is_one_error_line(tmp_path: Path) -> None:
    path, b = residual_sidecar(tmp_path)
    proc = run_module("bench.switch", str(path), "--budgets", f"{b['middle']},{b['tightest'] - 1}")
    assert_user_error(proc, "infeasible", "smallest feasible budget", "re-slice the model for it")
