"""The device binary `flexnn-bench`: prepares, plans and runs a model in its arena, on host and
cross-built under qemu-aarch64, matching stock NCNN (the `ncnn` wheel) from generous budgets to the
tightest feasible one."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import helpers
from helpers import QEMU, built
from helpers import stock_output
from model_helpers import present, random_input
from test_runtime import WRITERS, ZOO, ModelCase, assert_close, prepared, write_residual, write_wide

QEMU_A72 = [*QEMU, "-cpu", "cortex-a72"]  # no fp16 arithmetic: fp32 like the oracle
FP16_RTOL = 3e-2  # fp16 arithmetic (qemu's default CPU): an ~11-bit mantissa


Writer = Callable[[Path], tuple[Path, Path, np.ndarray]]


def bench(runner: list[str], target: str, tmp_path: Path, *args: str, writer: Writer = write_residual) -> tuple[dict, np.ndarray]:
    param, bin_, x = writer(tmp_path)
    np.save(tmp_path / "in.npy", x)
    program = built(target, "native", "tools", "flexnn-bench")
    proc = subprocess.run([*runner, str(program), str(param), str(bin_), str(tmp_path / "in.npy"), "loops=3", "warmup=1",
                           f"out={tmp_path / 'out.npy'}", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0]), np.load(tmp_path / "out.npy")


def assert_mapped(report: dict) -> None:
    """The timed runs made records resident in the mapped file, over the arena's bytes: the device
    binary really mapped them (a silent fallback to reading them would give the same outputs)."""
    assert report["mapped_weight_bytes"] > 0
    assert 0 < report["mapped_peak_bytes"] <= report["arena_bytes"]


@pytest.mark.parametrize("runner, target", [([], "host"), (QEMU_A72, "linux-aarch64")], ids=["host", "qemu-aarch64"])
def test_bench_runs_the_tightest_plan_and_matches_stock_ncnn(runner: list[str], target: str, tmp_path: Path) -> None:
    report, out = bench(runner, target, tmp_path, "budget=min")
    param, bin_ = tmp_path / "residual.param", tmp_path / "residual.bin"
    assert_close(out, stock_output(param, bin_, np.load(tmp_path / "in.npy")))
    assert report["mode"] == "flexnn"
    assert 0 < report["arena_bytes"] + report["outside_arena_bytes"] <= report["budget"]
    assert all(key in report["latency_us"] for key in ("min", "median", "max"))
    # at the tightest budget every weighted layer streams, read into the arena, none mapped
    assert report["arena_weight_bytes"] > 0 and report["mapped_weight_bytes"] == report["mapped_peak_bytes"] == 0


@pytest.mark.parametrize("runner, target", [([], "host"), (QEMU_A72, "linux-aarch64")], ids=["host", "qemu-aarch64"])
def test_mapped_weights_run_the_tightest_mapped_plan_and_match_stock_ncnn(runner: list[str], target: str, tmp_path: Path) -> None:
    """map_weights=1: the device binary maps the pre-transformed records over their arena bytes, on
    host and cross-built under qemu-aarch64."""
    _, ref = bench(runner, target, tmp_path, "mode=stock")
    report, out = bench(runner, target, tmp_path, "budget=min", "map_weights=1")
    assert_close(out, ref)
    assert 0 < report["arena_bytes"] + report["outside_arena_bytes"] <= report["budget"]
    assert_mapped(report)


@pytest.mark.parametrize("runner, target", [([], "host"), (QEMU_A72, "linux-aarch64")], ids=["host", "qemu-aarch64"])
def test_mapped_weights_faulted_in_by_the_computing_threads_match_stock_ncnn(runner: list[str], target: str,
                                                                              tmp_path: Path) -> None:
    """map_weights=1 loader=computing threads=2: no loading thread; the 2 computing threads share the
    faults of each large record (the wide model's 1 MiB fc1), on host and cross-built under qemu-aarch64."""
    _, ref = bench(runner, target, tmp_path, "mode=stock", writer=write_wide)
    report, out = bench(runner, target, tmp_path, "budget=min", "map_weights=1", "loader=computing", "threads=2",
                        writer=write_wide)
    assert_close(out, ref)
    assert 0 < report["arena_bytes"] + report["outside_arena_bytes"] <= report["budget"]
    assert_mapped(report)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_every_small_model_under_qemu_matches_stock_ncnn_from_generous_to_tightest(name: str, tmp_path: Path) -> None:
    """Each test model of test_runtime.py, cross-built and run under qemu-aarch64 at the tightest
    feasible budget (planned there), a generous one (everything fits pinned: the tightest plus twice
    every tensor of the host's profile, since flexnn-bench measures its own uncounted RSS, qemu's
    included) and one between: outputs equal stock NCNN's on that CPU (its own Net,
    `mode=stock`), counted memory <= budget. (On ARM, NCNN's default fp16 storage keeps InnerProduct
    weights in fp16, so the MLP differs from the x86 wheel by ~1e-3 relative, stock and planned alike.)"""
    param, bin_, x = WRITERS[name](tmp_path)
    _, ref = bench(QEMU_A72, "linux-aarch64", tmp_path, "mode=stock", writer=WRITERS[name])
    m = ModelCase(name, param, bin_, x, ref)
    reports = {"tightest": bench(QEMU_A72, "linux-aarch64", tmp_path, "budget=min", writer=WRITERS[name])}
    tightest = reports["tightest"][0]["budget"]
    generous = tightest + 2 * sum(t.size + 64 for t in prepared(m, tmp_path)[1].profile.tensors)
    for label, budget in (("middle", (tightest + generous) // 2), ("generous", generous)):
        reports[label] = bench(QEMU_A72, "linux-aarch64", tmp_path, f"budget={budget}", writer=WRITERS[name])
        assert reports[label][0]["budget"] == budget
    for label, (report, out) in reports.items():
        assert_close(out, m.ref)
        assert 0 < report["arena_bytes"] + report["outside_arena_bytes"] <= report["budget"], (label, report)


@pytest.mark.parametrize("mode", ["ondemand", "stock", "direct"])
def test_bench_baselines_match_stock_ncnn(mode: str, tmp_path: Path) -> None:
    report, out = bench([], "host", tmp_path, f"mode={mode}", "budget=min")
    assert_close(out, stock_output(tmp_path / "residual.param", tmp_path / "residual.bin", np.load(tmp_path / "in.npy")))
    assert report["mode"] == mode
    assert (report["arena_bytes"] > 0) == (mode == "ondemand")


def test_bench_refuses_an_unknown_argument_in_one_line(tmp_path: Path) -> None:
    program = built("host", "native", "tools", "flexnn-bench")
    proc = subprocess.run([str(program), "a.param", "a.bin", "in.npy", "bogus=1"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: unknown argument 'bogus=1'"]


def has_interpreter(elf: bytes) -> bool:
    """Whether a 64-bit little-endian ELF asks for a dynamic loader (a PT_INTERP program header).
    (Its bytes may still name ld-linux: static glibc keeps the name for dlopen, which libgomp.a uses.)"""
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    return any(struct.unpack_from("<I", elf, phoff + i * phentsize)[0] == 3 for i in range(phnum))


def test_cross_built_bench_is_static() -> None:
    elf = built("linux-aarch64", "native", "tools", "flexnn-bench").read_bytes()
    assert elf[:4] == b"\x7fELF" and elf[18] == 0xB7  # EM_AARCH64
    assert not has_interpreter(elf)
    assert has_interpreter(Path("/bin/sh").resolve().read_bytes())  # the check can tell a dynamic program


def stress(runner: list[str], program: Path, tmp_path: Path, threads: int, inferences: int, writer: Writer = write_residual,
           *options: str, pretransform: bool = True, budgets: tuple[str, ...] = ("min", "600000", "100000000")) -> dict:
    """runtime_stress on a model (blobs `data` -> `output`): `inferences` pipelined runs cycling
    `budgets` (the tightest first), with `options` (direct_io=1, loader=middle), loading pre-transformed
    weights unless `pretransform` is False; the timeout is the watchdog that turns a hang into a failure."""
    param, bin_, x = writer(tmp_path)
    np.save(tmp_path / "in.npy", x)
    if pretransform:
        options = (*options, f"transformed={tmp_path / 'model.transformed'}")
    proc = subprocess.run([*runner, str(program), str(param), str(bin_), str(tmp_path / "in.npy"), "data", "output", str(threads),
                           str(inferences), "50", *budgets, *options], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # sanitizers report on stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("threads, pretransform", [(1, False), (2, True)])
def test_a_thousand_pipelined_inferences_across_budgets_agree_and_never_hang(threads: int, pretransform: bool, tmp_path: Path) -> None:
    report = stress([], built("host", "native", "tests_native", "runtime_stress"), tmp_path, threads, 1000,
                    pretransform=pretransform)
    assert report["inferences"] == 1000 and report["budgets"] == 3


def test_pipelined_inferences_under_qemu_aarch64_agree_and_never_hang(tmp_path: Path) -> None:
    report = stress(QEMU_A72, built("linux-aarch64", "native", "tests_native", "runtime_stress"), tmp_path, 2, 200)
    assert report["inferences"] == 200


def write_residual_unmarked(folder: Path) -> tuple[Path, Path, np.ndarray]:
    """The residual model with no layer marked direct: NCNN's Net runs every kernel the runtime runs."""
    param, bin_, x = write_residual(folder)
    param.write_text(param.read_text().replace(" 26=1", ""))
    return param, bin_, x


def test_fp16_arithmetic_under_qemu_equals_ncnn_stock_there(tmp_path: Path) -> None:
    """qemu's default CPU has fp16 arithmetic: NCNN stores and computes blobs in fp16 (packing 8),
    through other layout conversions; the planned run must equal NCNN's own Net on that CPU. A layer
    the runtime runs direct, NCNN's Net runs as Winograd (it ignores the mark), and in fp16 the two
    kernels round apart (2e-3 of the output's scale): the model is compared unmarked at the tight
    tolerance, and as marked at fp16's."""
    report, out = bench(QEMU, "linux-aarch64", tmp_path, "budget=min", writer=write_residual_unmarked)
    _, ref = bench(QEMU, "linux-aarch64", tmp_path, "mode=stock", writer=write_residual_unmarked)
    assert_close(out, ref)
    assert report["arena_bytes"] + report["outside_arena_bytes"] <= report["budget"]
    marked, out = bench(QEMU, "linux-aarch64", tmp_path, "budget=min")
    _, ref = bench(QEMU, "linux-aarch64", tmp_path, "mode=stock")
    helpers.assert_close(out, ref, FP16_RTOL)
    assert marked["arena_bytes"] + marked["outside_arena_bytes"] <= marked["budget"]


@pytest.mark.parametrize("name", ZOO)
def test_pnnx_exports_under_qemu_aarch64_equal_ncnn_stock_there(name: str, zoo_exports, tmp_path: Path) -> None:
    """The cross-built flexnn-bench on the VGG-, ResNet-, MLP- and ViT-style pnnx exports (fp16 and fp32
    weight storage): prepared (pre-transformed weights included) and run at the tightest budget and at
    four times it under qemu (cortex-a72), equal to NCNN's own Net there."""
    model = zoo_exports[name]

    def writer(folder: Path) -> tuple[Path, Path, np.ndarray]:
        param, bin_ = folder / model.param.name, folder / model.bin.name
        shutil.copyfile(model.param, param)
        shutil.copyfile(model.bin, bin_)
        return param, bin_, random_input(model.input_shape)

    blobs = ("input=in0", "output=out0")
    _, ref = bench(QEMU_A72, "linux-aarch64", tmp_path, "mode=stock", *blobs, writer=writer)
    tightest, out = bench(QEMU_A72, "linux-aarch64", tmp_path, "budget=min", *blobs, writer=writer)
    assert_close(out, ref)
    generous, out = bench(QEMU_A72, "linux-aarch64", tmp_path, f"budget={4 * tightest['budget']}", *blobs, writer=writer)
    assert_close(out, ref)
    for report in (tightest, generous):
        assert report["arena_bytes"] + report["outside_arena_bytes"] <= report["budget"]


@pytest.mark.parametrize("grid", [(2, 2), (3, 2)])
def test_int8_tiles_under_qemu_aarch64_equal_ncnn_stock_there(grid: tuple[int, int], tmp_path: Path) -> None:
    """Tiles that crop and concatenate int8 blobs (NCNN's reference Crop and Concat, which the sliced model
    asks for with REFERENCE_LAYER_ID) under qemu (cortex-a72): the int8 chain tiled up to its int8 blob
    and from it, equal to NCNN's own Net there on the untiled model."""
    from test_spatial_tiling import INT8_CHAIN, _model, _write, tiled_blocks

    original = _model(INT8_CHAIN, "1,3,29,37", tmp_path, "int8")[4]
    tiled = _write(*tiled_blocks(INT8_CHAIN, [("q", "dw"), ("c", "h")], grid, tmp_path)[:2], tmp_path, "int8_tiled")
    x = random_input((1, 3, 29, 37))
    blobs = ("input=x0", "output=out")
    _, ref = bench(QEMU_A72, "linux-aarch64", tmp_path, "mode=stock", *blobs, writer=lambda _: (*original, x))
    report, out = bench(QEMU_A72, "linux-aarch64", tmp_path, "budget=min", *blobs, writer=lambda _: (*tiled, x))
    assert_close(out, ref)
    assert report["arena_bytes"] + report["outside_arena_bytes"] <= report["budget"]


QEMU_STRUCTURES = [(name, storage) for name, storage in [
    ("struct:squeezenet", "fp16"), ("struct:mobilenet", "fp32"), ("struct:shufflenet", "fp32"),
    ("struct:mobilenet_ssd", "fp32"), ("struct:yolov3_tiny", "fp32"), ("struct:yolov2", "fp32"),
    ("bench:squeezenet", "fp16"), ("bench:mobilenet_v2", "fp32"), ("bench:shufflenet_v2", "fp32")] if present(name)]


@pytest.mark.parametrize("name, storage", QEMU_STRUCTURES, ids=[f"{n}-{s}" for n, s in QEMU_STRUCTURES])
def test_structures_under_qemu_aarch64_equal_ncnn_stock_there(name: str, storage: str, corpus_files, tmp_path: Path) -> None:
    """Corpus structures with seeded weights (depthwise, grouped and 1x1 convolutions, channel shuffles,
    odd channel counts, detection heads; fp16 storage through ModelBin's conversion) at the tightest
    budget under qemu (cortex-a72)."""
    from flexnn_ncnn.ncnn_model import Graph, read_param

    files = corpus_files(name, storage)
    graph = Graph.build(read_param(files.param))

    def writer(folder: Path) -> tuple[Path, Path, np.ndarray]:
        param, bin_ = folder / files.param.name, folder / files.bin.name
        shutil.copyfile(files.param, param)
        shutil.copyfile(files.bin, bin_)
        return param, bin_, random_input(files.input_shape)

    blobs = (f"input={graph.inputs[0]}", f"output={graph.outputs[0]}")
    report, out = bench(QEMU_A72, "linux-aarch64", tmp_path, "budget=min", *blobs, writer=writer)
    assert report["arena_bytes"] + report["outside_arena_bytes"] <= report["budget"]
    _, ref = bench(QEMU_A72, "linux-aarch64", tmp_path, "mode=stock", *blobs, writer=writer)
    assert_close(out, ref)
