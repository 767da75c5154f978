"""`python -m flexnn_ncnn.bench.switch SIDECAR --budgets 100MB,300MB,200MB,500MB`: budget adaptation.

One Session is switched through the budgets in order (the paper's demo sequence, Fig. 14). For each,
it reports the switch (`set_budget`: a ladder lookup or a re-plan of the stored profile, then the
arena rebuilt and pinned layers reloaded), the first inference after it, and the steady latency.
Each step's outputs are checked against stock NCNN on the same model files, and the runtime's own
count (arena + outside it) against the budget. Either failing fails the run: exit code 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..cli import UserError, add_logging_args, run_main, setup_logging
from ..ncnn_model.stock import run_stock
from ..units import parse_size

RTOL = 1e-4  # DESIGN.md section 5


def switch_trace(sidecar_path: Path, budgets: Sequence[int], loops: int, seed: int = 0) -> list[dict[str, Any]]:
    """Run the switching sequence; one record per budget."""
    from ..session import Session

    session = Session(sidecar_path)
    rng = np.random.default_rng(seed)
    inputs = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in session.input_shapes.items()}
    param, bin_path = session.sidecar.model_files(sidecar_path)
    reference = run_stock(param, bin_path, inputs, session.outputs, fp32=not session.sidecar.target.fp16,
                          num_threads=session.sidecar.target.threads)
    trace = []
    for budget in budgets:
        start = time.perf_counter()
        session.set_budget(budget)
        switched = time.perf_counter()
        outputs = session.run(inputs)
        first = time.perf_counter()
        steady = []
        for _ in range(loops):
            begin = time.perf_counter()
            session.run(inputs)
            steady.append((time.perf_counter() - begin) * 1e3)
        stats = session.stats()
        error = max(float(np.max(np.abs(outputs[n] - reference[n]))) / max(float(np.max(np.abs(reference[n]))), 1e-30)
                    for n in session.outputs)
        trace.append({
            "budget": budget, "switch_ms": (switched - start) * 1e3, "first_inference_ms": (first - switched) * 1e3,
            "latency_median_ms": statistics.median(steady) if steady else None,
            "counted_bytes": int(stats["counted_bytes"]), "arena_bytes": int(stats["arena_bytes"]),
            "relative_error": error, "ok": error <= RTOL and stats["counted_bytes"] <= budget,
        })
    return trace


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.bench.switch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sidecar", type=Path, help="MODEL.flexnn.plan.json written by slice or prepare")
    parser.add_argument("--budgets", required=True, help="comma-separated budgets in switching order, e.g. 100MB,300MB")
    parser.add_argument("--loops", type=int, default=3, help="steady inferences after each switch's first (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON line per budget instead of the table")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    budgets = [parse_size(b) for b in args.budgets.split(",") if b.strip()]
    if not budgets:
        raise UserError("--budgets names no budget")
    trace = switch_trace(args.sidecar, budgets, args.loops)
    if args.json:
        for record in trace:
            print(json.dumps(record))
    else:
        print(f"{'budget':>12}  {'switch':>9}  {'1st run':>9}  {'steady':>9}  {'counted':>12}  {'rel. error':>10}")
        for r in trace:
            steady = f"{r['latency_median_ms']:.1f} ms" if r["latency_median_ms"] is not None else "-"
            print(f"{r['budget'] / 1e6:>9.1f} MB  {r['switch_ms']:>6.1f} ms  {r['first_inference_ms']:>6.1f} ms  "
                  f"{steady:>9}  {r['counted_bytes'] / 1e6:>9.1f} MB  {r['relative_error']:>10.1e}"
                  f"{'' if r['ok'] else '  FAILED'}")
    return 0 if all(r["ok"] for r in trace) else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
