"""The benchmark's orchestration: every configuration in its own child process, rounds interleaved,
memory sampled from outside, every output checked against stock NCNN.

Invariants: NCNN-Default runs first in every round, so each ratio compares samples from the same
rounds; the weight file is evicted from the page cache before each child, so every child starts
cold; a child that crashes, prints no JSON line, or returns outputs off the oracle by more than the
tolerance is a failure, and the run as a whole fails. A baseline with a smallest budget of its own
(configs.MAY_BE_INFEASIBLE) may instead report its budget infeasible: nothing is measured there and
it is not a failure. That smallest budget depends on the model's sizes, not on timings, so later
rounds skip the configuration, and the family's budgets below the smallest it reported are not run.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..ncnn_model.stock import run_stock
from ..units import format_size
from . import pagecache
from .configs import MAY_BE_INFEASIBLE, REFERENCE, UNSLICED, ChildSettings, Configuration, child_command
from .device import to_record
from .measure import model_inputs, status_bytes

log = logging.getLogger(__name__)

FP32_TOLERANCE = 1e-4  # max |got - ref| <= this x max |ref| (DESIGN.md §5)
FP16_TOLERANCE = 1e-2  # NCNN's fp16 storage rounds weights and activations to 11 bits
SAMPLE_SECONDS = 0.005
# optional fields a runtime child may report for the overhead table (paper Table 2): medians across runs
OVERHEAD_FIELDS = ("slice_ms", "prepare_ms", "plan_ms", "transformed_weight_bytes")
REQUIRED_FIELDS = ("config", "latency_ms", "rss_idle_bytes", "vm_hwm_bytes", "hwm_reset", "outputs_npz")


@dataclass
class ChildRun:
    """One child process: its JSON record and what the parent saw from outside."""

    config: str
    family: str
    budget: int | None
    round: int
    returncode: int
    record: dict[str, Any] | None = None
    sampled_rss_peak_bytes: int | None = None   # None where the parent could not sample (device runs)
    page_cache_peak_bytes: int | None = None
    weight_files: list[str] = field(default_factory=list)  # whose page cache was counted
    max_rel_error: float | None = None
    load_average: float | None = None          # the machine's 1-minute load when the child started
    infeasible: str = ""                       # the child's message when its budget is below what it accepts
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class Summary:
    """A configuration over all its rounds: pooled latency samples, worst-case memory."""

    config: str
    family: str
    budget: int | None
    ok: bool
    runs: int
    latency_median_ms: float | None = None
    latency_p10_ms: float | None = None
    latency_p90_ms: float | None = None
    latency_min_ms: float | None = None
    latency_max_ms: float | None = None
    ratio_to_default: float | None = None
    load_ms: float | None = None
    peak_over_idle_bytes: int | None = None          # memory (b): VmHWM - RSS before loading
    sampled_over_idle_bytes: int | None = None       # memory (b) cross-check: the parent's RSS samples
    hwm_reset: bool | None = None
    page_cache_peak_bytes: int | None = None         # memory (c): the weight file's resident pages
    counted_bytes: int | None = None                 # memory (a): the runtime's own count, if it reports one
    load_wait_median_ms: float | None = None
    loader_cpu_median_ms: float | None = None        # the loading thread's CPU time per inference
    max_rel_error: float | None = None
    activation_floor_bytes: int | None = None        # of the profile the child ran (bench/floor.py), if it reports one
    infeasible: str = ""                             # the budget is below what this baseline accepts: nothing measured
    smallest: bool = False                           # at the smallest budget its child found (`flexnn@min`): `budget` is it
    min_search: dict[str, Any] | None = None         # that child's search ({"probes": [[bytes, fits], ...], "seconds"})
    overhead: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FloorSummary:
    """A model's activation floor beside the smallest budget FlexNN ran within (issue 5's target ratio 1.5-2x),
    and how FlexNN ran there."""

    activation_floor_bytes: int | None  # the model's own: reported by an UNSLICED configuration's child
    min_budget: int | None              # the smallest budget of a `flexnn` run with correct outputs, counted within it
    min_budget_config: str | None
    found_by: str | None = None         # "search": flexnn@min's (`slice --budget min`); "grid": the smallest --budgets held
    search_held: bool | None = None     # whether flexnn@min held its budget (None: it did not run)
    latency_median_ms: float | None = None  # of the configuration at min_budget
    ratio_to_default: float | None = None
    peak_over_idle_bytes: int | None = None
    search_probes: int | None = None    # flexnn@min's search, when it is the one at min_budget
    search_seconds: float | None = None

    @property
    def min_budget_over_floor(self) -> float | None:
        if self.activation_floor_bytes and self.min_budget:
            return self.min_budget / self.activation_floor_bytes
        return None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "min_budget_over_floor": self.min_budget_over_floor}


def exceeds_budget(s: Summary) -> bool:
    """Its counted memory or its peak RSS over idle (each where reported) exceeded its budget."""
    return s.budget is not None and any(b is not None and b > s.budget for b in (s.counted_bytes, s.peak_over_idle_bytes))


def floor_summary(summaries: list[Summary]) -> FloorSummary:
    """The floor reported by the configurations that ran the model unsliced, and the smallest budget measured
    to hold: a `flexnn` configuration whose runs all passed and whose counted memory and peak RSS over
    idle (each where reported) fit it; flexnn@min's when it held, else the grid's smallest."""
    floors = [s.activation_floor_bytes for s in summaries if s.family in UNSLICED and s.activation_floor_bytes is not None]
    held = [s for s in summaries if s.family == "flexnn" and s.ok and s.budget is not None and not exceeds_budget(s)]
    searched = [s for s in summaries if s.family == "flexnn" and s.smallest]
    chosen = next((s for s in held if s.smallest), None) or min(held, key=lambda s: s.budget or 0, default=None)
    floor = max(floors) if floors else None
    if chosen is None:
        return FloorSummary(floor, None, None, search_held=False if searched else None)
    search = chosen.min_search or {}
    return FloorSummary(floor, chosen.budget, chosen.config, "search" if chosen.smallest else "grid",
                        chosen.smallest if searched else None, chosen.latency_median_ms, chosen.ratio_to_default,
                        chosen.peak_over_idle_bytes, len(search["probes"]) if "probes" in search else None,
                        search.get("seconds"))


@dataclass
class BenchResult:
    model: dict[str, Any]
    settings: dict[str, Any]
    runs: list[ChildRun]
    summaries: list[Summary]

    @property
    def failures(self) -> list[ChildRun]:
        return [r for r in self.runs if not r.ok]

    @property
    def over_budget(self) -> list[Summary]:
        """FlexNN's configurations (`flexnn`, each budget) that ran but did not hold their budget."""
        return [s for s in self.summaries if s.family == "flexnn" and s.ok and exceeds_budget(s)]

    @property
    def max_load_average(self) -> float | None:
        loads = [r.load_average for r in self.runs if r.load_average is not None]
        return max(loads) if loads else None

    def to_json(self) -> dict[str, Any]:
        return {"model": {k: str(v) if isinstance(v, Path) else v for k, v in self.model.items()},
                "settings": self.settings, "max_load_average": self.max_load_average,
                "activation_floor": floor_summary(self.summaries).to_json(), "summaries": [asdict(s) for s in self.summaries],
                "runs": [asdict(r) for r in self.runs]}


