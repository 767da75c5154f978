"""`python -m flexnn_ncnn.code_trace PLAN.json... -o HOT_LIST`: the functions of NCNN that prepared
models run, measured, most used first: the hot list the build lays out first (archive_layout.py).

Each plan runs (a Session and two inferences on seeded inputs) in a process of its own, with execute
permission taken from the native module's code (libflexnn_code_trace, built with the host target): the
first call into each page faults once and is recorded, so the pages a model runs are known exactly,
not at the kernel's 64 KB fault-around. The module's link map (build/host/native/_native.map) names
the functions on those pages. The functions more plans ran come first; among as many, those the same
plans ran lie together.

Trace a build made with the current list or without one: the list names functions as the compiler
did (archive_layout.original_name). A traced page also names the functions that share it, so a trace
of the laid-out build, where those are mostly hot ones, gives a shorter list (scripts/trace_hot_code.sh
traces three times).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm import tqdm

from . import archive_layout, link_map, native
from .build import BUILD_ROOT
from .files import atomic_write
from .cli import UserError, add_logging_args, child_error, run_main, setup_logging

PAGE = 4096
HOST_NATIVE = BUILD_ROOT / "host" / "native"
TRACER = HOST_NATIVE / "tools" / "libflexnn_code_trace.so"
LINK_MAP = HOST_NATIVE / "_native.map"
NCNN_ARCHIVE = "libncnn.a"


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


def trace_here(plan_path: Path, tracer: Path) -> list[int]:
    """The link-map addresses of the native module's code pages a Session on `plan_path` runs, from
    its creation through two inferences. Ends this process's use of that code for anything else."""
    from .session import Session

    module = native.load()
    lib = ctypes.CDLL(str(tracer))
    lib.code_trace_start.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
    start, end, base = _code_mapping(Path(module.__file__).name)
    touched = np.zeros((end - start) // PAGE, np.uint8)
    err = lib.code_trace_start(start, end, touched.ctypes.data)
    if err:
        raise UserError(f"cannot trace {module.__file__}: errno {err}")
    session = Session(plan_path, map_weights=False)
    rng = np.random.default_rng(0)
    for _ in range(2):
        session.run({name: rng.standard_normal(shape).astype(np.float32) for name, shape in session.input_shapes.items()})
    return [start - base + int(i) * PAGE for i in np.flatnonzero(touched)]


def trace_in_child(plan_path: Path, tracer: Path) -> list[int]:
    proc = subprocess.run([sys.executable, "-m", __spec__.name, "--child", "--tracer", str(tracer), str(plan_path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"tracing {plan_path}: {child_error(proc)}")
    return json.loads(proc.stdout)


def movable(section: link_map.InputSection) -> bool:
    """A function the build can move: the build lays out NCNN's archive, where each is a section."""
    return section.archive == NCNN_ARCHIVE and section.name.startswith(".text.")


def hot_list(runs: Sequence[list[link_map.InputSection]]) -> list[archive_layout.HotEntry]:
    """The functions (archive_layout.generic) each plan's run touched (link_map.sections_on_pages),
    those more plans ran first; among as many, the functions the same plans ran lie together (a plan
    then maps fewer 64 KB windows), each group in order of address."""
    ran_by: dict[archive_layout.HotEntry, list[int]] = defaultdict(list)
    first: dict[archive_layout.HotEntry, int] = {}
    for plan, sections in enumerate(runs):
        for section in sections:
            if not movable(section):
                continue
            entry = archive_layout.generic(section.member, archive_layout.original_name(section.name))
            if plan not in ran_by[entry]:
                ran_by[entry].append(plan)
            first.setdefault(entry, section.address)
    return sorted(ran_by, key=lambda e: (-len(ran_by[e]), ran_by[e], first[e]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.code_trace", description=__doc__.split("\n\n")[0])
    parser.add_argument("plans", nargs="+", type=Path, metavar="PLAN.json", help="prepared sidecars to run (never modified)")
    parser.add_argument("-o", "--output", type=Path, help="the hot list to write, e.g. flexnn_ncnn/hot_code/x86.txt")
    parser.add_argument("--link-map", type=Path, default=LINK_MAP, help=f"the native module's link map (default: {LINK_MAP})")
    parser.add_argument("--tracer", type=Path, default=TRACER, help=f"libflexnn_code_trace (default: {TRACER})")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.child:
        print(json.dumps(trace_here(args.plans[0], args.tracer)), flush=True)
        return 0
    if args.output is None:
        raise UserError("-o/--output is required")
    for path in (args.link_map, args.tracer):
        if not path.exists():
            raise UserError(f"{path} does not exist: run `{native.REBUILD}`")
    sections = link_map.text_sections(args.link_map)
    runs = [link_map.sections_on_pages(sections, trace_in_child(plan, args.tracer), PAGE)
            for plan in tqdm(args.plans, desc="trace", unit="plan", disable=None)]
    entries = hot_list(runs)
    size = sum(s.size for s in {s for run in runs for s in run if movable(s)})
    lines = [f"# {len(entries)} functions ({size:,} B here) that {len(runs)} plans ran, most used first;",
             "# written by python -m flexnn_ncnn.code_trace, laid out first by the build (archive_layout.py)",
             *(f"{member}\t{section}" for member, section in entries)]
    atomic_write(args.output, lambda f: f.write(("\n".join(lines) + "\n").encode()))
    print(f"{args.output}: {len(entries)} functions, {size:,} B of code in this build")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
