"""`python -m flexnn_ncnn.racehunt`: thousands of pipelined inferences hunting races, hangs and wrong outputs.

    python -m flexnn_ncnn.racehunt [--inferences 10000] [--python-inferences 1000] [--report docs/results/racehunt.json]

Two parts, on the same models (a real-size zoo model and three of the project's structures, one of
them a detector whose output size depends on the input's values):

1. Under ThreadSanitizer (build/host-tsan, `python -m flexnn_ncnn.build --sanitizer tsan`): the
   runtime's stress program prepares the model, then runs it pipelined (the loading thread beside
   the computing threads) with arena canaries on, switching the budget between the smallest feasible,
   twice it and a generous one every SWITCH_EVERY inferences, while a second thread reads the plan and
   the arena's size throughout (what Session.stats() reads). Every output must equal the first bit
   for bit, the first must equal stock NCNN's on the original model, and the sanitizer must say nothing.
2. From Python, on the host build: a Session per model switching budgets the same way while a second
   Python thread calls stats() throughout; every output is compared with stock NCNN's for its input
   (seeded inputs, cycled).

A hang is a finding (a part's watchdog), as is a crash, a sanitizer report, an error, a mismatch.
The report (JSON, and markdown beside it) gives each model's counts, time and findings; the exit code
is 1 when there is any finding.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm import tqdm

from . import build, models, planning, sidecar
from .bench.harness import relative_error
from .bench.measure import model_inputs
from .cli import UserError, add_logging_args, run_main, setup_logging
from .files import atomic_write
from .ncnn_model.stock import run_stock
from .prepare import RuntimeOptions, prepare_model, write_plan_file
from .session import Session

log = logging.getLogger(__name__)

# (model, share of the inferences): the real-size model is the slow one under the sanitizer
MODELS = (("mobilenetv2", 0.01), ("struct:resnet", 0.37), ("struct:yolov3_tiny", 0.2), ("struct:squeezenet", 0.42))
SWITCH_EVERY = 25
THREADS = 2
GENEROUS = 1 << 30
# the sanitizer build's NCNN has SSE2 kernels only (build.py): within this of the wheel's AVX ones;
# the host build computes as the wheel does
RTOL = {"tsan": 1e-3, "python": 1e-4}
SECONDS_PER_INFERENCE = 20.0  # the watchdog: far beyond a real-size model under TSAN on a busy 2-core machine
PYTHON_INPUTS = 4


@dataclass
class Result:
    model: str
    part: str  # "tsan" or "python"
    inferences: int = 0
    budget_switches: int = 0
    observations: int = 0  # reads of the plan / stats() beside the runs
    max_rel_error: float | None = None
    seconds: float = 0.0
    findings: list[str] = field(default_factory=list)


def _stress_program(build_root: Path) -> Path:
    program = build_root / "host-tsan" / "native" / "tests_native" / "runtime_stress"
    if not program.exists():
        raise UserError(f"{program} is missing: run `python -m flexnn_ncnn.build --sanitizer tsan` first")
    return program


def hunt_tsan(description: dict[str, Any], inferences: int, program: Path, folder: Path) -> Result:
    """Part 1 on one model (see the module's docstring)."""
    result = Result(description["name"], "tsan")
    (blob_in, x), = model_inputs(description, 0).items()  # the stress program feeds one input
    blob_out = description["outputs"][0]
    np.save(folder / "in.npy", x)
    args = [str(program), str(description["param"]), str(description["bin"]), str(folder / "in.npy"), blob_in, blob_out,
            str(THREADS), str(inferences), str(SWITCH_EVERY), "min", "min*2", str(GENEROUS),
            f"transformed={folder / 'model.transformed'}", "canaries=1", "observe=1", f"out={folder / 'out.npy'}"]
    start = time.perf_counter()
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60 + inferences * SECONDS_PER_INFERENCE)
    except subprocess.TimeoutExpired:
        result.findings.append(f"hang: no result after {60 + inferences * SECONDS_PER_INFERENCE:.0f} s")
        return result
    finally:
        result.seconds = time.perf_counter() - start
    if proc.returncode != 0 or proc.stderr:
        # a sanitizer's report starts with a line of '=' then the warning; an error is one line
        lines = [l for l in proc.stderr.splitlines() if l.strip() and not set(l) <= {"="}]
        result.findings.append(f"exit code {proc.returncode}: {lines[0] if lines else 'no message'}")
        return result
    report = json.loads(proc.stdout.splitlines()[-1])
    result.inferences = report["inferences"]
    result.budget_switches = (inferences - 1) // SWITCH_EVERY
    result.observations = report["observations"]
    ref = run_stock(description["param"], description["bin"], {blob_in: x}, [blob_out], fp32=False)
    _compare(result, ref, {blob_out: np.load(folder / "out.npy")}, RTOL["tsan"])
    return result


def _compare(result: Result, ref: dict[str, np.ndarray], got: dict[str, np.ndarray], rtol: float) -> None:
    try:
        err = relative_error(ref, got)
    except ValueError as e:
        result.findings.append(f"mismatch: {e}")
        return
    result.max_rel_error = max(err, result.max_rel_error or 0.0)
    if not err <= rtol:
        result.findings.append(f"mismatch: outputs differ from stock NCNN's by {err:.2e} x max|ref| (> {rtol:g})")


