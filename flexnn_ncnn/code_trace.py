"""`python -m flexnn_ncnn.code_trace PLAN.json... -o HOT_LIST`: the functions of NCNN that prepared
models run, measured, ordered so each model's lie in few 64 KB windows: the hot list the build lays
out first (archive_layout.py).

Each plan runs (a Session and two inferences on seeded inputs) in a process of its own on the code
tracer's module (`python -m flexnn_ncnn.build --code-trace`: the host build's NCNN objects with every
function on pages of its own), with execute permission taken from that module's code
(libflexnn_code_trace, built with the host target): the first call into each page faults once and is
recorded. A page there holds one function, so the pages a model runs name exactly the functions it
ran, not their neighbours nor the kernel's 64 KB fault-around. The module's link map names them.
Their order is the layout's: within each instruction set's group (the build places each apart),
split in halves again and again so that each plan's functions fall on as few sides as can be
(_bisect): every 64 KB window holding one function a plan runs is resident. A plan counts in
inverse proportion to its budget: a window is a larger share of a smaller budget, so where plans
compete for a side, the small models' smallest budgets keep their code together.

The list names functions as the compiler did (archive_layout.original_name), so one trace serves
whatever hot list the host build was laid out with.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import math
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm import tqdm

from . import archive_layout, link_map, native, sidecar
from .build import BUILD_ROOT, CODE_TRACE_BUILD, python_modules
from .cli import UserError, add_logging_args, child_error, run_main, setup_logging
from .files import atomic_write
from .ncnn_model.sample_inputs import sample_inputs

PAGE = archive_layout.PAGE
WINDOW = 64 * 1024  # the kernel's fault-around: a first call maps the resident pages of its aligned 64 KB
BISECT_ROUNDS = 20  # swap passes per split; they stop earlier once no swap helps
TRACER = BUILD_ROOT / "host" / "native" / "tools" / "libflexnn_code_trace.so"
TRACE_NATIVE = BUILD_ROOT / CODE_TRACE_BUILD / "native"
NCNN_ARCHIVE = "libncnn.a"


def trace_module(native_dir: Path = TRACE_NATIVE) -> Path:
    """The `_native` module the code tracer's build made in `native_dir`."""
    found = [p for p in python_modules(native_dir) if p.name.startswith("_native.")]
    if not found:
        raise UserError(f"no code tracer's module in {native_dir}: run `python -m flexnn_ncnn.build --code-trace`")
    return found[0]


def _use_module(path: Path) -> None:
    """Make the module file `path` this process's flexnn_ncnn._native (before anything imports it)."""
    spec = importlib.util.spec_from_file_location(f"{__package__}._native", path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path} is not a Python extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[spec.name] = module


def _code_mapping(library: str) -> tuple[int, int, int]:
    """(start, end, load base) of the executable mapping of the shared object `library` in this
    process; an address minus the load base is the address the link map gives."""
    base = None
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[5].endswith("/" + library):
            start, end = (int(v, 16) for v in fields[0].split("-"))
            if int(fields[2], 16) == 0:
                base = start
            if "x" in fields[1] and base is not None:
                return start, end, base
    raise UserError(f"{library} is not mapped executable in this process")


