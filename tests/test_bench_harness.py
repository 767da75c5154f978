"""The benchmark harness on a tiny model: children's JSON lines parsed, ratios to NCNN-Default
computed, outputs checked against stock NCNN (a wrong output or a crashing child fails the run; a
baseline refusing its budget does not), device results ingested into the same report. No timing is
asserted."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn.bench import configs, harness, pagecache
from helpers import REPO_ROOT, assert_user_error, run_module

pytest.importorskip("torch")

# A stand-in for the runtime's child: computes with stock NCNN (or deliberately not), prints the protocol line.
FAKE_RUNTIME = textwrap.dedent("""
    import argparse, json, sys, time
    import numpy as np
    from flexnn_ncnn.bench.measure import model_inputs, reset_peak_rss, status_bytes
    from flexnn_ncnn.models import read_description
    from flexnn_ncnn.ncnn_model.stock import run_stock
    p = argparse.ArgumentParser()
    for a in ("--model", "--mode", "--budget", "--outputs", "--wrong-at", "--crash-at", "--infeasible-at", "--over-at"):
        p.add_argument(a, default="")
    args = p.parse_args()
    if args.budget == args.crash_at:
        sys.exit("fake runtime: arena exhausted")  # exit code 1 and a message on stderr
    if args.budget == args.infeasible_at:
        print(json.dumps({"config": args.mode, "budget": int(args.budget), "min_feasible_budget": 1500000,
                          "infeasible": "fake runtime: the smallest feasible budget is 1.5 MB"}))
        sys.exit(0)
    d = read_description(args.model)
    inputs = model_inputs(d, 0)
    idle = status_bytes("VmRSS")
    reset_peak_rss()
    out = run_stock(d["param"], d["bin"], inputs, d["outputs"])
    sliced = args.outputs + ".sliced.bin"  # streamed from while it runs, as a runtime child would
    with open(sliced, "wb") as f:
        f.write(open(d["bin"], "rb").read())
    with open(sliced, "rb") as f:
        f.read()
        time.sleep(0.3)
    if args.budget == args.wrong_at:
        out = {k: v + 1.0 for k, v in out.items()}
    np.savez(args.outputs, **out)
    # its real peak, within the budget (the stock run's own memory is not what a runtime would hold), or
    # twice the budget above its idle RSS where it is told to exceed it
    peak = idle + 2 * int(args.budget) if args.budget == args.over_at else min(status_bytes("VmHWM"), idle + int(args.budget))
    print(json.dumps({"config": args.mode or "flexnn", "latency_ms": [1.0, 2.0, 3.0], "load_ms": 0.5, "rss_idle_bytes": idle,
                      "vm_hwm_bytes": peak, "hwm_reset": True, "outputs_npz": args.outputs,
                      "counted_bytes": int(args.budget), "load_wait_ms": [0.1, 0.2, 0.3], "plan_ms": 4.0}))
