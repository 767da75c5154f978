"""`python -m flexnn_ncnn.bench --model resnet152 --budgets 35MB,50MB,100MB`: the paper's comparison.

Generates the model if needed (python -m flexnn_ncnn.models), runs every configuration in its own
process for --rounds interleaved rounds (NCNN-Default first), checks every output against stock
NCNN, and writes OUT/STEM.results.json, STEM.csv, STEM.png and docs/RESULTS.md. Exit code 1 when
any configuration crashed or computed a wrong output.

FlexNN at each budget, On-Demand and SwapNet-style block streaming at each budget run in the FlexNN
runtime (bench/flexnn_child.py: slice, prepare, plan, Session), alongside the stock baselines;
`min` among --budgets adds FlexNN at the smallest budget `slice --budget min` finds (flexnn@min), which the
floor summary reports beside the activation floor with the latency there and the search's probes and time;
--ablation adds FlexNN without the static arena, without preloading, and without both (Fig. 13);
`--modes flexnn-mapped` runs FlexNN with its pre-transformed weights mapped (zero copy),
`--modes flexnn-computing` with no loading thread (the computing threads load each layer), and the
`ncnn-mmap` baseline is NCNN's own Net on the memory-mapped .bin; `--cold` evicts the weight files
from the page cache before every inference of every configuration;
--runtime-command replaces the runtime's child (see docs/EVALUATION.md). A budget below SwapNet's smallest is reported, not failed. `--ingest DIR` reads
JSON lines measured on a device (scripts/adb_bench.sh) instead of running anything here.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Sequence

from ..cli import UserError, add_logging_args, run_main, setup_logging
from ..models import DEFAULT_BENCHMARK_DIR, describe_files, file_stem, generate, has_input_shapes, read_description
from ..units import format_size
from . import configs, harness, report

log = logging.getLogger(__name__)


def model_description(name: str, models_dir: Path, seed: int, tiny: bool, benchmark_dir: Path,
                      input_shapes: Sequence[str] = ()) -> dict[str, Any]:
    """A model's description: NAME.json if NAME is one, a MODEL.param's (and its MODEL.bin's: the model's
    own weights) written into `models_dir` if NAME is that, else the cached export in `models_dir`
    (re-generated when its seed, size or `input_shapes` differ). Generated weights are always fp32
    here: --fp16 is NCNN's arithmetic."""
    if name.endswith(".json"):
        return read_description(Path(name))
    if name.endswith(".param"):
        return read_description(describe_files(Path(name), models_dir, input_shapes))
    json_path = models_dir / f"{file_stem(name)}.json"
    if json_path.exists():
        cached = read_description(json_path)
        if (cached.get("seed") == seed and cached.get("tiny") == tiny and cached.get("storage") == "fp32"
                and has_input_shapes(cached, input_shapes)):
            return cached
    log.info("generating %s into %s", name, models_dir)
    return read_description(generate(name, models_dir, seed, fp16=False, tiny=tiny, benchmark_dir=benchmark_dir,
                                     input_shapes=input_shapes))


