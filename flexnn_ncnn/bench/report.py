"""Benchmark reports: per model STEM.results.json (everything), STEM.csv (one row per configuration),
STEM.png (latency against peak RSS over idle: baselines as points, each budgeted mode as a curve),
STEM.ablation.png (Fig. 13: FlexNN and its ablations per budget, as latency over NCNN-Default's), and
docs/RESULTS.md regenerated from every STEM.results.json in the output folder.

`python -m flexnn_ncnn.bench.report OUTDIR [--results-md PATH]` regenerates RESULTS.md alone.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import os
import platform
import sys
from pathlib import Path
from typing import Any, Sequence

from ..cli import add_logging_args, run_main, setup_logging
from ..models import file_stem
from ..files import atomic_write
from .configs import ABLATIONS, BUDGETED, RUNTIME_MODES, STOCK_CONFIGS, UNSLICED
from .harness import OVERHEAD_FIELDS, BenchResult, FloorSummary, Summary, floor_summary

log = logging.getLogger(__name__)

RESULTS_SUFFIX = ".results.json"
CSV_COLUMNS = ("config", "family", "budget", "ok", "runs", "latency_median_ms", "latency_p10_ms", "latency_p90_ms",
               "latency_min_ms", "latency_max_ms", "ratio_to_default", "load_ms", "peak_over_idle_bytes",
               "sampled_over_idle_bytes", "hwm_reset", "page_cache_peak_bytes", "counted_bytes", "load_wait_median_ms",
               "loader_cpu_median_ms", "max_rel_error", "activation_floor_bytes", "budget_over_floor", "infeasible")


def machine_description() -> dict[str, str]:
    """What the numbers were measured on."""
    cpu = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                if line.startswith(("model name", "Model", "Hardware"))), platform.machine())
    mem = next((line.split(":", 1)[1].strip() for line in _read("/proc/meminfo").splitlines()
                if line.startswith("MemTotal")), "?")
    try:
        import ncnn  # type: ignore[import-not-found]
        ncnn_version = ncnn.__version__
    except ImportError:
        ncnn_version = "not installed"
    return {"cpu": cpu, "cores": str(os.cpu_count()), "memory": mem, "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "ncnn wheel": ncnn_version}


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _mb(n: int | float | None) -> str:
    return "-" if n is None else f"{n / 1e6:.1f}"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _over_floor(budget: int | None, floor: int | None) -> float | None:
    return budget / floor if budget and floor else None


def write_csv(summaries: list[dict[str, Any]], model_floor: int | None, path: Path) -> None:
    """One row per configuration; `budget_over_floor` divides its budget by the model's activation floor."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows({**s, "budget_over_floor": _over_floor(s["budget"], model_floor)} for s in summaries)
    atomic_write(path, lambda f: f.write(text.getvalue().encode()))