""")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from flexnn_ncnn.models import generate
    return generate("squeezenet", tmp_path_factory.mktemp("models"), seed=0, tiny=True)


@pytest.fixture(scope="module")
def fake_runtime(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fake") / "fake runtime.py"  # a space: the template must keep it one argument
    path.write_text(f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r})\n" + FAKE_RUNTIME)
    return path


def _bench(tiny_model: Path, out: Path, runtime: str, *extra: str):
    return run_module("bench", "--model", str(tiny_model), "--baselines", "ncnn-default", "--modes", "flexnn",
                      "--budgets", "1MB,2MB", "--runtime-command", runtime, "--warmup", "0", "--loops", "2",
                      "--rounds", "1", "-o", str(out), "--results-md", str(out / "RESULTS.md"), *extra)


def test_runs_every_configuration_in_a_child_and_reports_ratios(tiny_model, fake_runtime, tmp_path):
    runtime = "{python} '" + str(fake_runtime) + "' --model {model} --budget {budget} --outputs {outputs}"
    proc = _bench(tiny_model, tmp_path, runtime)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "squeezenet.results.json").read_text())
    by_name = {s["config"]: s for s in data["summaries"]}
    assert list(by_name) == ["ncnn-default", "flexnn@1MB", "flexnn@2MB"]
    default = by_name["ncnn-default"]
    assert default["ok"] and default["ratio_to_default"] == 1.0 and default["max_rel_error"] <= 1e-4
    assert default["peak_over_idle_bytes"] > 0 and default["page_cache_peak_bytes"] > 0
    for budget, name in ((10**6, "flexnn@1MB"), (2 * 10**6, "flexnn@2MB")):
        s = by_name[name]
        assert s["ok"] and s["budget"] == budget and s["latency_median_ms"] == 2.0
        assert s["ratio_to_default"] == pytest.approx(2.0 / default["latency_median_ms"])
        assert s["counted_bytes"] == budget and s["load_wait_median_ms"] == pytest.approx(0.2)
        assert s["overhead"] == {"plan_ms": 4.0}
        # the model's .bin and the one the child held open: both in the cache
        assert s["page_cache_peak_bytes"] >= 2 * (tiny_model.parent / "squeezenet.bin").stat().st_size
    (run,) = [r for r in data["runs"] if r["config"] == "flexnn@1MB"]
    assert any(f.endswith(".sliced.bin") for f in run["weight_files"]), run["weight_files"]
    rows = (tmp_path / "squeezenet.csv").read_text().splitlines()
    assert len(rows) == 4 and rows[0].startswith("config,family,budget")
    md = (tmp_path / "RESULTS.md").read_text()
    assert "| flexnn@2MB | yes |" in md and "Machine:" in md and "| flexnn@2MB | - | - | 4 | - |" in md
    # the fake reports no activation floor: the smallest budget held (counted and peak RSS over idle
    # within it) is known, the floor is not
    floor = data["activation_floor"]
    assert (floor["activation_floor_bytes"], floor["min_budget"], floor["min_budget_config"], floor["min_budget_over_floor"],
            floor["search_held"]) == (None, 10**6, "flexnn@1MB", None, None)
    assert floor["found_by"] == "grid"
    assert "| squeezenet | - | 1.0 | grid | - |" in md


def test_wrong_output_and_crashing_child_fail_the_run(tiny_model, fake_runtime, tmp_path):
    runtime = ("{python} '" + str(fake_runtime) + "' --model {model} --budget {budget} --outputs {outputs} "
               "--wrong-at 1000000 --crash-at 2000000")
    proc = _bench(tiny_model, tmp_path, runtime)
    assert proc.returncode == 1, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("error: 2 configuration run(s) failed")
    assert "flexnn@1MB (round 0): wrong output: max relative error" in error
    assert "flexnn@2MB (round 0): exited with code 1: fake runtime: arena exhausted" in error
    data = json.loads((tmp_path / "squeezenet.results.json").read_text())
    assert [s["ok"] for s in data["summaries"]] == [True, False, False]
    assert "Failures:" in (tmp_path / "RESULTS.md").read_text()


def test_a_budget_not_held_fails_the_run(tiny_model, fake_runtime, tmp_path):
    runtime = "{python} '" + str(fake_runtime) + "' --model {model} --budget {budget} --outputs {outputs} --over-at 1000000"
    proc = _bench(tiny_model, tmp_path, runtime)
    assert proc.returncode == 1, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("error: 1 configuration run(s) failed or did not hold their budget")
    assert "flexnn@1MB did not hold its budget (1,000,000 B" in error and "flexnn@2MB" not in error
    floor = json.loads((tmp_path / "squeezenet.results.json").read_text())["activation_floor"]
    assert (floor["min_budget"], floor["min_budget_config"]) == (2 * 10**6, "flexnn@2MB")


def test_a_baseline_refusing_its_budget_is_reported_not_failed(tiny_model, fake_runtime, tmp_path):
    """SwapNet below its smallest budget is a result, run once: later rounds skip it, and its budgets below the
    smallest it reported are not run. FlexNN refusing a budget fails."""
    runtime = ("{python} '" + str(fake_runtime) + "' --model {model} --mode {mode} --budget {budget} --outputs {outputs} "
               "--infeasible-at 1000000")
    proc = _bench(tiny_model, tmp_path, runtime, "--modes", "swapnet,flexnn", "--rounds", "2", "--budgets", "1MB,1.2MB,2MB")
    assert proc.returncode == 1, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("error: 2 configuration run(s) failed")  # flexnn@1MB in both rounds
    assert "flexnn@1MB (round 0): refused its budget: fake runtime: the smallest feasible budget is 1.5 MB" in error
    assert "swapnet" not in error
    data = json.loads((tmp_path / "squeezenet.results.json").read_text())
    by_name = {s["config"]: s for s in data["summaries"]}
    assert list(by_name) == ["ncnn-default", "swapnet@1MB", "swapnet@1.2MB", "swapnet@2MB", "flexnn@1MB", "flexnn@1.2MB",
                             "flexnn@2MB"]
    refused = by_name["swapnet@1MB"]
    assert refused["ok"] and refused["runs"] == 1 and refused["latency_median_ms"] is None and not refused["errors"]
    assert refused["infeasible"] == "fake runtime: the smallest feasible budget is 1.5 MB"
    below = by_name["swapnet@1.2MB"]
    assert below["ok"] and below["runs"] == 1 and below["latency_median_ms"] is None
    assert below["infeasible"] == "below 1,500,000 B (1.4 MiB), the smallest budget swapnet@1MB reported"
    assert [r["config"] for r in data["runs"]].count("swapnet@1.2MB") == 1 and by_name["flexnn@1.2MB"]["runs"] == 2
    assert by_name["swapnet@2MB"]["ok"] and by_name["swapnet@2MB"]["runs"] == 2 and not by_name["swapnet@2MB"]["infeasible"]
    assert not by_name["flexnn@1MB"]["ok"] and by_name["flexnn@1MB"]["runs"] == 2
    md = (tmp_path / "RESULTS.md").read_text()
    assert "| swapnet@1MB | infeasible |" in md and "| flexnn@1MB | FAILED |" in md and "| swapnet@2MB | yes |" in md
    assert "- swapnet@1MB: fake runtime: the smallest feasible budget is 1.5 MB" in md
    rows = {row["config"]: row for row in csv.DictReader((tmp_path / "squeezenet.csv").open())}
    assert rows["swapnet@1MB"]["infeasible"] == refused["infeasible"] and rows["swapnet@2MB"]["infeasible"] == ""
    assert "swapnet@1MB              infeasible: fake runtime" in proc.stdout


def test_flexnn_runs_alongside_the_baselines_by_default(tiny_model, tmp_path):
    """The real runtime child (slice -> prepare -> Session) at two budgets, On-Demand, SwapNet-style
    block streaming and the three ablations at the two budgets; the harness checks every output against
    stock NCNN, and the heap-allocating ablations count no more than the plan they follow."""
    proc = run_module("bench", "--model", str(tiny_model), "--baselines", "ncnn-default", "--budgets", "6MB,7MB",
                      "--ablation", "--warmup", "0", "--loops", "2", "--rounds", "1", "-o", str(tmp_path),
                      "--results-md", str(tmp_path / "RESULTS.md"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "squeezenet.results.json").read_text())
    by_name = {s["config"]: s for s in data["summaries"]}
    assert list(by_name) == ["ncnn-default", "flexnn@6MB", "flexnn@7MB", "on-demand", "swapnet@6MB", "swapnet@7MB",
                             "flexnn-no-mem@6MB", "flexnn-no-mem@7MB", "flexnn-no-preload@6MB", "flexnn-no-preload@7MB",
                             "flexnn-no-both@6MB", "flexnn-no-both@7MB"]
    for name, s in by_name.items():
        assert s["ok"], (name, s["errors"])
        if s["infeasible"]:  # each budget leaves some 4 MB to the uncounted RSS: SwapNet may refuse 6 MB
            assert name == "swapnet@6MB" and "the smallest feasible budget is" in s["infeasible"]
            continue
        assert s["max_rel_error"] <= 1e-4, name
        if name != "ncnn-default":
            assert 0 < s["counted_bytes"] <= (s["budget"] or s["counted_bytes"]) and "plan_ms" in s["overhead"]
    for name in ("flexnn@6MB", "flexnn@7MB"):
        assert {"slice_ms", "prepare_ms", "plan_ms"} <= set(by_name[name]["overhead"])
        assert by_name[name]["overhead"]["transformed_weight_bytes"] > 0  # prepare wrote MODEL.transformed
    for run in data["runs"]:
        if run["config"].startswith(("flexnn-no-mem@", "flexnn-no-both@")):
            assert run["record"]["arena_bytes"] == 0  # no static arena: everything counted is heap
    md = (tmp_path / "RESULTS.md").read_text()
    assert "| budget | flexnn | flexnn-no-mem | flexnn-no-preload | flexnn-no-both |" in md
    assert "| 7 MB | " in md and (tmp_path / "squeezenet.ablation.png").stat().st_size > 0
    # SwapNet streams the unsliced model, prepared as On-Demand's: the same activation floor
    assert {"prepare_ms", "plan_ms", "transformed_weight_bytes"} == set(by_name["swapnet@7MB"]["overhead"])
    assert by_name["swapnet@7MB"]["activation_floor_bytes"] == by_name["on-demand"]["activation_floor_bytes"]
    # the unsliced model's activation floor (on-demand), beside the smallest budget FlexNN held
    floor = data["activation_floor"]
    assert floor["activation_floor_bytes"] == by_name["on-demand"]["activation_floor_bytes"] > 0
    assert floor["min_budget"] == 6 * 10**6 and floor["min_budget_over_floor"] == 6 * 10**6 / floor["activation_floor_bytes"]
    assert floor["activation_floor_bytes"] <= 6 * 10**6  # FlexNN ran within 6 MB, so the floor is below it
    rows = {row["config"]: row for row in csv.DictReader((tmp_path / "squeezenet.csv").open())}
    assert float(rows["flexnn@7MB"]["budget_over_floor"]) == pytest.approx(7 * 10**6 / floor["activation_floor_bytes"])
    assert rows["on-demand"]["activation_floor_bytes"] == str(floor["activation_floor_bytes"])
    assert f"| squeezenet | {floor['activation_floor_bytes'] / 1e6:.1f} | 6.0 | grid | {floor['min_budget_over_floor']:.2f} |" in (
        tmp_path / "RESULTS.md").read_text()


def test_unknown_configurations_and_missing_budgets_are_refused(tiny_model, tmp_path):
    proc = run_module("bench", "--model", str(tiny_model), "--modes", "flexnn,on-demand,swapnet", "-o", str(tmp_path))
    assert_user_error(proc, "flexnn, swapnet run at each budget: they need --budgets")
    proc = run_module("bench", "--model", str(tiny_model), "--modes", "w.o.mem", "--budgets", "1MB", "-o", str(tmp_path))
    assert_user_error(proc, "unknown configuration 'w.o.mem'")


def test_summaries_pool_rounds_and_divide_by_the_default_median():
    def run(config, family, budget, round_, latencies, hwm):
        record = {"config": config, "latency_ms": latencies, "load_ms": 1.0, "rss_idle_bytes": 100, "vm_hwm_bytes": hwm,
                  "hwm_reset": True, "outputs_npz": "x"}
        return harness.ChildRun(config, family, budget, round_, 0, record, sampled_rss_peak_bytes=150,
                                page_cache_peak_bytes=7, max_rel_error=0.0)
    cs = configs.configurations(configs.Budgets([10**6]), ["flexnn"], ["ncnn-default"])
    runs = [run("ncnn-default", "ncnn-default", None, 0, [10, 12], 400), run("flexnn@1MB", "flexnn", 10**6, 0, [15], 200),
            run("ncnn-default", "ncnn-default", None, 1, [11], 500), run("flexnn@1MB", "flexnn", 10**6, 1, [16, 18], 300)]
    default, flexnn = harness.summarise(runs, cs)
    assert default.latency_median_ms == 11 and default.peak_over_idle_bytes == 400 and default.sampled_over_idle_bytes == 50
    assert flexnn.latency_median_ms == 16 and flexnn.ratio_to_default == pytest.approx(16 / 11)


def test_child_lines_and_outputs_are_validated():
    with pytest.raises(ValueError, match="printed no JSON line"):
        harness._parse_record("")
    with pytest.raises(ValueError, match="lacks vm_hwm_bytes"):
        harness._parse_record('{"config": "x", "latency_ms": [1], "rss_idle_bytes": 1, "hwm_reset": true, "outputs_npz": "x"}')
    ref = {"out": np.ones((2, 3), np.float32)}
    with pytest.raises(ValueError, match="shape"):
        harness.relative_error(ref, {"out": np.ones((3, 2), np.float32)})
    assert harness.relative_error(ref, {"out": np.full((2, 3), np.nan, np.float32)}) == float("inf")
    default = configs.child_command(configs.Configuration("on-demand"), configs.ChildSettings(Path("m.json")), Path("o.npz"), None)
    assert default[1:3] == ["-m", "flexnn_ncnn.bench.flexnn_child"] and default[default.index("--budget") + 1] == ""
    command = configs.child_command(configs.Configuration("flexnn", 5), configs.ChildSettings(Path("a b/m.json")),
                                    Path("o.npz"), "{python} -m rt --model {model} --budget {budget}")
    assert command == [sys.executable, "-m", "rt", "--model", "a b/m.json", "--budget", "5"]


def test_device_results_are_ingested_and_checked(tiny_model, tmp_path):
    from flexnn_ncnn.models import read_description
    description = read_description(tiny_model)
    oracle = harness.oracle_outputs(description, 0)
    lines = []
    for family, budget, shift in (("ncnn-default", None, 0.0), ("flexnn", 10**6, 0.0), ("flexnn", 2 * 10**6, 1.0)):
        tag = f"{family}_{budget}"
        (tmp_path / "outputs" / tag).mkdir(parents=True)
        for name, array in oracle.items():
            np.save(tmp_path / "outputs" / tag / f"{name}.npy", array + shift)
        device = {"mode": family, "budget": budget or 0, "latency_us": {"min": 900.0, "median": 1000.0, "max": 1500.0},
                  "arena_bytes": budget or 0, "outside_arena_bytes": 0, "vm_hwm_minus_idle_bytes": 12345,
                  "load_wait_us_median": 10.0}
        lines.append({"family": family, "budget": budget, "outputs": f"outputs/{tag}", "device": device})
    result = harness.ingest_records(description, lines, configs.ChildSettings(tiny_model), tmp_path)
    ok = {s.config: s.ok for s in result.summaries}
    assert ok == {"ncnn-default": True, "flexnn@1MB": True, "flexnn@2MB": False}
    assert result.summaries[1].ratio_to_default == 1.0 and result.summaries[1].peak_over_idle_bytes == 12345


def test_page_cache_of_a_file_is_evicted_and_counted(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\1" * (1 << 20))
    pagecache.evict(path)
    assert pagecache.resident_bytes(path) == 0
    path.read_bytes()
    assert pagecache.resident_bytes(path) == 1 << 20


def test_an_empty_output_is_read_as_an_empty_array():
    """A DetectionOutput with no detection extracts an empty Mat: numpy would read it through a null
    pointer (the stock child crashed on bench:mobilenet_ssd); the oracle and the stock child read it alike."""
    import ncnn
    from flexnn_ncnn.ncnn_model.stock import output_array
    assert output_array(ncnn.Mat()).shape == (0,)
    assert output_array(ncnn.Mat(np.ones((2, 3), np.float32))).tolist() == [[1.0] * 3] * 2


def test_results_from_two_machines_name_theirs():
    from flexnn_ncnn.bench import report
    results = [{"model": {"name": n}, "machine": {"cpu": cpu}} for n, cpu in (("a", "X"), ("b", "Y"), ("c", "X"))]
    assert report._machines(results) == ["Machines:", "", "- cpu X: a, c", "- cpu Y: b", ""]
    assert report._machines(results[:1]) == ["Machine: cpu X", ""]


def test_the_rss_sampler_measures_a_childs_last_program(tmp_path):
    # a child that holds 200 MB, then execs into a program holding little (as the runtime's child execs
    # into its session): the peak is the second program's
    second = "import time; time.sleep(1.0)"
    first = textwrap.dedent(f"""
        import os, sys, time
        held = bytearray(200 * 2**20)
        held[::4096] = b"x" * len(held[::4096])
        time.sleep(0.5)
        os.execv(sys.executable, [sys.executable, "-c", {second!r}])
    """)
    proc = subprocess.Popen([sys.executable, "-c", first])
    sampler = harness._Sampler(proc.pid, tmp_path / "none.bin", 0.005)
    sampler.start()
    proc.wait()
    sampler.stop.set()
    sampler.join()
    assert 0 < sampler.rss_peak < 100 * 2**20