class _Sampler(threading.Thread):
    """Polls a child's VmRSS every `interval`, and the page cache of the weight files less often, so
    that sampling costs at most ~1/CACHE_COST_RATIO of a core (mincore on 100 MB takes ~2 ms); keeps
    the maxima (the RSS's of the child's last program: the runtime's child execs into its session).
    Weight files: the model's .bin, and any .bin or .transformed the child holds open (a
    runtime child streams from its sliced model and its pre-transformed weights)."""

    CACHE_MIN_INTERVAL = 0.1
    CACHE_COST_RATIO = 50

    def __init__(self, pid: int, weight_file: Path, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.weight_files = {weight_file}
        self.rss_peak = self.cache_peak = 0
        self.stop = threading.Event()

    def _open_weight_files(self) -> None:
        try:
            fds = os.listdir(f"/proc/{self.pid}/fd")
        except OSError:
            return  # exited
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except OSError:
                continue
            if target.endswith((".bin", ".transformed")):
                self.weight_files.add(Path(target))

    def _sample_cache(self) -> float:
        """Samples the page cache; returns how long to wait before the next cache sample."""
        start = time.perf_counter()
        self._open_weight_files()
        cached = 0
        for path in self.weight_files:
            try:
                cached += pagecache.resident_bytes(path)
            except OSError:
                pass  # removed meanwhile: it holds no cache
        self.cache_peak = max(self.cache_peak, cached)
        return max(self.CACHE_MIN_INTERVAL, (time.perf_counter() - start) * self.CACHE_COST_RATIO)

    def _image(self) -> bytes:
        """The command line of the child's current program ("" once it exited)."""
        try:
            return Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except OSError:
            return b""

    def run(self) -> None:
        next_cache = 0.0
        image = self._image()
        while True:
            now = self._image()  # before the RSS: a sample taken before an exec is never the new program's
            rss = status_bytes("VmRSS", self.pid)
            if now and now != image:  # the child exec'd (the runtime's, into its session): measure the new program
                image, self.rss_peak = now, rss
            self.rss_peak = max(self.rss_peak, rss)
            if time.perf_counter() >= next_cache:
                next_cache = time.perf_counter() + self._sample_cache()
            if self.stop.wait(self.interval):
                self._sample_cache()  # the child has exited: what it left in the cache
                return


def relative_error(ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> float:
    """max over outputs of max |got - ref| / max |ref|; a missing or reshaped output is an error."""
    worst = 0.0
    for name, r in ref.items():
        if name not in got:
            raise ValueError(f"output {name} is missing")
        g = got[name]
        if g.shape != r.shape:
            raise ValueError(f"output {name} has shape {g.shape}, stock NCNN's is {r.shape}")
        scale = float(np.abs(r).max()) if r.size else 0.0
        diff = float(np.abs(g - r).max()) if r.size else 0.0
        err = diff / scale if scale else diff
        worst = max(worst, err if np.isfinite(err) else float("inf"))
    return worst


def _parse_record(stdout: str) -> dict[str, Any]:
    """The child's last stdout line, which must be a JSON object with every required field, or one
    whose `infeasible` says why the budget is refused."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("printed no JSON line")
    try:
        record = json.loads(lines[-1])
    except ValueError:
        raise ValueError(f"last line is not JSON: {lines[-1][:200]!r}") from None
    if isinstance(record, dict) and isinstance(record.get("infeasible"), str):
        return record
    missing = [k for k in REQUIRED_FIELDS if not isinstance(record, dict) or k not in record]
    if missing:
        raise ValueError(f"JSON line lacks {', '.join(missing)}")
    if not record["latency_ms"]:
        raise ValueError("latency_ms is empty")
    return record


def run_child(config: Configuration, settings: ChildSettings, description: dict[str, Any], oracle: dict[str, np.ndarray],
              tolerance: float, workdir: Path, round_: int, runtime_command: str | None,
              sample_seconds: float = SAMPLE_SECONDS) -> ChildRun:
    outputs = workdir / f"{config.name.replace('@', '_')}.r{round_}.npz"
    command = child_command(config, settings, outputs, runtime_command)
    weight_file = Path(description["bin"])
    pagecache.evict(weight_file)
    load_average = os.getloadavg()[0]
    log.info("%s (round %d): %s", config.name, round_, " ".join(command))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = _Sampler(proc.pid, weight_file, sample_seconds)
    sampler.start()
    try:
        stdout, stderr = proc.communicate()
    finally:
        if proc.poll() is None:  # interrupted: never leave a child running
            proc.kill()
            proc.wait()
        sampler.stop.set()
        sampler.join()
    run = ChildRun(config.name, config.family, config.budget, round_, proc.returncode,
                   sampled_rss_peak_bytes=sampler.rss_peak, page_cache_peak_bytes=sampler.cache_peak,
                   weight_files=sorted(map(str, sampler.weight_files)), load_average=load_average)
    if proc.returncode != 0:
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        run.error = f"exited with code {proc.returncode}: {tail or '(no stderr)'}"
        return run
    try:
        run.record = _parse_record(stdout)
    except ValueError as e:
        run.error = str(e)
        return run
    if isinstance(run.record.get("infeasible"), str):
        if config.family in MAY_BE_INFEASIBLE:
            run.infeasible = run.record["infeasible"]
        else:
            run.error = f"refused its budget: {run.record['infeasible']}"
        return run
    if config.smallest:  # the budget is the one the child found
        found = run.record.get("budget")
        if not isinstance(found, int) or found <= 0:
            run.error = f"reported no budget: {config.name}'s child must report the budget it found as `budget`"
            return run
        run.budget = found
    check_outputs(run, oracle, tolerance)
    return run


def load_outputs(path: Path) -> dict[str, np.ndarray]:
    """A child's outputs: an .npz, or a folder of BLOB.npy files (what the device binary writes)."""
    if path.is_dir():
        return {p.stem: np.load(p) for p in sorted(path.glob("*.npy"))}
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}


def check_outputs(run: ChildRun, oracle: dict[str, np.ndarray], tolerance: float, base: Path | None = None) -> None:
    """Sets `run.max_rel_error`, and `run.error` when the outputs are unreadable or off the oracle."""
    assert run.record is not None
    path = Path(run.record["outputs_npz"])
    try:
        run.max_rel_error = relative_error(oracle, load_outputs(path if base is None else base / path))
    except (ValueError, OSError) as e:
        run.error = f"outputs {path}: {e}"
        return
    if not run.max_rel_error <= tolerance:
        run.error = f"wrong output: max relative error {run.max_rel_error:.3g} > {tolerance:g} against stock NCNN"


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def summarise(runs: list[ChildRun], configs: list[Configuration]) -> list[Summary]:
    summaries = []
    for config in configs:
        mine = [r for r in runs if r.config == config.name]
        good = [r for r in mine if r.ok and r.record and not r.infeasible]
        budget, search = config.budget, None
        if config.smallest:  # each round's child searched again: the largest budget found, where they differ
            found = sorted({r.budget for r in good if r.budget is not None})
            if len(found) > 1:
                log.warning("%s: the rounds found different budgets: %s", config.name, ", ".join(map(format_size, found)))
            budget = found[-1] if found else None
            search = next((r.record.get("min_search") for r in good if r.record and r.budget == budget), None)
        s = Summary(config.name, config.family, budget, ok=bool(mine) and all(r.ok for r in mine),
                    runs=len(mine), infeasible=next((r.infeasible for r in mine if r.infeasible), ""),
                    errors=[f"round {r.round}: {r.error}" for r in mine if not r.ok], smallest=config.smallest,
                    min_search=search)
        if good:
            latencies = [v for r in good for v in r.record["latency_ms"]]
            s.latency_median_ms = statistics.median(latencies)
            s.latency_p10_ms, s.latency_p90_ms = _percentile(latencies, 10), _percentile(latencies, 90)
            s.latency_min_ms, s.latency_max_ms = min(latencies), max(latencies)
            loads = [r.record["load_ms"] for r in good if r.record.get("load_ms") is not None]
            s.load_ms = statistics.median(loads) if loads else None
            s.peak_over_idle_bytes = max(r.record["vm_hwm_bytes"] - r.record["rss_idle_bytes"] for r in good)
            sampled = [r.sampled_rss_peak_bytes - r.record["rss_idle_bytes"] for r in good if r.sampled_rss_peak_bytes is not None]
            s.sampled_over_idle_bytes = max(sampled) if sampled else None
            s.hwm_reset = all(r.record["hwm_reset"] for r in good)
            cached = [r.page_cache_peak_bytes for r in good if r.page_cache_peak_bytes is not None]
            s.page_cache_peak_bytes = max(cached) if cached else None
            counted = [r.record["counted_bytes"] for r in good if "counted_bytes" in r.record]
            s.counted_bytes = max(counted) if counted else None
            waits = [v for r in good for v in r.record.get("load_wait_ms", [])]
            s.load_wait_median_ms = statistics.median(waits) if waits else None
            loader_cpu = [v for r in good for v in r.record.get("loader_cpu_ms", [])]
            s.loader_cpu_median_ms = statistics.median(loader_cpu) if loader_cpu else None
            s.max_rel_error = max(r.max_rel_error for r in good)
            floors = [r.record["activation_floor_bytes"] for r in good if r.record.get("activation_floor_bytes") is not None]
            s.activation_floor_bytes = max(floors) if floors else None
            for key in OVERHEAD_FIELDS:
                values = [r.record[key] for r in good if r.record.get(key) is not None]
                if values:
                    s.overhead[key] = statistics.median(values)
        summaries.append(s)
    reference = next((s for s in summaries if s.config == REFERENCE), None)
    if reference and reference.latency_median_ms:
        for s in summaries:
            if s.latency_median_ms is not None:
                s.ratio_to_default = s.latency_median_ms / reference.latency_median_ms
    return summaries


def ingest_records(description: dict[str, Any], records: list[dict[str, Any]], settings: ChildSettings, base: Path,
                   fp16: bool = False) -> BenchResult:
    """Results measured elsewhere (a device): results.jsonl lines as scripts/adb_bench.sh writes them
    (bench/device.py), outputs relative to `base`; checked against the host's stock NCNN like local runs."""
    tolerance = FP16_TOLERANCE if fp16 else FP32_TOLERANCE
    oracle = oracle_outputs(description, settings.seed)
    runs, configs = [], []
    for i, line in enumerate(records):
        record = to_record(line)
        config = Configuration(record["mode"], record["budget"])
        if config not in configs:
            configs.append(config)
        run = ChildRun(config.name, config.family, config.budget, int(line.get("round", 0)), 0)
        try:
            run.record = _parse_record(json.dumps(record))
        except ValueError as e:
            run.error = f"record {i + 1}: {e}"
        else:
            check_outputs(run, oracle, tolerance, base)
        runs.append(run)
    settings_json = {**asdict(settings), "model_json": str(settings.model_json), "rounds": 1, "tolerance": tolerance,
                     "sample_seconds": None}
    return BenchResult(description, settings_json, runs, summarise(runs, configs))


def oracle_outputs(description: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """Stock NCNN (the wheel), fp32 math, one thread: the reference no one here wrote."""
    return run_stock(description["param"], description["bin"], model_inputs(description, seed), description["outputs"])


def run_benchmark(description: dict[str, Any], configs: list[Configuration], settings: ChildSettings, rounds: int,
                  runtime_command: str | None = None, workdir: Path | None = None,
                  sample_seconds: float = SAMPLE_SECONDS) -> BenchResult:
    """`rounds` passes over `configs` in order (NCNN-Default first), each configuration a child process."""
    tolerance = FP16_TOLERANCE if settings.fp16 else FP32_TOLERANCE
    oracle = oracle_outputs(description, settings.seed)
    runs: list[ChildRun] = []
    smallest: dict[str, tuple[int, str]] = {}  # family -> the smallest budget one of its children reported, and which
    with tempfile.TemporaryDirectory(prefix="flexnn-bench-") as tmp:
        out = workdir or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        steps = [(r, c) for r in range(rounds) for c in configs]
        for round_, config in tqdm(steps, desc=f"bench {description['name']}", unit="run", disable=len(steps) < 2):
            if any(r.infeasible for r in runs if r.config == config.name):
                continue
            known = smallest.get(config.family)
            if known and config.budget is not None and config.budget < known[0]:
                runs.append(ChildRun(config.name, config.family, config.budget, round_, 0,
                                     infeasible=f"below {format_size(known[0])}, the smallest budget {known[1]} reported"))
                continue
            run = run_child(config, settings, description, oracle, tolerance, out, round_, runtime_command, sample_seconds)
            reported = run.record.get("min_feasible_budget") if run.infeasible and run.record else None
            if isinstance(reported, int) and reported > 0:
                smallest[config.family] = (reported, run.config)
            if not run.ok:
                log.error("%s (round %d) failed: %s", run.config, round_, run.error)
            elif run.infeasible:
                log.info("%s: %s", run.config, run.infeasible)
            runs.append(run)
    settings_json = {**asdict(settings), "model_json": str(settings.model_json), "rounds": rounds,
                     "tolerance": tolerance, "sample_seconds": sample_seconds}
    return BenchResult(description, settings_json, runs, summarise(runs, configs))
