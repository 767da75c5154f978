"""Where the runtime's code lies (archive_layout.py, code_trace.py): the functions the hot list names are
linked ahead of NCNN's other code, and the tracer finds the functions a model really runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexnn_ncnn import code_trace, link_map, sidecar
from flexnn_ncnn.archive_layout import ISA, read_hot_list
from flexnn_ncnn.build import HOT_LISTS
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


def test_the_tracer_finds_the_functions_a_model_runs(tmp_path: Path, text_sections: list[link_map.InputSection]) -> None:
    param, bin_, _ = WRITERS["residual"](tmp_path)
    plan = tmp_path / f"residual{sidecar.SUFFIX}"
    write_plan_file(prepare_model(param, bin_, None), plan)
    pages = code_trace.trace_in_child(plan, built("host", "native", "tools", "libflexnn_code_trace.so"))
    ran = link_map.sections_on_pages(text_sections, pages)
    members = {s.member.split("_x86")[0].removesuffix(".cpp.o") for s in ran}
    # the residual model's layers, and the runtime's executor
    assert {"convolution", "binaryop", "executor"} <= members
    # pages, not the kernel's fault-around windows: far less than what one run maps
    assert 0 < len(pages) * code_trace.PAGE < 2_000_000


def test_code_trace_writes_a_hot_list_read_back_in_rank_order(tmp_path: Path) -> None:
    param, bin_, _ = WRITERS["residual"](tmp_path)
    plan = tmp_path / f"residual{sidecar.SUFFIX}"
    write_plan_file(prepare_model(param, bin_, None), plan)
    out = tmp_path / "hot.txt"
    proc = run_module("code_trace", str(plan), str(plan), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    hot = read_hot_list(out)
    assert hot and len(set(hot)) == len(hot)
    assert all(section.startswith(".text.") for _, section in hot)
