"""The plan sidecar `MODEL.flexnn.plan.json`: a versioned, self-describing record of what a plan is for.

It names the sliced model (the sha256 of its .param, a sampled digest of its .bin and transformed
weights), the build that profiled it (NCNN version, patch-series id, this package's version), the
target and options the profile and the transformed weights were made for (ISA, the CPU features NCNN
dispatches on, L2, threads, packing, winograd, sgemm, fp16), the input shapes, the runtime's schedule (execution order,
per-layer .bin byte ranges, layer flags), the profile, the plan, an
optional ladder of plans for other budgets, and what a plan leaves room for beside the arena
(`reserved_bytes`: allocations outside it, and the resident memory the runtime does not count; a plan
prepare measured itself holds its own value of the latter, `reserved_for`). It is the one plan file: prepare writes it, the plan
CLI re-plans it, Session / run / the benchmark run it. The format is documented in docs/PLAN_FORMAT.md. Loading validates the
structure and every plan (with the planner's independent checker; a Session leaves the profile and
plans to its runtime, which runs the same checks); `verify` compares it with what
the caller is about to run and names the first field that differs. Writes are atomic.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from . import __version__, fetch, patches, planning
from .cli import UserError
from .files import atomic_write, sampled_digest
from .jsonfields import field as _field
from .jsonfields import number_text, numbers
from .planning import ARENA_MARGIN, ROLES, TENSOR_COLUMN, Plan, Profile, Rows

SCHEMA = "flexnn-plan"
SCHEMA_VERSION = 11  # 2: target winograd/sgemm/fp16 and the schedule; 3: model.transformed; 4: outside_bytes;
# 5: uncounted_rss_bytes; 6: build.runtime_version, target.cpu_features, sampled .bin/.transformed digests;
# 7: the profile's and plans' tables as columns, no copy of the slicer's decisions (a Session holds less);
# 8: profile.tensors.released_before (intermediates of one layer share bytes); 9: schedule.input_uses
# (inputs NCNN reads in place, without a copy in the arena); 10: every column of numbers one string
# (jsonfields.numbers: parsed into an array, no Python object per value); 11: plan.uncounted_rss_bytes
# (measured running that plan)
SUFFIX = ".flexnn.plan.json"


@dataclass(frozen=True)
class Model:
    """The sliced model the profile was recorded on; file names are relative to the sidecar (or absolute)."""

    param: str
    param_sha256: str
    bin: str
    bin_digest: str  # files.sampled_digest: opening a plan does not read the weights whole
    # the layers' pre-transformed weights prepare wrote (ncnn_patches/0003; its own header carries the
    # build/CPU/options key the native runtime checks); "" when every load transforms raw weights
    transformed: str
    transformed_digest: str


@dataclass(frozen=True)
class Build:
    """What the transformed layouts and the profile depend on in the native build."""

    ncnn_version: str
    patch_series_id: str
    runtime_version: str  # flexnn_ncnn's: the schedule and profile are what this runtime records

    @staticmethod
    def current() -> "Build":
        """This checkout's pinned NCNN version, patch series and package version."""
        return Build(fetch.Lock.load().ncnn_version, patches.series_id(patches.read_series()), __version__)


@dataclass(frozen=True)
class Target:
    """What the pre-transformed weight layouts depend on: the machine and NCNN's options. Prepare and
    every run of its plan use the same values (the runtime is built from them)."""

    isa: str  # the native module's, e.g. x86_64, aarch64
    cpu_features: str  # the ISA extensions NCNN dispatches kernels and layouts on, e.g. "avx,fma,f16c,avx2"
    l2_bytes: int  # NCNN sizes its GEMM tiles by it
    threads: int  # computing threads
    packing: bool  # NCNN's packed layouts (use_packing_layout)
    winograd: bool  # use_winograd_convolution
    sgemm: bool  # use_sgemm_convolution
    fp16: bool  # fp16/bf16 storage and arithmetic where the CPU has them


_RECORDS: dict[str, type] = {"model": Model, "build": Build, "target": Target}


def _record(cls: type, d: Any, where: str) -> Any:
    return cls(**{f.name: _field(d, f.name, {"str": str, "int": int, "bool": bool}[f.type], where) for f in fields(cls)})


