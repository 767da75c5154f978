"""scripts/adb_bench.sh with a fake `adb` on PATH that logs its arguments and answers like a phone
with two big cores (CPUs 2 and 3), and fake `ssh`/`scp` for a Linux board; the pulled results go
through the host report with their outputs checked; missing adb or device -> one error line, exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from helpers import REPO_ROOT, assert_user_error

pytest.importorskip("torch")

SCRIPT = REPO_ROOT / "scripts" / "adb_bench.sh"
BASH = shutil.which("bash") or "/bin/bash"  # by path: one test runs with a PATH that has no bash

FAKE_ADB = textwrap.dedent("""\
    #!/usr/bin/env bash
    # logs one line per call; answers get-state, the cpufreq listing and flexnn-bench; pull copies $FAKE_OUTPUT
    printf '%s\\n' "$*" >> "$FAKE_LOG"
    [[ "$1" == -s ]] && shift 2
    case "$1" in
        get-state) echo "${FAKE_STATE:-device}" ;;
        pull) cp "$FAKE_OUTPUT" "$3" ;;
        shell)
            case "$2" in
                *cpufreq*) printf '0 1800000\\n1 1800000\\n2 2800000\\n3 2800000\\n' ;;
                *flexnn-bench*) echo '{"mode": "x", "budget": 0, "latency_us": {"min": 900.0, "median": 1000.0, "max": 1200.0}, "arena_bytes": 0, "outside_arena_bytes": 0, "vm_hwm_minus_idle_bytes": 4096, "load_wait_us_median": 0.0}' ;;
            esac ;;
    esac
""")


# a Linux board: ssh runs its last argument as the remote command line, scp copies (pulls get $FAKE_OUTPUT)
FAKE_SSH = textwrap.dedent("""\
    #!/usr/bin/env bash
    printf 'ssh %s\\n' "$*" >> "$FAKE_LOG"
    case "${@: -1}" in
        *cpufreq*) printf '0 1500000\\n1 1500000\\n2 1500000\\n3 1500000\\n' ;;
        *flexnn-bench*) echo '{"mode": "x", "budget": 0, "latency_us": {"min": 1.0, "median": 2.0, "max": 3.0}, "vm_hwm_minus_idle_bytes": 1}' ;;
    esac
""")
FAKE_SCP = textwrap.dedent("""\
    #!/usr/bin/env bash
    printf 'scp %s\\n' "$*" >> "$FAKE_LOG"
    [[ "$2" == *:* ]] && cp "$FAKE_OUTPUT" "$3"
    exit 0
""")


def _script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True, env={**os.environ, **env}, cwd=REPO_ROOT)


@pytest.fixture
def fake_adb(tmp_path) -> dict[str, str]:
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for name, text in (("adb", FAKE_ADB), ("ssh", FAKE_SSH), ("scp", FAKE_SCP)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(tmp_path / "adb.log")}


@pytest.fixture(scope="module")
def device_files(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A tiny model, the output the fake device "computes" (the oracle's), and a stand-in binary."""
    from flexnn_ncnn.bench.harness import oracle_outputs
    from flexnn_ncnn.models import generate, read_description
    tmp = tmp_path_factory.mktemp("device")
    model = generate("squeezenet", tmp / "models", seed=0, tiny=True)
    (output,) = oracle_outputs(read_description(model), 0).values()
    np.save(tmp / "output.npy", output)
    binary = tmp / "flexnn-bench"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return model, tmp / "output.npy", binary


