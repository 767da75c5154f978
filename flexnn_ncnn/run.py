"""Run a prepared model under its plan.

    python -m flexnn_ncnn.run PLAN.json --input in.npy [--output out.npz] [--loops N] [--budget 60MB]
        [--loader any|little|middle|big|computing] [--weights mapped|read] [--direct-io] [--json]

`--json` prints one line of stats: arena bytes, bytes outside the arena, peak RSS over idle, and the
latency median over the loops (timing figures are for benchmarks, not for pass/fail decisions).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from .cli import UserError, add_logging_args, run_main, setup_logging
from .files import atomic_write, write_npz
from .units import format_size, parse_size


def _read_array(path: Path) -> np.ndarray:
    """The array of a .npy file; anything else (a missing file, an .npz, text, a pickle) is a UserError."""
    try:
        with open(path, "rb") as f:
            return np.lib.format.read_array(f, allow_pickle=False)
    except OSError as e:
        raise UserError(f"cannot read input {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UserError(f"input {path} is not a .npy array: {str(e).splitlines()[0]}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", type=Path, help="plan sidecar (MODEL.flexnn.plan.json) from `python -m flexnn_ncnn.prepare` or `python -m flexnn_ncnn.plan`")
    parser.add_argument("--input", type=Path, action="append", required=True,
                        help="input .npy (float32, of the shape the plan was prepared for, NCNN's c,h,w); repeat as NAME=FILE for several inputs")
    parser.add_argument("--output", type=Path, help="write the outputs to this .npz, one array per output blob")
    parser.add_argument("--loops", type=int, default=1, help="inferences to run (default: %(default)s)")
    parser.add_argument("--budget", help="re-plan for this budget instead of the file's plan, e.g. 60MB")
    parser.add_argument("--loader", choices=("any", "little", "middle", "big", "computing"), default="any",
                        help="cores of the loading thread; computing: none, the computing threads load each layer "
                             "just before it computes (when every core computes)")
    parser.add_argument("--weights", choices=("mapped", "read"), default=None,
                        help="pre-transformed weights mapped from their file (zero copy) or read into the arena; "
                             "default: as the plan was made (prepare --map-weights)")
    parser.add_argument("--direct-io", action="store_true",
                        help="read the weights with O_DIRECT (through an aligned window the budget leaves room for)")
    parser.add_argument("--json", action="store_true", help="print one JSON line of stats")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.loops < 1:
        raise UserError("--loops must be at least 1")
    budget = parse_size(args.budget) if args.budget else None

    # the inputs are read before the session, so its peak RSS over idle is the model's alone (as the
    # benchmark and prepare's measurement make their inputs first)
    arrays = []
    for spec in args.input:
        name, _, file = str(spec).rpartition("=")
        arrays.append((name, _read_array(Path(file))))

    from .session import Session
    session = Session(args.plan, budget=budget, loader=args.loader, direct_io=args.direct_io,
                      map_weights=None if args.weights is None else args.weights == "mapped")
    inputs = {}
    for name, array in arrays:
        if not name:
            if len(arrays) != 1 or len(session.inputs) != 1:
                raise UserError(f"the model has inputs {', '.join(session.inputs)}: pass each as --input NAME=FILE")
            name = session.inputs[0]
        inputs[name] = array
    outputs = {}
    for _ in range(args.loops):
        outputs = session.run(inputs)
    if args.output:
        atomic_write(args.output, lambda f: write_npz(f, outputs))
    stats = session.stats()
    if args.json:
        print(json.dumps({k: v for k, v in stats.items() if k not in ("load_wait_us", "latency_us", "loader_cpu_us")}
                         | {"load_wait_median_us": statistics.median(stats["load_wait_us"]),
                            "loader_cpu_median_us": statistics.median(stats["loader_cpu_us"])}))
    else:
        print(f"{args.loops} inference(s): arena {format_size(stats['arena_bytes'])}, outside the arena "
              f"{format_size(stats['outside_arena_bytes'])}, latency median {stats['latency_median_us'] / 1000:.2f} ms, "
              f"loading thread {statistics.median(stats['loader_cpu_us']) / 1000:.2f} ms CPU")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
