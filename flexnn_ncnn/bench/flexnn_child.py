"""`python -m flexnn_ncnn.bench.flexnn_child`: one FlexNN runtime configuration; prints one JSON line.

The runtime side of the benchmark (bench/configs.py RUNTIME_COMMAND; protocol in docs/EVALUATION.md),
through the real pipeline in separate processes: slice and prepare run as their CLIs; this process
reads the sidecar, times the planner, then execs itself into a fresh program (the same pid, which the
harness samples) that loads the runtime, makes the inputs, reads the idle RSS, and only then opens the
Session: what reading the plan costs is counted, as in a user's process that loads its model.

- `flexnn` (budget B): `python -m flexnn_ncnn.slice --no-fp16` at B (fp32 math, the benchmark's
  default; on the host it prepares and plans too, tightening the slicing until the plan fits), then a
  `Session` on its sidecar: weights stream in on the loading thread, loading overlaps computing.
  `--budget min`: `slice --budget min` finds the smallest budget a slicing fits, and the session runs
  at it; the JSON line's `budget` is that budget and `min_search` the search that found it (its probes
  `[bytes, fits]` and seconds, as slice records them in MODEL.flexnn.slicing.json and the sidecar).
- `flexnn-mapped` (budget B): `slice --map-weights` at B: the same pipeline with the layers'
  pre-transformed weights mapped from their file over their arena bytes (zero copy).
- `flexnn-computing` (budget B): the same sidecar as `flexnn`, run with no loading thread
  (`Session(loader="computing")`): the computing thread loads each layer just before it computes,
  its large reads split among the computing threads.
- `flexnn-no-mem` (budget B, Fig. 13's w.o.mem): the same sidecar and schedule without the static
  arena: every buffer a heap block from request to release, a layer's weights freed once it computed.
- `flexnn-no-preload` (budget B, Fig. 13's w.o.preload): the same sidecar, each layer's load also
  waiting for the previous layer's computation (no loading overlaps computing).
- `flexnn-no-both` (budget B, Fig. 13's w.o.both): neither the static arena nor preloading.
- `on-demand`: the unsliced model, planned at its smallest feasible budget, loads not overlapping
  computation: each layer's weights loaded just before it runs and released after.
- `swapnet` (budget B): the unsliced model prepared as for `on-demand`, then SwapNet-style block
  streaming (bench/swapnet.py) planned for B into a copy of the sidecar and run like `flexnn`. A
  budget below the smallest this layout accepts is a result, not a failure: the JSON line then
  holds `infeasible` (the message naming that smallest budget) and no measurement.

`activation_floor_bytes` is that of the profile the session ran (bench/floor.py): the model's own for
`on-demand` and `swapnet`, the sliced model's for `flexnn` and its ablations.

Reported overheads: `slice_ms` and `prepare_ms` are wall times of those CLI processes (interpreter
start-up included; slicing includes its own prepare and planning attempts, and for `flexnn` prepare
is timed once more alone on the sliced model, into a sidecar nothing runs); `plan_ms` is the
planner's time for the budget on the stored profile (for `swapnet`, the block-streaming builder's);
`transformed_weight_bytes` the size of the pre-transformed weights prepare wrote beside the sidecar.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import planning, sidecar
from ..cli import UserError, child_error, run_main, setup_logging
from . import swapnet
from .configs import BUDGETED, MAY_BE_INFEASIBLE, MIN, RUNTIME_MODES, SEARCHED, UNSLICED
from .floor import activation_floor
from .measure import add_run_args, apply_run_args, evict_all, model_inputs, reset_peak_rss, status_bytes

log = logging.getLogger(__name__)

MODES = tuple(RUNTIME_MODES)
OVERLAPPED = ("flexnn", "flexnn-mapped", "flexnn-no-mem", "swapnet")  # loading overlaps computing; the others load each layer after the previous computed
HEAP = ("flexnn-no-mem", "flexnn-no-both")  # no static arena: buffers from the heap


@dataclass(frozen=True)
class Prepared:
    sidecar_path: Path
    slice_ms: float | None  # None: not sliced (UNSLICED modes)
    prepare_ms: float | None  # None: slice's own prepare made the sidecar


def _run_cli(verb: str, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """`python -m flexnn_ncnn.VERB args`: its wall time in ms and the finished process."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", f"flexnn_ncnn.{verb}", *args], capture_output=True, text=True)
    return (time.perf_counter() - start) * 1e3, proc


def _cli_error(verb: str, proc: subprocess.CompletedProcess[str]) -> str:
    """The CLI's one-line error (cli.run_main), the signal it crashed on, or its exit code."""
    return child_error(proc) if proc.stderr.strip() or proc.returncode < 0 else f"{verb} exited with code {proc.returncode}"


