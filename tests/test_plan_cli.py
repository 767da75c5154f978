"""`python -m flexnn_ncnn.plan`: exit codes, one-line errors, atomic output, the input left untouched."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flexnn_ncnn import plan as plan_cli
from flexnn_ncnn import planning, sidecar
from flexnn_ncnn.cli import run_main

from helpers import assert_user_error, run_module
from plan_fixtures import chain_sidecar


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / f"chain{sidecar.SUFFIX}"
    sidecar.save(chain_sidecar(), path)
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("plan", *args)


def test_replans_and_writes_the_output_leaving_the_input_untouched(source: Path, tmp_path: Path) -> None:
    before = source.read_bytes()
    out = tmp_path / "out.json"
    result = run(str(source), "--budget", "30kB", "-o", str(out), "--ladder", "40000,100kB")
    assert result.returncode == 0, result.stderr
    assert "budget:          30,000 B" in result.stdout and "ratio:" in result.stdout and "planning time:" in result.stdout
    assert source.read_bytes() == before
    written = sidecar.load(out)
    assert written.plan.budget == 30_000 and [p.budget for p in written.ladder] == [40_000, 100_000]
    assert written.profile == chain_sidecar().profile
    assert written.model == chain_sidecar().model, "model file names stay relative to the written sidecar"


def test_an_infeasible_budget_exits_2_with_one_line_naming_the_smallest(source: Path, tmp_path: Path) -> None:
    # the runtime's arena holds ARENA_MARGIN bytes past its last buffer
    minimum = planning.min_feasible_budget(chain_sidecar().profile) + planning.ARENA_MARGIN
    out = tmp_path / "out.json"
    line = assert_user_error(run(str(source), "--budget", str(minimum - 1), "-o", str(out)))
    assert line == f"error: budget {minimum - 1:,} B (0.0 MiB) is infeasible for this profile; the smallest feasible budget is {minimum:,} B (0.0 MiB)"
    assert not out.exists(), "an infeasible budget writes nothing"
    assert run(str(source), "--budget", str(minimum)).returncode == 0


@pytest.mark.parametrize("args, message", [
    (["--budget", "lots"], "error: cannot read size 'lots'"),
    (["--budget", "1MB", "--ladder", "2MB"], "error: --ladder stores plans in the output"),
])
def test_bad_arguments_are_one_line_errors(source: Path, args: list[str], message: str) -> None:
    assert assert_user_error(run(str(source), *args)).startswith(message)


def test_output_onto_the_input_is_refused(source: Path) -> None:
    before = source.read_bytes()
    assert run_main(plan_cli.main, [str(source), "--budget", "1MB", "-o", str(source)]) == 2
    assert source.read_bytes() == before


def test_a_broken_sidecar_is_a_one_line_error(source: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source.write_text(source.read_text()[:100])
    assert run_main(plan_cli.main, [str(source), "--budget", "1MB"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "is not valid JSON" in err


def test_the_output_is_written_atomically(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out.json"
    out.write_text("previous")

    def fail(*args: object) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(sidecar.os, "replace", fail)
    with pytest.raises(OSError):
        plan_cli.main([str(source), "--budget", "1MB", "-o", str(out)])
    assert out.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([source.name, "out.json"])


def test_help_describes_the_verb() -> None:
    result = run("--help")
    assert result.returncode == 0 and "--budget" in result.stdout and "infeasible" in result.stdout


def test_the_bench_prints_a_row_per_budget_and_algorithm(source: Path) -> None:
    result = run_module("bench.planner", str(source), "--budgets", "1kB,30kB,1MB", "--repeat", "1")
    assert result.returncode == 0, result.stderr
    rows = [line.split()[:3] for line in result.stdout.splitlines() if line.split()[1:2] in (["flexnn"], ["algorithm1"])]
    assert [r[0] for r in rows] == ["0.001MB"] * 2 + ["0.03MB"] * 2 + ["1MB"] * 2
    assert [r[2] for r in rows] == ["no", "no", "yes", "yes", "yes", "yes"]
