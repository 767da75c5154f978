"""Mapped weights (issue 15; runtime/mapped_weights.*, planner/plan.h's planned_bytes): with
`map_weights` the layers' pre-transformed weights are never copied into the arena. Each record is
mapped from the transformed-weights file over the arena bytes the plan gives it (a page-aligned
offset, whole pages), resident before its layer computes, and given back to the arena once it has,
so the same bytes serve activations and other weights at other steps, as in the read plan. Outputs
stay stock NCNN's; the pread and O_DIRECT paths stay.

Models: test_transformed's kernel, Gemm and mixed int8/deconvolution stacks and the runtime's own
models; the oracle is the stock `ncnn` wheel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import Session, planning
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.planning import ARENA_MARGIN
from flexnn_ncnn.prepare import RuntimeOptions
from helpers import assert_counted_within_budget, stock_output
from test_runtime import WRITERS, assert_close
from test_transformed import CASES, Written, prepared

PAGE = 4096
MAPPED = RuntimeOptions(threads=2, map_weights=True)


def written(name: str, folder: Path) -> Written:
    if name in CASES:
        return CASES[name](folder)
    param, bin_, x = WRITERS[name](folder)
    return Written(param, bin_, x, [])


def tightest(session: Session) -> int:
    return planning.min_feasible_budget(session.profile, mapped=session.map_weights) + ARENA_MARGIN + session.reserved_bytes


def resident_bytes_of(path: Path) -> int:
    """This process's resident bytes of its mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
            inside = len(fields) >= 6 and Path(fields[5]) == path.resolve()
        elif inside and fields[0] == "Rss:":
            total += int(fields[1]) * 1024
    return total