class _StatsReader:
    """A second Python thread calling session.stats() until stopped, each answer within the budgets;
    what it raised is kept."""

    def __init__(self, session: Session):
        self.calls = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(session,), daemon=True)
        self._thread.start()

    def _read(self, session: Session) -> None:
        try:
            while not self._stop.is_set():
                stats = session.stats()
                # 0 while a budget switch holds no arena (the old one goes before the new one comes)
                if not 0 <= stats["arena_bytes"] <= GENEROUS:
                    raise AssertionError(f"stats() gave an arena of {stats['arena_bytes']} B")
                self.calls += 1
        except Exception as e:  # noqa: BLE001 - whatever the reader hits is the finding
            self.error = f"{type(e).__name__}: {e}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def hunt_python(description: dict[str, Any], inferences: int, folder: Path) -> Result:
    """Part 2 on one model (see the module's docstring)."""
    result = Result(description["name"], "python")
    shapes = {i["name"]: tuple(i["shape"]) for i in description["inputs"]}
    content = prepare_model(description["param"], description["bin"], GENEROUS, shapes, RuntimeOptions(threads=THREADS))
    plan = folder / f"model{sidecar.SUFFIX}"
    write_plan_file(content, plan)
    session = Session(plan)
    try:
        session.set_budget(1)
        raise UserError(f"{description['name']}: a budget of 1 B was accepted")
    except planning.InfeasibleBudget as e:
        smallest = e.min_feasible_budget
    budgets = (smallest, 2 * smallest, GENEROUS)
    feeds = [model_inputs(description, 100 + k) for k in range(PYTHON_INPUTS)]
    refs = [run_stock(description["param"], description["bin"], feed, description["outputs"], fp32=False) for feed in feeds]
    start = time.perf_counter()
    reader = _StatsReader(session)
    try:
        for i in range(inferences):
            if i % SWITCH_EVERY == 0:
                session.set_budget(budgets[i // SWITCH_EVERY % len(budgets)])
                result.budget_switches += i > 0
            _compare(result, refs[i % PYTHON_INPUTS], session.run(feeds[i % PYTHON_INPUTS]), RTOL["python"])
            result.inferences += 1
            if result.findings:
                break
    except (UserError, RuntimeError) as e:
        result.findings.append(f"inference {result.inferences}: {e}")
    finally:
        reader.stop()
        result.seconds = time.perf_counter() - start
    result.observations = reader.calls
    if reader.error:
        result.findings.append(f"stats() beside the runs: {reader.error}")
    return result


def markdown(results: list[Result], command: str) -> str:
    rows = [f"| {r.model} | {r.part} | {r.inferences} | {r.budget_switches} | {r.observations} | "
            f"{'-' if r.max_rel_error is None else f'{r.max_rel_error:.1e}'} | {r.seconds:.0f} s | "
            f"{'; '.join(r.findings) or 'none'} |" for r in results]
    return "\n".join([f"`{command}`", "",
                      "| model | part | inferences | budget switches | plan/stats reads beside | max rel. error vs stock | time | findings |",
                      "|---|---|---|---|---|---|---|---|", *rows, ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexnn_ncnn.racehunt", description=__doc__.split("\n\n")[0],
                                     epilog="Report: JSON at --report, markdown beside it (.md). Exit code 1 on any finding.")
    parser.add_argument("--inferences", type=int, default=10000, help="pipelined inferences under TSAN, shared by the models (default %(default)s)")
    parser.add_argument("--python-inferences", type=int, default=1000, help="inferences from Python, shared the same way (default %(default)s)")
    parser.add_argument("--models", nargs="+", default=[m for m, _ in MODELS], metavar="NAME",
                        help="models (python -m flexnn_ncnn.models names); default: %(default)s")
    parser.add_argument("--report", type=Path, default=Path("racehunt.json"), help="the JSON report (default %(default)s)")
    parser.add_argument("--build-root", type=Path, default=build.BUILD_ROOT, help="where the builds are (default: %(default)s)")
    add_logging_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.inferences < 0 or args.python_inferences < 0:
        raise UserError("--inferences and --python-inferences must be >= 0")
    program = _stress_program(args.build_root) if args.inferences else None
    shares = dict(MODELS)
    weights = [shares.get(m, max(shares.values())) for m in args.models]
    counts = [tuple(max(1, round(n * w / sum(weights))) if n else 0 for n in (args.inferences, args.python_inferences))
              for w in weights]
    results: list[Result] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="flexnn-racehunt-") as scratch:
        for name, (n_tsan, n_python) in tqdm(list(zip(args.models, counts)), desc="racehunt", unit="model"):
            folder = Path(scratch) / models.file_stem(name)
            description = models.read_description(models.generate(name, folder))
            if program:
                (folder / "tsan").mkdir()
                results.append(hunt_tsan(description, n_tsan, program, folder / "tsan"))
                log.info("%s under TSAN: %s", name, results[-1].findings or "no finding")
            if n_python:
                (folder / "python").mkdir()
                results.append(hunt_python(description, n_python, folder / "python"))
                log.info("%s from Python: %s", name, results[-1].findings or "no finding")
    command = "python -m flexnn_ncnn.racehunt " + " ".join(argv if argv is not None else sys.argv[1:])
    report = {"command": command.strip(), "seconds": round(time.perf_counter() - start, 1),
              "inferences": sum(r.inferences for r in results), "findings": sum(len(r.findings) for r in results),
              "results": [asdict(r) for r in results]}
    atomic_write(args.report, lambda f: f.write((json.dumps(report, indent=1) + "\n").encode()))
    atomic_write(args.report.with_suffix(".md"), lambda f: f.write(markdown(results, report["command"]).encode()))
    print(markdown(results, report["command"]))
    print(f"{report['inferences']} inferences in {report['seconds']:.0f} s, {report['findings']} finding(s); report: {args.report}")
    return 1 if report["findings"] else 0


if __name__ == "__main__":
    sys.exit(run_main(main))
