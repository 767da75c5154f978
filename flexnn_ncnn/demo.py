"""`python -m flexnn_ncnn.demo`: the main job end to end on a built-in default model.

1. generate ResNet-50 (plain torch, pnnx, fp32, seeded) with `python -m flexnn_ncnn.models`;
2. slice it for the budget, prepare it on this machine and plan it (`python -m flexnn_ncnn.slice`);
3. run it inside the budget, weights streamed on a loading thread (`python -m flexnn_ncnn.run`);
4. run stock NCNN with its default options on the original model (NCNN-Default), in its own process;
5. compare: latency, memory, and the outputs.

Each step is the command a user would type, printed before it runs; every inference runs in its own
process, so peak RSS over idle is that configuration's alone. Re-running reuses the generated model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from .cli import UserError, add_logging_args, run_main, setup_logging
from .units import format_size, parse_size

MODEL = "resnet50"


def _command(title: str, args: list[str]) -> str:
    """Run `python -m flexnn_ncnn.<verb> ...` as a user would; its last stdout line is returned."""
    shown = " ".join(["python", "-m", *args])
    print(f"\n==> {title}\n$ {shown}", flush=True)
    proc = subprocess.run([sys.executable, "-m", *args], stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise UserError(f"`{shown}` failed (exit {proc.returncode})")
    lines = proc.stdout.strip().splitlines()
    print("\n".join(l for l in lines if not l.startswith("{")), flush=True)
    return lines[-1] if lines else ""


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", default="20MB", help="memory budget (default %(default)s; stock NCNN needs ~10x)")
    parser.add_argument("--threads", type=int, default=2, help="computing threads (default %(default)s)")
    parser.add_argument("--loops", type=int, default=10, help="timed inferences per configuration (default %(default)s)")
    parser.add_argument("-o", "--outdir", type=Path, default=Path("out/demo"), help="working folder (default %(default)s)")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    budget = parse_size(args.budget)
    out = args.outdir
    description_path = out / f"{MODEL}.json"

    if description_path.exists():
        print(f"==> reusing the generated model {description_path}")
    else:
        _command(f"1/4 generate the default model ({MODEL}, fp32, seeded)", ["flexnn_ncnn.models", MODEL, "-o", str(out)])
    description = json.loads(description_path.read_text())
    (model_input,) = description["inputs"]
    shape = ",".join(map(str, [1, *model_input["shape"]]))
    param = out / description["param"]

    sliced = out / "sliced"
    _command(f"2/4 slice, prepare and plan for {format_size(budget)}",
             ["flexnn_ncnn.slice", str(param), "--budget", args.budget, "--input-shape", shape,
              "--threads", str(args.threads), "-o", str(sliced)])

    from .bench.measure import model_inputs
    x = model_inputs(description, seed=0)[model_input["name"]]
    np.save(out / "input.npy", x)
    plan = sliced / f"{MODEL}.flexnn.plan.json"
    flexnn = json.loads(_command(f"3/4 run inside {format_size(budget)}, weights streamed on a loading thread",
                                 ["flexnn_ncnn.run", str(plan), "--input", f"{model_input['name']}={out / 'input.npy'}",
                                  "--loops", str(args.loops), "--output", str(out / "flexnn.npz"), "--json"]))
    stock = json.loads(_command("4/4 stock NCNN, default options, on the original model (NCNN-Default)",
                                ["flexnn_ncnn.bench.measure", "--model", str(description_path), "--config", "ncnn-default",
                                 "--threads", str(args.threads), "--warmup", "1", "--loops", str(args.loops),
                                 "--fp16",  # NCNN's own default options, as the runtime keeps them
                                 "--outputs", str(out / "stock.npz")]))

    (output,) = description["outputs"]
    got, ref = np.load(out / "flexnn.npz")[output], np.load(out / "stock.npz")[output]
    diff = float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))
    stock_ms = statistics.median(stock["latency_ms"])
    flexnn_ms = flexnn["latency_median_us"] / 1000
    stock_rss = stock["vm_hwm_bytes"] - stock["rss_idle_bytes"]
    print(f"\n{MODEL}, {args.threads} threads, {args.loops} inferences each\n")
    rows = [("configuration", "latency median", "peak RSS over idle", "counted by the runtime"),
            ("NCNN-Default", f"{stock_ms:.1f} ms (1.00x)", _mb(stock_rss), "-"),
            (f"FlexNN @ {_mb(budget)}", f"{flexnn_ms:.1f} ms ({flexnn_ms / stock_ms:.2f}x)",
             _mb(flexnn["peak_rss_over_idle_bytes"]), f"{_mb(flexnn['counted_bytes'])} (arena + outside)")]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    print(f"\noutput {output}: max |FlexNN - NCNN-Default| = {diff:.2e} x max|NCNN-Default|"
          f" ({'match' if diff <= 1e-4 else 'MISMATCH'}, tolerance 1e-4)")
    if diff > 1e-4:
        raise UserError("the FlexNN output differs from stock NCNN beyond the tolerance")
    if flexnn["counted_bytes"] > budget:
        raise UserError(f"the runtime counted {format_size(flexnn['counted_bytes'])}, over the budget")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
