"""The runtime (issue 6): a prepared model run inside one arena equals stock NCNN at every budget
from generous to the tightest feasible, its own memory count stays within the budget, and every
way a plan can not fit its model or machine is refused or stops the inference with a message.

Models are small and written here with seeded weights: conv+FC (the smoke model), a residual block,
an MLP. The oracle is the stock `ncnn` wheel with its default options.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import smoke_model
from model_helpers import STRUCT_PREFIX, corpus, present
from flexnn_ncnn import Session, planning, sidecar
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.planning import ARENA_MARGIN
from flexnn_ncnn.prepare import prepare_model, transformed_path_for, write_plan_file
import helpers
from helpers import assert_counted_within_budget, run_module, stock_output

RTOL = 1e-4  # DESIGN.md section 5: max abs diff <= 1e-4 x max|ref|


@dataclass(frozen=True)
class ModelCase:
    name: str
    param: Path
    bin: Path
    x: np.ndarray
    ref: np.ndarray


def _flagged(rng: np.random.Generator, n: int) -> bytes:
    """A weight record as NCNN's ModelBin reads it: a 4-byte raw-fp32 flag, then the floats."""
    return np.zeros(1, "<u4").tobytes() + (rng.standard_normal(n) * 0.2).astype("<f4").tobytes()


def _floats(rng: np.random.Generator, n: int) -> bytes:
    return (rng.standard_normal(n) * 0.2).astype("<f4").tobytes()


# conv2 is marked direct (26=1, which stock NCNN ignores): the runtime runs it with Winograd off
RESIDUAL_PARAM = """7767517
10 11
Input            data   0 1 data 0=16 1=16 2=8
Convolution      conv1  1 1 data c1 0=16 1=3 4=1 5=1 6=1152 9=1
Split            split  1 2 c1 s0 s1
Convolution      conv2  1 1 s0 c2 0=16 1=3 4=1 5=1 6=2304 9=1 26=1
Convolution      conv3  1 1 c2 c3 0=16 1=3 4=1 5=1 6=2304
BinaryOp         add    2 1 c3 s1 sum 0=0
ReLU             relu   1 1 sum r
Pooling          gap    1 1 r gap 0=1 4=1
Flatten          flat   1 1 gap f
InnerProduct     fc     1 1 f output 0=10 1=1 2=160
"""

MLP_PARAM = """7767517
4 4
Input            data   0 1 data 0=64
InnerProduct     fc1    1 1 data h1 0=256 1=1 2=16384 9=1
InnerProduct     fc2    1 1 h1 h2 0=256 1=1 2=65536 9=1
InnerProduct     fc3    1 1 h2 output 0=10 1=1 2=2560
"""


def write_residual(folder: Path) -> tuple[Path, Path, np.ndarray]:
    rng = np.random.default_rng(1)
    blob = (_flagged(rng, 1152) + _floats(rng, 16) + _flagged(rng, 2304) + _floats(rng, 16)
            + _flagged(rng, 2304) + _floats(rng, 16) + _flagged(rng, 160) + _floats(rng, 10))
    param, bin_ = folder / "residual.param", folder / "residual.bin"
    param.write_text(RESIDUAL_PARAM)
    bin_.write_bytes(blob)
    return param, bin_, rng.standard_normal((8, 16, 16)).astype(np.float32)


def write_mlp(folder: Path) -> tuple[Path, Path, np.ndarray]:
    rng = np.random.default_rng(2)
    blob = _flagged(rng, 16384) + _floats(rng, 256) + _flagged(rng, 65536) + _floats(rng, 256) + _flagged(rng, 2560) + _floats(rng, 10)
    param, bin_ = folder / "mlp.param", folder / "mlp.bin"
    param.write_text(MLP_PARAM)
    bin_.write_bytes(blob)
    return param, bin_, rng.standard_normal(64).astype(np.float32)


WRITERS = {"convfc": smoke_model.write, "residual": write_residual, "mlp": write_mlp}

# two InnerProducts, fc1's weights 2 MiB raw (1 MiB as fp16): records large enough that computing
# threads split their reads (loader="computing")
WIDE_PARAM = """7767517
3 3
Input            data   0 1 data 0=512
InnerProduct     fc1    1 1 data h1 0=1024 1=1 2=524288 9=1
InnerProduct     fc2    1 1 h1 output 0=10 1=1 2=10240
"""


