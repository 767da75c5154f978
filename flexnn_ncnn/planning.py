"""Preload-aware memory planning, typed: the profile the runtime records, the plan the planner makes.

The planner and its checker are C++ (`flexnn_ncnn/csrc/planner/`, module `flexnn_ncnn._planner`);
this module gives them dataclasses and their JSON form. Time is counted in layer steps with
half-open intervals: a tensor over [begin, end) is claimed once layer begin-1 has computed and
released once layer end-1 has; tensors whose intervals only touch may share bytes, and so may two
intermediates of one layer when NCNN released one before it requested the other. A placement's
`load_after` is the layer after whose computation the tensor's bytes are claimed (-1: at the start
of the inference); weights may be claimed early (preloaded), everything else at its first use.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, replace
from types import ModuleType
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .cli import UserError
from .jsonfields import field as _field
from .jsonfields import number_columns, number_text, numbers
from .native import REBUILD
from .units import format_size

log = logging.getLogger(__name__)

ROLES = ("weight", "activation", "intermediate")  # index = the C++ Role value
# the profile's and plan's tables, as the sidecar stores them: a column of numbers per field, the
# roles by name, `transformed` 0 or 1 (docs/PLAN_FORMAT.md); the dtype each column is read as
TENSOR_FIELDS = {"layer": np.int64, "role": np.int64, "ordinal": np.int64, "size": np.int64, "first_use": np.int64,
                 "last_use": np.int64, "transformed": np.int64, "released_before": np.int64}
TENSOR_COLUMN = {name: k for k, name in enumerate(TENSOR_FIELDS)}  # a field's column in Profile.columns[0]
LAYER_FIELDS = {"load_us": np.float64, "compute_us": np.float64}
PLACEMENT_FIELDS = {"offset": np.int64, "load_after": np.int64}
DEPENDENCY_FIELDS = {"comp": np.int64, "load": np.int64}
ALGORITHMS = ("flexnn", "algorithm1")  # what the planner makes
# what a plan may name: "swapnet" plans are the benchmark's block-streaming baseline (bench/swapnet.py)
PLAN_ALGORITHMS = (*ALGORITHMS, "swapnet")
DEFAULT_ALIGNMENT = 64  # NCNN_MALLOC_ALIGN
# NCNN may read this many bytes past a buffer's end (NCNN_MALLOC_OVERREAD): the runtime's arena holds
# them past its last buffer, so a runtime budget B is planned as an arena of at most B - ARENA_MARGIN.
ARENA_MARGIN = 64


def load() -> None:
    """Load the native planner now (a process measuring its memory loads its libraries first)."""
    _module()


@functools.cache
def _module() -> ModuleType:
    try:
        from . import _planner
    except ImportError as e:
        raise UserError(f"the planner module is not built ({e}): run `{REBUILD}`") from None
    return _planner


def _planner_call(name: str, *args: Any) -> Any:
    """_planner.`name`(*args); a number the native planner cannot take (a layer index past int32, a
    size past int64: a damaged sidecar) is a UserError, as every other malformed field."""
    try:
        return getattr(_module(), name)(*args)
    except (TypeError, OverflowError) as e:
        raise UserError(f"a profile or plan number is out of the planner's range ({str(e).splitlines()[0]})") from None
    except RuntimeError as e:
        if not str(e).startswith("Unable to cast"):
            raise
        raise UserError(f"a profile or plan number is out of the planner's range ({str(e).splitlines()[0]})") from None


@dataclass(frozen=True, slots=True)
class TensorUse:
    """One allocation of the profiled inference, identified by (layer, role, ordinal)."""

    layer: int
    role: str  # one of ROLES
    ordinal: int
    size: int  # bytes
    first_use: int  # == layer
    last_use: int
    # weights only: a record of the transformed-weights file, which a mapped plan maps in place
    transformed: bool = False
    # intermediates only: released before its layer's intermediate of this ordinal was requested, so
    # the later ones may share its bytes; -1: held to its layer's end
    released_before: int = -1


@dataclass(frozen=True, slots=True)
class LayerCost:
    load_us: float  # reading the layer's weights into the arena
    compute_us: float  # the layer's computation


class Profile:
    """What one sequential inference allocates and when (layers in execution order), held as the
    columns `_planner` takes: an int64 row per tensor (TENSOR_FIELDS, the role as its index in ROLES)
    and a float64 (load_us, compute_us) row per step. A sidecar's profile parses into these two
    arrays, not an object per tensor (a Session's resident memory keeps what loading its sidecar
    touched); `tensors` and `layers` are made from them when asked."""

    def __init__(self, tensors: Sequence[TensorUse], layers: Sequence[LayerCost]):
        table = [[getattr(t, name) for t in tensors] for name in TENSOR_FIELDS]
        table[TENSOR_COLUMN["role"]] = [ROLES.index(t.role) for t in tensors]
        self.columns = (_table(table, np.int64, "profile"),
                        _table([[getattr(c, name) for c in layers] for name in LAYER_FIELDS], np.float64, "profile"))
        self.__dict__["tensors"], self.__dict__["layers"] = tuple(tensors), tuple(layers)

    @classmethod
    def from_columns(cls, tensors: np.ndarray, layers: np.ndarray) -> Profile:
        profile = cls.__new__(cls)
        profile.columns = (tensors, layers)
        return profile

    @functools.cached_property
    def tensors(self) -> tuple[TensorUse, ...]:
        return tuple(TensorUse(l, ROLES[r], o, s, f, u, bool(t), b) for l, r, o, s, f, u, t, b in self.columns[0].tolist())

    @functools.cached_property
    def layers(self) -> tuple[LayerCost, ...]:
        return tuple(LayerCost(load, compute) for load, compute in self.columns[1].tolist())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Profile):
            return NotImplemented
        return all(np.array_equal(a, b) for a, b in zip(self.columns, other.columns))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Profile({len(self.columns[0])} tensors, {len(self.columns[1])} layers)"

    def copy(self) -> Profile:
        """A profile of these columns, read once."""
        return Profile.from_columns(*self.columns)

    def validate(self) -> None:
        message = _planner_call("validate_profile", *self.columns)
        if message:
            raise UserError(message)

    def to_dict(self) -> dict[str, Any]:
        """Columns, a string of numbers per field (the roles by name)."""
        tensors, layers = self.columns
        table = {name: number_text(tensors[:, k]) for k, name in enumerate(TENSOR_FIELDS)}
        table["role"] = " ".join(ROLES[r] for r in tensors[:, TENSOR_COLUMN["role"]].tolist())
        return {"layers": {name: number_text(layers[:, k]) for k, name in enumerate(LAYER_FIELDS)}, "tensors": table}

    @staticmethod
    def from_dict(d: Mapping[str, Any], where: str = "profile") -> Profile:
        """Read as columns: the form (the ranges of the values) is checked by `validate` and the native
        runtime, which take these arrays."""
        layers = number_columns(_field(d, "layers", dict, where), LAYER_FIELDS, f"{where}.layers")
        tensors = _field(d, "tensors", dict, where)
        roles = _role_numbers(_field(tensors, "role", str, f"{where}.tensors"), f"{where}.tensors")
        columns = number_columns({**tensors, "role": roles}, TENSOR_FIELDS, f"{where}.tensors")
        return Profile.from_columns(_table(columns, np.int64, where), _table(layers, np.float64, where))


_ROLE_INDICES = re.compile(r"\s*([0-2](\s+[0-2])*)?\s*")


def _role_numbers(names: str, where: str) -> str:
    """The role column (names separated by spaces) as their indices in ROLES, a column `numbers` reads;
    a UserError names the first value that is not exactly one role."""
    indices = names
    for i, role in enumerate(ROLES):
        indices = indices.replace(role, str(i))
    if not re.search(r"\d", names) and _ROLE_INDICES.fullmatch(indices):
        return indices
    for i, role in enumerate(names.split()):  # the failure path: find the value
        if role not in ROLES:
            raise UserError(f"{where}.role[{i}] is {role!r}, not one of {', '.join(ROLES)}")
    raise AssertionError("every name is a role, yet the column did not read as their indices")


class HeldProfile(Profile):
    """A profile another owner holds (a Session's native runtime): its columns are read from that owner
    each time they are asked for, a fresh copy, so this process keeps no second copy between uses."""

    def __init__(self, columns: Callable[[], tuple[np.ndarray, np.ndarray]]):
        self._read = columns

    @property  # type: ignore[override]
    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        return self._read()


def _table(columns: Sequence[Sequence[Any]], dtype: type, where: str) -> np.ndarray:
    """Equal-length `columns` (lists or arrays) as a C-contiguous array of `dtype`, a row per entry; a
    number past it is a UserError."""
    try:
        return np.ascontiguousarray(np.array(columns, dtype=dtype).reshape(len(columns), -1).T)
    except OverflowError as e:
        raise UserError(f"a {where} number is out of the planner's range ({e})") from None


@dataclass(frozen=True, slots=True)
class Placement:
    offset: int  # bytes from the arena's start
    load_after: int  # bytes claimed once this layer has computed; -1: at inference start
    pinned: bool  # weights only: resident across inferences, never reloaded


class Rows(Sequence[Any]):
    """A read-only sequence over the rows of a C-contiguous int64 table, each row made when read: how
    a sidecar's plans hold their placements and dependencies (a Session keeps what loading touched,
    so not an object per tensor). Equal to any sequence of the same items."""

    __slots__ = ("table", "_make")

    def __init__(self, table: np.ndarray, make: Callable[..., Any]):
        self.table = table
        self._make = make

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self._make(*row) for row in self.table[i].tolist())
        return self._make(*self.table[i].tolist())

    def __iter__(self) -> Iterator[Any]:
        return (self._make(*row) for row in self.table.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rows):
            return np.array_equal(self.table, other.table)
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rows({len(self)})"


class HeldRows(Rows):
    """Rows whose table another owner holds (a Session's native runtime, its current plan): read from it
    each time it is asked for, a fresh copy, so this process keeps no second copy between uses."""

    __slots__ = ("_read",)

    def __init__(self, read: Callable[[], np.ndarray], make: Callable[..., Any]):
        self._read = read
        self._make = make

    @property  # type: ignore[override]
    def table(self) -> np.ndarray:
        return self._read()


def _placement(offset: int, load_after: int, pinned: int) -> Placement:
    return Placement(offset, load_after, bool(pinned))


def _single(value: int) -> int:
    return value


def _pair(first: int, second: int) -> tuple[int, int]:
    return first, second


def placement_rows(offsets: Sequence[int], load_after: Sequence[int], pinned: Sequence[bool]) -> Rows:
    """Placements as Rows of an (offset, load_after, pinned) int64 table."""
    return Rows(_table([list(offsets), list(load_after), [int(p) for p in pinned]], np.int64, "plan"), _placement)


def pair_rows(pairs: Sequence[Sequence[int]] | np.ndarray, where: str = "plan") -> Rows:
    """Integer pairs (an (n, 2) int64 array is taken as it is) as Rows of a two-column int64 table, each
    row read as a tuple."""
    if isinstance(pairs, np.ndarray):
        return Rows(np.ascontiguousarray(pairs, np.int64).reshape(-1, 2), _pair)
    return Rows(_table([[p[0] for p in pairs], [p[1] for p in pairs]], np.int64, where), _pair)


def int_rows(values: Sequence[int] | np.ndarray, where: str) -> Rows:
    """Integers (an int64 array is taken as it is) as Rows of a one-column int64 table, each row read
    as its integer."""
    if isinstance(values, np.ndarray):
        return Rows(np.ascontiguousarray(values, np.int64).reshape(-1, 1), _single)
    return Rows(_table([list(values)], np.int64, where), _single)


def _placement_table(tensors: Sequence[Placement]) -> np.ndarray:
    if isinstance(tensors, Rows):
        return tensors.table
    return placement_rows([p.offset for p in tensors], [p.load_after for p in tensors], [p.pinned for p in tensors]).table


def _dependency_table(dependencies: Sequence[tuple[int, int]]) -> np.ndarray:
    return dependencies.table if isinstance(dependencies, Rows) else pair_rows(dependencies).table


@dataclass(frozen=True)
class Plan:
    """Where each profile tensor lives and when it is claimed; `tensors` is parallel to the profile's.
    A plan read from a sidecar or made by the planner holds both sequences as Rows.

    Runtime contract: load(j) reads layer j's non-pinned weights once computation `comp` of every
    dependency (comp, j) has finished; comp(j) waits for load(j). Pinned weights load once.
    """

    algorithm: str
    budget: int
    alignment: int
    arena_bytes: int
    lower_bound: int  # max live bytes without preloading: no layout fits in less
    tensors: Sequence[Placement]
    dependencies: Sequence[tuple[int, int]]  # (comp, load), sorted by load
    # the runtime maps each transformed record over its arena bytes (a page-aligned offset, whole
    # pages and the over-read page: planned_bytes in planner/plan.h) instead of reading it there
    mapped: bool
    # the resident memory a process running this plan holds beyond the runtime's count, as prepare
    # measured it running this plan (rounded as it reserves it); None: not measured (a re-plan), the
    # sidecar's reservation stands for it (Sidecar.uncounted_for)
    uncounted_rss_bytes: int | None = None

    @property
    def ratio(self) -> float:
        """Arena over lower bound: 1.0 is a perfect packing without preloading."""
        return self.arena_bytes / self.lower_bound

    @property
    def pinned_weights(self) -> list[int]:
        return np.flatnonzero(_placement_table(self.tensors)[:, 2]).tolist()

    def to_dict(self) -> dict[str, Any]:
        table, dependencies = _placement_table(self.tensors), _dependency_table(self.dependencies)
        return {
            "algorithm": self.algorithm, "budget": self.budget, "alignment": self.alignment,
            "arena_bytes": self.arena_bytes, "lower_bound": self.lower_bound, "mapped": self.mapped,
            "tensors": {name: number_text(table[:, k]) for k, name in enumerate(PLACEMENT_FIELDS)},
            "pinned_weights": number_text(self.pinned_weights),
            "dependencies": {name: number_text(dependencies[:, k]) for k, name in enumerate(DEPENDENCY_FIELDS)},
            **({} if self.uncounted_rss_bytes is None else {"uncounted_rss_bytes": self.uncounted_rss_bytes}),
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any], where: str = "plan") -> "Plan":
        algorithm = _field(d, "algorithm", str, where)
        if algorithm not in PLAN_ALGORITHMS:
            raise UserError(f"{where}.algorithm is {algorithm!r}, not one of {', '.join(PLAN_ALGORITHMS)}")
        offsets, load_after = number_columns(_field(d, "tensors", dict, where), PLACEMENT_FIELDS, f"{where}.tensors")
        pinned = np.zeros(len(offsets), np.int64)
        for i, index in enumerate(memoryview(numbers(d, "pinned_weights", np.int64, where))):
            if not 0 <= index < len(offsets):
                raise UserError(f"{where}.pinned_weights[{i}] is {index}, not a tensor index")
            pinned[index] = 1
        dependencies = _table(number_columns(_field(d, "dependencies", dict, where), DEPENDENCY_FIELDS,
                                             f"{where}.dependencies"), np.int64, where)
        mapped = _field(d, "mapped", bool, where) if "mapped" in d else False
        uncounted = _field(d, "uncounted_rss_bytes", int, where, 0) if "uncounted_rss_bytes" in d else None
        return Plan(algorithm, _field(d, "budget", int, where, 0), _field(d, "alignment", int, where, 1),
                    _field(d, "arena_bytes", int, where, 0), _field(d, "lower_bound", int, where, 0),
                    Rows(_table([offsets, load_after, pinned], np.int64, where), _placement), Rows(dependencies, _pair), mapped,
                    uncounted)

    def columns(self) -> dict[str, Any]:
        """The form `_planner` takes."""
        table = _placement_table(self.tensors)
        return {
            "algorithm": self.algorithm, "budget": self.budget, "alignment": self.alignment,
            "arena_bytes": self.arena_bytes, "lower_bound": self.lower_bound, "mapped": self.mapped,
            "offsets": table[:, 0], "load_after": table[:, 1], "pinned": table[:, 2].astype(bool),
            "dependencies": _dependency_table(self.dependencies),
        }

    def held(self, columns: Callable[[], Mapping[str, Any]]) -> "Plan":
        """This plan with its tables read from `columns` (an owner's `columns()` form of it, e.g. a
        Session's runtime once the plan is set there) each time they are asked for (HeldRows)."""
        def placements() -> np.ndarray:
            c = columns()
            return placement_rows(c["offsets"], c["load_after"], c["pinned"]).table
        return replace(self, tensors=HeldRows(placements, _placement),
                       dependencies=HeldRows(lambda: pair_rows(columns()["dependencies"]).table, _pair))

    def owned(self) -> "Plan":
        """This plan holding its own tables (a copy of a held plan's)."""
        return replace(self, tensors=Rows(_placement_table(self.tensors), _placement),
                       dependencies=Rows(_dependency_table(self.dependencies), _pair))

    @staticmethod
    def from_columns(c: Mapping[str, Any]) -> "Plan":
        return Plan(c["algorithm"], c["budget"], c["alignment"], c["arena_bytes"], c["lower_bound"],
                    placement_rows(c["offsets"], c["load_after"], c["pinned"]), pair_rows(c["dependencies"]),
                    bool(c["mapped"]))


class InfeasibleBudget(UserError):
    """The budget cannot hold the profile; `min_feasible_budget` can (0 if the search found none).
    `beside_arena`: the bytes of either budget not available to the arena (its margin and what the
    runtime holds beside it; 0 for a bare arena budget)."""

    def __init__(self, budget: int, min_feasible_budget: int, reason: str, advice: str = "", beside_arena: int = 0):
        self.budget = budget
        self.min_feasible_budget = min_feasible_budget
        self.reason = reason
        self.beside_arena = beside_arena
        smallest = (f"the smallest feasible budget is {format_size(min_feasible_budget)}" if min_feasible_budget
                    else "no feasible budget was found")
        super().__init__(f"budget {format_size(budget)} is infeasible for this profile; {smallest}"
                         + (f"; {advice}" if advice else ""))


class InvalidPlan(UserError):
    """The checker found a violation; the message names the tensor(s)."""


def _check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise UserError(f"unknown planning algorithm {algorithm!r}: use {' or '.join(ALGORITHMS)}")


def make_plan(profile: Profile, budget: int, algorithm: str = "flexnn", alignment: int = DEFAULT_ALIGNMENT,
              mapped: bool = False) -> Plan:
    """Plan `profile` into one arena of at most `budget` bytes; deterministic. Raises InfeasibleBudget.
    mapped: the runtime maps transformed records over their arena bytes, planned at pages (Plan.mapped)."""
    _check_algorithm(algorithm)
    out = _planner_call("make_plan", *profile.columns, budget, algorithm, alignment, mapped)
    if "plan" in out:
        return Plan.from_columns(out["plan"])
    if not out["infeasible"]:
        raise UserError(out["error"])  # the profile itself is invalid
    log.info("%s", out["error"])
    raise InfeasibleBudget(budget, out["min_feasible_budget"], out["error"])


def check_plan(profile: Profile, plan: Plan) -> None:
    """Raise InvalidPlan with the first violation (independent of how the plan was made)."""
    message = _planner_call("check_plan", *profile.columns, plan.columns())
    if message:
        raise InvalidPlan(message)


def min_feasible_budget(profile: Profile, algorithm: str = "flexnn", alignment: int = DEFAULT_ALIGNMENT,
                        mapped: bool = False) -> int:
    """The smallest budget `make_plan` accepts (bisection; one byte less is infeasible); 0 if none found."""
    _check_algorithm(algorithm)
    return int(_planner_call("min_feasible_budget", *profile.columns, algorithm, alignment, mapped))


def lower_bound(profile: Profile, alignment: int = DEFAULT_ALIGNMENT) -> int:
    return int(_planner_call("lower_bound", *profile.columns, alignment))


def expected_stall_us(profile: Profile, plan: Plan) -> float:
    """Time computation waits for loading in one inference, simulated from the profile's costs (a proxy)."""
    return float(_planner_call("expected_stall_us", *profile.columns, plan.columns()))


def preloaded_weights(profile: Profile, plan: Plan) -> int:
    """How many non-pinned weights are claimed before their layer's turn."""
    return sum(1 for t, p in zip(profile.tensors, plan.tensors)
               if t.role == "weight" and not p.pinned and p.load_after < t.first_use - 1)


def pinned_bytes(profile: Profile, plan: Plan) -> int:
    return sum(profile.tensors[i].size for i in plan.pinned_weights)


def has_transformed(profile: Profile) -> bool:
    """Whether some weight of `profile` is a transformed record (a mapped plan maps it in place)."""
    return bool(profile.columns[0][:, TENSOR_COLUMN["transformed"]].any())


def plan_for_budget(profile: Profile, budget: int, algorithm: str = "flexnn", reserved: int = 0, mapped: bool = False) -> Plan:
    """The plan the runtime runs within `budget` bytes: its arena plus ARENA_MARGIN plus `reserved`
    (what the runtime holds outside the arena for its whole life, e.g. the O_DIRECT window) fit, and
    its `budget` is `budget`. Raises InfeasibleBudget naming the smallest such budget."""
    beside = ARENA_MARGIN + reserved
    if budget <= beside:
        smallest = min_feasible_budget(profile, algorithm, mapped=mapped)
        raise InfeasibleBudget(budget, smallest + beside if smallest else 0,
                               f"it leaves no arena beside the {ARENA_MARGIN} B margin"
                               + (f" and {format_size(reserved)} held outside it" if reserved else ""), beside_arena=beside)
    try:
        plan = make_plan(profile, budget - beside, algorithm, mapped=mapped)
    except InfeasibleBudget as e:
        raise InfeasibleBudget(budget, e.min_feasible_budget + beside if e.min_feasible_budget else 0, e.reason,
                               beside_arena=beside) from None
    return replace(plan, budget=budget)


def plans_for(profile: Profile, budgets: Sequence[int], algorithm: str = "flexnn", reserved: int = 0,
              mapped: bool = False) -> list[Plan]:
    """A plan ladder for the runtime: one plan per budget (plan_for_budget), in the order given."""
    return [plan_for_budget(profile, b, algorithm, reserved, mapped) for b in budgets]
