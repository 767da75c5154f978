"""The race hunt (flexnn_ncnn/racehunt.py), small: both parts on two models end in no finding, with
plans and stats read beside the runs, and what it would report as findings is found."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from flexnn_ncnn import models, racehunt
from helpers import built, run_module


def test_a_short_race_hunt_finds_nothing_and_reads_beside_every_run(tmp_path: Path) -> None:
    built("host-tsan", "native", "tests_native", "runtime_stress")
    report_path = tmp_path / "hunt.json"
    proc = run_module("racehunt", "--inferences", "120", "--python-inferences", "80",
                      "--models", "struct:resnet", "struct:yolov3_tiny", "--report", str(report_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())
    assert report["findings"] == 0 and report["inferences"] == 200
    by_part = {(r["model"], r["part"]): r for r in report["results"]}
    # shared by the models' shares (racehunt.MODELS: 0.37 and 0.2)
    assert [by_part[m, p]["inferences"] for m in ("struct:resnet", "struct:yolov3_tiny") for p in ("tsan", "python")] == \
        [78, 52, 42, 28]
    assert set(by_part) == {(m, p) for m in ("struct:resnet", "struct:yolov3_tiny") for p in ("tsan", "python")}
    for r in by_part.values():
        assert r["observations"] > 0, r  # the second thread really ran beside the inferences
        assert r["budget_switches"] >= 1 and r["max_rel_error"] is not None
    assert (tmp_path / "hunt.md").read_text().count("| struct:") == 4


def test_a_mismatch_and_a_changed_shape_are_findings() -> None:
    ref = {"out": np.ones((2, 3), np.float32)}
    result = racehunt.Result("m", "python")
    racehunt._compare(result, ref, {"out": np.ones((2, 3), np.float32) * 1.01}, 1e-3)
    racehunt._compare(result, ref, {"out": np.ones((3, 2), np.float32)}, 1e-3)
    assert len(result.findings) == 2 and "differ" in result.findings[0] and "shape" in result.findings[1]


def test_a_stress_program_error_is_a_finding(tmp_path: Path, monkeypatch) -> None:
    """The TSAN part reads the program's stderr: an error (here: a budget it cannot parse) is reported."""
    program = built("host-tsan", "native", "tests_native", "runtime_stress")
    description = models.read_description(models.generate("struct:resnet", tmp_path))
    monkeypatch.setattr(racehunt, "GENEROUS", "plenty")
    result = racehunt.hunt_tsan(description, 5, program, tmp_path)
    assert result.findings and "exit code 1" in result.findings[0], result
