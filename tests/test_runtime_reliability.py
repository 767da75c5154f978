"""What the runtime does when something fails (issue 14): a plan whose arena cannot be allocated
leaves the executor on its current plan, which still runs to stock NCNN's output; an infeasible
prepare leaves no pre-transformed weights behind; a damaged number in a sidecar is one user error."""

from __future__ import annotations

import json
import dataclasses
from pathlib import Path

import pytest

from flexnn_ncnn import Session
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.prepare import prepare_model, write_plan_file
from helpers import stock_output
from test_runtime import assert_close, write_residual


def test_an_arena_that_cannot_be_allocated_keeps_the_current_plan(tmp_path: Path) -> None:
    param, bin_, x = write_residual(tmp_path)
    path = tmp_path / "residual.flexnn.plan.json"
    write_plan_file(prepare_model(param, bin_, 1 << 30), path)
    session = Session(path)
    before = session._executor.arena_bytes()
    # 64 TiB, nothing mapped: no allocator has it
    impossible = dataclasses.replace(session.plan, arena_bytes=1 << 46, budget=1 << 47)
    with pytest.raises(RuntimeError, match="cannot allocate an arena of 70368744177664 B: the current plan stays"):
        session._executor.set_plan(impossible.columns())
    assert session._executor.arena_bytes() == before
    assert_close(session.run({"data": x})["output"], stock_output(param, bin_, x))


def test_an_infeasible_prepare_writes_no_transformed_weights(tmp_path: Path) -> None:
    from flexnn_ncnn.planning import InfeasibleBudget
    from flexnn_ncnn.prepare import transformed_path

    param, bin_, _ = write_residual(tmp_path)
    with pytest.raises(InfeasibleBudget):
        prepare_model(param, bin_, 1000)
    assert not transformed_path(param).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([param.name, bin_.name])  # no scratch left either


def _number_paths(doc, path=()):
    """Paths to the numbers of a sidecar: (JSON path, None) for a number, (JSON path, k) for value k of a
    column of numbers (a string, docs/PLAN_FORMAT.md); lists and columns: their first three entries."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _number_paths(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:3]):
            yield from _number_paths(value, (*path, i))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield path, None
    elif isinstance(doc, str) and " " in doc.strip() and doc.split()[0].lstrip("-").isdigit():
        for k in range(min(3, len(doc.split()))):
            yield path, k


def _damaged(good: str, where: tuple, k: int | None, value) -> str:
    doc = json.loads(good)
    parent = doc
    for key in where[:-1]:
        parent = parent[key]
    if k is None:
        parent[where[-1]] = value
    else:
        values = parent[where[-1]].split()
        values[k] = json.dumps(value)
        parent[where[-1]] = " ".join(values)
    return json.dumps(doc)


def test_a_damaged_number_in_a_sidecar_is_one_user_error(tmp_path: Path) -> None:
    """Every number of a real sidecar replaced, in turn, by a negative, a float, a string, null and
    integers past int32 and int64: opening and running the sidecar either works or is a UserError (one
    line), never a TypeError, an OverflowError or a native cast error."""
    param, bin_, x = write_residual(tmp_path)
    path = tmp_path / "residual.flexnn.plan.json"
    write_plan_file(prepare_model(param, bin_, 1 << 30), path)
    good = path.read_text()
    paths = list(_number_paths(json.loads(good)))
    assert len(paths) > 40 and sum(k is not None for _, k in paths) > 30
    for where, k in paths:
        for value in (-1, 1.5, "x", None, 2**40, 2**70):
            path.write_text(_damaged(good, where, k, value))
            try:
                Session(path).run({"data": x})
            except UserError as e:
                assert "\n" not in str(e), (where, k, value, str(e))
    path.write_text(good)
    assert_close(Session(path).run({"data": x})["output"], stock_output(param, bin_, x))
