"""`python -m flexnn_ncnn.bench.planner PROFILE_OR_SIDECAR.json --budgets 35MB,50MB,...`: planner speed and quality.

For each budget and algorithm: whether it is feasible (else the smallest feasible budget), the
median planning time over `--repeat` runs, arena / lower bound, pinned bytes, preloaded weights
and the expected I/O stall proxy. `--synthetic resnet152|vgg19` plans a built-in profile shaped
like those models (see bench/synthetic.py) instead of a file; `--copies N` chains N copies of it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

from .. import planning, sidecar
from ..cli import UserError, add_logging_args, run_main, setup_logging
from ..plan import parse_budgets
from . import synthetic


def read_profile(path: Path) -> planning.Profile:
    """A sidecar's profile, or a bare profile JSON ({"layers": [...], "tensors": [...]})."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    if isinstance(data, dict) and "schema" in data:
        return sidecar.load(path).profile
    return planning.Profile.from_dict(data)


def bench_row(profile: planning.Profile, budget: int, algorithm: str, repeat: int) -> list[str]:
    times, cpu_times = [], []
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            plan = planning.make_plan(profile, budget, algorithm)
        except planning.InfeasibleBudget as e:
            return [f"{budget / 1e6:g}MB", algorithm, f"no (min {e.min_feasible_budget / 1e6:g}MB)"] + ["-"] * 6
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    planning.check_plan(profile, plan)
    return [
        f"{budget / 1e6:g}MB", algorithm, "yes", f"{statistics.median(times) * 1e3:.2f}", f"{statistics.median(cpu_times) * 1e3:.2f}",
        f"{plan.ratio:.3f}",
        f"{planning.pinned_bytes(profile, plan) / 1e6:.1f}MB", str(planning.preloaded_weights(profile, plan)),
        f"{planning.expected_stall_us(profile, plan) / 1e3:.2f}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.bench.planner", description=__doc__.split("\n\n")[1])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("profile", nargs="?", type=Path, metavar="PROFILE_OR_SIDECAR.json", help="a plan sidecar or a bare profile")
    source.add_argument("--synthetic", choices=sorted(synthetic.PROFILES), help="a built-in profile instead of a file")
    parser.add_argument("--copies", type=int, default=1, help="chain this many copies of the profile (default 1)")
    parser.add_argument("--budgets", type=parse_budgets, default=parse_budgets("35MB,50MB,100MB,200MB,400MB"),
                        help="comma-separated budgets (default 35MB,50MB,100MB,200MB,400MB)")
    parser.add_argument("--algorithms", default=",".join(planning.ALGORITHMS), help="comma-separated (default: both)")
    parser.add_argument("--repeat", type=int, default=11, help="timed plans per cell; the median is reported (default 11)")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.copies < 1 or args.repeat < 1:
        raise UserError("--copies and --repeat must be at least 1")
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    for a in algorithms:
        if a not in planning.ALGORITHMS:
            raise UserError(f"unknown algorithm {a!r}: use {', '.join(planning.ALGORITHMS)}")

    profile = synthetic.PROFILES[args.synthetic]() if args.synthetic else read_profile(args.profile)
    if args.copies > 1:
        profile = synthetic.scaled(profile, args.copies)
    profile.validate()
    weights = sum(t.size for t in profile.tensors if t.role == "weight")
    print(f"profile: {args.synthetic or args.profile} x{args.copies}: {len(profile.tensors)} tensors, {len(profile.layers)} layers, "
          f"weights {weights / 1e6:.1f}MB, lower bound {planning.lower_bound(profile) / 1e6:.2f}MB")
    for a in algorithms:
        minimum = planning.min_feasible_budget(profile, a)
        print(f"min feasible budget ({a}): {minimum / 1e6:.3f}MB = {minimum / planning.lower_bound(profile):.3f} x lower bound")
    # plan ms: median wall time of make_plan (from a Profile, including the conversions to and from C++);
    # cpu ms: the same runs' CPU time, which other processes on the machine do not inflate
    header = ["budget", "algorithm", "feasible", "plan ms", "cpu ms", "arena/LB", "pinned", "preloaded", "stall ms"]
    rows = [header] + [bench_row(profile, b, a, args.repeat) for b in args.budgets for a in algorithms]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
