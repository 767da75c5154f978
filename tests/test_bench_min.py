"""`python -m flexnn_ncnn.bench --budgets min` (issue 13): FlexNN at the smallest budget `slice --budget min`
finds, measured as at any budget; the floor summary reports that budget, its ratio to the activation floor,
and the search that found it. A real run on the tiny SqueezeNet of the zoo; no timing is asserted."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from flexnn_ncnn.bench import configs
from helpers import assert_user_error, run_module

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from flexnn_ncnn.models import generate
    return generate("squeezenet", tmp_path_factory.mktemp("models"), seed=0, tiny=True)


def test_flexnn_at_min_runs_at_the_budget_slice_names_and_the_floor_row_reports_it(tiny_model, tmp_path):
    proc = run_module("bench", "--model", str(tiny_model), "--budgets", "min", "--modes", "flexnn,on-demand",
                      "--baselines", "ncnn-default", "--warmup", "0", "--loops", "2", "--rounds", "1", "-o", str(tmp_path),
                      "--results-md", str(tmp_path / "RESULTS.md"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "squeezenet.results.json").read_text())
    by_name = {s["config"]: s for s in data["summaries"]}
    assert list(by_name) == ["ncnn-default", "flexnn@min", "on-demand"]
    found = by_name["flexnn@min"]
    assert found["ok"] and found["smallest"] and found["max_rel_error"] <= 1e-4, found["errors"]
    (run,) = [r for r in data["runs"] if r["config"] == "flexnn@min"]
    budget = found["budget"]
    assert run["budget"] == run["record"]["budget"] == budget
    # the bench's budget is the one `slice --budget min` names alone for the same model and options (the
    # child's: fp32 math, 2 threads), and the search it reports is slice's, probe for probe
    description = json.loads(tiny_model.read_text())
    shape = ",".join(map(str, [1, *description["inputs"][0]["shape"]]))
    alone = run_module("slice", str(tiny_model.with_name(description["param"])), "--budget", "min", "--input-shape", shape,
                       "--threads", "2", "--no-fp16", "-o", str(tmp_path / "alone"))
    assert alone.returncode == 0, alone.stderr
    assert budget == int(re.search(r"smallest budget: ([\d,]+) B", alone.stdout)[1].replace(",", ""))
    search = json.loads((tmp_path / "alone" / "squeezenet.flexnn.slicing.json").read_text())["min_search"]
    assert found["min_search"]["probes"] == search["probes"] == run["record"]["min_search"]["probes"]
    assert [budget, True] in search["probes"] and isinstance(found["min_search"]["seconds"], float)  # recorded, not judged
    # held: the runtime's count and the process's peak RSS over idle within the budget found
    assert 0 < found["counted_bytes"] <= budget and found["peak_over_idle_bytes"] <= budget
    floor = data["activation_floor"]
    assert floor["activation_floor_bytes"] == by_name["on-demand"]["activation_floor_bytes"] > 0
    assert (floor["min_budget"], floor["min_budget_config"], floor["found_by"], floor["search_held"]) == (
        budget, "flexnn@min", "search", True)
    assert floor["min_budget_over_floor"] == budget / floor["activation_floor_bytes"]
    assert floor["search_probes"] == len(search["probes"]) and floor["search_seconds"] == found["min_search"]["seconds"]
    assert (floor["latency_median_ms"], floor["ratio_to_default"], floor["peak_over_idle_bytes"]) == (
        found["latency_median_ms"], found["ratio_to_default"], found["peak_over_idle_bytes"])
    md = (tmp_path / "RESULTS.md").read_text()
    assert (f"| squeezenet | {floor['activation_floor_bytes'] / 1e6:.1f} | {budget / 1e6:.1f} | search "
            f"| {floor['min_budget_over_floor']:.2f} | {found['latency_median_ms']:.1f} | {found['ratio_to_default']:.3f} "
            f"| {found['peak_over_idle_bytes'] / 1e6:.1f} | {len(search['probes'])} |") in md
    assert f"| flexnn@min ({budget / 1e6:.1f} MB) | yes |" in md
    assert f"flexnn@min's search: {len(search['probes'])} probes in" in proc.stdout


def test_min_is_flexnn_s_alone() -> None:
    budgets = configs.parse_budgets("min, 35MB,50MB")
    assert budgets == configs.Budgets([35 * 10**6, 50 * 10**6], smallest=True)
    names = [c.name for c in configs.configurations(budgets, ["flexnn", "on-demand", "swapnet"], ["ncnn-default"])]
    assert names == ["ncnn-default", "flexnn@min", "flexnn@35MB", "flexnn@50MB", "on-demand", "swapnet@35MB", "swapnet@50MB"]
    with pytest.raises(configs.UserError, match="swapnet runs at budgets in bytes; min is for flexnn alone"):
        configs.configurations(configs.parse_budgets("min"), ["flexnn", "swapnet"])
    # a --runtime-command template gets `min` as its budget
    command = configs.child_command(configs.Configuration("flexnn", smallest=True), configs.ChildSettings(Path("m.json")),
                                    Path("o.npz"), "{python} -m rt --budget {budget}")
    assert command == [sys.executable, "-m", "rt", "--budget", "min"]


def test_min_with_only_budgeted_baselines_or_in_another_mode_s_child_is_refused(tiny_model, tmp_path):
    proc = run_module("bench", "--model", str(tiny_model), "--budgets", "min", "--ablation", "-o", str(tmp_path))
    assert_user_error(proc, "flexnn-no-mem runs at budgets in bytes", "--budgets min,35MB")
    proc = run_module("bench.flexnn_child", "--model", str(tiny_model), "--mode", "swapnet", "--budget", "min",
                      "--outputs", str(tmp_path / "o.npz"))
    assert_user_error(proc, "--budget min is for --mode flexnn")


def test_a_runtime_child_at_min_must_report_the_budget_it_found(tiny_model, tmp_path):
    """A --runtime-command child for flexnn@min that measures but names no budget fails the run."""
    fake = tmp_path / "fake.py"
    fake.write_text("import json, sys\nprint(json.dumps({'config': 'flexnn', 'latency_ms': [1.0], 'rss_idle_bytes': 0, "
                    "'vm_hwm_bytes': 0, 'hwm_reset': True, 'outputs_npz': sys.argv[1]}))\n")
    proc = run_module("bench", "--model", str(tiny_model), "--budgets", "min", "--modes", "flexnn", "--baselines",
                      "ncnn-default", "--runtime-command", f"{{python}} {fake} {{outputs}}", "--warmup", "0", "--loops", "1",
                      "--rounds", "1", "-o", str(tmp_path / "out"), "--results-md", str(tmp_path / "RESULTS.md"))
    assert proc.returncode == 1
    assert "flexnn@min (round 0): reported no budget" in proc.stderr.strip().splitlines()[-1]


def test_a_model_of_the_user_s_own_is_benched_by_its_param_path_with_its_own_weights(tiny_model, tmp_path):
    """`--model MODEL.param`: the MODEL.bin beside it, read in place (its folder is left as it was), its
    outputs checked against stock NCNN like any model's."""
    description = json.loads(tiny_model.read_text())
    mine = tmp_path / "mine"
    mine.mkdir()
    for suffix in ("param", "bin"):
        (mine / f"net.{suffix}").write_bytes(tiny_model.with_name(description[suffix]).read_bytes())
    before = {p.name: p.stat().st_mtime_ns for p in mine.iterdir()}
    shape = ",".join(map(str, [1, *description["inputs"][0]["shape"]]))  # a pnnx export's Input declares none
    proc = run_module("bench", "--model", str(mine / "net.param"), "--input-shape", shape, "--budgets", "min", "--modes", "flexnn", "--baselines",
                      "ncnn-default", "--warmup", "0", "--loops", "1", "--rounds", "1", "-o", str(tmp_path / "out"),
                      "--models-dir", str(tmp_path / "models"), "--results-md", str(tmp_path / "RESULTS.md"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "out" / "files-net.results.json").read_text())
    assert data["model"]["bin"] == str((mine / "net.bin").resolve())
    found = {s["config"]: s for s in data["summaries"]}["flexnn@min"]
    assert found["ok"] and found["max_rel_error"] <= 1e-4, found["errors"]
    assert {p.name: p.stat().st_mtime_ns for p in mine.iterdir()} == before
    (mine / "net.bin").unlink()
    assert_user_error(run_module("bench", "--model", str(mine / "net.param"), "--input-shape", shape, "-o", str(tmp_path / "out")),
                      "no net.bin beside it")
