"""Where the runtime's code lies (archive_layout.py, code_trace.py): the functions the hot list names are
linked ahead of NCNN's other code, and the tracer, on a build with every function on pages of its own,
finds exactly the functions a model runs."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from flexnn_ncnn import code_trace, link_map, native, sidecar
from flexnn_ncnn.archive_layout import ISA, PAGE, page_aligned, read_hot_list
from flexnn_ncnn.build import CODE_TRACE_BUILD, HOT_LISTS
from flexnn_ncnn.prepare import prepare_model, write_plan_file

from helpers import built, run_module
from test_runtime import WRITERS


@pytest.fixture(scope="module")
def text_sections() -> list[link_map.InputSection]:
    return link_map.text_sections(built("host", "native", "_native.map"))


def test_the_hot_functions_are_linked_ahead_of_ncnns_other_code(text_sections: list[link_map.InputSection]) -> None:
    hot = read_hot_list(HOT_LISTS["host"])
    assert len(hot) > 200 and any(ISA in member for member, _ in hot)
    moved = [s for s in text_sections if s.name.startswith(".text.sorted.")]
    # every hot function, in each variant of its object that the build has
    assert len(moved) >= len(hot)
    assert [s.name for s in moved] == sorted(s.name for s in moved)
    others = [s for s in text_sections if s.name.startswith(".text._ZN4ncnn") and s.member.endswith(".cpp.o")]
    assert others and max(s.address for s in moved) < min(s.address for s in others)


def test_the_runtimes_own_code_is_compiled_for_size(text_sections: list[link_map.InputSection]) -> None:
    # every 64 KB window of it a Session first runs stays resident: at -O3 it took 311 KB
    runtime = [s for s in text_sections if s.archive == "libflexnn_runtime.a"]
    assert runtime and sum(s.size for s in runtime) < 160 * 1024


def _residual_plan(folder: Path) -> Path:
    param, bin_, _ = WRITERS["residual"](folder)
    plan = folder / f"residual{sidecar.SUFFIX}"
    write_plan_file(prepare_model(param, bin_, None), plan)
    return plan


def _ncnn_functions_on(sections: list[link_map.InputSection], pages: list[int]) -> dict[int, set[str]]:
    """For each traced page, the NCNN functions on it."""
    found: dict[int, set[str]] = {}
    for page in pages:
        found[page] = {s.name for s in link_map.sections_on_pages(sections, [page]) if code_trace.movable(s)}
    return found


def test_the_tracer_finds_exactly_the_functions_a_model_runs(tmp_path: Path,
                                                             text_sections: list[link_map.InputSection]) -> None:
    plan = _residual_plan(tmp_path)
    tracer = built("host", "native", "tools", "libflexnn_code_trace.so")
    module = code_trace.trace_module(built(CODE_TRACE_BUILD, "native"))
    aligned = link_map.text_sections(module.with_name("_native.map"))
    pages = code_trace.trace_in_child(plan, tracer, module)
    ran = link_map.sections_on_pages(aligned, pages)
    members = {s.member.split("_x86")[0].removesuffix(".cpp.o") for s in ran}
    # the residual model's layers, and the runtime's executor
    assert {"convolution", "binaryop", "executor"} <= members
    # one function a page: no neighbour is named for having shared a page with one that ran
    on_page = _ncnn_functions_on(aligned, pages)
    assert on_page and all(len(names) <= 1 for names in on_page.values())
    # where functions share pages (the host build), the same run names more of them
    host_module = Path(native.load().__file__)
    shared = link_map.sections_on_pages(text_sections, code_trace.trace_in_child(plan, tracer, host_module))
    exact = {s.name for s in ran if code_trace.movable(s)}
    assert exact and len({s.name for s in shared if code_trace.movable(s)}) > len(exact)


def test_page_aligned_puts_every_function_on_pages_of_its_own(tmp_path: Path) -> None:
    source = tmp_path / "two.c"
    source.write_text("int one(int x) { return x + 1; }\nint two(int x) { return x * 2; }\n")
    subprocess.run(["cc", "-c", "-O2", "-ffunction-sections", str(source), "-o", str(tmp_path / "two.o")], check=True)
    subprocess.run(["ar", "rcs", str(tmp_path / "in.a"), "two.o"], cwd=tmp_path, check=True)
    out = tmp_path / "out" / "aligned.a"
    assert page_aligned(tmp_path / "in.a", out, "ar", "objcopy")
    assert not page_aligned(tmp_path / "in.a", out, "ar", "objcopy")  # made once per input
    headers = subprocess.run(["objdump", "-h", str(out)], capture_output=True, text=True, check=True).stdout
    text = [line.split() for line in headers.splitlines() if ".text." in line]
    assert {row[1] for row in text} == {".text.one", ".text.two"}
    assert all(row[-1] == f"2**{PAGE.bit_length() - 1}" for row in text)


def test_code_trace_writes_a_hot_list_read_back_in_rank_order(tmp_path: Path) -> None:
    plan = _residual_plan(tmp_path)
    out = tmp_path / "hot.txt"
    proc = run_module("code_trace", str(plan), str(plan), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    hot = read_hot_list(out)
    assert hot and len(set(hot)) == len(hot)
    assert all(section.startswith(".text.") for _, section in hot)


def test_code_trace_merges_an_earlier_list_after_what_it_traced(tmp_path: Path) -> None:
    plan = _residual_plan(tmp_path)
    out = tmp_path / "hot.txt"
    # two clones another instruction set's object runs and this plan does not
    earlier = [(f"convolution_x86{ISA}.cpp.o", ".text._ZN4ncnnL17only_elsewhere.constprop.1"),
               (f"convolution_x86{ISA}.cpp.o", ".text._ZN4ncnnL17only_elsewhere.constprop.0")]
    out.write_text("# measured elsewhere\n" + "".join(f"{m}\t{s}\n" for m, s in earlier))
    proc = run_module("code_trace", str(plan), "-o", str(out), "--merge", str(out))
    assert proc.returncode == 0, proc.stderr
    hot = read_hot_list(out)
    traced = hot[:-len(earlier)]
    assert traced and hot[-len(earlier):] == earlier and not set(traced) & set(earlier)
    again = tmp_path / "again.txt"
    assert run_module("code_trace", str(plan), "-o", str(again), "--merge", str(out)).returncode == 0
    assert read_hot_list(again) == hot  # a function traced and kept is listed once, where the trace put it
    missing = run_module("code_trace", str(plan), "-o", str(again), "--merge", str(tmp_path / "none.txt"))
    assert missing.returncode == 2 and "--merge" in missing.stderr


def test_the_hot_list_keeps_what_one_plan_runs_in_fewer_windows_than_most_used_first() -> None:
    # six plans: code all run, code each half of them runs, and code each runs alone (4 KB functions)
    families = [(range(6), 16), (range(3), 12), (range(3, 6), 12), *(((p,), 4) for p in range(6))]
    plans_of = [set(plans) for plans, count in families for _ in range(count)]
    runs = [[link_map.InputSection(PAGE * f, PAGE, f".text.f{f}", "mat.cpp.o", "libncnn.a")
             for f, plans in enumerate(plans_of) if p in plans] for p in range(6)]
    traced = code_trace.Traced.of(runs, [16_000_000] * 6)
    hot = traced.hot_list()
    assert sorted(hot) == sorted({(s.member, s.name) for run in runs for s in run})
    assert traced.windows(hot) < traced.windows(traced.most_used_first())
    assert code_trace.Traced.of(runs, [16_000_000] * 6).hot_list() == hot  # deterministic


def test_the_hot_list_keeps_a_smaller_budgets_code_together_where_plans_compete() -> None:
    # three plans of 34 functions (4 KB each) sharing them pairwise: not all can lie in 3 windows
    families = [((0, 1), 8), ((0,), 16), ((1,), 16), ((0, 2), 10), ((1, 2), 10), ((2,), 12)]
    plans_of = [set(plans) for plans, count in families for _ in range(count)]
    random.Random(1).shuffle(plans_of)
    runs = [[link_map.InputSection(PAGE * f, PAGE, f".text.f{f}", "mat.cpp.o", "libncnn.a")
             for f, plans in enumerate(plans_of) if p in plans] for p in range(3)]
    equal = code_trace.Traced.of(runs, [10_000_000] * 3)
    small_last = code_trace.Traced.of(runs, [100_000_000, 100_000_000, 1_000_000])
    assert small_last.windows(small_last.hot_list(), [2]) == 3 < equal.windows(equal.hot_list(), [2])
