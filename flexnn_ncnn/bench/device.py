"""What the device binary (tools/flexnn-bench) speaks, for scripts/adb_bench.sh and `bench --ingest`.

`python -m flexnn_ncnn.bench.device input MODEL.json OUT.npy [--seed N]` writes the seeded input
the host's oracle uses; `python -m flexnn_ncnn.bench.device modes` prints the harness families
the binary runs, as `family=mode` lines. Each line of a device's results.jsonl is written by the
script as {"family", "budget", "outputs", "device": <the binary's JSON line>}; `to_record` turns it
into the child protocol of bench/measure.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..cli import UserError, add_logging_args, run_main, setup_logging
from .measure import model_inputs

# harness family -> flexnn-bench mode= (its stock/direct load the model in every timed loop, see docs/RUNTIME.md)
DEVICE_MODES = {"ncnn-default": "stock", "ncnn-direct": "direct", "flexnn": "flexnn", "on-demand": "ondemand"}


def to_record(line: dict[str, Any]) -> dict[str, Any]:
    """A results.jsonl line -> the child protocol (rss_idle 0: the binary reports VmHWM over idle)."""
    try:
        device = line["device"]
        latency = device["latency_us"]
        samples = device.get("latency_ms") or [latency["median"] / 1e3]  # the binary prints min/median/max only
        return {"config": line["family"], "mode": line["family"], "budget": line.get("budget"),
                "latency_ms": samples, "latency_min_ms": latency["min"] / 1e3, "latency_max_ms": latency["max"] / 1e3,
                "rss_idle_bytes": 0, "vm_hwm_bytes": device["vm_hwm_minus_idle_bytes"],
                "hwm_reset": line["family"] not in ("ncnn-default", "ncnn-direct"),
                "counted_bytes": device.get("arena_bytes", 0) + device.get("outside_arena_bytes", 0) or None,
                "load_wait_ms": [device["load_wait_us_median"] / 1e3] if "load_wait_us_median" in device else [],
                "outputs_npz": line["outputs"]}
    except (KeyError, TypeError) as e:
        raise UserError(f"device result line lacks {e}: {str(line)[:200]}") from None


def main(argv: Sequence[str] | None = None) -> int:
    from ..models import read_description
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.bench.device", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("input", help="write the seeded input as .npy (NCNN's batch-less shape)")
    p.add_argument("model", type=Path, help="the model's .json (python -m flexnn_ncnn.models)")
    p.add_argument("output", type=Path, help="the .npy to write")
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0, as the harness)")
    sub.add_parser("modes", help="print family=mode for every configuration the binary runs")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.command == "modes":
        for family, mode in DEVICE_MODES.items():
            print(f"{family}={mode}")
        return 0
    inputs = model_inputs(read_description(args.model), args.seed)
    if len(inputs) != 1:
        raise UserError(f"{args.model}: the device binary takes one input, this model has {len(inputs)}")
    np.save(args.output, next(iter(inputs.values())))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