@dataclass(frozen=True)
class Schedule:
    """How the runtime walks the model: what prepare recorded on the target (docs/RUNTIME.md). The
    per-layer sequences are held as Rows of int64 tables, not an object per layer."""

    outputs: tuple[str, ...]  # output blobs, extracted in this order
    order: Sequence[int]  # the layer index computed at step s is order[s - 1] (NCNN's own execution order)
    ranges: Sequence[tuple[int, int]]  # per layer index: its [begin, end) bytes in the .bin
    flags: Sequence[int]  # per layer index: NCNN's layer flags after create_pipeline (packing, fp16, inplace)
    # per input, in feeding order: (bytes NCNN reads, last step it holds them) when it reads the caller's
    # array in place, (0, -1) when the input is copied into the arena (a step-0 tensor of the profile)
    input_uses: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", _rows(self.order, planning.int_rows))
        object.__setattr__(self, "ranges", _rows(self.ranges, planning.pair_rows))
        object.__setattr__(self, "flags", _rows(self.flags, planning.int_rows))

    def executor_columns(self) -> dict[str, Any]:
        """As the native Executor takes it: the tables themselves."""
        return {"outputs": list(self.outputs), "order": self.order.table[:, 0], "ranges": self.ranges.table,
                "flags": self.flags.table[:, 0], "input_uses": [list(u) for u in self.input_uses]}

    def to_dict(self) -> dict[str, Any]:
        return {"outputs": list(self.outputs), "order": number_text(self.order.table[:, 0]),
                "ranges": number_text(self.ranges.table.reshape(-1)), "flags": number_text(self.flags.table[:, 0]),
                "input_uses": [list(u) for u in self.input_uses]}

    @staticmethod
    def from_dict(d: Mapping[str, Any], where: str = "schedule") -> "Schedule":
        outputs = _field(d, "outputs", list, where)
        if not outputs or not all(isinstance(name, str) for name in outputs):
            raise UserError(f"{where}.outputs must be a non-empty list of blob names")
        # per layer index its [begin, end), one pair after another; checked value by value (memoryview:
        # no numpy operation, whose code a Session would map only for this)
        bounds = numbers(d, "ranges", np.int64, where)
        if len(bounds) % 2:
            raise UserError(f"{where}.ranges must hold a begin and an end per layer, not {len(bounds)} numbers")
        ranges = bounds.reshape(-1, 2)
        for i, (begin, end) in enumerate(zip(memoryview(bounds)[0::2], memoryview(bounds)[1::2])):
            if not 0 <= begin <= end:
                raise UserError(f"{where}.ranges[{i}] is [{begin}, {end}), not a [begin, end) pair of byte offsets")
        flags = numbers(d, "flags", np.int64, where)
        if len(flags) != len(ranges):
            raise UserError(f"{where}.flags has {len(flags)} entries, {where}.ranges {len(ranges)}: one per layer index")
        for i, value in enumerate(memoryview(flags)):
            if value < 0:
                raise UserError(f"{where}.flags[{i}] is {value}, less than 0")
        order = numbers(d, "order", np.int64, where)
        for i, layer in enumerate(memoryview(order)):
            if not 0 <= layer < len(ranges):
                raise UserError(f"{where}.order[{i}] is {layer}, not a layer index of the {len(ranges)} layers")
        uses = _field(d, "input_uses", list, where)
        for i, u in enumerate(uses):
            if not (isinstance(u, list) and len(u) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in u)
                    and (u == [0, -1] or (u[0] > 0 and 0 <= u[1] <= len(order) + 1))):
                raise UserError(f"{where}.input_uses[{i}] must be [bytes, last step] of an input read in place, "
                                "or [0, -1] for one copied into the arena")
        return Schedule(tuple(outputs), planning.int_rows(order, where), planning.pair_rows(ranges, where),
                        planning.int_rows(flags, where), tuple((b, s) for b, s in uses))


def _rows(values: Sequence[Any], make: Callable[[Sequence[Any], str], Rows]) -> Rows:
    return values if isinstance(values, Rows) else make(values, "schedule")


