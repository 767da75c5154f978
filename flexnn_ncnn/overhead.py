"""`python -m flexnn_ncnn.overhead PLAN.json --input NAME=C,H,W`: the resident memory a Session holds
beyond what its runtime counts; prints one JSON line.

The budget holds for memory (b) too (DESIGN.md §4): the peak RSS of the inference process over its RSS
before the model is loaded. The runtime counts memory (a), its arena and what it serves outside it;
the rest of (b) — the sidecar and its profile in Python, NCNN's Net and every layer's params, the
runtime's code and tables, thread stacks — is measured here the way the benchmark measures (b)
(bench/flexnn_child.py): in a fresh process, the Python modules and the native runtime loaded and
the inputs written first (as the stock baselines import ncnn first: a library is not the model),
VmHWM reset to the current RSS, then a Session on the sidecar and two inferences, the first one's
outputs kept while the second runs, as a loop `outputs = session.run(inputs)` keeps them (the
benchmark's child runs so; a model with large outputs, NanoDet's 0.9 MB, held that much more than one
inference). Free heap pages are returned to the OS before the idle RSS is read, so
nothing resident before can be reused for free: a process with more history (the benchmark's child)
holds at most as much. The weights are read into the arena even when the plan maps them: a mapped
record's bytes are never written, so pages the plan lays out would stay untouched in this run and
hide part of what is measured (the steady state could then exceed the first run's peak); read into
the arena, every page the plan lays out is touched, and what lies beside it is the same. `uncounted_rss_bytes` = max(0, peak RSS over idle − counted bytes); prepare
stores it in the sidecar, or in a plan it measured itself, and the plan leaves room for it (Sidecar.reserved_for).

JSON line: peak_rss_over_idle_bytes, counted_bytes, uncounted_rss_bytes; with --by-mapping also
resident_by_mapping_bytes: what each mapping holds after the run beyond what it held at idle
(process_memory.resident_by_mapping: the runtime's code, the C heap, `[anon]` with the arena in it),
to see what the uncounted bytes are made of.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from . import native, planning
from .cli import UserError, add_logging_args, child_error, run_main, setup_logging
from .ncnn_model.sample_inputs import sample_inputs
from .process_memory import release_free_heap, reset_peak_rss, resident_by_mapping, status_bytes
from .session import Session

log = logging.getLogger(__name__)


def _parse_input(text: str) -> tuple[str, tuple[int, ...]]:
    name, _, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        shape = ()
    if not name or not shape or min(shape) < 1:
        raise UserError(f"--input {text!r} is not NAME=D0,D1,... with positive dimensions")
    return name, shape


def measure_here(plan_path: Path, input_shapes: dict[str, tuple[int, ...]], by_mapping: bool = False,
                 image_sizes: Sequence[str] = ()) -> dict[str, Any]:
    """Open a Session on `plan_path` in this process and run it once: peak RSS over idle, counted bytes
    and their difference (see the module's docstring), and with `by_mapping` what each mapping gained
    (bytes, at least 16 KiB, largest first). `image_sizes`: the inputs a Proposal reads as the image's
    size (sample_inputs). Call it in a process that ran no model yet."""
    # made as prepare makes its inputs, before the idle RSS
    inputs = sample_inputs(input_shapes, image_sizes)
    native.load()
    planning.load()
    release_free_heap()
    idle = status_bytes("VmRSS")
    mappings = resident_by_mapping() if by_mapping else {}
    if not reset_peak_rss():
        log.warning("cannot reset the peak RSS: the measured overhead includes the interpreter's start-up peak")
    session = Session(plan_path, map_weights=False)
    previous = session.run(inputs)
    session.run(inputs)  # while `previous` is held
    del previous
    peak = status_bytes("VmHWM") - idle
    counted = int(session.stats()["counted_bytes"])
    out: dict[str, Any] = {"peak_rss_over_idle_bytes": peak, "counted_bytes": counted, "uncounted_rss_bytes": max(0, peak - counted)}
    if by_mapping:
        gained = {name: size - mappings.get(name, 0) for name, size in resident_by_mapping().items()}
        out["resident_by_mapping_bytes"] = dict(sorted(((n, b) for n, b in gained.items() if b >= 16 * 1024), key=lambda x: -x[1]))
    return out


def measure_in_child(plan_path: Path, input_shapes: dict[str, tuple[int, ...]], image_sizes: Sequence[str] = ()) -> dict[str, int]:
    """measure_here in a fresh interpreter (this process has run models already), its JSON line parsed."""
    args = [f"--input={name}={','.join(map(str, shape))}" for name, shape in input_shapes.items()]
    args += [f"--image-size={name}" for name in image_sizes]
    proc = subprocess.run([sys.executable, "-m", "flexnn_ncnn.overhead", str(plan_path), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"measuring the runtime's uncounted memory on {plan_path}: {child_error(proc)}")
    return json.loads(proc.stdout.splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("sidecar", type=Path, metavar="PLAN.json", help="a plan sidecar (never modified)")
    parser.add_argument("--input", action="append", type=_parse_input, required=True, metavar="NAME=D0,D1,...",
                        help="an input blob and its numpy shape (c,h,w), once per input")
    parser.add_argument("--image-size", action="append", default=[], metavar="NAME",
                        help="an input a Proposal reads as the image's size (height, width, scale): it gets the "
                             "first image input's, not random values, which would leave no proposal")
    parser.add_argument("--by-mapping", action="store_true",
                        help="also report what each mapping (code, C heap, anonymous memory) gained over idle")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    print(json.dumps(measure_here(args.sidecar, dict(args.input), args.by_mapping, args.image_size)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
