"""`python -m flexnn_ncnn.plan PLAN.json --budget 60MB [-o OUT.json]`: re-plan a sidecar's profile offline.

The profile stored in the sidecar (as `prepare` wrote it) is planned again for the new budget (no
re-slicing, no run on the target): the runtime's arena plus its over-read margin fit in the budget,
beside the sidecar's reservation. A budget the sidecar holds a plan for keeps that plan (prepare's
leaves room for what it measured running it, which may be less than the reservation).
Without `-o` nothing is written; with it, a copy of the sidecar holding the new plan (and the
`--ladder` plans, if asked) is written atomically, its model file names relative to the new file.
The input is never modified.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from . import planning, sidecar
from .cli import UserError, add_logging_args, run_main, setup_logging
from .units import format_size, parse_size


def parse_budgets(text: str) -> list[int]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def plan_for(source: sidecar.Sidecar, budget: int, algorithm: str) -> planning.Plan:
    """The sidecar's own plan for exactly `budget` with `algorithm` (prepare's, which leaves room for what
    it measured running it), else `budget` re-planned leaving room for the sidecar's reservation, else
    the stored plan with `algorithm` that fits `budget` with its own (Sidecar.stored_within)."""
    stored = source.plan_for(budget)
    if stored is not None and stored.algorithm == algorithm:
        return stored
    try:
        return planning.plan_for_budget(source.profile, budget, algorithm, reserved=source.reserved_bytes,
                                        mapped=source.plan.mapped)
    except planning.InfeasibleBudget:
        within = source.stored_within(budget, source.plan.mapped)
        if within is None or within.algorithm != algorithm:
            raise
        return within


def describe(profile: planning.Profile, plan: planning.Plan, seconds: float) -> list[str]:
    """The report lines of one plan."""
    pinned = plan.pinned_weights
    return [
        f"budget:          {format_size(plan.budget)} ({plan.algorithm})",
        f"arena:           {format_size(plan.arena_bytes)}",
        f"lower bound:     {format_size(plan.lower_bound)} (max live bytes without preloading)",
        f"ratio:           {plan.ratio:.3f} (arena / lower bound)",
        f"pinned weights:  {len(pinned)} ({format_size(planning.pinned_bytes(profile, plan))})",
        f"preloaded:       {planning.preloaded_weights(profile, plan)} weights, {len(plan.dependencies)} comp->load dependencies",
        f"expected stall:  {planning.expected_stall_us(profile, plan):.0f} us per inference (proxy from the profile's costs)",
        f"planning time:   {seconds * 1e3:.1f} ms",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flexnn_ncnn.plan",
        description="Re-plan the profile stored in a plan sidecar for another memory budget (offline, no re-slicing).",
        epilog="Budgets: 60MB is 60*10^6 bytes, 60MiB is 60*2^20, a bare number is bytes. "
               "An infeasible budget exits with status 2 and names the smallest feasible budget.")
    parser.add_argument("sidecar", type=Path, metavar="PLAN.json", help="a plan sidecar (MODEL.flexnn.plan.json); never modified")
    parser.add_argument("--budget", required=True, help="the new memory budget, e.g. 60MB")
    parser.add_argument("-o", "--output", type=Path, help="write the re-planned sidecar here (atomically); default: write nothing")
    parser.add_argument("--algorithm", choices=planning.ALGORITHMS, default="flexnn",
                        help="flexnn (default: best fit, pinning by expected stall) or algorithm1 (the paper's baseline)")
    parser.add_argument("--ladder", type=parse_budgets, metavar="B1,B2,...",
                        help="also store plans for these budgets in the output, for instant switching")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)

    budget = parse_size(args.budget)
    if args.output is not None and args.output.resolve() == args.sidecar.resolve():
        raise UserError(f"-o {args.output} is the input sidecar, which is never modified: write to another file")
    if args.ladder is not None and args.output is None:
        raise UserError("--ladder stores plans in the output: give -o OUT.json")
    source = sidecar.load(args.sidecar)
    start = time.perf_counter()
    plan = plan_for(source, budget, args.algorithm)
    seconds = time.perf_counter() - start
    print("\n".join(describe(source.profile, plan, seconds)))
    if args.output is not None:
        ladder = None if args.ladder is None else tuple(plan_for(source, b, args.algorithm) for b in args.ladder)
        written = sidecar.moved(sidecar.with_plans(source, plan, ladder), args.sidecar.parent, args.output.parent)
        sidecar.save(written, args.output)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
