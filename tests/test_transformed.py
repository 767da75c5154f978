"""Pre-transformed weights (issue 7; ncnn_patches/0003, runtime/transformed_weights.*): prepare writes
the weights each layer derives in create_pipeline (Winograd, packed, GEMM-tiled), every load reads
them instead of transforming, the outputs stay stock NCNN's, and a file made for another build, CPU
or options is refused naming the field.

Models: a convolution stack whose layers take each of NCNN's kernels (Winograd, im2col+GEMM, packed
direct, dilation, odd channel counts, 1x1/3x3/5x5/7x7, stride 2), InnerProduct layers, and a Gemm
with a constant B; plus the runtime's own test models.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import Session, native, planning, sidecar
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.planning import ARENA_MARGIN
from flexnn_ncnn.prepare import RuntimeOptions, prepare_model, transformed_path, write_plan_file
from helpers import assert_counted_within_budget, run_module, stock_output
from test_runtime import RTOL, WRITERS, assert_close
from test_runtime_bench import QEMU, bench

# name, kernel, stride, pad, dilation, in -> out channels: each row reaches another of NCNN's
# x86/ARM kernels (packing on, 2 threads) on a 24x24 input
CONVS = [
    ("wino", 3, 1, 1, 1, 8, 24),   # Winograd F(6,3)/F(4,3)
    ("pw", 1, 1, 0, 1, 24, 12),    # 1x1: im2col+GEMM
    ("s2", 3, 2, 1, 1, 12, 6),     # small 3x3 stride 2: packed direct
    ("k5", 5, 1, 2, 1, 6, 7),      # odd channels: packed direct, elempack 1
    ("dil", 3, 1, 2, 2, 7, 16),    # dilation 2
    ("k7", 7, 2, 3, 1, 16, 32),    # 7x7 stride 2: im2col+GEMM
]
FC_OUT = 10
HEADER_BYTES = 4096  # the transformed file's header; records follow, 4096-aligned


@dataclass(frozen=True)
class Written:
    param: Path
    bin: Path
    x: np.ndarray
    raw_weights: list[tuple[int, int]]  # [begin, end) of each layer's raw weight record in the .bin


def write_kernels(folder: Path) -> Written:
    rng = np.random.default_rng(3)
    lines = [f"Input data 0 1 data 0=24 1=24 2={CONVS[0][5]}"]
    blob, raw = bytearray(), []
    bottom = "data"
    for name, k, s, p, d, cin, cout in CONVS:
        lines.append(f"Convolution {name} 1 1 {bottom} {name} 0={cout} 1={k} 2={d} 3={s} 4={p} 5=1 6={cin * cout * k * k} 9=1")
        raw.append((len(blob), len(blob) + 4 + 4 * cin * cout * k * k))
        blob += np.zeros(1, "<u4").tobytes() + (rng.standard_normal(cin * cout * k * k) * 0.2).astype("<f4").tobytes()
        blob += (rng.standard_normal(cout) * 0.1).astype("<f4").tobytes()
        bottom = name
    cout = CONVS[-1][6]
    lines += ["Pooling gap 1 1 k7 gap 0=1 4=1", "Flatten flat 1 1 gap flat",
              f"InnerProduct fc 1 1 flat output 0={FC_OUT} 1=1 2={cout * FC_OUT}"]
    raw.append((len(blob), len(blob) + 4 + 4 * cout * FC_OUT))
    blob += np.zeros(1, "<u4").tobytes() + (rng.standard_normal(cout * FC_OUT) * 0.2).astype("<f4").tobytes()
    blob += (rng.standard_normal(FC_OUT) * 0.1).astype("<f4").tobytes()
    param, bin_ = folder / "kernels.param", folder / "kernels.bin"
    param.write_text(f"7767517\n{len(lines)} {len(lines)}\n" + "\n".join(lines) + "\n")
    bin_.write_bytes(bytes(blob))
    return Written(param, bin_, rng.standard_normal((CONVS[0][5], 24, 24)).astype(np.float32), raw)


def write_gemm(folder: Path) -> Written:
    """A = the input (20 x 48), B constant (48 x 40): NCNN packs B in create_pipeline."""
    rng = np.random.default_rng(4)
    m, k, n = 20, 48, 40
    param, bin_ = folder / "gemm.param", folder / "gemm.bin"
    param.write_text(f"7767517\n2 2\nInput data 0 1 data 0={k} 1={m}\nGemm gemm 1 1 data output 5=1 6=0 8={n} 9={k}\n")
    bin_.write_bytes(np.zeros(1, "<u4").tobytes() + (rng.standard_normal(k * n) * 0.2).astype("<f4").tobytes())
    return Written(param, bin_, rng.standard_normal((m, k)).astype(np.float32), [(0, 4 + 4 * k * n)])


TAG_INT8 = 0x000D4B38  # an int8 weight record's flag (src/modelbin.cpp)


def write_mixed(folder: Path) -> Written:
    """int8 convolutions (3x3: Winograd, 1x1: GEMM), an int8 depthwise convolution and an int8
    InnerProduct, an fp32 depthwise convolution (packed) and a Deconvolution (its GEMM path): the layers whose transforms 0003 covers beyond the
    fp32 Convolution/InnerProduct/Gemm of `write_kernels`. int8 weights w_q with per-channel scale s_w
    and input scale s_x compute sum(w_q * round(x * s_x)) / (s_w * s_x)."""
    rng = np.random.default_rng(5)
    blob, raw = bytearray(), []

    def record(values: np.ndarray, int8: bool = False) -> None:
        raw.append((len(blob), len(blob) + 4 + values.nbytes + (-values.nbytes % 4)))
        blob.extend(np.array([TAG_INT8 if int8 else 0], "<u4").tobytes() + values.tobytes() + bytes(-values.nbytes % 4))

    def floats(n: int, scale: float) -> bytes:
        return (rng.standard_normal(n) * scale).astype("<f4").tobytes()

    def int8_layer(rows: int, count: int) -> None:
        record(rng.integers(-127, 128, count, dtype=np.int8), int8=True)
        blob.extend(floats(rows, 0.1))  # bias
        blob.extend(np.full(rows, 127 / 0.3 * np.sqrt(count / rows), "<f4").tobytes())  # weight scales: |w| ~ 0.3/sqrt(fan-in)
        blob.extend(np.array([127 / 4], "<f4").tobytes())  # input scale: |x| up to 4

    lines = ["Input data 0 1 data 0=16 1=16 2=8",
             "Convolution q3 1 1 data q3 0=16 1=3 4=1 5=1 6=1152 8=1 9=1"]
    int8_layer(16, 8 * 16 * 9)
    # int8 depthwise: load_model widens its one input scale to one per group, from a raw record the
    # file does not hold, so that record must still be read
    lines.append("ConvolutionDepthWise dw 1 1 q3 dw 0=16 1=3 4=1 5=1 6=144 7=16 8=1 9=1")
    int8_layer(16, 144)
    lines.append("Deconvolution up 1 1 dw up 0=8 1=4 3=2 4=1 5=1 6=2048")
    record((rng.standard_normal(2048) * 0.1).astype("<f4"))
    blob.extend(floats(8, 0.1))
    lines.append("ConvolutionDepthWise dw2 1 1 up dw2 0=8 1=3 4=1 5=1 6=72 7=8 9=1")
    record((rng.standard_normal(72) * 0.3).astype("<f4"))
    blob.extend(floats(8, 0.1))
    lines.append("Convolution q1 1 1 dw2 q1 0=16 1=1 5=1 6=128 8=1 9=1")
    int8_layer(16, 128)
    lines += ["Pooling gap 1 1 q1 gap 0=1 4=1", "Flatten flat 1 1 gap flat",
              f"InnerProduct fc 1 1 flat output 0={FC_OUT} 1=1 2={16 * FC_OUT} 8=1"]
    int8_layer(FC_OUT, 16 * FC_OUT)
    param, bin_ = folder / "mixed.param", folder / "mixed.bin"
    param.write_text(f"7767517\n{len(lines)} {len(lines)}\n" + "\n".join(lines) + "\n")
    bin_.write_bytes(bytes(blob))
    return Written(param, bin_, rng.standard_normal((8, 16, 16)).astype(np.float32), raw)


CASES = {"kernels": write_kernels, "gemm": write_gemm, "mixed": write_mixed}


def prepared(w: Written, options: RuntimeOptions = RuntimeOptions(threads=2)) -> Path:
    content = prepare_model(w.param, w.bin, 1 << 30, options=options)
    path = w.param.with_suffix(".plan.json")
    write_plan_file(content, path)
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_pretransformed_layers_equal_stock_ncnn_from_generous_to_tightest(name: str, tmp_path: Path) -> None:
    w = CASES[name](tmp_path)
    ref = stock_output(w.param, w.bin, w.x)
    path = prepared(w)
    session = Session(path)
    assert session.sidecar.model.transformed == transformed_path(w.param).name
    tightest = planning.min_feasible_budget(session.profile) + ARENA_MARGIN + session.reserved_bytes
    for budget in (None, tightest):
        if budget:
            session.set_budget(budget)
        for _ in range(3):  # later runs reload every unpinned layer from the file
            assert_close(session.run({"data": w.x})["output"], ref)
        stats = session.stats()
        assert_counted_within_budget(stats)


@pytest.mark.parametrize("name", sorted(CASES))
def test_loads_read_transformed_weights_not_raw_ones(name: str, tmp_path: Path) -> None:
    """Zero each layer's raw weights in the .bin once the sessions have checked it, then move to a new
    plan (every layer is built again): a run that still equals stock NCNN never read them and never
    transformed them again; one without pre-transformed weights does both, and goes wrong."""
    w = CASES[name](tmp_path)
    ref = stock_output(w.param, w.bin, w.x)
    folder = tmp_path / "raw"
    folder.mkdir()
    w_raw = CASES[name](folder)
    with_file = Session(prepared(w))
    without = Session(prepared(w_raw, RuntimeOptions(threads=2, pretransform=False)))
    assert without.sidecar.model.transformed == "" and not transformed_path(w_raw.param).exists()
    for session, written in ((with_file, w), (without, w_raw)):
        data = bytearray(written.bin.read_bytes())
        for begin, end in written.raw_weights:
            data[begin + 4:end] = bytes(end - begin - 4)
        with open(written.bin, "r+b") as f:  # in place: the runtime's descriptor sees it
            f.write(data)
        session.set_budget(planning.min_feasible_budget(session.profile) + ARENA_MARGIN + session.reserved_bytes)
    assert_close(with_file.run({"data": w.x})["output"], ref)
    got = without.run({"data": w_raw.x})["output"]
    assert np.abs(got - ref).max() > RTOL * np.abs(ref).max()
    # the profile holds every buffer a load allocates: with the file, neither the raw weights nor the
    # transforms' scratch buffers are among them
    def weight_bytes(session: Session) -> int:
        return sum(t.size for t in session.profile.tensors if t.role == "weight")
    assert weight_bytes(without) - weight_bytes(with_file) >= sum(end - begin - 4 for begin, end in w.raw_weights)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_runtime_models_run_from_pretransformed_weights(name: str, tmp_path: Path) -> None:
    param, bin_, x = WRITERS[name](tmp_path)
    path = prepared(Written(param, bin_, x, []))
    assert transformed_path(param).stat().st_size > 2 * HEADER_BYTES  # records, not just a header
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # written atomically
    session = Session(path)
    assert_close(session.run({"data": x})["output"], stock_output(param, bin_, x))


def _executor(path: Path, threads: int = 2):
    """The native executor for a sidecar, without the sidecar's own checks: the file's must hold."""
    content = sidecar.load(path)
    tensors, layers = content.profile.columns
    param, bin_ = content.model_files(path)
    return native.load().Executor(str(param), str(bin_), content.executor_schedule(), tensors, layers,
                                  threads=threads, transformed=str(content.transformed_file(path)))


def test_a_file_made_for_another_thread_count_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = prepared(write_kernels(tmp_path))
    with pytest.raises(RuntimeError, match="made for threads=2, this run has threads=1"):
        _executor(path, threads=1)


def test_a_file_made_on_another_isa_is_refused_naming_the_field(tmp_path: Path) -> None:
    w = write_kernels(tmp_path)
    path = prepared(w)
    isa = native.load().build_info()["isa"]
    other = ("arm" if isa != "arm" else "x86").ljust(len(isa), "_")[: len(isa)]
    data = transformed_path(w.param).read_bytes()
    transformed_path(w.param).write_bytes(data.replace(f"isa={isa}\n".encode(), f"isa={other}\n".encode(), 1))
    with pytest.raises(RuntimeError, match=f"made for isa={other}, this run has isa={isa}"):
        _executor(path)


def _huge_mat_count(b: bytes) -> bytes:
    """The first layer's count of transformed Mats in the index made 2^32 - 1: refused before anything
    is sized by it (the header holds the index's offset at byte 16; the index starts with the layer
    count, then the first layer's index and its Mat count)."""
    at = int.from_bytes(b[16:24], "little") + 8
    return b[:at] + (0xFFFFFFFF).to_bytes(4, "little") + b[at + 4:]


def _non_utf8_key(data: bytes) -> bytes:
    """A byte no UTF-8 text holds inside the key's first value (`ncnn_version=...` after the 32-byte header)."""
    assert data[32:45] == b"ncnn_version="
    return data[:46] + b"\xff" + data[47:]


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[: len(b) // 2], "truncated or corrupt"),
    (lambda b: b"XXXX" + b[4:], "not a transformed-weights file"),
    (_huge_mat_count, "has a corrupt index"),
    # quoted as \xff, so the message reaches Python as one line of text (found by python -m flexnn_ncnn.fuzz)
    (_non_utf8_key, r"were made for ncnn_version=.\\xff"),
], ids=["truncated", "bad-magic", "huge-count", "non-utf8-key"])
def test_a_damaged_file_is_refused(damage, message: str, tmp_path: Path) -> None:
    w = write_kernels(tmp_path)
    path = prepared(w)
    file = transformed_path(w.param)
    file.write_bytes(damage(file.read_bytes()))
    with pytest.raises(RuntimeError, match=message):
        _executor(path)
    with pytest.raises(UserError, match="model.transformed_digest"):
        Session(path)