def prepare_for(description: dict[str, Any], mode: str, budget: int | str | None, threads: int, fp16: bool,
                workdir: Path) -> Prepared:
    """Slice (the sliced modes; `budget` bytes or MIN) and prepare the model in `workdir`: the sidecar
    the session runs (for `swapnet`, the one its plan is made from)."""
    param, bin_path = Path(description["param"]), Path(description["bin"])
    if len(description["inputs"]) != 1:
        raise UserError(f"{param}: the runtime child takes models with one input, this one has {len(description['inputs'])}")
    shape = "1," + ",".join(map(str, description["inputs"][0]["shape"]))  # torch NCHW with a batch of 1
    prepare_args = ["--shape", shape, "--threads", str(threads)] + ([] if fp16 else ["--no-fp16"])
    if mode in UNSLICED:
        out = workdir / f"{param.stem}{sidecar.SUFFIX}"
        ms, proc = _run_cli("prepare", str(param), "--bin", str(bin_path), "--budget", "min", "-o", str(out), *prepare_args)
        if proc.returncode != 0:
            raise UserError(f"prepare: {_cli_error('prepare', proc)}")
        return Prepared(out, None, ms)
    assert budget is not None
    # on the host, slice also prepares and plans with the same options, tightening until the plan fits
    slice_ms, proc = _run_cli("slice", str(param), "--bin", str(bin_path), "--budget", str(budget), "--input-shape", shape,
                              "--threads", str(threads), "-o", str(workdir), *([] if fp16 else ["--no-fp16"]),
                              *(["--map-weights"] if mode == "flexnn-mapped" else []))
    if proc.returncode != 0:
        raise UserError(f"slice: {_cli_error('slice', proc)}")
    sliced, out = workdir / f"{param.stem}.flexnn.param", workdir / f"{param.stem}{sidecar.SUFFIX}"
    if mode != "flexnn":
        return Prepared(out, slice_ms, None)
    # the overhead table's prepare time: prepare alone on the sliced model, into a sidecar nothing runs
    timed = workdir / "prepare-timed" / out.name
    timed.parent.mkdir()
    prepare_ms, proc = _run_cli("prepare", str(sliced), "--budget", "min", "-o", str(timed), *prepare_args)
    if proc.returncode != 0:
        raise UserError(f"prepare: {_cli_error('prepare', proc)}")
    return Prepared(out, slice_ms, prepare_ms)


def plan_for(mode: str, budget: int | str | None, prepared: Path) -> tuple[Path, sidecar.Sidecar, float]:
    """The sidecar the session runs, its content, and the planning time in ms: prepare's sidecar, its
    plan made again only to time the planner; for `swapnet`, a copy beside it holding the block-streaming
    plan for `budget`. Raises InfeasibleBudget when that layout does not fit the budget."""
    content = sidecar.load(prepared)
    start = time.perf_counter()
    if mode != "swapnet":
        planning.plan_for_budget(content.profile, content.plan.budget, reserved=content.reserved_for(content.plan))
        return prepared, content, (time.perf_counter() - start) * 1e3
    assert isinstance(budget, int)
    plan = swapnet.swapnet_plan(content.profile, budget, reserved=content.reserved_bytes)
    plan_ms = (time.perf_counter() - start) * 1e3
    content = sidecar.with_plans(content, plan, ())
    path = prepared.with_name(prepared.name.removesuffix(sidecar.SUFFIX) + f".swapnet{sidecar.SUFFIX}")
    sidecar.save(content, path)  # in prepare's folder: its relative model file names hold
    return path, content, plan_ms


def prepare_session(description: dict[str, Any], mode: str, budget: int | str | None, threads: int, fp16: bool,
                    outputs_npz: Path, cold: bool) -> dict[str, Any]:
    """Slice, prepare and plan one configuration in a work folder beside `outputs_npz`: what run_session
    needs (`sidecar`, `cold_files`, `workdir`, which it removes) and the `record` fields known before
    any inference; or, for a baseline that refuses the budget, the record saying so (no folder left)."""
    workdir = Path(tempfile.mkdtemp(prefix="flexnn-child-", dir=outputs_npz.parent))
    try:
        prepared = prepare_for(description, mode, budget, threads, fp16, workdir)
        try:
            sidecar_path, content, plan_ms = plan_for(mode, budget, prepared.sidecar_path)
        except planning.InfeasibleBudget as e:
            if mode not in MAY_BE_INFEASIBLE:
                raise
            # nothing to measure: the harness reports this baseline as infeasible at the budget
            shutil.rmtree(workdir)
            return {"config": mode, "budget": budget, "infeasible": str(e), "min_feasible_budget": e.min_feasible_budget}
        # slicing and prepare read the model and wrote the sliced one and its transformed weights
        # (offline steps): start cold
        transformed = content.transformed_file(sidecar_path)
        weight_files = [Path(description["bin"]), content.model_files(sidecar_path)[1], *([transformed] if transformed else [])]
        evict_all(weight_files)
        record = {"config": mode, "budget": content.plan.budget, "plan_ms": plan_ms,
                  "activation_floor_bytes": activation_floor(content.profile, content.schedule.input_uses),
                  "transformed_weight_bytes": transformed.stat().st_size if transformed else 0}
        if budget == MIN:  # the search `slice` recorded in its decisions, beside the sliced .param
            param = content.model_files(sidecar_path)[0]
            record["min_search"] = json.loads(param.with_name(param.name.removesuffix(".param") + ".slicing.json").read_text())["min_search"]
        for key, value in (("slice_ms", prepared.slice_ms), ("prepare_ms", prepared.prepare_ms)):
            if value is not None:
                record[key] = value
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return {"sidecar": str(sidecar_path), "cold_files": [str(p) for p in weight_files] if cold else [], "workdir": str(workdir),
            "record": record}