def planned_bytes(t: planning.TensorUse, plan: planning.Plan) -> int:
    """What a plan gives a tensor (planner/plan.h): a mapped record its pages and the over-read page."""
    size = -(-t.size // PAGE) * PAGE + PAGE if plan.mapped and t.transformed else t.size
    return -(-size // plan.alignment) * plan.alignment


def mapped_at_once(session: Session) -> int:
    """The most bytes of records the plan has live at one step."""
    plan, profile = session.plan, session.profile
    steps = len(profile.layers)
    live = [0] * steps
    for t, p in zip(profile.tensors, plan.tensors):
        if t.transformed:
            for step in range(0 if p.pinned else p.load_after + 1, steps if p.pinned else t.last_use + 1):
                live[step] += planned_bytes(t, plan)
    return max(live)


def weight_bytes(session: Session, transformed: bool) -> int:
    return sum(t.size for t in session.profile.tensors if t.role == "weight" and t.transformed == transformed)


@pytest.mark.parametrize("name", sorted(CASES) + sorted(WRITERS))
def test_mapped_weights_equal_stock_ncnn_and_are_never_copied_into_the_arena(name: str, tmp_path: Path) -> None:
    w = written(name, tmp_path)
    ref = stock_output(w.param, w.bin, w.x)
    session = Session(prepared(w, MAPPED))
    assert session.map_weights and session.plan.mapped
    transformed = [t for t in session.profile.tensors if t.transformed]
    assert transformed and all(t.role == "weight" for t in transformed)
    for budget in (None, tightest(session)):
        if budget:
            session.set_budget(budget)
        for _ in range(3):  # later runs map every unpinned layer again
            assert_close(session.run({"data": w.x})["output"], ref)
        assert_counted_within_budget(session.stats())
        # what is mapped at once, counted by the runtime between layers, stays within what the plan has live
        assert 0 < max(session.stats()["mapped_peak_bytes"][-3:]) <= mapped_at_once(session)
    # at the tightest budget every layer streams: the first run after set_plan loads them all, and
    # what it was served in the arena is exactly the weights that are not transformed records
    session.set_budget(tightest(session))
    assert_close(session.run({"data": w.x})["output"], ref)
    stats = session.stats()
    assert stats["arena_weight_bytes"][-1] == weight_bytes(session, transformed=False)
    mapped = stats["mapped_weight_bytes"][-1]
    # a record is what Mat::create asked for less its refcount (and the 4-byte rounding)
    assert weight_bytes(session, True) - 8 * len(transformed) <= mapped <= weight_bytes(session, True)


@pytest.mark.parametrize("name", ["kernels", "convfc"])
def test_streamed_pages_stay_inside_the_arena_and_pinned_ones_stay_mapped(name: str, tmp_path: Path) -> None:
    """A streamed record's pages are the file's only over the arena bytes the plan gives records: the
    ones a written tensor takes next are given back, the rest wait for the next record mapped there,
    so the file's resident pages never exceed the arena."""
    w = written(name, tmp_path)
    session = Session(prepared(w, MAPPED))
    transformed_file = session.sidecar.transformed_file(session.path)
    assert transformed_file is not None
    session.set_budget(tightest(session))
    assert not any(p.pinned for t, p in zip(session.profile.tensors, session.plan.tensors) if t.transformed)
    for _ in range(2):
        session.run({"data": w.x})
        assert resident_bytes_of(transformed_file) <= session.plan.arena_bytes
    session.set_budget(1 << 30)  # generous: the planner pins what it can
    # a pinned record's pages, and the one past it NCNN may over-read, stay mapped
    pinned = sum(-(-t.size // PAGE) * PAGE + PAGE for t, p in zip(session.profile.tensors, session.plan.tensors)
                 if t.transformed and p.pinned)
    assert pinned > 0
    session.run({"data": w.x})
    assert 0 < resident_bytes_of(transformed_file) <= pinned


def test_a_mapped_plan_maps_records_at_pages_in_little_more_than_a_read_plan(tmp_path: Path) -> None:
    """Records start at pages and take whole pages, laid out with every other tensor in one arena (no
    window apart from it), so a mapped plan needs little more than a read one: the page rounding of
    the records live around one layer."""
    w = written("kernels", tmp_path)
    session = Session(prepared(w, MAPPED))
    read_min = planning.min_feasible_budget(session.profile)
    session.set_budget(tightest(session))
    plan, profile = session.plan, session.profile
    planning.check_plan(profile, plan)
    records = [(t, p) for t, p in zip(profile.tensors, plan.tensors) if t.transformed]
    assert all(p.offset % PAGE == 0 for _, p in records)
    per_layer = [sum(1 for t in profile.tensors if t.transformed and t.layer == layer) for layer in range(len(profile.layers))]
    around = max(a + b for a, b in zip(per_layer, per_layer[1:]))
    assert read_min < planning.min_feasible_budget(profile, mapped=True) <= read_min + 3 * PAGE * around
    # a record moved off its page is refused by the checker
    index = next(i for i, t in enumerate(profile.tensors) if t.transformed)
    moved = list(plan.tensors)
    moved[index] = planning.Placement(moved[index].offset + plan.alignment, moved[index].load_after, moved[index].pinned)
    with pytest.raises(planning.InvalidPlan, match="is not aligned to 4096 B"):
        planning.check_plan(profile, planning.Plan(plan.algorithm, plan.budget, plan.alignment, plan.arena_bytes,
                                                   plan.lower_bound, tuple(moved), plan.dependencies, plan.mapped))


def write_chain(folder: Path, layers: int = 12, channels: int = 32, side: int = 32) -> Written:
    """Padded 3x3 convolutions, one after another: weights streamed past activations of their size."""
    rng = np.random.default_rng(5)
    lines = [f"Input data 0 1 data 0={side} 1={side} 2={channels}"]
    blob, bottom = bytearray(), "data"
    for i in range(layers):
        top = "output" if i == layers - 1 else f"c{i}"
        lines.append(f"Convolution c{i} 1 1 {bottom} {top} 0={channels} 1=3 4=1 5=1 6={channels * channels * 9} 9=1")
        blob += np.zeros(1, "<u4").tobytes() + (rng.standard_normal(channels * channels * 9) * 0.1).astype("<f4").tobytes()
        blob += (rng.standard_normal(channels) * 0.1).astype("<f4").tobytes()
        bottom = top
    param, bin_ = folder / "chain.param", folder / "chain.bin"
    param.write_text(f"7767517\n{len(lines)} {len(lines)}\n" + "\n".join(lines) + "\n")
    bin_.write_bytes(bytes(blob))
    return Written(param, bin_, rng.standard_normal((channels, side, side)).astype(np.float32), [])


def written_after_records(profile: planning.Profile, plan: planning.Plan) -> int:
    """Bytes of streamed records whose next tenant (wrapping into the next inference) is written, not
    another record: each such page comes back to the arena as a fresh zero page its writer faults in."""
    steps = len(profile.layers)
    spans = [(p.offset, p.offset + planned_bytes(t, plan), 0 if p.pinned else p.load_after + 1 if t.role == "weight" else t.first_use,
              steps if p.pinned else t.last_use + 1, t.transformed) for t, p in zip(profile.tensors, plan.tensors)]
    total = 0
    for lo, hi, begin, end, record in spans:
        if not record or end - begin == steps:
            continue
        for page in range(lo, hi, PAGE):
            tenants = [((b - end) % steps, r) for l, h, b, _, r in spans if l <= page < h and (l, b) != (lo, begin)]
            total += PAGE if tenants and not min(tenants)[1] else 0
    return total


def test_with_room_to_spare_records_are_mapped_apart_from_what_is_written(tmp_path: Path) -> None:
    """A mapped plan with room keeps records at the top of the arena and everything else from the
    bottom (planner/layout.cpp, zoned): few record pages are next written (best fit everywhere writes
    into most of them, each a page fault per inference); at the tightest budget it falls back to best
    fit, so the smallest feasible budget is unchanged; the outputs stay stock NCNN's."""
    w = write_chain(tmp_path)
    session = Session(prepared(w, MAPPED))
    profile = session.profile
    smallest = planning.min_feasible_budget(profile, mapped=True)
    for factor in (1.25, 1.5, 2):
        plan = planning.make_plan(profile, int(smallest * factor), mapped=True)
        streamed = sum(planned_bytes(t, plan) for t, p in zip(profile.tensors, plan.tensors) if t.transformed and not p.pinned)
        assert streamed > 0
        assert written_after_records(profile, plan) <= streamed // 8, factor
    assert planning.min_feasible_budget(profile, mapped=True) <= planning.min_feasible_budget(profile) + 3 * PAGE * 2
    session.set_budget(int(tightest(session) * 1.25))
    assert_close(session.run({"data": w.x})["output"], stock_output(w.param, w.bin, w.x))


def test_a_mapped_resnet_switches_budgets_and_closes_with_record_pages_left_mapped(tmp_path: Path) -> None:
    """Record pages whose next tenant is another record stay the file's (read-only) after their layer:
    re-planning and closing the session give every page back before the layers' Mats write their
    refcounts into the arena (a tiny zoo ResNet-50 crashed there when they did not). Outputs equal
    stock NCNN at every budget."""
    import gc
    import json
    from flexnn_ncnn.models import generate
    from flexnn_ncnn.prepare import prepare_model, write_plan_file
    model = generate("resnet50", tmp_path / "models", seed=0, tiny=True)
    meta = json.loads(model.read_text())
    (entry,) = meta["inputs"]
    param, bin_ = model.parent / meta["param"], model.parent / meta["bin"]
    x = np.random.default_rng(1).standard_normal(entry["shape"]).astype(np.float32)
    ref = run_stock(param, bin_, {entry["name"]: x}, meta["outputs"][:1], fp32=True)[meta["outputs"][0]]
    plan = tmp_path / "resnet50.plan.json"
    write_plan_file(prepare_model(param, bin_, 1 << 30, {entry["name"]: tuple(entry["shape"])}, options=MAPPED), plan)
    session = Session(plan)
    smallest = tightest(session)
    for factor in (1, 1.25, 1.5, 2, 1, 3):
        session.set_budget(int(smallest * factor))
        for _ in range(2):
            assert_close(session.run({entry["name"]: x})[meta["outputs"][0]], ref)
    del session
    gc.collect()


def test_the_pread_path_still_reads_into_the_arena_and_a_session_can_choose_either(tmp_path: Path) -> None:
    w = written("kernels", tmp_path)
    ref = stock_output(w.param, w.bin, w.x)
    path = prepared(w)
    read = Session(path)
    assert not read.map_weights and not read.plan.mapped
    read.set_budget(tightest(read))
    assert_close(read.run({"data": w.x})["output"], ref)
    assert read.stats()["mapped_weight_bytes"] == [0]
    assert read.stats()["arena_weight_bytes"][-1] == weight_bytes(read, True) + weight_bytes(read, False)
    mapped = Session(path, map_weights=True)  # the same sidecar, re-planned with records at pages
    assert mapped.plan.mapped
    assert_close(mapped.run({"data": w.x})["output"], ref)
    assert mapped.stats()["mapped_weight_bytes"][-1] > 0
    direct = Session(path, direct_io=True)
    assert_close(direct.run({"data": w.x})["output"], ref)
    for session in (read, mapped, direct):  # the loading thread's CPU time, within the run it lived in
        stats = session.stats()
        assert all(0 < cpu <= latency for cpu, latency in zip(stats["loader_cpu_us"], stats["latency_us"], strict=True))


def test_mapping_is_refused_without_pretransformed_weights_with_o_direct_and_without_the_arena(tmp_path: Path) -> None:
    w = written("convfc", tmp_path)
    raw = prepared(w, RuntimeOptions(threads=2, pretransform=False))
    with pytest.raises(UserError, match="mapped weights need the pre-transformed weights file"):
        Session(raw, map_weights=True)
    with pytest.raises(UserError, match="not read with O_DIRECT"):
        Session(prepared(w, MAPPED), direct_io=True)
    with pytest.raises(UserError, match="need the static arena"):
        Session(prepared(w, MAPPED), static_arena=False)
    with pytest.raises(UserError, match="needs them"):
        prepared(w, RuntimeOptions(threads=2, pretransform=False, map_weights=True))


def test_a_mapped_sidecar_runs_from_the_command_line_within_its_budget(tmp_path: Path) -> None:
    import json
    from helpers import run_module
    w = written("residual", tmp_path)
    np.save(tmp_path / "x.npy", w.x)
    plan = tmp_path / "m.plan.json"
    out = run_module("prepare", str(w.param), "--budget", "min", "--threads", "2", "--map-weights", "-o", str(plan))
    assert out.returncode == 0, out.stderr
    got = run_module("run", str(plan), "--input", f"data={tmp_path / 'x.npy'}", "--output", str(tmp_path / "y.npz"),
                     "--loops", "4", "--json")
    assert got.returncode == 0, got.stderr
    assert_close(np.load(tmp_path / "y.npz")["output"], stock_output(w.param, w.bin, w.x))
    # at the smallest mapped budget, over runs whose pinned layers stay mapped, mapped pages included
    stats = json.loads(got.stdout.strip().splitlines()[-1])
    assert stats["peak_rss_over_idle_bytes"] <= json.loads(plan.read_text())["plan"]["budget"]
    assert stats["mapped_weight_bytes"][0] > 0
    assert stats["loader_cpu_median_us"] > 0
    # the plan CLI re-plans a mapped sidecar as mapped, so a session on its output runs that plan
    replanned = tmp_path / "m2.plan.json"
    budget = json.loads(plan.read_text())["plan"]["budget"] * 2
    out = run_module("plan", str(plan), "--budget", str(budget), "--ladder", f"{budget + PAGE}", "-o", str(replanned))
    assert out.returncode == 0, out.stderr
    written_plans = json.loads(replanned.read_text())
    assert written_plans["plan"]["mapped"] and all(p["mapped"] for p in written_plans["ladder"])


@pytest.mark.parametrize("name", ["kernels", "residual"])
def test_the_ncnn_mmap_baseline_equals_stock_ncnn(name: str, tmp_path: Path) -> None:
    """The user's alternative (bench config ncnn-mmap): NCNN's own Net on the memory-mapped .bin."""
    import json
    from helpers import run_module
    w = written(name, tmp_path)
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"name": name, "param": w.param.name, "bin": w.bin.name, "outputs": ["output"],
                                 "inputs": [{"name": "data", "shape": list(w.x.shape)}]}))
    outputs = tmp_path / "out.npz"
    proc = run_module("bench.measure", "--model", str(model), "--config", "ncnn-mmap", "--threads", "2", "--warmup", "0",
                      "--loops", "2", "--seed", "0", "--outputs", str(outputs))
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["config"] == "ncnn-mmap" and len(record["latency_ms"]) == 2
    x = np.random.default_rng(0).standard_normal(w.x.shape).astype(np.float32)  # the child's seeded input
    ref = run_stock(w.param, w.bin, {"data": x}, ["output"], fp32=True)["output"]  # the child's fp32 math
    assert_close(np.load(outputs)["output"], ref)


