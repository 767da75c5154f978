"""How the loading thread reads weights (issue 6): on which cores (`loader=middle`, the clusters told
apart by sysfs' maximum frequencies) and through O_DIRECT (`direct_io`: aligned reads into a bounce
window held outside the arena and counted, the plan leaving room for it). Outputs equal stock NCNN.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import Session, native, planning, sidecar
from flexnn_ncnn.cli import UserError
from helpers import assert_counted_within_budget, assert_user_error, built, run_module, stock_output
from flexnn_ncnn.prepare import RuntimeOptions, prepare_model, write_plan_file
from test_runtime import WRITERS, ModelCase, assert_close, budgets_for, prepared, write_mlp, write_wide
from test_runtime_bench import QEMU_A72

WINDOW_MAX = (1 << 20) + 4096  # the O_DIRECT window's most: 1 MiB, plus alignment slack
GHZ = {"little": 1_800_000, "middle": 2_400_000, "big": 3_000_000, "prime": 3_200_000}  # kHz, as sysfs writes them


def fake_sysfs(root: Path, khz: list[int | None]) -> Path:
    """A /sys/devices/system/cpu lookalike: cpuN/cpufreq/cpuinfo_max_freq for each core (None: no
    cpufreq folder), plus the non-core entries the real one has."""
    root.mkdir(parents=True)
    for i, f in enumerate(khz):
        (root / f"cpu{i}").mkdir()
        if f is not None:
            (root / f"cpu{i}" / "cpufreq").mkdir()
            (root / f"cpu{i}" / "cpufreq" / "cpuinfo_max_freq").write_text(f"{f}\n")
    (root / "cpufreq").mkdir()
    (root / "cpuidle").mkdir()
    (root / "online").write_text(f"0-{len(khz) - 1}\n")
    return root


L, M, B, P = GHZ["little"], GHZ["middle"], GHZ["big"], GHZ["prime"]
LAYOUTS = {
    # name: (max frequency per core, clusters slowest first, middle cores)
    "three_clusters": ([L, L, L, L, M, M, M, B], [[0, 1, 2, 3], [4, 5, 6], [7]], [4, 5, 6]),
    "three_clusters_interleaved": ([B, M, L, M, L], [[2, 4], [1, 3], [0]], [1, 3]),
    "four_tiers": ([L, L, L, M, M, B, B, P], [[0, 1, 2], [3, 4], [5, 6], [7]], [3, 4, 5, 6]),
    "two_clusters": ([L, L, L, L, B, B, B, B], [[0, 1, 2, 3], [4, 5, 6, 7]], [0, 1, 2, 3]),
    "twelve_cores_numeric_order": ([L] * 10 + [M, B], [list(range(10)), [10], [11]], [10]),
    "one_cluster": ([B, B, B, B], [[0, 1, 2, 3]], []),
    "a_core_without_cpufreq": ([L, L, None, B], [], []),
    "no_cores": ([], [], []),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_middle_cores_come_from_the_clusters_of_maximum_frequency(layout: str, tmp_path: Path) -> None:
    khz, clusters, middle = LAYOUTS[layout]
    root = fake_sysfs(tmp_path / "cpu", khz)
    assert native.load().cpu_clusters(str(root)) == clusters
    assert native.load().middle_cpus(str(root)) == middle


def test_an_unreadable_sysfs_means_any_core_and_a_malformed_frequency_is_an_error(tmp_path: Path) -> None:
    assert native.load().middle_cpus(str(tmp_path / "missing")) == []
    root = fake_sysfs(tmp_path / "cpu", [L, B])
    (root / "cpu1" / "cpufreq" / "cpuinfo_max_freq").write_text("fast\n")
    with pytest.raises(RuntimeError, match=r"cpu1/cpufreq/cpuinfo_max_freq does not hold a frequency"):
        native.load().middle_cpus(str(root))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModelCase, Path, dict[str, int]]:
    folder = tmp_path_factory.mktemp("mlp")
    param, bin_, x = write_mlp(folder)
    m = ModelCase("mlp", param, bin_, x, stock_output(param, bin_, x))
    path, content = prepared(m, folder)
    return m, path, budgets_for(content)


def test_loader_on_middle_cores_changes_no_output(mlp: tuple[ModelCase, Path, dict[str, int]]) -> None:
    m, path, budgets = mlp
    session = Session(path, budget=budgets["tightest"], loader="middle")
    for _ in range(2):
        assert_close(session.run({"data": m.x})["output"], m.ref)
    assert_counted_within_budget(session.stats())


def test_an_unknown_loader_is_refused(mlp: tuple[ModelCase, Path, dict[str, int]]) -> None:
    with pytest.raises(UserError, match="any, little, middle, big or computing, not 'medium'"):
        Session(mlp[1], loader="medium")


# how the wide model's weights reach the arena: pre-transformed records read, raw weights read, or
# pre-transformed records mapped (faulted in by the computing threads)
WIDE_OPTIONS = {
    "pretransformed": RuntimeOptions(threads=2),
    "raw": RuntimeOptions(threads=2, pretransform=False),
    "mapped": RuntimeOptions(threads=2, map_weights=True),
}


@pytest.fixture(scope="module", params=sorted(WIDE_OPTIONS))
def wide(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[ModelCase, Path, dict[str, int]]:
    folder = tmp_path_factory.mktemp("wide")
    param, bin_, x = write_wide(folder)
    m = ModelCase("wide", param, bin_, x, stock_output(param, bin_, x))
    content = prepare_model(param, bin_, 1 << 30, options=WIDE_OPTIONS[request.param])
    path = folder / f"wide{sidecar.SUFFIX}"
    write_plan_file(content, path)
    return m, path, budgets_for(content)


@pytest.mark.parametrize("label", ["tightest", "middle", "generous"])
def test_computing_threads_load_each_layer_without_a_loading_thread(wide: tuple[ModelCase, Path, dict[str, int]],
                                                                    label: str) -> None:
    """loader="computing": no loading thread ran (its CPU time is 0), the streamed layers were still loaded
    every run, their large reads (or a mapped record's faults) split between the 2 computing threads;
    outputs equal stock NCNN."""
    m, path, budgets = wide
    session = Session(path, budget=budgets[label], loader="computing")
    for _ in range(3):
        assert_close(session.run({"data": m.x})["output"], m.ref)
    stats = session.stats()
    assert stats["loader_cpu_us"] == [0.0] * 3
    if label == "tightest":
        assert min(stats["loaded_layers"]) >= 2, stats["loaded_layers"]
        # fc1's record (1 MiB as fp16) is mapped on every run, not read into the arena
        assert min(stats["mapped_weight_bytes"]) >= (1 << 20 if session.map_weights else 0), stats["mapped_weight_bytes"]
    assert_counted_within_budget(stats)


def test_computing_threads_report_a_truncated_bin(tmp_path: Path) -> None:
    """A split read whose second part comes up short ends the inference naming the file and the byte where
    it ended."""
    param, bin_, x = write_wide(tmp_path, seed=4)
    content = prepare_model(param, bin_, 1 << 30, options=RuntimeOptions(threads=2, pretransform=False))
    path = tmp_path / f"wide{sidecar.SUFFIX}"
    write_plan_file(content, path)
    session = Session(path, budget=budgets_for(content)["tightest"], loader="computing")
    assert_close(session.run({"data": x})["output"], stock_output(param, bin_, x))
    end = 4 + 3 * (1 << 19)  # fc1's flag, then three quarters of its 2 MiB: the second half comes up short
    with open(bin_, "r+b") as f:
        f.truncate(end)
    with pytest.raises(UserError, match=f"{bin_} ended at byte {end},"):
        session.run({"data": x})


def direct_io_refusal(folder: Path) -> str | None:
    """Why O_DIRECT does not work for a file in `folder` (None: it does): open, then one aligned read."""
    probe = folder / ".odirect_probe"
    probe.write_bytes(b"\0" * 8192)
    try:
        fd = os.open(probe, os.O_RDONLY | os.O_DIRECT)
        try:
            os.preadv(fd, [mmap.mmap(-1, 4096)], 0)
        finally:
            os.close(fd)
        return None
    except OSError as e:
        return f"{folder}: {e.strerror}"
    finally:
        probe.unlink()


@pytest.fixture(scope="module")
def direct_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A writable folder whose file system takes O_DIRECT: pytest's temporary folder, else one in the checkout."""
    tried = []
    for folder in (tmp_path_factory.mktemp("direct"), Path(__file__).resolve().parent.parent / "build"):
        refusal = direct_io_refusal(folder)
        if refusal is None:
            return folder
        tried.append(refusal)
    pytest.skip("no writable file system here takes O_DIRECT: " + "; ".join(tried))


def direct_case(name: str, folder: Path) -> tuple[ModelCase, Path, dict[str, int]]:
    (folder / name).mkdir(exist_ok=True)
    param, bin_, x = WRITERS[name](folder / name)
    m = ModelCase(name, param, bin_, x, stock_output(param, bin_, x))
    path, content = prepared(m, folder / name)
    return m, path, budgets_for(content)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_direct_io_equals_stock_and_the_budget_holds_its_window(name: str, direct_folder: Path) -> None:
    """The tightest budget with O_DIRECT is the arena's tightest plus the window: one byte less is
    infeasible, and the window is in the counted memory of every run."""
    m, path, budgets = direct_case(name, direct_folder)
    session = Session(path, direct_io=True)
    window = session.reserved_bytes - session.sidecar.reserved_bytes
    assert 0 < window <= WINDOW_MAX and window % 4096 == 0
    tightest = budgets["tightest"] + window
    for budget in (budgets["generous"] + window, tightest):
        session.set_budget(budget)
        for _ in range(2):  # the second inference reloads what the first evicted
            assert_close(session.run({"data": m.x})["output"], m.ref)
        stats = session.stats()
        assert window <= stats["outside_arena_bytes"]
        assert_counted_within_budget(stats)
    with pytest.raises(planning.InfeasibleBudget) as info:
        session.set_budget(tightest - 1)
    assert info.value.min_feasible_budget == tightest


def test_direct_io_reads_a_layer_larger_than_its_window(direct_folder: Path) -> None:
    """One layer of 1.25 MiB of weights goes through the 1 MiB window in two refills."""
    folder = direct_folder / "wide"
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(5)
    n_in, n_out = 1024, 320  # 1.25 MiB of fp32 weights in one layer
    param, bin_ = folder / "wide.param", folder / "wide.bin"
    param.write_text(f"7767517\n2 2\nInput data 0 1 data 0={n_in}\nInnerProduct fc 1 1 data output 0={n_out} 1=1 2={n_in * n_out}\n")
    bin_.write_bytes(np.zeros(1, "<u4").tobytes() + (rng.standard_normal(n_in * n_out + n_out) * 0.05).astype("<f4").tobytes())
    x = rng.standard_normal(n_in).astype(np.float32)
    m = ModelCase("wide", param, bin_, x, stock_output(param, bin_, x))
    path, content = prepared(m, folder)
    session = Session(path, budget=budgets_for(content)["tightest"] + WINDOW_MAX, direct_io=True)
    assert session.reserved_bytes == WINDOW_MAX + content.reserved_bytes
    for _ in range(2):
        assert_close(session.run({"data": x})["output"], m.ref)


def test_direct_io_reports_a_truncated_bin(direct_folder: Path) -> None:
    m, path, budgets = direct_case("mlp", direct_folder)
    session = Session(path, direct_io=True)
    session.set_budget(budgets["tightest"] + session.reserved_bytes - session.sidecar.reserved_bytes)
    assert_close(session.run({"data": m.x})["output"], m.ref)
    with open(m.bin, "r+b") as f:
        f.truncate(m.bin.stat().st_size // 2)  # inside fc2, which the tightest plan streams
    with pytest.raises(UserError, match=f"{m.bin} ended at byte"):
        session.run({"data": m.x})


# a shell in a user and mount namespace of its own (no privilege needed, the host's mounts untouched)
# with a ramfs on $1, which has never taken O_DIRECT (tmpfs has since Linux 6.6), the model copied
# from $2 into it, running the rest of its arguments there
IN_RAMFS = ("unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
            'mount -t ramfs ramfs "$1" && cp -R "$2"/. "$1" && shift 2 && exec "$@"', "sh")


def test_direct_io_on_a_file_system_that_refuses_it_names_the_file(tmp_path: Path) -> None:
    m, path, _ = direct_case("mlp", tmp_path)
    np.save(path.parent / "in.npy", m.x)
    ramfs = tmp_path / "ramfs"
    ramfs.mkdir()
    probe = subprocess.run([*IN_RAMFS, str(ramfs), str(path.parent), "true"], capture_output=True, text=True)
    assert probe.returncode == 0, f"cannot mount a ramfs in a namespace of its own: {probe.stderr}"
    proc = subprocess.run([*IN_RAMFS, str(ramfs), str(path.parent), sys.executable, "-m", "flexnn_ncnn.run",
                           str(ramfs / path.name), "--input", str(ramfs / "in.npy"), "--direct-io"],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    assert_user_error(proc, f"{ramfs / m.bin.name} with O_DIRECT: its file system refuses direct I/O")


def test_run_cli_takes_middle_cores_and_direct_io(direct_folder: Path) -> None:
    m, path, budgets = direct_case("residual", direct_folder)
    np.save(direct_folder / "residual" / "in.npy", m.x)
    budget = budgets["tightest"] + WINDOW_MAX
    out = direct_folder / "residual" / "out.npz"
    proc = run_module("run", str(path), "--input", str(direct_folder / "residual" / "in.npy"), "--budget", str(budget),
                      "--loader", "middle", "--direct-io", "--loops", "2", "--output", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert_counted_within_budget(stats)
    assert stats["outside_arena_bytes"] > 0
    assert_close(np.load(out)["output"], m.ref)
    assert_user_error(run_module("run", str(path), "--input", str(direct_folder / "residual" / "in.npy"), "--budget",
                                 str(budgets["tightest"]), "--direct-io"), "infeasible")


@pytest.mark.parametrize("runner, target", [([], "host"), (QEMU_A72, "linux-aarch64")], ids=["host", "qemu-aarch64"])
def test_bench_with_middle_cores_and_direct_io_matches_stock(runner: list[str], target: str, direct_folder: Path) -> None:
    folder = direct_folder / f"bench-{target}"
    folder.mkdir(exist_ok=True)
    param, bin_, x = WRITERS["residual"](folder)
    np.save(folder / "in.npy", x)
    program = built(target, "native", "tools", "flexnn-bench")
    proc = subprocess.run([*runner, str(program), str(param), str(bin_), str(folder / "in.npy"), "budget=min", "loader=middle",
                           "direct_io=1", "loops=2", "warmup=1", f"out={folder / 'out.npy'}"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert_close(np.load(folder / "out.npy"), stock_output(param, bin_, x))
    assert 0 < report["outside_arena_bytes"] and report["arena_bytes"] + report["outside_arena_bytes"] <= report["budget"]


def test_the_benchmark_runs_computing_threads_loading(tmp_path: Path) -> None:
    """`bench --modes flexnn-computing`: the same slicing as `flexnn`, no loading thread (its CPU time 0 on
    every timed run); both equal stock NCNN."""
    from flexnn_ncnn.models import generate
    model = generate("squeezenet", tmp_path / "models", seed=0, tiny=True)
    proc = run_module("bench", "--model", str(model), "--baselines", "ncnn-default", "--budgets", "12MB", "--threads", "2",
                      "--modes", "flexnn,flexnn-computing", "--warmup", "0", "--loops", "2", "--rounds", "1",
                      "-o", str(tmp_path), "--results-md", str(tmp_path / "RESULTS.md"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "squeezenet.results.json").read_text())
    by_name = {s["config"]: s for s in data["summaries"]}
    assert list(by_name) == ["ncnn-default", "flexnn@12MB", "flexnn-computing@12MB"]
    for name, s in by_name.items():
        assert s["ok"] and s["max_rel_error"] <= 1e-4, (name, s["errors"])
    records = {run["config"]: run["record"] for run in data["runs"]}
    assert records["flexnn-computing@12MB"]["loader_cpu_ms"] == [0.0, 0.0]
    assert min(records["flexnn@12MB"]["loader_cpu_ms"]) > 0
