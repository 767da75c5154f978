"""Prepare a model for the runtime on this machine, and plan it for a budget: the plan sidecar.

    python -m flexnn_ncnn.prepare MODEL.param --budget 100MB [--bin MODEL.bin] [--shape [NAME=]1,3,224,224 ...]
                                  [--threads N] [--no-pretransform] [-o MODEL.flexnn.plan.json]

Prepare writes MODEL.flexnn.transformed beside the sidecar (X.transformed for a sidecar X.json): the
weights each layer derives when NCNN builds it (Winograd, packed, GEMM-tiled; ncnn_patches/0003), so
that every load at run time reads them instead of transforming again (checked: the model computes
the same outputs both ways). It then loads every layer once from them (recording its bytes in the .bin, its flags and its load time) and
runs one sequential inference recording every buffer (step, role, ordinal, size, last use) and each
layer's compute time: the planner's profile. The sidecar (flexnn_ncnn/sidecar.py,
docs/PLAN_FORMAT.md) holds the profile, the schedule the runtime needs (execution order, byte
ranges, flags), the target and options it was made with, the build, the model's sha256 and the plan
for the budget.
Last, a fresh process runs the prepared model once (overhead.py), on the plan given the whole budget,
to measure the resident memory the runtime does not count (the sidecar and NCNN's Net in memory, code
pages, thread stacks): the sidecar records it and the plan leaves room for it beside the arena. Where
that leaves the budget too little, the plans that would run there, with fewer layers resident, are
measured themselves, and the plan keeps its own value. An infeasible budget writes nothing and names
the smallest feasible one.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import __version__, measured, native, overhead, planning, sidecar
from .cli import UserError, add_logging_args, run_main, setup_logging
from .fetch import sha256_of
from .files import sampled_digest
from .jsonfields import number_text
from .ncnn_model import Graph, declared_input_shapes, parse_input_shapes, read_param
from .ncnn_model.sample_inputs import image_size_inputs, sample_inputs
from .units import format_size, parse_size

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeOptions:
    """What prepare and every run of its plan share: the layers' transformed weights depend on it."""

    threads: int = 1
    packing: bool = True
    winograd: bool = True
    sgemm: bool = True
    fp16: bool = True  # NCNN's default: fp16 storage/arithmetic where the CPU has it
    pretransform: bool = True  # load layers' transformed weights from the file prepare writes, not from raw ones
    # map those weights from their file over their arena bytes instead of reading them there (zero
    # copy; planned at whole pages: planning.make_plan's `mapped`); needs pretransform
    map_weights: bool = False


def transformed_path(param: Path) -> Path:
    """Where prepare_model writes `param`'s pre-transformed weights by default: MODEL.transformed beside
    MODEL.param."""
    return param.with_name(param.name.removesuffix(".param") + ".transformed")


def transformed_path_for(plan_path: Path) -> Path:
    """The pre-transformed weights that belong to the sidecar `plan_path` (X.plan.json or X.json ->
    X.transformed): each sidecar its own, so preparing the model again for another sidecar (other
    threads, fp16) never replaces the file an earlier one was recorded with."""
    return plan_path.with_name(plan_path.name.removesuffix(".json").removesuffix(".plan") + ".transformed")


def _plan(profile: planning.Profile, budget: int | None, reserved: int, mapped: bool) -> planning.Plan:
    """The plan for `budget` bytes with `reserved` beside the arena and its margin (None: the smallest
    feasible budget). Raises InfeasibleBudget naming the smallest feasible one."""
    if budget is None:
        budget = planning.min_feasible_budget(profile, mapped=mapped) + planning.ARENA_MARGIN + reserved
    return planning.plan_for_budget(profile, budget, reserved=reserved, mapped=mapped)


# the measured uncounted RSS is one process's, and others vary by tens of KB around it: every plan
# leaves it this much more, rounded up to UNCOUNTED_QUANTUM (so at least the margin, at most margin +
# quantum: rounding alone left as little as nothing, and a ViT-B/16 plan at 45 MB ran 7 KB above it)
UNCOUNTED_MARGIN = 64 * 1024
UNCOUNTED_QUANTUM = 128 * 1024