def _print_summaries(result: harness.BenchResult) -> None:
    print(f"{result.model['name']}:")
    for s in result.summaries:
        label = report.config_label(s.config, s.budget, s.smallest)
        if s.infeasible and s.ok:
            print(f"  {label:24} infeasible: {s.infeasible}")
            continue
        if s.latency_median_ms is None:
            print(f"  {label:24} FAILED: {'; '.join(s.errors)}")
            continue
        ratio = f"{s.ratio_to_default:.3f}x" if s.ratio_to_default is not None else "-"
        print(f"  {label:24} {s.latency_median_ms:9.2f} ms ({ratio} NCNN-Default)  peak RSS over idle "
              f"{format_size(s.peak_over_idle_bytes or 0)}  max rel. error {s.max_rel_error:.1e}"
              + ("" if s.loader_cpu_median_ms is None else f"  loading thread {s.loader_cpu_median_ms:.1f} ms CPU")
              + ("" if s.ok else f"  FAILED: {'; '.join(s.errors)}"))
    floor = harness.floor_summary(result.summaries)
    parts = [] if floor.activation_floor_bytes is None else [f"activation floor {format_size(floor.activation_floor_bytes)}"]
    if floor.min_budget is not None:
        over = "" if floor.min_budget_over_floor is None else f"{floor.min_budget_over_floor:.2f}x the floor, "
        latency = "-" if floor.latency_median_ms is None else f"{floor.latency_median_ms:.2f} ms"
        ratio = "-" if floor.ratio_to_default is None else f"{floor.ratio_to_default:.3f}x"
        parts.append(f"smallest budget FlexNN held {format_size(floor.min_budget)} ({over}{_found_by(floor)}): {latency} "
                     f"({ratio} NCNN-Default), peak RSS over idle {format_size(floor.peak_over_idle_bytes or 0)}")
    elif floor.search_held is False:
        parts.append("flexnn@min did not hold its budget")
    if parts:
        print("  " + "; ".join(parts))