def run_session(request: dict[str, Any], description: dict[str, Any], mode: str, threads: int, warmup: int, loops: int,
                seed: int, outputs_npz: Path) -> dict[str, Any]:
    """A Session on prepare_session's sidecar and `warmup + loops` inferences, in a process that has
    loaded no model and no sidecar yet (main execs into it): its RSS before the session is the idle
    RSS of memory (b) (DESIGN.md §4: before loading the model; reading the plan is loading it). The
    cold files are evicted before every inference. Writes the outputs to `outputs_npz`, removes the
    work folder; returns the configuration's record."""
    from .. import native
    from ..session import Session
    try:
        native.load()  # the runtime's libraries, loaded before the idle RSS is read (as the stock child imports ncnn)
        planning.load()
        inputs = model_inputs(description, seed)
        cold_files = [Path(p) for p in request["cold_files"]]
        rss_idle = status_bytes("VmRSS")
        hwm_reset = reset_peak_rss()
        start = time.perf_counter()
        session = Session(Path(request["sidecar"]), threads=threads, overlap_loading=mode in OVERLAPPED,
                          static_arena=mode not in HEAP, loader="computing" if mode == "flexnn-computing" else "any")
        load_ms = (time.perf_counter() - start) * 1e3
        outputs: dict[str, np.ndarray] = {}
        for _ in range(warmup + loops):
            evict_all(cold_files)
            outputs = session.run(inputs)
        vm_hwm = status_bytes("VmHWM")
        stats = session.stats()
        stored = sidecar.load(Path(request["sidecar"])).plan
        if session.plan != stored:
            raise UserError(f"the session re-planned instead of running the sidecar's {stored.algorithm} plan")
    finally:
        shutil.rmtree(request["workdir"], ignore_errors=True)
    np.savez(outputs_npz, **outputs)
    timed = slice(warmup, None)
    return {**request["record"], "latency_ms": [us / 1e3 for us in stats["latency_us"][timed]], "load_ms": load_ms,
            "rss_idle_bytes": rss_idle, "vm_hwm_bytes": vm_hwm, "hwm_reset": hwm_reset, "outputs_npz": str(outputs_npz),
            "counted_bytes": stats["counted_bytes"], "counted_limit_bytes": stats["counted_limit_bytes"],
            "arena_bytes": stats["arena_bytes"],
            "load_wait_ms": [us / 1e3 for us in stats["load_wait_us"][timed]],
            "loader_cpu_ms": [us / 1e3 for us in stats["loader_cpu_us"][timed]],
            "arena_weight_bytes": stats["arena_weight_bytes"][timed], "mapped_weight_bytes": stats["mapped_weight_bytes"][timed]}


def main(argv: Sequence[str] | None = None) -> int:
    from ..models import read_description
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.bench.flexnn_child", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="the model's .json (python -m flexnn_ncnn.models)")
    parser.add_argument("--mode", choices=MODES, default="flexnn", help="which runtime configuration (default flexnn)")
    parser.add_argument("--budget", default="", help=f"bytes, for {', '.join(BUDGETED)} (empty for the others); "
                                                     f"{MIN} ({', '.join(SEARCHED)}): the smallest its slicing fits")
    parser.add_argument("--fp16", choices=("0", "1"), default="0", help="1: NCNN's fp16 storage/arithmetic where the CPU has it")
    # prepare_session's JSON: this process runs its session (main execs into it)
    parser.add_argument("--session", metavar="JSON", help=argparse.SUPPRESS)
    add_run_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.session is not None:
        record = run_session(json.loads(args.session), read_description(args.model), args.mode, args.threads, args.warmup,
                             args.loops, args.seed, args.outputs)
        print(json.dumps(record), flush=True)
        return 0
    apply_run_args(args)
    if (args.mode in BUDGETED) != bool(args.budget):
        raise UserError(f"--mode {args.mode} " + ("needs --budget" if args.mode in BUDGETED else "takes no --budget"))
    if args.budget == MIN and args.mode not in SEARCHED:
        raise UserError(f"--budget {MIN} is for --mode {', '.join(SEARCHED)}: --mode {args.mode} takes bytes")
    budget = args.budget if args.budget == MIN else int(args.budget) if args.budget else None
    request = prepare_session(read_description(args.model), args.mode, budget, args.threads, args.fp16 == "1", args.outputs,
                              args.cold == "1")
    if "infeasible" in request:
        print(json.dumps(request), flush=True)
        return 0
    # the session in a fresh image of this process (the harness samples this pid): this one read the
    # sidecar and planned, and the session would reuse that freed heap without counting it
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", __spec__.name, *(sys.argv[1:] if argv is None else argv),
                              "--session", json.dumps(request)])

if __name__ == "__main__":
    sys.exit(run_main(main))