def write_wide(folder: Path, seed: int = 3) -> tuple[Path, Path, np.ndarray]:
    rng = np.random.default_rng(seed)
    param, bin_ = folder / "wide.param", folder / "wide.bin"
    param.write_text(WIDE_PARAM)
    bin_.write_bytes(_flagged(rng, 524288) + _floats(rng, 1024) + _flagged(rng, 10240) + _floats(rng, 10))
    return param, bin_, rng.standard_normal(512).astype(np.float32)


@pytest.fixture(scope="module", params=sorted(WRITERS))
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ModelCase:
    folder = tmp_path_factory.mktemp(request.param)
    param, bin_, x = WRITERS[request.param](folder)
    return ModelCase(request.param, param, bin_, x, stock_output(param, bin_, x))


def assert_close(got: np.ndarray, ref: np.ndarray) -> None:
    helpers.assert_close(got, ref, RTOL)


def prepared(m: ModelCase, folder: Path, budget: int = 1 << 30) -> tuple[Path, sidecar.Sidecar]:
    content = prepare_model(m.param, m.bin, budget)
    path = folder / f"{m.name}{sidecar.SUFFIX}"
    write_plan_file(content, path)
    return path, content


def budgets_for(content: sidecar.Sidecar) -> dict[str, int]:
    """Generous (everything fits pinned), tightest feasible, and one between; each leaves the sidecar's
    reservation beside the arena."""
    profile = content.profile
    beside = ARENA_MARGIN + content.reserved_bytes
    tightest = planning.min_feasible_budget(profile, mapped=content.plan.mapped) + beside
    generous = 2 * sum(t.size + 64 for t in profile.tensors) + beside
    return {"generous": generous, "middle": (tightest + generous) // 2, "tightest": tightest}


def test_outputs_equal_stock_ncnn_from_generous_to_tightest_budget(model: ModelCase, tmp_path: Path) -> None:
    path, content = prepared(model, tmp_path)
    for label, budget in budgets_for(content).items():
        session = Session(path, budget=budget)
        for _ in range(3):  # later inferences reload what the first evicted
            out = session.run({"data": model.x})
            assert_close(out["output"], model.ref)
        stats = session.stats()
        assert_counted_within_budget(stats)
        assert stats["arena_bytes"] == session.plan.arena_bytes + ARENA_MARGIN


def test_tightest_budget_streams_weights_and_one_byte_less_is_refused(model: ModelCase, tmp_path: Path) -> None:
    path, content = prepared(model, tmp_path)
    tightest = budgets_for(content)["tightest"]
    session = Session(path, budget=tightest)
    assert any(not p.pinned for t, p in zip(session.profile.tensors, session.plan.tensors) if t.role == "weight")
    with pytest.raises(planning.InfeasibleBudget) as info:
        session.set_budget(tightest - 1)
    assert info.value.min_feasible_budget == tightest
    # the refused budget changed nothing: the session still runs its plan
    assert_close(session.run({"data": model.x})["output"], model.ref)
    assert_counted_within_budget(session.stats())


def test_budget_switches_keep_outputs_and_memory_within_each_budget(model: ModelCase, tmp_path: Path) -> None:
    path, content = prepared(model, tmp_path)
    b = budgets_for(content)
    session = Session(path)
    for budget in (b["tightest"], b["generous"], b["middle"], b["tightest"]):
        session.set_budget(budget)
        assert_close(session.run({"data": model.x})["output"], model.ref)
        assert_counted_within_budget(session.stats())


def test_a_sidecar_replanned_offline_runs_elsewhere_and_switches_by_lookup(tmp_path: Path) -> None:
    """prepare's sidecar re-planned by `python -m flexnn_ncnn.plan` into another folder, with a ladder:
    the session finds the model, runs the new plan, and takes ladder budgets from the file."""
    param, bin_, x = write_residual(tmp_path)
    m = ModelCase("residual", param, bin_, x, stock_output(param, bin_, x))
    path, content = prepared(m, tmp_path)
    b = budgets_for(content)
    out = tmp_path / "elsewhere" / "replanned.json"
    out.parent.mkdir()
    proc = run_module("plan", str(path), "--budget", str(b["middle"]), "-o", str(out), "--ladder", f"{b['tightest']},{b['generous']}")
    assert proc.returncode == 0, proc.stderr
    session = Session(out)
    assert session.plan.budget == b["middle"] and session.sidecar.model.param == "../residual.param"
    assert_close(session.run({"data": x})["output"], m.ref)
    for i, budget in enumerate((b["tightest"], b["generous"])):
        session.set_budget(budget)
        assert session.plan is session.sidecar.ladder[i]
        assert_close(session.run({"data": x})["output"], m.ref)
        assert_counted_within_budget(session.stats())


def test_the_sidecar_s_plan_is_held_by_the_runtime_alone_while_it_runs(tmp_path: Path) -> None:
    """Once set, the sidecar's plan's tables live in the runtime only (read back when asked for: a Python
    copy was 140 KB of NCNN's vision_transformer's 2.9 MB held beside the arena); moving to a ladder
    entry gives the sidecar's plan its own tables again, equal to the file's, and moving back holds it again."""
    param, bin_, x = write_residual(tmp_path)
    m = ModelCase("residual", param, bin_, x, stock_output(param, bin_, x))
    path, content = prepared(m, tmp_path)
    b = budgets_for(content)
    out = tmp_path / "laddered.json"
    proc = run_module("plan", str(path), "--budget", str(b["middle"]), "-o", str(out), "--ladder", str(b["tightest"]))
    assert proc.returncode == 0, proc.stderr
    stored = sidecar.load(out).plan
    session = Session(out)
    assert session.plan is session.sidecar.plan and isinstance(session.plan.tensors, planning.HeldRows)
    assert isinstance(session.plan.dependencies, planning.HeldRows) and session.plan == stored
    session.set_budget(b["tightest"])
    assert session.plan is session.sidecar.ladder[0]
    assert type(session.sidecar.plan.tensors) is planning.Rows and session.sidecar.plan == stored
    session.set_budget(b["middle"])
    assert isinstance(session.plan.tensors, planning.HeldRows) and session.plan == stored
    assert_close(session.run({"data": x})["output"], m.ref)


STRESS = """
import sys
import ncnn
import numpy as np
from flexnn_ncnn import Session
plan, budgets, x, ref, loops = sys.argv[1], [int(b) for b in sys.argv[2].split(",")], np.load(sys.argv[3]), np.load(sys.argv[4]), int(sys.argv[5])
session = Session(plan)
for i in range(loops):
    if i % 50 == 0:
        session.set_budget(budgets[i // 50 % len(budgets)])
    out = session.run({"data": x})["output"]
    assert float(np.max(np.abs(out - ref))) <= 1e-4 * float(np.max(np.abs(ref))), i
print("ok", loops)
"""


def test_pipelined_inferences_never_hang(tmp_path: Path) -> None:
    """Hundreds of pipelined inferences across budgets in a child process; a watchdog (timeout) fails a hang."""
    param, bin_, x = write_residual(tmp_path)
    m = ModelCase("residual", param, bin_, x, stock_output(param, bin_, x))
    path, content = prepared(m, tmp_path)
    b = budgets_for(content)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "ref.npy", m.ref)
    proc = subprocess.run([sys.executable, "-c", STRESS, str(path), f"{b['tightest']},{b['middle']},{b['generous']}",
                           str(tmp_path / "x.npy"), str(tmp_path / "ref.npy"), "300"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok 300"


def assert_equal_stock_from_generous_to_tightest(param: Path, bin_: Path, shape: tuple[int, ...], tmp_path: Path) -> None:
    """Prepare the model, then move one session through the generous, middle and tightest budgets: at
    each, prepare's own input and another (a detector emits another number of rows for it) give stock
    NCNN's outputs (default options), and the runtime's count holds the budget. Canaries are on: no
    request finds its arena bytes written since their last tensor died."""
    from flexnn_ncnn.ncnn_model import Graph, read_param
    from flexnn_ncnn.ncnn_model.stock import run_stock

    graph = Graph.build(read_param(param))
    xs = [np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * (1 + seed) for seed in (0, 1)]
    refs = [run_stock(param, bin_, {graph.inputs[0]: x}, graph.outputs, fp32=False) for x in xs]
    path = tmp_path / f"{param.stem}.flexnn.plan.json"
    # its transformed weights beside the plan: a benchmark structure's .param is NCNN's own file, in a folder not ours
    content = prepare_model(param, bin_, 1 << 34, {graph.inputs[0]: shape}, transformed=transformed_path_for(path))
    write_plan_file(content, path)
    session = Session(path, canaries=True)
    for label, budget in budgets_for(content).items():
        session.set_budget(budget)
        for x, ref in zip(xs, refs):
            outputs = session.run({graph.inputs[0]: x})
            for blob, expected in ref.items():
                assert_close(outputs[blob], expected)
        assert_counted_within_budget(session.stats())


# The corpus structures (model_helpers) with seeded weights: real layer mixes (depthwise, grouped,
# concat, shuffles, SE blocks, detection heads), from generous budgets to the tightest feasible. fp16
# storage (pnnx's default) goes through ModelBin's conversion path instead of reading in place.
RUNS = [(name, "fp32") for name in corpus() if name.startswith(STRUCT_PREFIX)] + [
    (name, storage) for name, storage in [
        ("struct:squeezenet", "fp16"), ("struct:yolov2", "fp16"), ("bench:squeezenet", "fp32"), ("bench:squeezenet", "fp16"),
        ("bench:mobilenet_v2", "fp32"), ("bench:shufflenet_v2", "fp32"), ("bench:googlenet", "fp32"),
        ("bench:efficientnet_b0", "fp16"), ("bench:yolo-fastestv2", "fp32")] if present(name)]


@pytest.mark.parametrize("name, storage", RUNS, ids=[f"{n}-{s}" for n, s in RUNS])
def test_structures_equal_stock_ncnn_from_generous_to_tightest(name: str, storage: str, corpus_files, tmp_path: Path) -> None:
    files = corpus_files(name, storage)
    assert_equal_stock_from_generous_to_tightest(files.param, files.bin, files.input_shape[1:], tmp_path)


def test_loader_on_big_cores_dropping_the_page_cache_changes_no_output(tmp_path: Path) -> None:
    param, bin_, x = write_mlp(tmp_path)
    m = ModelCase("mlp", param, bin_, x, stock_output(param, bin_, x))
    path, content = prepared(m, tmp_path)
    session = Session(path, budget=budgets_for(content)["tightest"], loader="big", drop_page_cache=True)
    for _ in range(2):
        assert_close(session.run({"data": x})["output"], m.ref)


def test_prepare_cli_writes_a_plan_the_session_runs(tmp_path: Path) -> None:
    param, bin_, x = write_mlp(tmp_path)
    proc = run_module("prepare", str(param), "--budget", "10MB")
    assert proc.returncode == 0, proc.stderr
    plan = tmp_path / "mlp.flexnn.plan.json"
    assert str(plan) in proc.stdout and "budget 10,000,000 B" in proc.stdout
    assert_close(Session(plan).run({"data": x})["output"], stock_output(param, bin_, x))
    elsewhere = tmp_path / "new" / "folder" / "mlp.flexnn.plan.json"  # its folder made, as slice -o makes its own
    assert run_module("prepare", str(param), "--budget", "10MB", "-o", str(elsewhere)).returncode == 0
    assert_close(Session(elsewhere).run({"data": x})["output"], stock_output(param, bin_, x))


def test_two_computing_threads_at_the_tightest_budget(tmp_path: Path) -> None:
    from flexnn_ncnn.prepare import RuntimeOptions

    param, bin_, x = write_residual(tmp_path)
    content = prepare_model(param, bin_, 1 << 30, options=RuntimeOptions(threads=2))
    path = tmp_path / "residual.flexnn.plan.json"
    write_plan_file(content, path)
    session = Session(path, budget=budgets_for(content)["tightest"], threads=2)
    for _ in range(3):
        assert_close(session.run({"data": x})["output"], stock_output(param, bin_, x))


ZOO = [f"{arch}_fp{bits}" for arch in ("vgg19", "resnet50", "mlp", "vit", "gpt2") for bits in (16, 32)]


@pytest.mark.parametrize("name", ZOO)
def test_pnnx_exports_equal_stock_ncnn_from_generous_to_tightest(name: str, zoo_exports, tmp_path: Path) -> None:
    """pnnx exports of VGG-, ResNet-, MLP-, ViT- and GPT-2-style torch models, fp16 and fp32 weight storage."""
    model = zoo_exports[name]
    assert_equal_stock_from_generous_to_tightest(model.param, model.bin, model.input_shape[1:], tmp_path)


def test_runs_from_several_threads_take_turns(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    param, bin_, x = write_residual(tmp_path)
    m = ModelCase("residual", param, bin_, x, stock_output(param, bin_, x))
    path, content = prepared(m, tmp_path)
    session = Session(path, budget=budgets_for(content)["tightest"])
    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(lambda _: session.run({"data": x})["output"], range(40)))
    for out in outputs:
        assert_close(out, m.ref)


def test_allocations_outside_any_plan_are_left_room_for(zoo_exports, tmp_path: Path) -> None:
    """With 2 threads, MultiHeadAttention's OpenMP workers allocate buffers no step owns: prepare
    records their peak, every plan leaves room for it beside the arena, and the runtime's count holds
    the budget at the tightest one."""
    from flexnn_ncnn.ncnn_model import Graph, read_param
    from flexnn_ncnn.prepare import RuntimeOptions

    model = zoo_exports["vit_fp32"]
    graph = Graph.build(read_param(model.param))
    shape = model.input_shape[1:]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    content = prepare_model(model.param, model.bin, None, {graph.inputs[0]: shape}, RuntimeOptions(threads=2))
    assert content.outside_bytes > 0
    tightest = planning.min_feasible_budget(content.profile) + ARENA_MARGIN + content.reserved_bytes
    assert content.plan.budget == tightest and content.plan.arena_bytes <= tightest - ARENA_MARGIN - content.reserved_bytes
    path = tmp_path / "vit.flexnn.plan.json"
    write_plan_file(content, path)
    session = Session(path, threads=2)
    for _ in range(3):
        session.run({graph.inputs[0]: x})
    stats = session.stats()
    assert 0 < stats["outside_arena_bytes"] <= content.outside_bytes
    assert_counted_within_budget(stats)
    # the room is enforced: a plan that leaves none for the workers' buffers fails, naming the layer,
    # and the next run of a plan that leaves enough equals the first
    short = tmp_path / "short.flexnn.plan.json"
    write_plan_file(dataclasses.replace(content, outside_bytes=0), short)
    with pytest.raises(UserError, match=r"^inference failed: .+: \d+ B requested outside the arena \(.+\) hold \d+ B there, "
                                        r"beyond the plan's \d+ B: prepare measured less"):
        Session(short, threads=2).run({graph.inputs[0]: x})
    again = Session(path, threads=2)
    assert_close(again.run({graph.inputs[0]: x})[graph.outputs[0]], session.run({graph.inputs[0]: x})[graph.outputs[0]])


def test_without_the_static_arena_outputs_and_counted_memory_hold(model: ModelCase, tmp_path: Path) -> None:
    """The ablation w.o.mem (and w.o.both): the same plans served from the heap. Outputs equal stock
    NCNN; no arena; what the heap holds at once never exceeds the plan it follows."""
    path, content = prepared(model, tmp_path)
    for label, budget in budgets_for(content).items():
        for overlap in (True, False):
            session = Session(path, budget=budget, static_arena=False, overlap_loading=overlap)
            for _ in range(3):
                assert_close(session.run({"data": model.x})["output"], model.ref)
            stats = session.stats()
            assert stats["arena_bytes"] == 0, label
            assert 0 < stats["counted_bytes"] <= session.plan.arena_bytes, (label, overlap, stats)


def test_a_budget_switch_defers_building_pinned_layers_to_the_next_run(model: ModelCase, tmp_path: Path) -> None:
    """set_budget plans and allocates only: the run after it builds what the new plan pins, the runs
    after that build only the streamed layers."""
    path, content = prepared(model, tmp_path)
    b = budgets_for(content)
    session = Session(path, budget=b["tightest"])
    for _ in range(2):
        session.run({"data": model.x})
    layers = len(content.schedule.order)
    first, streamed = session.stats()["loaded_layers"]
    assert first == layers and 0 < streamed <= layers  # weightless layers stay built after the first run
    session.set_budget(b["generous"])  # every weight pinned
    for _ in range(2):
        assert_close(session.run({"data": model.x})["output"], model.ref)
    assert session.stats()["loaded_layers"][2:] == [layers, 0]


def test_a_streamed_layer_is_dropped_once_it_has_computed(model: ModelCase, tmp_path: Path) -> None:
    """Between inferences the process holds the NCNN objects of the resident layers only (weightless
    or all weights pinned): a streamed layer's go once it has computed, and its next load builds it again."""
    path, content = prepared(model, tmp_path)
    b = budgets_for(content)
    session = Session(path, budget=b["tightest"])
    for _ in range(2):
        assert_close(session.run({"data": model.x})["output"], model.ref)
    layers = len(content.schedule.order)
    streamed = session.stats()["loaded_layers"][1]
    assert 0 < streamed <= layers
    assert session.stats()["built_layers"] == [layers - streamed] * 2
    session.set_budget(b["generous"])  # every weight pinned
    assert_close(session.run({"data": model.x})["output"], model.ref)
    assert session.stats()["built_layers"][-1] == layers


def test_canaries_find_nothing_in_a_correct_plan(model: ModelCase, tmp_path: Path) -> None:
    """With canaries every byte no live tensor holds is poisoned and checked when next requested: a
    correct plan passes at every budget, across runs (resident weights kept, streamed ones reloaded)
    and switches, with outputs equal to stock NCNN."""
    path, content = prepared(model, tmp_path)
    session = Session(path, canaries=True)
    for budget in (*budgets_for(content).values(), budgets_for(content)["tightest"]):
        session.set_budget(budget)
        for _ in range(2):
            assert_close(session.run({"data": model.x})["output"], model.ref)


def _overlapped_when_shortened(profile: planning.Profile, plan: planning.Plan, k: int) -> bool:
    """Whether a tensor the plan claims after tensor k's shortened end, while k is still read, shares
    its bytes: the overlap the canary must catch."""
    t, p = profile.tensors[k], plan.tensors[k]
    return any(u.first_use > t.first_use and u.first_use <= t.last_use
               and q.offset < p.offset + t.size and p.offset < q.offset + u.size
               for u, q in zip(profile.tensors, plan.tensors))


def test_a_canary_catches_a_plan_whose_lifetime_is_wrong(tmp_path: Path) -> None:
    """A profile claiming that the residual block's skip activation dies where it is first used lets
    the planner put the next activations over it while NCNN still holds it; ASAN cannot see it (one
    arena). The canary does: the inference fails naming the request; without canaries it computes
    on overwritten bytes."""
    param, bin_, x = write_residual(tmp_path)
    ref = stock_output(param, bin_, x)
    path, content = prepared(ModelCase("residual", param, bin_, x, ref), tmp_path)
    tensors = content.profile.tensors
    for k, t in enumerate(tensors):
        if t.role != "activation" or t.last_use <= t.first_use + 1:
            continue
        shortened = planning.Profile(tensors[:k] + (dataclasses.replace(t, last_use=t.first_use),) + tensors[k + 1:], content.profile.layers)
        plan = planning.plan_for_budget(shortened, planning.min_feasible_budget(shortened) + ARENA_MARGIN + content.reserved_bytes,
                                        reserved=content.reserved_bytes)
        if _overlapped_when_shortened(content.profile, plan, k):
            break
    else:
        pytest.fail("no activation of the residual model lives long enough to be shortened into an overlap")
    wrong = tmp_path / "wrong.flexnn.plan.json"
    write_plan_file(sidecar.with_plans(dataclasses.replace(content, profile=shortened), plan), wrong)
    with pytest.raises(UserError, match=r"written after the tensor there died, or belongs to one still alive \(arena canary\)"):
        Session(wrong, canaries=True).run({"data": x})
    assert not np.allclose(Session(wrong).run({"data": x})["output"], ref, rtol=1e-4, atol=1e-5)
