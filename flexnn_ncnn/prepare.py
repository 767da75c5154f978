"""Prepare a model for the runtime on this machine, and plan it for a budget: the plan file.

    python -m flexnn_ncnn.prepare MODEL.param --budget 100MB [--bin MODEL.bin] [--shape 1,3,224,224]
                                  [--threads N] [-o MODEL.flexnn.plan.json]

Prepare loads every layer once (recording its bytes in the .bin, its flags and its load time) and
runs one sequential inference recording every buffer (step, role, ordinal, size, last use) and each
layer's compute time: the planner's profile. The plan file holds the profile, the schedule the
runtime needs (execution order, byte ranges, flags), the options and build it was made with, the
model's sha256, and the plan for the budget. An infeasible budget writes nothing and names the
smallest feasible one. Format: docs/RUNTIME.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import native, planning
from .fetch import sha256_of
from .cli import UserError, add_logging_args, run_main, setup_logging
from .ncnn_model import Graph, declared_input_shapes, parse_input_shape, read_param
from .units import format_size, parse_size

log = logging.getLogger(__name__)

FORMAT = "flexnn-ncnn-runtime-plan"
VERSION = 1
# NCNN may read this many bytes past a buffer's end (NCNN_MALLOC_OVERREAD): the arena holds them
# past its last buffer, so a budget B is planned as an arena of B - ARENA_MARGIN.
ARENA_MARGIN = 64


@dataclass(frozen=True)
class RuntimeOptions:
    """What prepare and every run of its plan share: the layers' transformed weights depend on it."""

    threads: int = 1
    packing: bool = True
    winograd: bool = True
    sgemm: bool = True
    fp16: bool = True  # NCNN's default: fp16 storage/arithmetic where the CPU has it

    def to_dict(self) -> dict[str, Any]:
        return {"threads": self.threads, "packing": self.packing, "winograd": self.winograd, "sgemm": self.sgemm, "fp16": self.fp16}




def plan_for_budget(profile: planning.Profile, budget: int) -> planning.Plan:
    """The plan whose arena (plus NCNN's over-read margin) fits in `budget` bytes."""
    if budget <= ARENA_MARGIN:
        raise UserError(f"budget {format_size(budget)} is smaller than the arena's {ARENA_MARGIN} B margin")
    try:
        return planning.make_plan(profile, budget - ARENA_MARGIN)
    except planning.InfeasibleBudget as e:
        smallest = e.min_feasible_budget + ARENA_MARGIN if e.min_feasible_budget else 0
        raise planning.InfeasibleBudget(budget, smallest, e.reason) from None


def prepare_model(param: Path, bin_path: Path, budget: int, input_shapes: dict[str, tuple[int, ...]] | None = None,
                  options: RuntimeOptions = RuntimeOptions(), seed: int = 0) -> dict[str, Any]:
    """Prepare `param`/`bin_path` here and plan it for `budget` bytes: the plan file's content."""
    graph = Graph.build(read_param(param))
    shapes = input_shapes or {name: s.numpy() for name, s in declared_input_shapes(read_param(param), graph).items()}
    missing = [name for name in graph.inputs if name not in shapes]
    if missing:
        raise UserError(f"the model does not state the shape of input {missing[0]}: pass --shape")
    rng = np.random.default_rng(seed)
    inputs = {name: rng.standard_normal(shapes[name]).astype(np.float32) for name in graph.inputs}
    try:
        prepared = native.load().prepare(str(param), str(bin_path), inputs, graph.outputs, threads=options.threads,
                                         packing=options.packing, winograd=options.winograd, sgemm=options.sgemm,
                                         fp16=options.fp16)
    except RuntimeError as e:
        raise UserError(f"prepare {param}: {e}") from None
    tensors, layers = prepared["profile"]
    profile = planning.Profile(
        tuple(planning.TensorUse(l, planning.ROLES[r], o, s, f, u) for l, r, o, s, f, u in tensors),
        tuple(planning.LayerCost(load, comp) for load, comp in layers))
    if prepared["outside_bytes"]:
        log.warning("prepare: %s were requested from OpenMP workers, outside any plan", format_size(prepared["outside_bytes"]))
    plan = plan_for_budget(profile, budget)
    schedule = prepared["schedule"]
    schedule["ranges"] = [list(r) for r in schedule["ranges"]]
    info = native.load().build_info()
    return {
        "format": FORMAT, "version": VERSION,
        "model": {"param": str(param.resolve()), "bin": str(bin_path.resolve()),
                  "param_sha256": sha256_of(param), "bin_sha256": sha256_of(bin_path)},
        "build": {k: info[k] for k in ("ncnn_version", "patch_series_id", "target", "isa")},
        "options": options.to_dict(),
        "input_shapes": {name: list(shapes[name]) for name in graph.inputs},
        "budget": budget,
        "schedule": schedule,
        "profile": profile.to_dict(),
        "plan": plan.to_dict(),
    }


def write_plan_file(content: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(content, indent=1) + "\n")
    os.replace(tmp, path)  # readers never see a partial file


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.prepare", description=__doc__.split("\n\n")[0])
    parser.add_argument("param", type=Path, help="the model's .param (text)")
    parser.add_argument("--bin", type=Path, help="its .bin (default: beside the .param)")
    parser.add_argument("--budget", required=True, help="memory budget, e.g. 100MB (10^6) or 100MiB (2^20)")
    parser.add_argument("--shape", help="input shape, torch NCHW (batch 1 dropped), e.g. 1,3,224,224; default: the model's")
    parser.add_argument("--threads", type=int, default=1, help="computing threads (fixed by the plan; default: %(default)s)")
    parser.add_argument("-o", "--output", type=Path, help="plan file (default: MODEL.flexnn.plan.json beside the .param)")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if not args.param.is_file():
        raise UserError(f"no such model: {args.param}")
    bin_path = args.bin or args.param.with_suffix(".bin")
    if not bin_path.is_file():
        raise UserError(f"no such weights file: {bin_path}")
    budget = parse_size(args.budget)
    shapes = None
    if args.shape:
        graph = Graph.build(read_param(args.param))
        if len(graph.inputs) != 1:
            raise UserError(f"--shape sets one input, the model has {len(graph.inputs)}")
        shapes = {graph.inputs[0]: parse_input_shape(args.shape).numpy()}
    if args.threads < 1:
        raise UserError("--threads must be at least 1")
    content = prepare_model(args.param, bin_path, budget, shapes, RuntimeOptions(threads=args.threads))
    out = args.output or args.param.with_name(args.param.stem + ".flexnn.plan.json")
    write_plan_file(content, out)
    print(f"budget {format_size(budget)}: arena {format_size(content['plan']['arena_bytes'] + ARENA_MARGIN)}, plan {out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