def pyplot(what: str) -> Any:
    """matplotlib.pyplot on the Agg backend, or None (with a log line naming `what` goes unplotted) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed (pip install matplotlib): no plot of %s", what)
        return None
    return plt


def plot(result: dict[str, Any], path: Path) -> bool:
    """Latency against peak RSS over idle; False (with a log line) when matplotlib is missing."""
    plt = pyplot(result["model"]["name"])
    if plt is None:
        return False
    ok = [s for s in result["summaries"] if s["latency_median_ms"] is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    colors = iter(plt.get_cmap("tab10").colors)  # one per point or curve: baselines and curves never share one
    for s in ok:
        if s["family"] not in BUDGETED:
            ax.scatter(s["peak_over_idle_bytes"] / 1e6, s["latency_median_ms"], label=s["config"], zorder=3,
                       color=next(colors))
    for family in (f for f in BUDGETED if f not in ABLATIONS):  # the ablations have their own chart
        curve = sorted((s for s in ok if s["family"] == family), key=lambda s: s["budget"])
        if curve:
            ax.plot([s["peak_over_idle_bytes"] / 1e6 for s in curve], [s["latency_median_ms"] for s in curve],
                    marker="o", label=family, color=next(colors))
    ax.set_xlabel("peak RSS over idle (MB)")
    ax.set_ylabel("latency, median (ms)")
    ax.set_title(f"{result['model']['name']}: latency vs memory")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120))
    plt.close(fig)
    return True


ABLATION_BARS = ("flexnn",) + ABLATIONS


def _ablation_grid(summaries: list[dict[str, Any]]) -> dict[int, dict[str, dict[str, Any]]]:
    """{budget: {family: summary}} for the budgets at which an ablation ran."""
    grid: dict[int, dict[str, dict[str, Any]]] = {}
    for s in summaries:
        if s["family"] in ABLATION_BARS:
            grid.setdefault(s["budget"], {})[s["family"]] = s
    return {b: row for b, row in sorted(grid.items()) if any(f in row for f in ABLATIONS)}


def plot_ablation(result: dict[str, Any], path: Path) -> bool:
    """Grouped bars, one group per budget: latency over NCNN-Default's for FlexNN and each ablation;
    False when there is no ablation to draw or no matplotlib."""
    grid = _ablation_grid(result["summaries"])
    if not grid:
        return False
    plt = pyplot(f"{result['model']['name']}'s ablation")
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / len(ABLATION_BARS)
    for k, family in enumerate(ABLATION_BARS):
        ratios = [row[family]["ratio_to_default"] if family in row and row[family]["ratio_to_default"] else 0
                  for row in grid.values()]
        ax.bar([i + (k - (len(ABLATION_BARS) - 1) / 2) * width for i in range(len(grid))], ratios, width, label=family)
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xticks(range(len(grid)), [f"{b / 1e6:g} MB" for b in grid])
    ax.set_xlabel("budget")
    ax.set_ylabel("latency / NCNN-Default")
    ax.set_title(f"{result['model']['name']}: ablation")
    ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120))
    plt.close(fig)
    return True


def _ablation_table(summaries: list[dict[str, Any]]) -> list[str]:
    grid = _ablation_grid(summaries)
    if not grid:
        return []
    lines = ["", "Ablation (paper Fig. 13), latency / NCNN-Default:", "",
             "| budget | " + " | ".join(ABLATION_BARS) + " |", "|---|" + "---|" * len(ABLATION_BARS)]
    for budget, row in grid.items():
        cells = [f"{row[f]['ratio_to_default']:.3f}" if f in row and row[f]["ratio_to_default"] else "-" for f in ABLATION_BARS]
        lines.append(f"| {budget / 1e6:g} MB | " + " | ".join(cells) + " |")
    return lines


def write_model_report(result: BenchResult, outdir: Path) -> Path:
    """STEM.results.json, STEM.csv, STEM.png and (with ablations) STEM.ablation.png for one model;
    returns the .results.json path."""
    outdir.mkdir(parents=True, exist_ok=True)
    data = result.to_json()
    data["machine"] = machine_description()
    stem = file_stem(result.model["name"])
    json_path = outdir / f"{stem}{RESULTS_SUFFIX}"
    atomic_write(json_path, lambda f: f.write((json.dumps(data, indent=1) + "\n").encode()))
    write_csv(data["summaries"], data["activation_floor"]["activation_floor_bytes"], outdir / f"{stem}.csv")
    plot(data, outdir / f"{stem}.png")
    plot_ablation(data, outdir / f"{stem}.ablation.png")
    return json_path


def config_label(config: str, budget: int | None, smallest: bool) -> str:
    """A configuration's name; flexnn@min's with the budget its child found."""
    return f"{config} ({_mb(budget)} MB)" if smallest and budget else config


def _model_section(data: dict[str, Any], outdir: Path, md_dir: Path) -> list[str]:
    model, settings = data["model"], data["settings"]
    stem = file_stem(model["name"])
    lines = [f"## {model['name']}", "",
             f"{model.get('description', '')}; weights {model.get('storage', '?')}, seed {model.get('seed', '?')}. "
             f"{settings['threads']} threads, {settings['warmup']} warm-ups, {settings['loops']} timed loops x "
             f"{settings['rounds']} interleaved rounds"
             + ("; cold storage: the weight files evicted from the page cache before every inference" if settings.get("cold") else "")
             + f"; outputs checked against stock NCNN at {settings['tolerance']:g}.", ""]
    # the children themselves keep the load near `threads`; more means other processes competed for the cores
    load = data.get("max_load_average")
    if load is not None and load > settings["threads"] + 1:
        lines += [f"**Timing is unreliable here**: the load average reached {load:.1f} on {os.cpu_count()} cores with "
                  f"{settings['threads']} computing threads (other processes took cores). Memory figures are unaffected.", ""]
    lines += ["| configuration | ok | latency median ms (p10-p90) | x NCNN-Default | peak RSS over idle MB | sampled MB "
              "| page cache MB | counted MB | load ms | max rel. error |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for s in data["summaries"]:
        spread = "-" if s["latency_p10_ms"] is None else f"{_ms(s['latency_median_ms'])} ({_ms(s['latency_p10_ms'])}-{_ms(s['latency_p90_ms'])})"
        ratio = "-" if s["ratio_to_default"] is None else f"{s['ratio_to_default']:.3f}"
        err = "-" if s["max_rel_error"] is None else f"{s['max_rel_error']:.1e}"
        ok = "FAILED" if not s["ok"] else "infeasible" if s.get("infeasible") else "yes"  # older results lack `infeasible`
        label = config_label(s["config"], s["budget"], s.get("smallest", False))  # older results lack `smallest`
        lines.append(f"| {label} | {ok} | {spread} | {ratio} | {_mb(s['peak_over_idle_bytes'])} "
                     f"| {_mb(s['sampled_over_idle_bytes'])} | {_mb(s['page_cache_peak_bytes'])} | {_mb(s['counted_bytes'])} "
                     f"| {_ms(s['load_ms'])} | {err} |")
    with_overhead = [s for s in data["summaries"] if s.get("overhead")]
    if with_overhead:
        lines += ["", "| configuration | " + " | ".join(OVERHEAD_FIELDS) + " |", "|---|" + "---|" * len(OVERHEAD_FIELDS)]
        lines += [f"| {s['config']} | " + " | ".join(f"{s['overhead'][k]:g}" if k in s["overhead"] else "-" for k in OVERHEAD_FIELDS)
                  + " |" for s in with_overhead]
    lines += _ablation_table(data["summaries"])
    infeasible = [f"{s['config']}: {s['infeasible']}" for s in data["summaries"] if s.get("infeasible")]
    if infeasible:
        lines += ["", "Not run (the budget is below what the baseline accepts):", ""] + [f"- {x}" for x in infeasible]
    failures = [e for s in data["summaries"] for e in (f"{s['config']}: {x}" for x in s["errors"])]
    if failures:
        lines += ["", "Failures:", ""] + [f"- {f}" for f in failures]
    pngs = [outdir / f"{stem}.png"] + ([outdir / f"{stem}.ablation.png"] if _ablation_grid(data["summaries"]) else [])
    for png in pngs:
        if png.exists():
            lines += ["", f"![{model['name']}]({os.path.relpath(png, md_dir)})"]
    return lines + [""]


def _found_by(f: FloorSummary) -> str:
    """Where a floor row's smallest budget comes from: flexnn@min's search, or the grid's smallest held."""
    if f.found_by == "search":
        return "search"
    grid = "-" if f.min_budget is None else "grid"
    return grid + (" (flexnn@min did not hold)" if f.search_held is False else "")