def test_the_benchmark_runs_mapped_weights_and_the_mmap_baseline_from_cold_storage(tmp_path: Path) -> None:
    """`bench --cold`: every child evicts the weight files before each inference; FlexNN reading and
    mapping its weights, On-Demand, NCNN-Default and NCNN on the mapped .bin all equal stock NCNN."""
    import json
    from flexnn_ncnn.models import generate
    from helpers import run_module
    model = generate("squeezenet", tmp_path / "models", seed=0, tiny=True)
    proc = run_module("bench", "--model", str(model), "--baselines", "ncnn-default,ncnn-mmap", "--budgets", "12MB",
                      "--modes", "flexnn,flexnn-mapped,on-demand", "--cold", "--warmup", "0", "--loops", "2", "--rounds", "1",
                      "-o", str(tmp_path), "--results-md", str(tmp_path / "RESULTS.md"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "squeezenet.results.json").read_text())
    assert data["settings"]["cold"] is True
    by_name = {s["config"]: s for s in data["summaries"]}
    assert list(by_name) == ["ncnn-default", "ncnn-mmap", "flexnn@12MB", "flexnn-mapped@12MB", "on-demand"]
    for name, s in by_name.items():
        assert s["ok"] and s["max_rel_error"] <= 1e-4, (name, s["errors"])
    records = {run["config"]: run["record"] for run in data["runs"]}
    assert records["flexnn-mapped@12MB"]["mapped_weight_bytes"][0] > 0  # the first run builds every layer
    assert records["flexnn@12MB"]["mapped_weight_bytes"] == [0, 0]
    assert len(records["flexnn@12MB"]["loader_cpu_ms"]) == 2 and min(records["flexnn@12MB"]["loader_cpu_ms"]) > 0
    assert by_name["flexnn-mapped@12MB"]["loader_cpu_median_ms"] > 0 and by_name["ncnn-default"]["loader_cpu_median_ms"] is None
    assert "cold storage" in (tmp_path / "RESULTS.md").read_text()