def trace_here(plan_path: Path, tracer: Path, module_path: Path | None = None) -> list[int]:
    """The link-map addresses of the native module's code pages a Session on `plan_path` runs, from
    its creation through two inferences, on the module file `module_path` (default: the package's).
    Ends this process's use of that code for anything else."""
    from .session import Session

    if module_path is not None:
        _use_module(module_path)
    module = native.load()
    lib = ctypes.CDLL(str(tracer))
    lib.code_trace_start.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
    start, end, base = _code_mapping(Path(module.__file__).name)
    touched = np.zeros((end - start) // PAGE, np.uint8)
    err = lib.code_trace_start(start, end, touched.ctypes.data)
    if err:
        raise UserError(f"cannot trace {module.__file__}: errno {err}")
    session = Session(plan_path, map_weights=False)
    for seed in range(2):
        session.run(sample_inputs(session.input_shapes, seed=seed))
    return [start - base + int(i) * PAGE for i in np.flatnonzero(touched)]


def trace_in_child(plan_path: Path, tracer: Path, module_path: Path) -> list[int]:
    proc = subprocess.run([sys.executable, "-m", __spec__.name, "--child", "--tracer", str(tracer), "--module",
                           str(module_path), str(plan_path)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"tracing {plan_path}: {child_error(proc)}")
    return json.loads(proc.stdout)


def movable(section: link_map.InputSection) -> bool:
    """A function the build can move: the build lays out NCNN's archive, where each is a section."""
    return section.archive == NCNN_ARCHIVE and section.name.startswith(".text.")


def _gain(in_from: int, in_to: int) -> float:
    """How much closer a plan with `in_from` functions on one side and `in_to` on the other comes to lying
    on one side when one of them moves across: the change of sum n*log2(n+1), which is convex, so a
    plan gains most from joining the side that holds most of it."""
    def g(n: int) -> float:
        return n * math.log2(n + 1)
    return g(in_from - 1) + g(in_to + 1) - g(in_from) - g(in_to)


def _bisect(entries: list[archive_layout.HotEntry], ran_by: dict[archive_layout.HotEntry, frozenset[int]],
            size: dict[archive_layout.HotEntry, int], weight: Sequence[float]) -> list[archive_layout.HotEntry]:
    """`entries` ordered so each plan's functions lie in few WINDOW-sized stretches: split in two halves
    of as many functions, functions swapped across while that keeps more of each plan on one side
    (balanced graph partitioning, the traces as the hyperedges, plan p's gains times weight[p]), each
    half ordered the same way, down to a window's bytes. Deterministic: ties keep the order given."""
    if sum(size[e] for e in entries) <= WINDOW or len(entries) < 2:
        return entries
    half = len(entries) // 2
    side = {e: i >= half for i, e in enumerate(entries)}  # True: the right half
    for _ in range(BISECT_ROUNDS):
        count = [defaultdict(int), defaultdict(int)]
        for e in entries:
            for plan in ran_by[e]:
                count[side[e]][plan] += 1
        gains: list[list[tuple[float, int, archive_layout.HotEntry]]] = [[], []]
        for i, e in enumerate(entries):
            here, there = count[side[e]], count[not side[e]]
            gains[side[e]].append((-sum(weight[p] * _gain(here[p], there[p]) for p in ran_by[e]), i, e))
        moved = 0
        for (left_gain, _, left), (right_gain, _, right) in zip(sorted(gains[False]), sorted(gains[True])):
            if -(left_gain + right_gain) <= 0:
                break
            side[left], side[right] = True, False
            moved += 1
        if not moved:
            break
    left_half = [e for e in entries if not side[e]]
    right_half = [e for e in entries if side[e]]
    return _bisect(left_half, ran_by, size, weight) + _bisect(right_half, ran_by, size, weight)


@dataclass(frozen=True)
class Traced:
    """What the runs say of each movable function: the plans that ran it, its address in the traced
    module, its size and its instruction-set group; and each plan's weight in the layout (1 / its budget
    in MB)."""
    plans: dict[archive_layout.HotEntry, frozenset[int]]
    first: dict[archive_layout.HotEntry, int]
    size: dict[archive_layout.HotEntry, int]
    group: dict[archive_layout.HotEntry, str]
    weight: tuple[float, ...]

    @classmethod
    def of(cls, runs: Sequence[list[link_map.InputSection]], budgets: Sequence[int]) -> Traced:
        ran_by: dict[archive_layout.HotEntry, set[int]] = defaultdict(set)
        first: dict[archive_layout.HotEntry, int] = {}
        size: dict[archive_layout.HotEntry, int] = {}
        group: dict[archive_layout.HotEntry, str] = {}
        for plan, sections in enumerate(runs):
            for section in sections:
                if not movable(section):
                    continue
                entry = archive_layout.generic(section.member, archive_layout.original_name(section.name))
                ran_by[entry].add(plan)
                first.setdefault(entry, section.address)
                size[entry] = section.size
                group[entry] = archive_layout.isa_group(section.member)
        return cls({e: frozenset(p) for e, p in ran_by.items()}, first, size, group, tuple(1e6 / b for b in budgets))

    def most_used_first(self) -> list[archive_layout.HotEntry]:
        """Those more plans ran first; among as many, those the same plans ran together, in order of address."""
        return sorted(self.plans, key=lambda e: (-len(self.plans[e]), sorted(self.plans[e]), self.first[e]))

    def hot_list(self) -> list[archive_layout.HotEntry]:
        """In the order the build lays them out: per instruction-set group (the build places each group
        apart), arranged by _bisect from most_used_first so the functions one plan ran lie in few
        64 KB windows."""
        start = self.most_used_first()
        return [e for g in sorted(set(self.group.values()))
                for e in _bisect([e for e in start if self.group[e] == g], self.plans, self.size, self.weight)]

    def windows(self, order: Sequence[archive_layout.HotEntry], plans: Sequence[int] | None = None) -> int:
        """The WINDOWs the plans' (`plans`, default all) functions occupy, summed over them, with `order` (which holds
        every function they ran) laid out as the build does: group by group, back to back, 16-byte
        aligned. An estimate: where the linker starts each group moves the window boundaries."""
        start: dict[archive_layout.HotEntry, int] = {}
        offset = 0
        for g in sorted(set(self.group.values())):
            for entry in (e for e in order if self.group.get(e) == g):
                offset = -(-offset // 16) * 16
                start[entry], offset = offset, offset + self.size[entry]
        total = 0
        for plan in range(len(self.weight)) if plans is None else plans:
            ran = [e for e, plans in self.plans.items() if plan in plans]
            total += len({w for e in ran for w in range(start[e] // WINDOW, (start[e] + self.size[e] - 1) // WINDOW + 1)})
        return total


def merged(traced: Sequence[archive_layout.HotEntry], earlier: Sequence[archive_layout.HotEntry]) -> list[archive_layout.HotEntry]:
    """`traced`, then the entries of `earlier` it lacks, in their order: a list measured on one instruction
    set keeps the functions another's object cloned and named apart (`gemm_transB_packed_tile.constprop.1.isra.0`)."""
    seen = set(traced)
    return [*traced, *(e for e in earlier if e not in seen)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.code_trace", description=__doc__.split("\n\n")[0])
    parser.add_argument("plans", nargs="+", type=Path, metavar="PLAN.json", help="prepared sidecars to run (never modified)")
    parser.add_argument("-o", "--output", type=Path, help="the hot list to write, e.g. flexnn_ncnn/hot_code/x86.txt")
    parser.add_argument("--module", type=Path,
                        help=f"the native module to run (default: the code tracer's, in {TRACE_NATIVE})")
    parser.add_argument("--link-map", type=Path,
                        help="that module's link map (default: the _native.map beside it)")
    parser.add_argument("--tracer", type=Path, default=TRACER, help=f"libflexnn_code_trace (default: {TRACER})")
    parser.add_argument("--merge", type=Path, metavar="HOT_LIST",
                        help="an earlier hot list (e.g. the output itself, measured on another instruction set): its "
                             "functions this trace did not reach are kept, after the traced ones")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.child:
        print(json.dumps(trace_here(args.plans[0], args.tracer, args.module)), flush=True)
        return 0
    if args.output is None:
        raise UserError("-o/--output is required")
    if args.merge is not None and not args.merge.is_file():
        raise UserError(f"--merge {args.merge} does not exist")
    # read before anything runs: the output may be the list merged
    earlier = archive_layout.read_hot_list(args.merge) if args.merge is not None else []
    module = args.module or trace_module()
    link_map_path = args.link_map or module.with_name("_native.map")
    for path in (module, link_map_path, args.tracer):
        if not path.exists():
            raise UserError(f"{path} does not exist: run `python -m flexnn_ncnn.build --code-trace`")
    sections = link_map.text_sections(link_map_path)
    runs = [link_map.sections_on_pages(sections, trace_in_child(plan, args.tracer, module), PAGE)
            for plan in tqdm(args.plans, desc="trace", unit="plan", disable=None)]
    found = Traced.of(runs, [sidecar.load(plan, native_checks=False).plan.budget for plan in args.plans])
    traced = found.hot_list()
    entries = merged(traced, earlier)
    size = sum(s.size for s in {s for run in runs for s in run if movable(s)})
    kept = f"; {len(entries) - len(traced)} more kept from {args.merge}" if args.merge is not None else ""
    lines = [f"# {len(traced)} functions ({size:,} B here) that {len(runs)} plans ran, in layout order (code_trace._bisect){kept};",
             "# written by python -m flexnn_ncnn.code_trace, laid out first by the build (archive_layout.py)",
             *(f"{member}\t{section}" for member, section in entries)]
    atomic_write(args.output, lambda f: f.write(("\n".join(lines) + "\n").encode()))
    alike = replace(found, weight=(1.0,) * len(found.weight))
    print(f"{args.output}: {len(entries)} functions ({len(traced)} traced), {size:,} B of traced code in this build; "
          f"laid out back to back, the {len(runs)} plans' functions take {found.windows(traced)} 64 KB windows in all "
          f"({alike.windows(alike.hot_list())} with every plan weighted alike, "
          f"{found.windows(found.most_used_first())} most used first)")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