@dataclass(frozen=True)
class Sidecar:
    model: Model
    build: Build
    target: Target
    inputs: dict[str, list[int]]  # input blob name -> shape, NCNN order (w, h, c); fed in this order
    schedule: Schedule
    profile: Profile
    plan: Plan
    ladder: tuple[Plan, ...] = field(default=())  # plans for other budgets, same profile
    # peak bytes prepare saw requested outside any step's ownership (OpenMP workers inside a layer):
    # the runtime serves them from the heap, so every plan leaves room for them beside the arena
    outside_bytes: int = 0
    # peak RSS over idle a process running this sidecar holds beyond what the runtime counts (arena +
    # outside it): the sidecar and NCNN's Net in memory, code pages, thread stacks; measured by
    # prepare in a fresh process (overhead.py) on the plan given the whole budget beside `outside_bytes`
    # (the most layers resident, whose NCNN objects stay on the heap), so a re-plan for a budget up to
    # the one prepared leaves room for it too; a plan prepare measured itself holds its own
    # (Plan.uncounted_rss_bytes)
    uncounted_rss_bytes: int = 0

    @property
    def reserved_bytes(self) -> int:
        """What a re-plan of this sidecar leaves beside the arena and its margin (`reserved=`)."""
        return self.outside_bytes + self.uncounted_rss_bytes

    def uncounted_for(self, plan: Plan) -> int:
        """The uncounted RSS `plan` leaves room for: measured running it, else the sidecar's."""
        return self.uncounted_rss_bytes if plan.uncounted_rss_bytes is None else plan.uncounted_rss_bytes

    def reserved_for(self, plan: Plan) -> int:
        """What `plan` leaves beside the arena and its margin."""
        return self.outside_bytes + self.uncounted_for(plan)

    def model_files(self, sidecar_path: Path) -> tuple[Path, Path]:
        """The sliced model's .param and .bin, resolved against the sidecar's folder."""
        base = Path(sidecar_path).parent
        return base / self.model.param, base / self.model.bin

    def transformed_file(self, sidecar_path: Path) -> Path | None:
        """The pre-transformed weights, resolved against the sidecar's folder (None: there are none)."""
        return Path(sidecar_path).parent / self.model.transformed if self.model.transformed else None

    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        """Input blob name -> numpy shape (c, h, w: NCNN's order reversed)."""
        return {name: tuple(reversed(shape)) for name, shape in self.inputs.items()}

    def executor_schedule(self) -> dict[str, Any]:
        """The schedule as the native Executor takes it."""
        return {"inputs": list(self.inputs), **self.schedule.executor_columns()}

    def plan_for(self, budget: int) -> Plan | None:
        """The stored plan made for exactly `budget` bytes, if any."""
        return next((p for p in (self.plan, *self.ladder) if p.budget == budget), None)

    def stored_within(self, budget: int, mapped: bool, beside: int = 0) -> Plan | None:
        """The stored plan (`mapped` or not) with the largest arena that fits `budget` with what it reserves
        and `beside` more, made for `budget`; None if none does. A re-plan reserves the sidecar's value,
        which may be more than a stored plan's own: a budget a stored plan fits is not refused for it."""
        fitting = [p for p in (self.plan, *self.ladder)
                   if p.mapped == mapped and p.arena_bytes + ARENA_MARGIN + beside + self.reserved_for(p) <= budget]
        best = max(fitting, key=lambda p: p.arena_bytes, default=None)
        return None if best is None else replace(best, budget=budget)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "model": vars(self.model).copy(),
            "build": vars(self.build).copy(),
            "target": vars(self.target).copy(),
            "inputs": {name: list(shape) for name, shape in self.inputs.items()},
            "schedule": self.schedule.to_dict(),
            "profile": self.profile.to_dict(),
            "plan": self.plan.to_dict(),
            "ladder": [p.to_dict() for p in self.ladder],
            "outside_bytes": self.outside_bytes,
            "uncounted_rss_bytes": self.uncounted_rss_bytes,
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Sidecar":
        if not isinstance(d, Mapping):
            raise UserError("the sidecar must be a JSON object")
        if d.get("schema") != SCHEMA:
            raise UserError(f"schema is {d.get('schema')!r}, not {SCHEMA!r}: this is not a FlexNN plan sidecar")
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise UserError(f"schema_version {version!r} is not supported (this flexnn_ncnn reads {SCHEMA_VERSION}, "
                            f"whose plans hold the uncounted RSS measured running them): prepare the model again")
        known = {"schema", "schema_version", *(f.name for f in fields(Sidecar))}
        unknown = sorted(set(d) - known)
        if unknown:
            raise UserError(f"unknown field {unknown[0]!r}")
        inputs = _field(d, "inputs", dict, "sidecar")
        for name, shape in inputs.items():
            if not (isinstance(shape, list) and shape and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in shape)):
                raise UserError(f"inputs.{name} must be a list of positive dimensions")
        return Sidecar(
            *(_record(cls, _field(d, key, dict, "sidecar"), key) for key, cls in _RECORDS.items()),
            inputs=inputs,
            schedule=Schedule.from_dict(_field(d, "schedule", dict, "sidecar")),
            profile=Profile.from_dict(_field(d, "profile", dict, "sidecar")),
            plan=Plan.from_dict(_field(d, "plan", dict, "sidecar")),
            ladder=tuple(Plan.from_dict(p, f"ladder[{i}]") for i, p in enumerate(_field(d, "ladder", list, "sidecar"))),
            outside_bytes=_field(d, "outside_bytes", int, "sidecar", at_least=0),
            uncounted_rss_bytes=_field(d, "uncounted_rss_bytes", int, "sidecar", at_least=0),
        )

    def validate(self, native_checks: bool = True) -> None:
        """The profile is well formed, fits the schedule and the inputs, and every stored plan passes the
        checker. Without `native_checks`, what the native runtime checks itself is left to it: the
        profile's form (Executor: validate_profile) and each plan (set_plan: check_plan)."""
        if native_checks:
            self.profile.validate()
        tensors, layers = self.profile.columns
        if len(layers) != len(self.schedule.order) + 2:
            raise UserError(f"profile.layers has {len(layers)} steps, the schedule {len(self.schedule.order) + 2} "
                            "(inputs, one per computed layer, outputs)")
        # read row by row: a numpy operation here would map pages of numpy's code that a Session does not
        # otherwise run, resident beside the arena
        rows, column, activation = memoryview(tensors), TENSOR_COLUMN, ROLES.index("activation")
        copies = {rows[i, column["ordinal"]]: rows[i, column["size"]] for i in range(len(tensors))
                  if rows[i, column["layer"]] == 0 and rows[i, column["role"]] == activation}
        if len(self.schedule.input_uses) != len(self.inputs):
            raise UserError(f"schedule.input_uses has {len(self.schedule.input_uses)} entries for {len(self.inputs)} inputs")
        copied = 0  # the inputs not read in place are copied in order: the j-th copy is ordinal j
        for k, (name, shape) in enumerate(self.inputs.items()):
            floats = 4 * math.prod(shape)
            read, _ = self.schedule.input_uses[k]
            if read:  # read in place: its floats exactly
                if read != floats:
                    raise UserError(f"inputs.{name} {shape} takes {floats} B of floats, the schedule reads {read} B of input "
                                    f"{k} in place: they belong to different models")
                continue
            # the input's copy into the arena: its floats, each channel (the last of w, h, (d,) c) rounded
            # up to 16 B, and NCNN's refcount
            channels = shape[-1] if len(shape) >= 3 else 1
            if not floats <= copies.get(copied, 0) <= floats + 16 * channels + 8:
                raise UserError(f"inputs.{name} {shape} takes {floats} B of floats, the profile's copy of input {k} "
                                f"{copies.get(copied, 0)} B: they belong to different models")
            copied += 1
        if len(copies) != copied:
            raise UserError(f"the profile copies {len(copies)} inputs into the arena, the schedule reads "
                            f"{len(self.inputs) - copied} of {len(self.inputs)} in place: they belong to different models")
        for where, plan in (("plan", self.plan), *((f"ladder[{i}]", p) for i, p in enumerate(self.ladder))):
            if not native_checks:
                break
            try:
                planning.check_plan(self.profile, plan)
            except planning.InvalidPlan as e:
                raise UserError(f"{where} is invalid: {e}") from None