def _uncounted_rss_bytes(content: sidecar.Sidecar, arena: int) -> int:
    """The resident memory running `content`'s plan (made for an arena of at most `arena` bytes) holds
    beyond the runtime's count, measured in a fresh process on a scratch copy of the sidecar
    (overhead.py), plus UNCOUNTED_MARGIN, rounded up to UNCOUNTED_QUANTUM; kept (measured.py) by what
    it depends on: the build, the model's files, whether layers load pre-transformed weights (not that
    file's bytes, which differ between prepares), the options, the input shapes, the arena the plan was
    given and whether it maps weights (the layers it keeps resident hold their NCNN objects; not the
    plan itself, whose pinning follows the profile's timings, which differ between prepares) and this
    package's Python code (the session's own objects are part of it). So preparing the same files
    again, here or in another process, plans with the same value: the plan that fitted fits, and the
    same slice command gives the same answer."""
    key = {"build": measured.build_key(native.load().__file__), "python": measured.python_key(),
           "param": content.model.param_sha256, "bin": content.model.bin_digest,
           "transformed": bool(content.model.transformed), "target": asdict(content.target), "inputs": content.inputs,
           "arena": arena, "mapped": content.plan.mapped}

    def measure() -> int:
        with tempfile.TemporaryDirectory(prefix="flexnn-overhead-") as scratch:
            path = Path(scratch) / f"measuring{sidecar.SUFFIX}"
            write_plan_file(content, path)
            run = overhead.measure_in_child(path, content.input_shapes(), image_size_inputs(read_param(content.model.param)))
        log.info("prepare: a run of a %s arena held %s over idle, %s of it counted: it leaves room for the other %s",
                 format_size(content.plan.arena_bytes), format_size(run["peak_rss_over_idle_bytes"]),
                 format_size(run["counted_bytes"]), format_size(run["uncounted_rss_bytes"]))
        return -(-(run["uncounted_rss_bytes"] + UNCOUNTED_MARGIN) // UNCOUNTED_QUANTUM) * UNCOUNTED_QUANTUM
    return measured.recalled("uncounted_rss", key, measure)


def _measured(content: sidecar.Sidecar, budget: int | None, reserved: int, mapped: bool) -> planning.Plan:
    """_plan(...) holding the uncounted RSS measured running it (in a sidecar reserving nothing for it,
    which runs the plan as it is)."""
    plan = _plan(content.profile, budget, reserved, mapped)
    alone = replace(content, plan=plan, ladder=(), uncounted_rss_bytes=0)
    return replace(plan, uncounted_rss_bytes=_uncounted_rss_bytes(alone, plan.budget - planning.ARENA_MARGIN - reserved))


def _fitted(content: sidecar.Sidecar, budget: int | None, mapped: bool) -> planning.Plan:
    """The plan for `budget` (None: the smallest feasible) beside `content`'s reservation. That was
    measured on the plan given the whole budget; when it leaves too little, the plans that would run
    keep fewer layers resident, whose NCNN objects the heap then does not hold, so they are measured
    themselves: the plan for what the smallest plan's measurement leaves, taken if it fits with its
    own, else the smallest plan. The budget an infeasible one names is the smallest plan's with its
    measurement (verified: it ran), and every budget from there up is accepted."""
    try:
        return _plan(content.profile, budget, content.reserved_bytes, mapped)
    except planning.InfeasibleBudget as e:
        if budget is None or not e.min_feasible_budget:
            raise
        missed = e
    smallest = _measured(content, None, content.outside_bytes, mapped)
    least = smallest.budget + content.uncounted_for(smallest)  # as prepare names for budget None
    if budget < least:
        raise planning.InfeasibleBudget(budget, least, missed.reason,
                                        beside_arena=planning.ARENA_MARGIN + content.reserved_for(smallest))
    wider = _measured(content, budget, content.reserved_for(smallest), mapped)
    if wider.arena_bytes + planning.ARENA_MARGIN + content.reserved_for(wider) <= budget:
        return wider
    log.info("prepare: the plan for %s keeps the smallest arena, %s: a larger one holds more than the budget leaves",
             format_size(budget), format_size(smallest.arena_bytes))
    return replace(smallest, budget=budget)


def prepare_model(param: Path, bin_path: Path, budget: int | None, input_shapes: dict[str, tuple[int, ...]] | None = None,
                  options: RuntimeOptions = RuntimeOptions(), seed: int = 0, transformed: Path | None = None) -> sidecar.Sidecar:
    """Prepare `param`/`bin_path` here and plan it for `budget` bytes (None: the smallest feasible
    budget), reserving what prepare saw outside the arena and the uncounted RSS a fresh process
    measures running it: the sidecar (model paths absolute until `write_plan_file` makes them
    relative to where it is written). With options.pretransform, the pre-transformed weights go to
    `transformed` (default: transformed_path(param)); with options.map_weights, the plans map them."""
    if options.map_weights and not options.pretransform:
        raise UserError("mapped weights are the pre-transformed ones: --map-weights needs them (drop --no-pretransform)")
    model = read_param(param)
    graph = Graph.build(model)
    declared = {name: s.numpy() for name, s in declared_input_shapes(model, graph).items()}
    shapes = {**declared, **(input_shapes or {})}
    missing = [name for name in graph.inputs if name not in shapes]
    if missing:
        raise UserError(f"the model does not state the shape of input '{missing[0]}': give --shape {missing[0]}=1,3,224,224 "
                        f"(NAME=SHAPE once per input)")
    for name, shape in shapes.items():
        # NCNN would read the input as another rank or channel count than its layers are made for
        want = declared.get(name)
        if want is not None and (len(shape) != len(want) or shape[0] != want[0]):
            raise UserError(f"input '{name}' is given shape {tuple(shape)}, the model declares {tuple(want)} "
                            f"(numpy order, c, h, w: no batch dimension)")
    inputs = sample_inputs({name: shapes[name] for name in graph.inputs}, image_size_inputs(model), seed)
    module = native.load()
    transformed = (transformed or transformed_path(param)) if options.pretransform else None
    # written beside its final name and moved there once the plan is made: a failed or infeasible
    # prepare leaves whatever was there
    scratch = transformed.with_name(f".{transformed.name}.{os.getpid()}.tmp") if transformed else None
    try:
        content = _prepared(module, param, bin_path, graph, shapes, inputs, options, budget, scratch)
        if transformed and scratch:
            os.replace(scratch, transformed)
            content = replace(content, model=replace(content.model, transformed=str(transformed.resolve())))
        return content
    finally:
        if scratch and scratch.exists():
            scratch.unlink()


def _prepared(module: Any, param: Path, bin_path: Path, graph: Graph, shapes: dict[str, tuple[int, ...]],
              inputs: dict[str, np.ndarray], options: RuntimeOptions, budget: int | None,
              transformed: Path | None) -> sidecar.Sidecar:
    """prepare_model's work, its pre-transformed weights written to `transformed`."""
    try:
        prepared = module.prepare(str(param), str(bin_path), inputs, graph.outputs, threads=options.threads,
                                  packing=options.packing, winograd=options.winograd, sgemm=options.sgemm, fp16=options.fp16,
                                  transformed=str(transformed or ""))
    except RuntimeError as e:
        raise UserError(f"prepare {param}: {e}") from None
    profile = planning.Profile.from_columns(*prepared["profile"])
    outside = int(prepared["outside_bytes"])
    if outside:
        log.info("prepare: %s were requested from OpenMP workers: every plan leaves room for them beside the arena",
                 format_size(outside))
    recorded = prepared["schedule"]
    schedule = {"inputs": recorded["inputs"], "outputs": recorded["outputs"],  # JSON's form, read as a sidecar's
                "order": number_text(recorded["order"]), "ranges": number_text([v for r in recorded["ranges"] for v in r]),
                "flags": number_text(recorded["flags"]), "input_uses": [list(u) for u in recorded["input_uses"]]}
    if list(schedule["inputs"]) != list(graph.inputs):
        raise UserError(f"prepare {param}: the runtime feeds inputs {schedule['inputs']}, the graph declares {graph.inputs}")
    try:
        measuring_plan = _plan(profile, budget, outside, options.map_weights)
    except planning.InfeasibleBudget as e:
        if not e.min_feasible_budget:
            raise
        # measured anyway, so that the error names a budget that leaves room for it
        measuring_plan = _plan(profile, e.min_feasible_budget, outside, options.map_weights)
    info = module.build_info()
    content = sidecar.Sidecar(
        model=sidecar.Model(str(param.resolve()), sha256_of(param), str(bin_path.resolve()), sampled_digest(bin_path),
                            str(transformed.resolve()) if transformed else "", sampled_digest(transformed) if transformed else ""),
        build=sidecar.Build(info["ncnn_version"], info["patch_series_id"], __version__),
        target=sidecar.Target(info["isa"], info["cpu_features"], int(info["l2_bytes"]), options.threads, options.packing, options.winograd,
                              options.sgemm, options.fp16),
        inputs={name: list(reversed(shapes[name])) for name in graph.inputs},
        schedule=sidecar.Schedule.from_dict(schedule),
        profile=profile,
        plan=measuring_plan,
        outside_bytes=outside,
    )
    arena = measuring_plan.budget - planning.ARENA_MARGIN - outside
    content = replace(content, uncounted_rss_bytes=_uncounted_rss_bytes(content, arena))
    return sidecar.with_plans(content, _fitted(content, budget, options.map_weights))


def write_plan_file(content: sidecar.Sidecar, path: Path) -> None:
    """Save atomically, the model's file names relative to `path`'s folder."""
    sidecar.save(sidecar.moved(content, Path.cwd(), path.parent), path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.prepare", description=__doc__.split("\n\n")[0])
    parser.add_argument("param", type=Path, help="the model's .param (text)")
    parser.add_argument("--bin", type=Path, help="its .bin (default: beside the .param)")
    parser.add_argument("--budget", required=True,
                        help="memory budget, e.g. 100MB (10^6) or 100MiB (2^20); `min`: the smallest feasible budget")
    parser.add_argument("--shape", action="append", metavar="[NAME=]SHAPE",
                        help="input shape, torch NCHW (batch 1 dropped), e.g. 1,3,224,224; a model with several inputs: once "
                             "per input, in the model's input order or as NAME=SHAPE; default: the model's")
    parser.add_argument("--threads", type=int, default=1, help="computing threads (fixed by the plan; default: %(default)s)")
    parser.add_argument("--no-fp16", action="store_true",
                        help="fp32 storage and arithmetic (NCNN's fp16/bf16 off; default: NCNN's, fp16 where the CPU has it)")
    parser.add_argument("--no-pretransform", action="store_true",
                        help="write no pre-transformed weights: every load transforms the layer's raw weights again (slower)")
    parser.add_argument("--map-weights", action="store_true",
                        help="map the pre-transformed weights from their file instead of reading them into the arena "
                             "(zero copy: the loading thread makes each layer's pages resident and drops them after use)")
    parser.add_argument("-o", "--output", type=Path, help="plan sidecar (default: MODEL.flexnn.plan.json beside the .param)")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if not args.param.is_file():
        raise UserError(f"no such model: {args.param}")
    bin_path = args.bin or args.param.with_suffix(".bin")
    if not bin_path.is_file():
        raise UserError(f"no such weights file: {bin_path}")
    budget = None if args.budget == "min" else parse_size(args.budget)
    shapes = None
    if args.shape:
        param = read_param(args.param)
        given = parse_input_shapes(args.shape, param, Graph.build(param), "--shape")
        shapes = {name: shape.numpy() for name, shape in given.items()}
    if args.threads < 1:
        raise UserError("--threads must be at least 1")
    out = args.output or args.param.with_name(args.param.name.removesuffix(".param").removesuffix(".flexnn") + sidecar.SUFFIX)
    options = RuntimeOptions(threads=args.threads, fp16=not args.no_fp16, pretransform=not args.no_pretransform,
                             map_weights=args.map_weights)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)  # as slice makes its -o folder
    except OSError as e:
        raise UserError(f"cannot make {out.parent}: {e.strerror or e}") from None
    content = prepare_model(args.param, bin_path, budget, shapes, options, transformed=transformed_path_for(out))
    write_plan_file(content, out)
    print(f"budget {format_size(content.plan.budget)}: arena {format_size(content.plan.arena_bytes + planning.ARENA_MARGIN)}, plan {out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