@pytest.mark.parametrize("cpu", ["cortex-a72", None], ids=["cortex-a72", "fp16-cpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_pretransformed_layers_under_qemu_aarch64_equal_ncnn_stock_there(name: str, cpu: str | None, tmp_path: Path) -> None:
    """The cross-built flexnn-bench prepares MODEL.transformed on the (emulated) device and runs every
    layer from it at the tightest budget: ARM's fp32 kernels (cortex-a72) and, on qemu's default CPU,
    its fp16-arithmetic ones; NCNN's own Net on the same CPU is the oracle."""
    runner = QEMU[:-2] + (["-cpu", cpu] if cpu else [])

    def writer(folder: Path) -> tuple[Path, Path, np.ndarray]:
        w = CASES[name](folder)
        return w.param, w.bin, w.x

    report, out = bench(runner, "linux-aarch64", tmp_path, "budget=min", "threads=2", writer=writer)
    assert transformed_path(tmp_path / f"{name}.param").stat().st_size > 2 * HEADER_BYTES  # records, not just a header
    assert report["arena_bytes"] + report["outside_arena_bytes"] <= report["budget"]
    _, ref = bench(runner, "linux-aarch64", tmp_path, "mode=stock", "threads=2", writer=writer)
    assert_close(out, ref)


def test_each_sidecar_keeps_its_own_transformed_weights(tmp_path: Path) -> None:
    """Preparing the model again for another sidecar (another thread count) writes another file: the
    first sidecar still opens and runs."""
    w = write_kernels(tmp_path)
    ref = stock_output(w.param, w.bin, w.x)
    plans = [tmp_path / f"t{threads}.json" for threads in (1, 2)]
    for threads, plan in zip((1, 2), plans):
        proc = run_module("prepare", str(w.param), "--budget", "min", "--threads", str(threads), "-o", str(plan))
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("*.transformed")) == ["t1.transformed", "t2.transformed"]
    for threads, plan in zip((1, 2), plans):
        assert_close(Session(plan, threads=threads).run({"data": w.x})["output"], ref)


def write_repeated(folder: Path, same: bool) -> Written:
    """Two 3x3 convolutions 16 -> 16 on 24x24 (Winograd), the second's weights the first's when `same`:
    as a spatially tiled block repeats its layers once per tile."""
    rng = np.random.default_rng(6)
    weights = [(rng.standard_normal(16 * 16 * 9) * 0.2).astype("<f4").tobytes() for _ in range(2)]
    biases = [(rng.standard_normal(16) * 0.1).astype("<f4").tobytes() for _ in range(2)]
    if same:
        weights[1], biases[1] = weights[0], biases[0]
    lines = ["Input data 0 1 data 0=24 1=24 2=16"]
    blob, raw = bytearray(), []
    for i, bottom in enumerate(("data", "c0")):
        lines.append(f"Convolution c{i} 1 1 {bottom} {'output' if i else 'c0'} 0=16 1=3 4=1 5=1 6=2304 9=1")
        raw.append((len(blob), len(blob) + 4 + len(weights[i])))
        blob += np.zeros(1, "<u4").tobytes() + weights[i] + biases[i]
    param, bin_ = folder / "repeated.param", folder / "repeated.bin"
    param.write_text(f"7767517\n{len(lines)} {len(lines)}\n" + "\n".join(lines) + "\n")
    bin_.write_bytes(bytes(blob))
    return Written(param, bin_, rng.standard_normal((16, 24, 24)).astype(np.float32), raw)


@pytest.mark.parametrize("mapped", [False, True], ids=["read", "mapped"])
def test_equal_records_are_written_once_and_each_layer_loads_them(mapped: bool, tmp_path: Path) -> None:
    """A record equal to one written before points at it: two layers with the same weights take one
    layer's records on disk, and each loads them, read or mapped, at the tightest budget (both streamed)."""
    sizes = {}
    for same in (False, True):
        folder = tmp_path / ("same" if same else "different")
        folder.mkdir()
        w = write_repeated(folder, same)
        path = prepared(w, RuntimeOptions(threads=2, map_weights=mapped))
        sizes[same] = transformed_path(w.param).stat().st_size
        session = Session(path)
        session.set_budget(planning.min_feasible_budget(session.profile, mapped=mapped) + ARENA_MARGIN + session.reserved_bytes)
        for _ in range(3):
            assert_close(session.run({"data": w.x})["output"], stock_output(w.param, w.bin, w.x))
        assert min(session.stats()["loaded_layers"]) == 2
    one_layer = sizes[False] - HEADER_BYTES  # two layers' records and the index
    assert sizes[True] < sizes[False] and sizes[False] - sizes[True] > one_layer // 3, sizes
