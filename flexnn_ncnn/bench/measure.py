"""`python -m flexnn_ncnn.bench.measure`: one configuration in this process; prints one JSON line.

The child side of the benchmark harness (bench/harness.py). Memory (b) is VmHWM minus the RSS
before the model is loaded: imports and inputs are done first, then VmHWM is reset to the current
RSS (/proc/self/clear_refs 5) so the peak is this model's. Latency: W warm-ups, then N timed
inferences (a fresh extractor each, as benchncnn). Outputs go to an .npz the harness checks.

The JSON line (the protocol every child follows, runtime children included; see docs/EVALUATION.md):
  config, latency_ms [N floats], load_ms, rss_idle_bytes, vm_hwm_bytes, hwm_reset, outputs_npz
  and optionally counted_bytes (memory (a)), load_wait_ms and loader_cpu_ms [N floats each], arena_bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..cli import UserError, add_logging_args, run_main, setup_logging
from ..ncnn_model.sample_inputs import sample_inputs
from ..ncnn_model.stock import output_array
from ..process_memory import reset_peak_rss, status_bytes
from . import pagecache
from .configs import STOCK_CONFIGS, StockOptions

FP16_FLAGS = ("use_fp16_storage", "use_fp16_packed", "use_fp16_arithmetic", "use_bf16_storage", "use_bf16_packed")


def model_inputs(description: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """Seeded standard-normal inputs in NCNN's batch-less shapes, the same in every process."""
    return sample_inputs({i["name"]: i["shape"] for i in description["inputs"]}, seed=seed)


class _MappedNet:
    """The `ncnn-mmap` baseline: NCNN's Net on the memory-mapped .bin (the native module's MappedNet)."""

    def __init__(self, param: Path, bin_: Path, options: StockOptions, threads: int, fp16: bool):
        from .. import native
        try:
            self._net = native.load().MappedNet(str(param), str(bin_), threads=threads, packing=options.packing,
                                                winograd=options.winograd, sgemm=options.sgemm, fp16=fp16)
        except RuntimeError as e:
            raise UserError(str(e)) from None

    def forward(self, inputs: dict[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]:
        try:
            return dict(self._net.run(inputs, list(outputs)))
        except RuntimeError as e:
            raise UserError(str(e)) from None


def _stock_net(param: Path, bin_: Path, options: StockOptions, threads: int, fp16: bool):
    if options.mapped:
        return _MappedNet(param, bin_, options, threads, fp16)
    import ncnn  # type: ignore[import-not-found]
    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    net.opt.num_threads = threads
    net.opt.use_winograd_convolution = options.winograd
    net.opt.use_sgemm_convolution = options.sgemm
    net.opt.use_packing_layout = options.packing
    if not fp16:
        for flag in FP16_FLAGS:
            setattr(net.opt, flag, False)
    if net.load_param(str(param)) != 0 or net.load_model(str(bin_)) != 0:
        raise UserError(f"stock NCNN cannot load {param} / {bin_}")
    return net


def _stock_forward(net, inputs: dict[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]:
    if isinstance(net, _MappedNet):
        return net.forward(inputs, outputs)
    import ncnn  # type: ignore[import-not-found]
    ex = net.create_extractor()
    for name, array in inputs.items():
        ex.input(name, ncnn.Mat(array))
    out = {}
    for name in outputs:
        ret, mat = ex.extract(name)
        if ret != 0:
            raise UserError(f"stock NCNN failed to compute blob {name} (code {ret})")
        out[name] = output_array(mat)
    return out


def evict_all(paths: Sequence[Path]) -> None:
    """Cold storage (--cold 1): the files leave the page cache (what is mapped in a process stays)."""
    for path in paths:
        pagecache.evict(path)


def measure_stock(description: dict[str, Any], config: str, threads: int, warmup: int, loops: int, seed: int,
                  fp16: bool, outputs_npz: Path, cold: bool = False) -> dict[str, Any]:
    """One stock-NCNN baseline: its options from STOCK_CONFIGS, the model loaded once; with `cold`,
    its .bin evicted from the page cache before every inference."""
    cold_files = [Path(description["bin"])] if cold else []
    # imported before the idle RSS is read; one of them only: two OpenMP runtimes in one process
    # would fight over the cores
    if STOCK_CONFIGS[config].mapped:
        from .. import native
        native.load()
    else:
        import ncnn  # noqa: F401
    inputs = model_inputs(description, seed)
    rss_idle = status_bytes("VmRSS")
    hwm_reset = reset_peak_rss()
    start = time.perf_counter()
    net = _stock_net(description["param"], description["bin"], STOCK_CONFIGS[config], threads, fp16)
    load_ms = (time.perf_counter() - start) * 1e3
    for _ in range(warmup):
        evict_all(cold_files)
        _stock_forward(net, inputs, description["outputs"])
    latencies = []
    for _ in range(loops):
        evict_all(cold_files)
        start = time.perf_counter()
        outputs = _stock_forward(net, inputs, description["outputs"])
        latencies.append((time.perf_counter() - start) * 1e3)
    vm_hwm = status_bytes("VmHWM")
    np.savez(outputs_npz, **outputs)
    return {"config": config, "latency_ms": latencies, "load_ms": load_ms, "rss_idle_bytes": rss_idle,
            "vm_hwm_bytes": vm_hwm, "hwm_reset": hwm_reset, "outputs_npz": str(outputs_npz)}


def add_run_args(parser: argparse.ArgumentParser) -> None:
    """The arguments every benchmark child takes from the harness (docs/EVALUATION.md)."""
    parser.add_argument("--threads", type=int, default=2, help="computing threads (default 2)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed inferences first (default 3)")
    parser.add_argument("--loops", type=int, default=10, help="timed inferences (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    parser.add_argument("--cpus", default="", help="comma-separated CPUs to run on (default: any)")
    parser.add_argument("--cold", choices=("0", "1"), default="0",
                        help="1: evict the model's weight files from the page cache before every inference")
    parser.add_argument("--outputs", type=Path, required=True, help="the .npz to write the outputs to")
    add_logging_args(parser)


def apply_run_args(args: argparse.Namespace) -> None:
    """Check add_run_args' values and pin this process to --cpus."""
    if args.loops < 1 or args.warmup < 0 or args.threads < 1:
        raise UserError("--loops and --threads must be at least 1, --warmup at least 0")
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})


def main(argv: Sequence[str] | None = None) -> int:
    from ..models import read_description
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.bench.measure", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="the model's .json (python -m flexnn_ncnn.models)")
    parser.add_argument("--config", choices=sorted(STOCK_CONFIGS), required=True, help="which baseline")
    parser.add_argument("--fp16", action="store_true", help="NCNN's default fp16 storage/arithmetic where the CPU has it")
    add_run_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    apply_run_args(args)
    result = measure_stock(read_description(args.model), args.config, args.threads, args.warmup, args.loops, args.seed,
                           args.fp16, args.outputs, args.cold == "1")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