def test_pushes_runs_pinned_and_reports(tmp_path, fake_adb, device_files):
    model, output, binary = device_files
    out = tmp_path / "device"
    proc = _script("--serial", "PHONE1", "--binary", str(binary), "--out", str(out), str(model), "1MB", "2MB",
                   env={**fake_adb, "FAKE_OUTPUT": str(output)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = Path(fake_adb["FAKE_LOG"]).read_text().splitlines()
    assert all(line.startswith("-s PHONE1 ") for line in log)
    assert f"-s PHONE1 push {binary} /data/local/tmp/flexnn/flexnn-bench" in log
    assert "-s PHONE1 push " + str(out / "work" / "input.npy") + " /data/local/tmp/flexnn/input.npy" in log
    assert any(line.endswith("/data/local/tmp/flexnn/1000000.squeezenet.flexnn.bin") for line in log)
    runs = [line for line in log if "flexnn-bench " in line and "shell" in line]
    common = "loops=8 warmup=4 threads=2 loader=little input=in0 output=out0"
    assert [r.split("./flexnn-bench ")[1].split(" out=")[0] for r in runs] == [
        f"squeezenet.param squeezenet.bin input.npy budget=0 mode=stock {common}",
        f"squeezenet.param squeezenet.bin input.npy budget=0 mode=direct {common}",
        f"squeezenet.param squeezenet.bin input.npy budget=min mode=ondemand {common}",
        f"1000000.squeezenet.flexnn.param 1000000.squeezenet.flexnn.bin input.npy budget=1000000 mode=flexnn {common}",
        f"2000000.squeezenet.flexnn.param 2000000.squeezenet.flexnn.bin input.npy budget=2000000 mode=flexnn {common}",
    ]
    assert all("cd /data/local/tmp/flexnn && taskset c ./flexnn-bench" in r for r in runs)  # CPUs 2,3: the fast ones
    lines = [json.loads(line) for line in (out / "work" / "results.jsonl").read_text().splitlines()]
    assert [(l["family"], l["budget"]) for l in lines] == [
        ("ncnn-default", None), ("ncnn-direct", None), ("on-demand", None), ("flexnn", 10**6), ("flexnn", 2 * 10**6)]
    data = json.loads((out / "squeezenet.results.json").read_text())
    assert all(s["ok"] for s in data["summaries"]) and data["summaries"][3]["config"] == "flexnn@1MB"
    assert (out / "RESULTS.md").exists()


def test_ssh_runs_the_same_flow_on_a_linux_board(tmp_path, fake_adb, device_files):
    model, output, binary = device_files
    out = tmp_path / "board"
    proc = _script("--ssh", "pi@board", "--threads", "3", "--compute-cpus", "1,2,3", "--loader", "big", "--binary", str(binary),
                   "--out", str(out), str(model), "1MB", env={**fake_adb, "FAKE_OUTPUT": str(output)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = Path(fake_adb["FAKE_LOG"]).read_text().splitlines()
    assert log[0] == "ssh -o BatchMode=yes pi@board true"
    assert f"scp -q {binary} pi@board:/tmp/flexnn/flexnn-bench" in log
    runs = [line for line in log if "./flexnn-bench" in line]
    assert len(runs) == 4 and all("cd /tmp/flexnn && taskset e ./flexnn-bench" in r and "threads=3 loader=big" in r for r in runs)
    assert not any("cpufreq" in line for line in log)  # --compute-cpus given
    assert json.loads((out / "squeezenet.results.json").read_text())["summaries"][-1]["config"] == "flexnn@1MB"


def test_missing_adb_or_device_is_one_error_line(tmp_path, fake_adb):
    only_dirname = tmp_path / "bare"
    only_dirname.mkdir()
    (only_dirname / "dirname").symlink_to(shutil.which("dirname"))
    model = tmp_path / "m.json"
    model.write_text("{}")
    assert_user_error(_script(str(model), "1MB", env={"PATH": str(only_dirname)}), "adb not found")
    assert_user_error(_script(str(model), "1MB", env={**fake_adb, "FAKE_STATE": "unauthorized"}),
                      "no Android device ready", "unauthorized")
    assert_user_error(_script(str(model), "1MB", env={**fake_adb, "FAKE_OUTPUT": ""}), "flexnn-bench is missing")
    assert_user_error(_script(env=fake_adb), "usage")