def _found_by(floor: harness.FloorSummary) -> str:
    """Where the smallest budget comes from, in words."""
    if floor.found_by == "search":
        return "flexnn@min's search" + ("" if floor.search_probes is None else
                                        f": {floor.search_probes} probes in {floor.search_seconds or 0:.1f} s")
    return f"the grid's smallest, {floor.min_budget_config}" + ("; flexnn@min did not hold" if floor.search_held is False else "")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip().startswith("{")]
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read device results {path}: {e}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True,
                        help="comma-separated zoo names, struct:NAME, bench:NAME (python -m flexnn_ncnn.models --list), model .json "
                             "paths, or MODEL.param paths: a model of yours, run with the MODEL.bin beside it "
                             "(--input-shape where its Input declares none)")
    parser.add_argument("--budgets", type=configs.parse_budgets, default=configs.Budgets([]),
                        help=f"comma-separated budgets for {', '.join(configs.BUDGETED)}, e.g. 35MB,50MB,100MB; "
                             f"`{configs.MIN}` ({', '.join(configs.SEARCHED)}): the smallest budget its slicing fits, "
                             f"found by `slice --budget {configs.MIN}`")
    parser.add_argument("--modes", default=None,
                        help=f"runtime configurations ({', '.join(configs.RUNTIME_MODES)}); default: "
                             f"{','.join(configs.DEFAULT_RUNTIME_MODES)}")
    parser.add_argument("--baselines", default=None,
                        help=f"stock baselines to run ({', '.join(configs.STOCK_CONFIGS)}; default all; ncnn-default always runs)")
    parser.add_argument("--ablation", action="store_true", help="also run the ablations at every budget")
    parser.add_argument("--runtime-command", default=None,
                        help="command template replacing the runtime's child (bench/flexnn_child.py); fields: " + ", ".join(
                            "{" + f + "}" for f in configs.runtime_fields(configs.Configuration("flexnn"), configs.ChildSettings(Path()), Path())))
    parser.add_argument("--threads", type=int, default=2, help="computing threads (default 2)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed inferences per process (default 3)")
    parser.add_argument("--loops", type=int, default=10, help="timed inferences per process (default 10)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved passes over the configurations (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="weight and input seed (default 0)")
    parser.add_argument("--fp16", action="store_true",
                        help="let NCNN use fp16 storage/arithmetic where the CPU has it (default off: fp32 math as the paper)")
    parser.add_argument("--cold", action="store_true",
                        help="cold storage: every child evicts the model's weight files from the page cache (posix_fadvise "
                             "DONTNEED) before each inference, as a phone under memory pressure reads them")
    parser.add_argument("--cpus", default="", help="computing CPUs for the children, e.g. 2,3 (default any)")
    parser.add_argument("--tiny", action="store_true", help="tiny instances of the zoo models (smoke runs)")
    parser.add_argument("--models-dir", type=Path, default=Path("bench-results/models"), help="model cache (default bench-results/models)")
    parser.add_argument("--benchmark-dir", type=Path, default=DEFAULT_BENCHMARK_DIR, help="NCNN benchmark .param files for bench:NAME")
    parser.add_argument("--input-shape", action="append", default=[], metavar="[NAME=]SHAPE",
                        help="the input shape of bench:NAME structures and MODEL.param models, torch NCHW with a batch of 1 "
                             "(e.g. 1,3,384,384 for vision_transformer, whose Input declares none), as "
                             "`python -m flexnn_ncnn.models --input-shape`")
    parser.add_argument("-o", "--output", type=Path, default=Path("bench-results"), help="report folder (default bench-results)")
    parser.add_argument("--results-md", type=Path, default=Path("docs/RESULTS.md"), help="regenerated summary (default docs/RESULTS.md)")
    parser.add_argument("--ingest", type=Path, default=None, metavar="DIR",
                        help="report DIR/results.jsonl measured on a device instead of running here")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.loops < 1 or args.rounds < 1 or args.threads < 1 or args.warmup < 0:
        raise UserError("--loops, --rounds and --threads must be at least 1, --warmup at least 0")

    runtime = args.runtime_command or configs.RUNTIME_COMMAND
    if args.modes is not None:
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    else:  # the budgeted modes at each budget, when budgets are given
        modes = [m for m in configs.DEFAULT_RUNTIME_MODES if m not in configs.BUDGETED or args.budgets.sizes
                 or (args.budgets.smallest and m in configs.SEARCHED)]
    if args.ablation:
        modes += [m for m in configs.ABLATIONS if m not in modes]
    budgeted = [m for m in modes if m in configs.BUDGETED]
    if budgeted and not (args.budgets.sizes or args.budgets.smallest):
        raise UserError(f"{', '.join(budgeted)} run at each budget: they need --budgets, e.g. --budgets 35MB,50MB,100MB")
    baselines = None if args.baselines is None else [b.strip() for b in args.baselines.split(",") if b.strip()]
    configurations = configs.configurations(args.budgets, modes, baselines)
    if args.budgets.smallest:
        unsearched = [m for m in budgeted if m not in configs.SEARCHED]
        print(f"budget {configs.MIN}: the smallest {', '.join(configs.SEARCHED)} fits, found by its child"
              + (f" ({', '.join(unsearched)} run at the other budgets only)" if unsearched else ""))
    for b in args.budgets.sizes:
        print(f"budget {format_size(b)}")

    failed: list[str] = []
    for name in [n.strip() for n in args.model.split(",") if n.strip()]:
        description = model_description(name, args.models_dir, args.seed, args.tiny, args.benchmark_dir, args.input_shape)
        stem = file_stem(description["name"])
        settings = configs.ChildSettings(args.models_dir / f"{stem}.json" if not name.endswith(".json") else Path(name),
                                         args.threads, args.warmup, args.loops, args.seed, args.fp16, args.cpus, args.cold)
        if args.ingest:
            result = harness.ingest_records(description, _read_jsonl(args.ingest / "results.jsonl"), settings, args.ingest, args.fp16)
        else:
            result = harness.run_benchmark(description, configurations, settings, args.rounds,
                                           runtime, workdir=args.output / "outputs" / stem)
        path = report.write_model_report(result, args.output)
        _print_summaries(result)
        print(f"wrote {path}")
        failed += [f"{description['name']} {r.config} (round {r.round}): {r.error}" for r in result.failures]
        failed += [f"{description['name']} {s.config} did not hold its budget ({format_size(s.budget or 0)}): counted "
                   f"{format_size(s.counted_bytes or 0)}, peak RSS over idle {format_size(s.peak_over_idle_bytes or 0)}"
                   for s in result.over_budget]
    report.render_results_md(args.output, args.results_md)
    print(f"wrote {args.results_md}")
    if failed:
        print(f"error: {len(failed)} configuration run(s) failed or did not hold their budget: " + "; ".join(failed),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
