"""The fuzz harness (`python -m flexnn_ncnn.fuzz`, issue 14): a few hundred mutated `.param`, `.bin`,
sidecar and transformed-weights inputs, each accepted or refused in one line, none crashing,
throwing another exception or hanging; and proof that the harness reports a crash when its worker
dies (the long run's report is docs/FUZZING.md)."""

from __future__ import annotations

import json
from pathlib import Path

from flexnn_ncnn.fuzz import TARGETS, fuzz
from helpers import run_module

CASES = 400


def test_mutated_inputs_are_accepted_or_refused_in_one_line(tmp_path: Path) -> None:
    report = fuzz(CASES, seed=11, targets=TARGETS, workdir=tmp_path)
    assert report.findings == 0, {t: v.findings for t, v in report.targets.items() if v.findings}
    for name, tally in report.targets.items():
        assert tally.cases == CASES // len(TARGETS)
        assert tally.refused > 0, name  # the mutations reach the readers' checks
    assert not list((tmp_path / "findings").iterdir())


def test_a_worker_that_dies_is_a_finding_with_its_input_kept(tmp_path: Path) -> None:
    report = fuzz(8, seed=0, targets=("param", "sidecar"), workdir=tmp_path, abort_on="sidecar")
    tally = report.targets["sidecar"]
    assert tally.cases == 4 and len(tally.findings) == 4
    assert all("the process died" in f["error"] and Path(f["input"]).is_file() for f in tally.findings)
    assert report.targets["param"].findings == []  # the worker replaced after each death answers the rest


def test_the_command_writes_its_report_and_exits_0_without_findings(tmp_path: Path) -> None:
    proc = run_module("fuzz", "--cases", "40", "--seed", "3", "--report", str(tmp_path / "fuzz.json"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "fuzz.json").read_text())
    assert data["cases"] == 40 and data["findings"] == 0
    assert "| sidecar | 10 |" in (tmp_path / "fuzz.md").read_text()
