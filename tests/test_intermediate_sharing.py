"""Intermediates of one layer share bytes when NCNN released one before it asked for the next.

A grouped DeconvolutionDepthWise (two input channels per group) runs one Deconvolution per group,
each with buffers it frees before the next group's: prepare records when each was released
(`released_before`), the planner lays a layer's intermediates out among themselves, and the runtime
fails an inference in which NCNN still holds an intermediate whose bytes the plan gives to the next.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_close, stock_output
from model_helpers import written_text_model
from flexnn_ncnn import planning, sidecar
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.planning import ARENA_MARGIN
from flexnn_ncnn.prepare import prepare_model, write_plan_file
from flexnn_ncnn.session import Session

pytest.importorskip("ncnn")

# 32 groups of 2 input channels upsampled by a 4x4 stride-2 transposed conv, then a padded 3x3 conv
# (its bordered input copy is held while its im2col buffers are made)
GROUPED = """7767517
3 3
Input data 0 1 data 0=10 1=13 2=64
DeconvolutionDepthWise up 1 1 data up 0=32 1=4 3=2 4=1 6=1024 7=32
Convolution conv 1 1 up output 0=8 1=3 4=1 5=1 6=2304
"""
SHAPE = (1, 64, 13, 10)
RTOL = 1e-4


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, sidecar.Sidecar]:
    folder = tmp_path_factory.mktemp("grouped")
    written_text_model(GROUPED, SHAPE, 3, folder)
    param, bin_ = folder / "a.param", folder / "a.bin"
    return param, bin_, prepare_model(param, bin_, None)


def _intermediates(profile: planning.Profile, step: int) -> list[int]:
    return [i for i, t in enumerate(profile.tensors) if t.layer == step and t.role == "intermediate"]


def _at_smallest(content: sidecar.Sidecar, profile: planning.Profile, path: Path) -> planning.Plan:
    """`profile` planned at its smallest budget, written with `content` to `path`."""
    budget = planning.min_feasible_budget(profile) + ARENA_MARGIN + content.reserved_bytes
    plan = planning.plan_for_budget(profile, budget, reserved=content.reserved_bytes)
    write_plan_file(sidecar.with_plans(dataclasses.replace(content, profile=profile), plan), path)
    return plan


def test_a_grouped_layers_per_group_buffers_share_bytes_and_outputs_equal_stock(grouped, tmp_path: Path) -> None:
    param, bin_, content = grouped
    profile = content.profile
    step = max(range(len(profile.layers)), key=lambda s: len(_intermediates(profile, s)))
    scratch = [profile.tensors[i] for i in _intermediates(profile, step)]
    assert len(scratch) > 32 and sum(t.released_before >= 0 for t in scratch) > 32  # per group, released within the step
    path = tmp_path / f"grouped{sidecar.SUFFIX}"
    plan = _at_smallest(content, profile, path)
    placed = [plan.tensors[i] for i in _intermediates(profile, step)]
    extent = max(p.offset + t.size for p, t in zip(placed, scratch)) - min(p.offset for p in placed)
    assert extent < sum(t.size for t in scratch) / 2
    # as if every buffer were held to the layer's end: the smallest arena up to this step (the padded
    # conv after it may need as much: on AVX-512 its buffers do) grows by what sharing saved
    def upto(tensors) -> planning.Profile:
        return planning.Profile(tuple(t for t in tensors if t.first_use <= step), profile.layers)

    held = upto(dataclasses.replace(t, released_before=-1) for t in profile.tensors)
    assert planning.min_feasible_budget(held) > planning.min_feasible_budget(upto(profile.tensors)) + sum(t.size for t in scratch) / 3
    session = Session(path, canaries=True)
    for seed in range(1, 5):  # prepare fed its own input
        x = np.random.default_rng(seed).standard_normal(SHAPE[1:]).astype(np.float32)
        assert_close(session.run({"data": x})["output"], stock_output(param, bin_, x), RTOL)


def test_an_inference_whose_plan_shares_a_held_intermediate_fails(grouped, tmp_path: Path) -> None:
    """A profile claiming the padded conv released its bordered input before its next request: the
    planner puts that request over it, the checker accepts it, and the runtime refuses to serve it
    while NCNN still holds the bordered copy (one arena: no sanitizer would see the overwrite)."""
    param, bin_, content = grouped
    profile = content.profile
    conv = len(profile.layers) - 2  # the last layer's step; the output step follows
    first = _intermediates(profile, conv)[0]
    assert len(_intermediates(profile, conv)) > 1 and profile.tensors[first].released_before != 1
    wrong = profile.tensors[:first] + (dataclasses.replace(profile.tensors[first], released_before=1),) + profile.tensors[first + 1:]
    wrong_profile = planning.Profile(wrong, profile.layers)
    path = tmp_path / f"wrong{sidecar.SUFFIX}"
    plan = _at_smallest(content, wrong_profile, path)
    planning.check_plan(wrong_profile, plan)
    assert plan.tensors[first].offset == plan.tensors[first + 1].offset
    x = np.random.default_rng(1).standard_normal(SHAPE[1:]).astype(np.float32)
    with pytest.raises(UserError, match=r"intermediate 1 of \d+ B is planned over intermediate 0, which NCNN still holds"):
        Session(path).run({"data": x})