def _floor_table(results: list[dict[str, Any]]) -> list[str]:
    """Per model: the activation floor (bench/floor.py) beside the smallest budget FlexNN held, and how it
    ran there; from the summaries with today's rule (results written by older versions stored their own)."""
    lines = ["| model | activation floor MB | smallest budget FlexNN held MB | found by | budget / floor | latency ms "
             "| x NCNN-Default | peak RSS over idle MB | search probes | search s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for data in results:
        f = floor_summary([Summary(**s) for s in data["summaries"]])
        ratio, latency_ratio, seconds = f.min_budget_over_floor, f.ratio_to_default, f.search_seconds
        lines.append(f"| {data['model']['name']} | {_mb(f.activation_floor_bytes)} | {_mb(f.min_budget)} | {_found_by(f)} "
                     f"| {'-' if ratio is None else f'{ratio:.2f}'} | {_ms(f.latency_median_ms)} "
                     f"| {'-' if latency_ratio is None else f'{latency_ratio:.3f}'} | {_mb(f.peak_over_idle_bytes)} "
                     f"| {f.search_probes or '-'} | {'-' if seconds is None else f'{seconds:.0f}'} |")
    return lines + ["", "The floor is the most bytes of activations that coexist at any step of the unsliced model's "
                    f"profile (reported by the {' or '.join(UNSLICED)} run; inputs read in place from the caller's array "
                    "included): no slicing goes below it. The smallest budget is "
                    "`flexnn@min`'s when it ran and held (found by `slice --budget min`'s search: its probes and seconds), "
                    "else the smallest of the run's grid; held means FlexNN's outputs matched and its counted memory and peak "
                    "RSS over idle fit it. Latency, its ratio to NCNN-Default and the peak RSS over idle are FlexNN's at that "
                    "budget.", ""]


def _machines(results: list[dict[str, Any]]) -> list[str]:
    """What the results were measured on: one line, or one per machine naming its models when they differ."""
    machines: dict[str, list[str]] = {}
    for data in results:
        described = "; ".join(f"{k} {v}" for k, v in data.get("machine", {}).items())
        machines.setdefault(described, []).append(data["model"]["name"])
    if len(machines) == 1:
        return [f"Machine: {next(iter(machines))}", ""]
    return ["Machines:", ""] + [f"- {described}: {', '.join(models)}" for described, models in machines.items()] + [""]


def render_results_md(outdir: Path, md_path: Path) -> None:
    """docs/RESULTS.md from every STEM.results.json in `outdir`, with the machines they were measured on."""
    results = [json.loads(p.read_text()) for p in sorted(outdir.glob(f"*{RESULTS_SUFFIX}"))]
    lines = ["# Results", "",
             "Generated by `python -m flexnn_ncnn.bench` (do not edit by hand; docs/EVALUATION.md says what each column means).",
             ""]
    if results:
        lines += _machines(results)
    missing = sorted(set(RUNTIME_MODES) - {s["family"] for d in results for s in d["summaries"]})
    if missing:
        lines += [f"Not measured in these runs: {', '.join(missing)} (they run in the FlexNN runtime).", ""]
    lines += ["Baselines: " + ", ".join(STOCK_CONFIGS) + ".", ""]
    if results:
        lines += _floor_table(results)
    for data in results:
        lines += _model_section(data, outdir, md_path.parent)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(md_path, lambda f: f.write("\n".join(lines).encode()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.bench.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path, help="the benchmark's output folder (with STEM.results.json files)")
    parser.add_argument("--results-md", type=Path, default=Path("docs/RESULTS.md"), help="where to write (default docs/RESULTS.md)")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    render_results_md(args.outdir, args.results_md)
    print(f"wrote {args.results_md}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