def test_a_transformed_file_shrunk_under_a_mapped_session_fails_the_inference_not_the_process(tmp_path: Path) -> None:
    """Mapped pages past a file's end would fault (SIGBUS) where a read comes up short: the loading
    thread checks the file's size before it maps a layer, and the inference fails in one line."""
    w = written("kernels", tmp_path)
    session = Session(prepared(w, MAPPED))
    session.set_budget(tightest(session))  # every layer streams: each run maps them again
    session.run({"data": w.x})
    transformed = session.sidecar.transformed_file(session.path)
    assert transformed is not None
    with open(transformed, "r+b") as f:
        f.truncate(transformed.stat().st_size // 2)
    with pytest.raises(UserError, match="shrank to"):
        session.run({"data": w.x})


@pytest.mark.parametrize("name", ["yolov3", "ssd"])
def test_mapped_detectors_equal_stock_on_inputs_prepare_never_saw(name: str, tmp_path: Path) -> None:
    """Detection heads (output rows depend on the values) with mapped weights, at the tightest mapped
    budget, on inputs at three scales that prepare never saw."""
    from test_value_dependent import DETECTORS, SHAPE, assert_same_detections, seeded_input, stock_detections
    from test_value_dependent import write_model as write_detector
    param, bin_ = write_detector(tmp_path, name, DETECTORS[name])
    session = Session(prepared(Written(param, bin_, seeded_input(0), []), MAPPED))
    assert session.plan.mapped and session.input_shapes["data"] == SHAPE
    session.set_budget(tightest(session))
    rows = set()
    for seed in range(1, 10):
        x = seeded_input(seed)
        ref = stock_detections(param, bin_, x)
        assert_same_detections(session.run({"data": x})["output"], ref)
        rows.add(len(ref))
    assert len(rows) > 1 and max(session.stats()["mapped_weight_bytes"]) > 0
