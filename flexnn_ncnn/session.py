"""A model running inside a memory budget: `Session(plan_path)`, `.run({blob: array})`.

The plan sidecar (written by `python -m flexnn_ncnn.prepare`, re-planned by `python -m
flexnn_ncnn.plan`) is loaded and validated by `sidecar.load` and checked against this machine by
`sidecar.verify` before anything runs: the model's files must hash as at prepare, the native module
must be the same build and ISA, and the thread count the same (transformed weight layouts depend on
it); a mismatch is a UserError naming the field. The runtime checks the plan again when it is set.
"""

from __future__ import annotations

import logging
import mmap
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from . import native, planning, sidecar
from .cli import UserError
from .process_memory import reset_peak_rss, status_bytes

log = logging.getLogger(__name__)

_AXES = {1: "w", 2: "h, w", 3: "c, h, w", 4: "c, d, h, w"}  # an input's numpy axes by rank: NCNN's dims reversed


# NCNN_MALLOC_OVERREAD (allocator.h): kernels may read this far past a buffer NCNN allocated
OVERREAD = 64


def _readable_in_place(a: np.ndarray) -> np.ndarray:
    """`a`, or a copy of it, as the runtime reads an input in place (csrc/runtime/read_only_input.h):
    16-byte aligned (numpy's own arrays are; a view at another offset is not), and the OVERREAD bytes
    past its end within its last page (else the runtime would have to find them mapped): a copy into
    an array OVERREAD bytes longer otherwise."""
    end = a.ctypes.data + a.nbytes
    if a.ctypes.data % 16 == 0 and (end - 1) // mmap.PAGESIZE == (end + OVERREAD - 1) // mmap.PAGESIZE:
        return a
    padded = np.empty(a.size + OVERREAD // a.itemsize, a.dtype)[:a.size].reshape(a.shape)
    padded[...] = a
    return padded


class Session:
    """A prepared model inside one arena: weights stream in on a loading thread while layers compute.

    `budget` (bytes) re-plans the stored profile instead of using the file's plan; `threads` must
    equal the plan's (it is checked, not changed). `loader`: the loading thread's cores (any, little,
    middle, big), or `computing`: no loading thread, each layer loaded by the computing thread just
    before it computes, its large reads split among the computing threads (for a machine whose every
    core computes: a loading thread would take a core from them mid-layer). `overlap_loading=False` makes each layer's load also wait for the previous layer's
    computation: no loading overlaps computing (On-Demand). `static_arena=False` (the ablation
    w.o.mem) runs the same plan without the arena: every buffer a heap block allocated when requested
    and freed when released, all counted outside the arena. `direct_io=True` reads the .bin with
    O_DIRECT through an aligned window held outside the arena: every plan then leaves room for it
    (`reserved_bytes`, with the sidecar's reservation), so a stored plan made without that room is
    re-planned. `canaries=True` (debug, slower) checks the plan's lifetimes inside the arena: bytes no
    live tensor holds are poisoned, and a request finding its bytes written since fails the inference
    (docs/RUNTIME.md). `map_weights`: the layers' pre-transformed weights are mapped from their file
    over the arena bytes the plan gives them (zero copy) instead of read there; None: as the
    sidecar's plan was made (`prepare --map-weights`).
    """

    def __init__(self, plan_path: str | Path, budget: int | None = None, threads: int | None = None, loader: str = "any",
                 drop_page_cache: bool = False, overlap_loading: bool = True, direct_io: bool = False,
                 static_arena: bool = True, canaries: bool = False, map_weights: bool | None = None):
        path = Path(plan_path)
        # loaded first: loading the runtime fixes malloc's thresholds (csrc/runtime/heap_policy.h), so
        # what reading the sidecar frees is unmapped, whatever this process freed before
        module = native.load()
        content = sidecar.load(path, native_checks=False)  # the Executor checks the profile, set_plan each plan
        param, bin_path = content.model_files(path)
        transformed = content.transformed_file(path)
        for which, file in (("param", param), ("bin", bin_path), ("transformed", transformed)):
            try:
                found = file is None or file.is_file()
            except OSError as e:  # a name the file system refuses, e.g. longer than it allows
                raise UserError(f"{path}: model.{which} is not a usable file name ({e.strerror})") from None
            if not found:
                raise UserError(f"{path}: model.{which} {file} does not exist")
        sidecar.verify(content, sidecar.Expected.for_run(param, bin_path, threads, module.build_info(), transformed),
                       str(path))
        self.path = path
        self.input_shapes: dict[str, tuple[int, ...]] = content.input_shapes()
        self.map_weights = content.plan.mapped if map_weights is None else map_weights
        if not reset_peak_rss():
            log.warning("cannot reset the peak RSS: VmHWM includes what ran before the session")
        self._idle_rss = status_bytes("VmRSS")
        target = content.target
        tensors, layers = content.profile.columns
        try:
            self._executor = module.Executor(
                str(param), str(bin_path), content.executor_schedule(), tensors, layers, threads=target.threads,
                packing=target.packing, winograd=target.winograd, sgemm=target.sgemm, fp16=target.fp16,
                loader=loader, drop_page_cache=drop_page_cache, overlap_loading=overlap_loading, direct_io=direct_io,
                static_arena=static_arena, transformed=str(transformed or ""), outside_bytes=content.outside_bytes, canaries=canaries,
                map_weights=self.map_weights)
        except (RuntimeError, ValueError, TypeError, OverflowError) as e:  # Type/OverflowError: a number out of the runtime's range
            raise UserError(f"{path}: {str(e).splitlines()[0]}") from None
        # from here the runtime holds the profile, and this process no second copy of it: read back
        # (planning.HeldProfile) when asked for, e.g. to re-plan
        del tensors, layers
        self.sidecar = replace(content, profile=planning.HeldProfile(self._executor.profile))
        self.profile: planning.Profile = self.sidecar.profile
        self.inputs: list[str] = list(content.inputs)
        self.outputs: list[str] = list(content.schedule.outputs)
        self._load_waits_us: list[float] = []
        self._loader_cpu_us: list[float] = []
        self._latencies_us: list[float] = []
        self._loaded_layers: list[int] = []  # per inference: layers the loading thread built
        self._built_layers: list[int] = []  # per inference: layers whose NCNN objects outlived it
        # per inference: weight bytes served in the arena, and transformed bytes made resident in the mapped file
        self._arena_weight_bytes: list[int] = []
        self._mapped_weight_bytes: list[int] = []
        self._mapped_peak_bytes: list[int] = []  # per inference: the most record bytes mapped at once
        self._outside_peak = 0
        # what a re-plan leaves beside the arena and its margin: the executor's own buffers outside the
        # arena (the O_DIRECT window) and the sidecar's reservation (requests from OpenMP workers, and
        # the resident memory the runtime does not count); a stored plan measured by prepare leaves its own
        self._executor_outside = int(self._executor.reserved_outside_bytes())
        self.reserved_bytes = self._executor_outside + content.reserved_bytes
        self.set_budget(content.plan.budget if budget is None else budget)

    def _set_plan(self, plan: planning.Plan) -> None:
        """Set `plan` in the runtime. The sidecar's own plan, once set, is held by the runtime alone
        (Plan.held: read back when asked for, this process keeps no second copy of its tables), and
        given its own tables again before another replaces it there."""
        stored = self.sidecar.plan
        leaving = stored.owned() if stored is getattr(self, "plan", None) and stored is not plan else None
        try:
            self._executor.set_plan(plan.columns())
        except (RuntimeError, TypeError) as e:  # the runtime's checker refused it (a plan of a damaged sidecar)
            raise UserError(f"{self.path}: {str(e).splitlines()[0]}") from None
        if leaving is not None:
            self.sidecar = replace(self.sidecar, plan=leaving)
        elif plan is stored:
            plan = stored.held(self._executor.plan)
            self.sidecar = replace(self.sidecar, plan=plan)
        self.plan = plan

    def set_budget(self, budget: int) -> None:
        """Move to the plan for `budget` bytes (between inferences): the sidecar's plan or ladder entry for
        exactly that budget (a lookup) when it leaves room for what it holds beside the arena (the
        executor's buffers outside it and the sidecar's reservation for it), else a re-plan of the
        stored profile that leaves room for `reserved_bytes`, else the stored plan that fits
        (Sidecar.stored_within).

        An infeasible budget raises InfeasibleBudget and leaves the session on its current plan."""
        stored = self.sidecar.plan_for(budget)
        mapped = self.map_weights and planning.has_transformed(self.profile)
        if (stored is None
                or stored.arena_bytes + planning.ARENA_MARGIN + self._executor_outside + self.sidecar.reserved_for(stored) > budget
                or stored.mapped != mapped):
            try:  # the profile read back from the runtime once, for this re-plan
                stored = planning.plan_for_budget(self.profile.copy(), budget, reserved=self.reserved_bytes,
                                                  mapped=self.map_weights)
            except planning.InfeasibleBudget as e:
                stored = self.sidecar.stored_within(budget, mapped, self._executor_outside)
                if stored is None:
                    # the profile is of the model as sliced: a smaller budget may need it sliced again
                    raise planning.InfeasibleBudget(e.budget, e.min_feasible_budget, e.reason,
                                                    f"re-slice the model for it: python -m flexnn_ncnn.slice MODEL.param "
                                                    f"--budget {budget}", e.beside_arena) from None
        self._set_plan(stored)
        self.budget = budget

    def check_inputs(self, inputs: Mapping[str, Any]) -> None:
        """Every input the plan was prepared for, by name, as a float32 array of its shape (NCNN's dims reversed):
        anything else is a UserError naming what was expected and what was given. No dtype is converted
        (NCNN computes in float32; a float64 or integer array is the caller's to convert). A plan holds one
        input shape; serve another with a sidecar prepared for it (docs/RUNTIME.md)."""
        expected = self.input_shapes
        if set(inputs) != set(expected):
            raise UserError(f"inputs {sorted(inputs)} given, the plan was prepared for {sorted(expected)}")
        for name, value in inputs.items():
            if not isinstance(value, np.ndarray):
                raise UserError(f"input {name!r} is a {type(value).__name__}, expected a float32 numpy array")
            if value.dtype != np.float32:
                raise UserError(f"input {name!r} is {value.dtype}, expected float32 (convert it: .astype(np.float32))")
            if value.shape != expected[name]:
                axes = _AXES[len(expected[name])]
                raise UserError(f"input {name!r} has shape {value.shape}, the plan was prepared for {expected[name]} "
                                f"({axes}): prepare a sidecar per input shape")

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One inference: {input blob: float32 array of the plan's shape} -> {output blob: float32 array}
        (NCNN's shapes); inputs are checked first (check_inputs)."""
        self.check_inputs(inputs)
        arrays = {name: np.ascontiguousarray(value) for name, value in inputs.items()}
        read_in_place = {name: read > 0 for name, (read, _) in zip(self.inputs, self.sidecar.schedule.input_uses)}
        arrays = {name: _readable_in_place(a) if read_in_place[name] else a for name, a in arrays.items()}  # the others: copied
        try:
            outputs, stats = self._executor.run(arrays)
        except (RuntimeError, ValueError) as e:
            raise UserError(f"inference failed: {e}") from None
        self._load_waits_us.append(stats["load_wait_us"])
        self._loader_cpu_us.append(stats["loader_cpu_us"])
        self._latencies_us.append(stats["latency_us"])
        self._loaded_layers.append(stats["loaded_layers"])
        self._built_layers.append(stats["built_layers"])
        self._arena_weight_bytes.append(stats["arena_weight_bytes"])
        self._mapped_weight_bytes.append(stats["mapped_weight_bytes"])
        self._mapped_peak_bytes.append(stats["mapped_peak_bytes"])
        self._outside_peak = max(self._outside_peak, stats["outside_peak_bytes"])
        return outputs

    def stats(self) -> dict[str, Any]:
        """Memory as the runtime counts it (arena + outside it), peak RSS over idle, and per-inference timings."""
        arena = int(self._executor.arena_bytes())
        return {
            "arena_bytes": arena,
            "outside_arena_bytes": self._outside_peak,
            "counted_bytes": arena + self._outside_peak,
            # what the count may reach at this budget: the rest of it is the resident memory the
            # runtime does not count, which prepare measured (Sidecar.uncounted_for)
            "counted_limit_bytes": self.budget - self.sidecar.uncounted_for(self.plan),
            "peak_rss_over_idle_bytes": status_bytes("VmHWM") - self._idle_rss,
            "inferences": len(self._latencies_us),
            "load_wait_us": list(self._load_waits_us),
            # the loading thread's CPU time per inference: what it takes from computing threads sharing its cores
            "loader_cpu_us": list(self._loader_cpu_us),
            "latency_us": list(self._latencies_us),
            "loaded_layers": list(self._loaded_layers),
            "built_layers": list(self._built_layers),
            "arena_weight_bytes": list(self._arena_weight_bytes),
            "mapped_weight_bytes": list(self._mapped_weight_bytes),
            "mapped_peak_bytes": list(self._mapped_peak_bytes),
            "latency_median_us": statistics.median(self._latencies_us) if self._latencies_us else None,
        }