@dataclass(frozen=True)
class Expected:
    """What the caller is about to run; None means "not checked"."""

    param_sha256: str | None = None
    bin_digest: str | None = None
    transformed_digest: str | None = None
    ncnn_version: str | None = None
    patch_series_id: str | None = None
    runtime_version: str | None = None
    threads: int | None = None
    isa: str | None = None
    cpu_features: str | None = None
    l2_bytes: int | None = None

    @staticmethod
    def for_run(param: Path | None = None, bin: Path | None = None, threads: int | None = None,
                machine: Mapping[str, Any] | None = None, transformed: Path | None = None) -> "Expected":
        """The model files' identities, this checkout's build, and with `machine` (the native module's
        build_info) the ISA, CPU features and L2 size of the machine about to run."""
        build = Build.current()
        machine = machine or {}
        return Expected(fetch.sha256_of(param) if param else None, sampled_digest(bin) if bin else None,
                        sampled_digest(transformed) if transformed else None,
                        build.ncnn_version, build.patch_series_id, build.runtime_version, threads,
                        machine.get("isa"), machine.get("cpu_features"), machine.get("l2_bytes"))


_EXPECTED_FIELDS = {
    "param_sha256": "model.param_sha256", "bin_digest": "model.bin_digest", "transformed_digest": "model.transformed_digest",
    "ncnn_version": "build.ncnn_version", "patch_series_id": "build.patch_series_id",
    "runtime_version": "build.runtime_version", "threads": "target.threads", "isa": "target.isa",
    "cpu_features": "target.cpu_features", "l2_bytes": "target.l2_bytes",
}


