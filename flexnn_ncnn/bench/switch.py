"""`python -m flexnn_ncnn.bench.switch SIDECAR --budgets 100MB,300MB,200MB,500MB`: budget adaptation.

One Session is switched through the budgets in order (the paper's demo sequence, Fig. 14). For each,
it reports the switch (`set_budget`: a ladder lookup or a re-plan of the stored profile, then the
arena rebuilt), the first inference after it (which also builds the layers the new plan pins), and the
steady latency.
Each step's outputs are checked against stock NCNN on the same model files, and the runtime's own
count (arena + outside it) against what the budget leaves it beside the resident memory the runtime
does not count (`counted_limit_bytes`). Either failing fails the run: exit code 1.

The whole trace is written to OUT/STEM.switch.json (every switch and inference), STEM.switch.csv (one
row per inference) and STEM.switch.png (latency, budget and counted memory against wall time, the
switches marked), STEM being the sidecar's model.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, BinaryIO, Sequence

from .. import sidecar
from ..cli import UserError, add_logging_args, run_main, setup_logging
from ..files import atomic_write_all
from ..ncnn_model.sample_inputs import sample_inputs
from ..ncnn_model.stock import run_stock
from ..units import parse_size
from .harness import relative_error
from .report import pyplot

RTOL = 1e-4  # DESIGN.md section 5
SUFFIX = ".switch"


@dataclass(frozen=True)
class Switch:
    """One `set_budget`: when it started (seconds since the trace's first switch) and how long it took."""

    time_s: float
    budget: int
    switch_ms: float


@dataclass(frozen=True)
class Inference:
    """One inference of the trace. `counted_bytes` is the arena then plus the session's peak outside it so far;
    `counted_limit_bytes` what the budget leaves it, less the resident memory the runtime does not count."""

    index: int
    time_s: float  # when it started, seconds since the trace's first switch
    budget: int
    latency_ms: float
    arena_bytes: int
    counted_bytes: int
    counted_limit_bytes: int
    after_switch: bool  # the first inference after a switch
    relative_error: float | None  # against stock NCNN, checked on the first inference after a switch


@dataclass(frozen=True)
class Step:
    """One budget of the sequence: its switch, the first inference after it, the steady ones, and the checks."""

    budget: int
    switch_ms: float
    first_inference_ms: float
    latency_median_ms: float | None  # of the steady inferences (None without any)
    counted_bytes: int
    counted_limit_bytes: int
    arena_bytes: int
    relative_error: float  # of the first inference's outputs against stock NCNN
    ok: bool  # outputs within RTOL of stock NCNN's, every inference's count within its limit


@dataclass(frozen=True)
class SwitchTrace:
    switches: tuple[Switch, ...]
    inferences: tuple[Inference, ...]

    def steps(self) -> list[Step]:
        """Per switch, the inferences that followed it until the next."""
        groups: list[list[Inference]] = []
        for i in self.inferences:
            if i.after_switch:
                groups.append([])
            groups[-1].append(i)
        out = []
        for switch, group in zip(self.switches, groups):
            first, last, steady = group[0], group[-1], [i.latency_ms for i in group[1:]]
            assert first.relative_error is not None  # checked on every first inference after a switch
            out.append(Step(switch.budget, switch.switch_ms, first.latency_ms, statistics.median(steady) if steady else None,
                            last.counted_bytes, last.counted_limit_bytes, last.arena_bytes, first.relative_error,
                            first.relative_error <= RTOL and all(i.counted_bytes <= i.counted_limit_bytes for i in group)))
        return out

    def to_json(self) -> dict[str, Any]:
        return {"steps": [asdict(s) for s in self.steps()], "switches": [asdict(s) for s in self.switches],
                "inferences": [asdict(i) for i in self.inferences]}


def switch_trace(sidecar_path: Path, budgets: Sequence[int], loops: int, seed: int = 0) -> SwitchTrace:
    """Run the switching sequence: per budget, the switch, then 1 + `loops` inferences."""
    from ..session import Session

    session = Session(sidecar_path)
    inputs = sample_inputs(session.input_shapes, seed=seed)
    param, bin_path = session.sidecar.model_files(sidecar_path)
    reference = run_stock(param, bin_path, inputs, session.outputs, fp32=not session.sidecar.target.fp16,
                          num_threads=session.sidecar.target.threads)
    switches: list[Switch] = []
    inferences: list[Inference] = []
    origin = time.perf_counter()
    for budget in budgets:
        start = time.perf_counter()
        session.set_budget(budget)
        switches.append(Switch(start - origin, budget, (time.perf_counter() - start) * 1e3))
        for n in range(1 + loops):
            begin = time.perf_counter()
            outputs = session.run(inputs)
            latency_ms = (time.perf_counter() - begin) * 1e3
            stats = session.stats()
            inferences.append(Inference(len(inferences), begin - origin, budget, latency_ms, int(stats["arena_bytes"]),
                                        int(stats["counted_bytes"]), int(stats["counted_limit_bytes"]), n == 0,
                                        relative_error(reference, outputs) if n == 0 else None))
    return SwitchTrace(tuple(switches), tuple(inferences))


def _write_csv(trace: SwitchTrace, f: BinaryIO) -> None:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=[x.name for x in fields(Inference)])
    writer.writeheader()
    writer.writerows(asdict(i) for i in trace.inferences)
    f.write(text.getvalue().encode())


