"""A model running inside a memory budget: `Session(plan_path)`, `.run({blob: array})`.

The plan file (written by `python -m flexnn_ncnn.prepare`) is checked against this machine before
anything runs: the model's files must hash as at prepare, the native module must be the same build,
and the thread count the same (transformed weight layouts depend on it); a mismatch is a UserError
naming the field. The plan itself is checked by the planner's independent checker in the runtime.
"""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from . import native, planning
from .cli import UserError
from .fetch import sha256_of
from .prepare import FORMAT, VERSION

log = logging.getLogger(__name__)


def _status_kib(field: str) -> int:
    """A `VmRSS:`/`VmHWM:` line of /proc/self/status, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak_rss() -> None:
    """Start VmHWM again from the current RSS (Linux clear_refs 5), so the peak is this session's."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError as e:
        log.warning("cannot reset the peak RSS (%s): VmHWM includes what ran before the session", e)


def load_plan_file(path: Path) -> dict[str, Any]:
    try:
        content = json.loads(path.read_text())
    except OSError as e:
        raise UserError(f"cannot read plan {path}: {e.strerror}") from None
    except ValueError as e:
        raise UserError(f"plan {path} is not JSON: {e}") from None
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        raise UserError(f"{path} is not a runtime plan file (format {FORMAT!r})")
    if content.get("version") != VERSION:
        raise UserError(f"plan {path}: version is {content.get('version')!r}, this runtime reads {VERSION}")
    for key in ("model", "build", "options", "schedule", "profile", "plan"):
        if not isinstance(content.get(key), dict):
            raise UserError(f"plan {path}: {key} is missing")
    return content


def check_plan_file(content: Mapping[str, Any], path: Path, threads: int | None) -> None:
    """Refuse a plan made for other model files, another build, or another thread count, naming the field."""
    model = content["model"]
    for which in ("param", "bin"):
        file = Path(model[which])
        if not file.is_file():
            raise UserError(f"plan {path}: model.{which} {file} does not exist")
        if sha256_of(file) != model[f"{which}_sha256"]:
            raise UserError(f"plan {path}: model.{which}_sha256 differs: {file} changed since prepare; prepare again")
    info = native.load().build_info()
    for key, value in content["build"].items():
        if info.get(key) != value:
            raise UserError(f"plan {path}: build.{key} is {value!r}, this runtime's is {info.get(key)!r}; prepare again")
    planned = content["options"]["threads"]
    if threads is not None and threads != planned:
        raise UserError(f"plan {path}: options.threads is {planned}, asked for {threads}: transformed weights depend on "
                        "the thread count; prepare again with --threads")


class Session:
    """A prepared model inside one arena: weights stream in on a loading thread while layers compute.

    `budget` (bytes) re-plans the stored profile instead of using the file's plan; `threads` must
    equal the plan's (it is checked, not changed).
    """

    def __init__(self, plan_path: str | Path, budget: int | None = None, threads: int | None = None, loader: str = "any",
                 drop_page_cache: bool = False):
        path = Path(plan_path)
        content = load_plan_file(path)
        check_plan_file(content, path, threads)
        self.path = path
        self.profile = planning.Profile.from_dict(content["profile"])
        self.input_shapes: dict[str, list[int]] = content.get("input_shapes", {})
        _reset_peak_rss()
        self._idle_rss = _status_kib("VmRSS")
        options = content["options"]
        tensors, layers = self.profile.columns
        schedule = content["schedule"]
        try:
            self._executor = native.load().Executor(
                content["model"]["param"], content["model"]["bin"], schedule, tensors, layers, threads=options["threads"],
                packing=options["packing"], winograd=options["winograd"], sgemm=options["sgemm"], fp16=options["fp16"],
                loader=loader, drop_page_cache=drop_page_cache)
        except (RuntimeError, ValueError) as e:
            raise UserError(f"plan {path}: {e}") from None
        self.inputs: list[str] = list(schedule["inputs"])
        self.outputs: list[str] = list(schedule["outputs"])
        self._load_waits_us: list[float] = []
        self._latencies_us: list[float] = []
        self._outside_peak = 0
        if budget is None:
            self._set_plan(planning.Plan.from_dict(content["plan"]))
        else:
            self.set_budget(budget)

    def _set_plan(self, plan: planning.Plan) -> None:
        try:
            self._executor.set_plan(plan.columns())
        except RuntimeError as e:
            raise UserError(str(e)) from None
        self.plan = plan

    def set_budget(self, budget: int) -> None:
        """Re-plan the stored profile for `budget` bytes and move to the new arena (between inferences).

        An infeasible budget raises InfeasibleBudget and leaves the session on its current plan."""
        from .prepare import plan_for_budget
        self._set_plan(plan_for_budget(self.profile, budget))
        self.budget = budget

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One inference: {input blob: float32 array} -> {output blob: float32 array} (NCNN's shapes)."""
        arrays = {name: np.ascontiguousarray(value, dtype=np.float32) for name, value in inputs.items()}
        try:
            outputs, stats = self._executor.run(arrays)
        except (RuntimeError, ValueError) as e:
            raise UserError(f"inference failed: {e}") from None
        self._load_waits_us.append(stats["load_wait_us"])
        self._latencies_us.append(stats["latency_us"])
        self._outside_peak = max(self._outside_peak, stats["outside_peak_bytes"])
        return outputs

    def stats(self) -> dict[str, Any]:
        """Memory as the runtime counts it (arena + outside it), peak RSS over idle, and per-inference timings."""
        arena = int(self._executor.arena_bytes())
        return {
            "arena_bytes": arena,
            "outside_arena_bytes": self._outside_peak,
            "counted_bytes": arena + self._outside_peak,
            "peak_rss_over_idle_bytes": _status_kib("VmHWM") - self._idle_rss,
            "inferences": len(self._latencies_us),
            "load_wait_us": list(self._load_waits_us),
            "latency_us": list(self._latencies_us),
            "latency_median_us": statistics.median(self._latencies_us) if self._latencies_us else None,
        }