def verify(sidecar: Sidecar, expected: Expected, name: str = "the plan sidecar") -> None:
    """Raise UserError naming the first field of `sidecar` that differs from `expected`."""
    for attr, path in _EXPECTED_FIELDS.items():
        want = getattr(expected, attr)
        record, key = path.split(".")
        have = getattr(getattr(sidecar, record), key)
        if want is not None and have != want:
            raise UserError(f"{name} does not match: {path} is {have!r}, expected {want!r} (re-run slice/prepare for this model and build)")


def load(path: Path, expected: Expected | None = None, native_checks: bool = True) -> Sidecar:
    """Read, validate and (with `expected`) verify a sidecar; every problem is a UserError naming the field.
    A caller handing the profile and plans to the native runtime (Session) passes `native_checks=False`:
    the runtime checks them itself, and the planner module's code stays out of that process's memory."""
    sidecar = _parsed(path)
    try:
        sidecar.validate(native_checks)
    except UserError as e:
        raise UserError(f"{path}: {e}") from None
    if expected is not None:
        verify(sidecar, expected, str(path))
    return sidecar


def _parsed(path: Path) -> Sidecar:
    """The sidecar's fields, its JSON text and tree let go of on return: what a Session keeps after
    loading is the tables, and what the parse made is freed before anything else is made."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UserError(f"cannot read the plan sidecar {path}: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise UserError(f"{path} is not valid JSON ({e}): the sidecar is truncated or corrupt, re-plan the model") from None
    try:
        return Sidecar.from_dict(data)
    except UserError as e:
        raise UserError(f"{path}: {e}") from None


def save(sidecar: Sidecar, path: Path) -> None:
    """Write atomically: a reader sees the old file or the new one, never a partial one."""
    text = (json.dumps(sidecar.to_dict(), indent=1, sort_keys=False) + "\n").encode()
    atomic_write(path, lambda f: f.write(text))


def moved(sidecar: Sidecar, source_dir: Path, dest_dir: Path) -> Sidecar:
    """The same sidecar for a file in `dest_dir`: model file names relative to it (they were
    relative to `source_dir`, or absolute)."""
    def rebase(name: str) -> str:
        return os.path.relpath((Path(source_dir) / name).resolve(), Path(dest_dir).resolve()) if name else name
    model = sidecar.model
    return replace(sidecar, model=replace(model, param=rebase(model.param), bin=rebase(model.bin),
                                          transformed=rebase(model.transformed)))


def with_plans(sidecar: Sidecar, plan: Plan, ladder: tuple[Plan, ...] | None = None) -> Sidecar:
    """The same sidecar holding `plan` (and `ladder`, if given)."""
    return replace(sidecar, plan=plan, ladder=sidecar.ladder if ladder is None else ladder)