def _plot(plt: Any, trace: SwitchTrace, title: str) -> Any:
    """Latency over wall time above, budget and counted memory below; each switch a vertical line."""
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5), height_ratios=(3, 2))
    fig.suptitle(f"{title}: budget adaptation")
    t = [i.time_s for i in trace.inferences]
    top.plot(t, [i.latency_ms for i in trace.inferences], marker=".", label="inference")
    first = [i for i in trace.inferences if i.after_switch]
    top.scatter([i.time_s for i in first], [i.latency_ms for i in first], color="tab:red", zorder=3, label="first after a switch")
    top.set_ylabel("latency (ms)")
    # a budget holds from its switch until the next one; counted memory as measured after each inference
    end = max(t[-1] if t else 0.0, trace.switches[-1].time_s)
    bottom.step([s.time_s for s in trace.switches] + [end], [s.budget / 1e6 for s in trace.switches] + [trace.switches[-1].budget / 1e6],
                where="post", label="budget")
    bottom.plot(t, [i.counted_bytes / 1e6 for i in trace.inferences], marker=".", linestyle="none", label="counted\n(arena + outside)")
    bottom.set_ylabel("MB")
    bottom.set_ylim(bottom=0)
    bottom.set_xlabel("wall time since the first switch (s)")
    for ax in (top, bottom):
        for s in trace.switches:
            ax.axvline(s.time_s, color="gray", linestyle=":", linewidth=1)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    for s in trace.switches:  # above the plot: where to, and how long the switch took
        top.annotate(f"{s.budget / 1e6:g} MB\n{s.switch_ms:.1f} ms", (s.time_s, 1), xycoords=("data", "axes fraction"),
                     xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7, color="dimgray")
    fig.tight_layout()
    return fig


def write_trace(trace: SwitchTrace, prefix: Path, title: str) -> list[Path]:
    """PREFIX.json, PREFIX.csv and (when matplotlib is there) PREFIX.png, written atomically; returns the paths."""
    data = (json.dumps(trace.to_json(), indent=1) + "\n").encode()
    outputs = {prefix.with_name(prefix.name + ".json"): lambda f: f.write(data),
               prefix.with_name(prefix.name + ".csv"): lambda f: _write_csv(trace, f)}
    plt = pyplot(f"the switching trace of {title}")
    fig = _plot(plt, trace, title) if plt else None
    if fig is not None:
        outputs[prefix.with_name(prefix.name + ".png")] = lambda f: fig.savefig(f, format="png", dpi=120)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_write_all(outputs)
    finally:
        if fig is not None:
            plt.close(fig)
    return list(outputs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.bench.switch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sidecar", type=Path, help="MODEL.flexnn.plan.json written by slice or prepare")
    parser.add_argument("--budgets", required=True, help="comma-separated budgets in switching order, e.g. 100MB,300MB")
    parser.add_argument("--loops", type=int, default=3, help="steady inferences after each switch's first (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON line per budget instead of the table")
    parser.add_argument("-o", "--output", type=Path, default=Path("bench-results"),
                        help="folder of STEM.switch.json/.csv/.png (default %(default)s)")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    budgets = [parse_size(b) for b in args.budgets.split(",") if b.strip()]
    if not budgets:
        raise UserError("--budgets names no budget")
    if args.loops < 0:
        raise UserError("--loops must be at least 0")
    trace = switch_trace(args.sidecar, budgets, args.loops)
    stem = args.sidecar.name.removesuffix(sidecar.SUFFIX)
    written = write_trace(trace, args.output / f"{stem}{SUFFIX}", stem)
    steps = trace.steps()
    if args.json:
        for step in steps:
            print(json.dumps(asdict(step)))
    else:
        print(f"{'budget':>12}  {'switch':>9}  {'1st run':>9}  {'steady':>9}  {'counted':>12}  {'rel. error':>10}")
        for s in steps:
            steady = f"{s.latency_median_ms:.1f} ms" if s.latency_median_ms is not None else "-"
            print(f"{s.budget / 1e6:>9.1f} MB  {s.switch_ms:>6.1f} ms  {s.first_inference_ms:>6.1f} ms  "
                  f"{steady:>9}  {s.counted_bytes / 1e6:>9.1f} MB  {s.relative_error:>10.1e}"
                  f"{'' if s.ok else '  FAILED'}")
        for path in written:
            print(f"wrote {path}")
    return 0 if all(s.ok for s in steps) else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
