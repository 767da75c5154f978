"""Slice until the real profile fits: slice, prepare on this machine, plan; tighten and retry.

The slicer's per-layer choices are measured here (meter.py: each layer's slice, kernel and tiles run
through NCNN as a one-layer model); the profile that prepare records is what the whole model does
allocate (transformed weights, layout conversions, live activations), and prepare measures what the
budget must leave beside the arena (allocations outside it, the resident memory the runtime does not
count). When the plan for the budget is infeasible, every layer's limit is lowered by the shortfall
(the slicer's `reserve`) and the model is sliced again, until the plan fits, the slicer cannot cut
further, or the shortfall stops shrinking. The reserve is never less than what prepare measured the
budget must leave beside the arena (its margin, allocations outside it, the uncounted RSS): a loop
starts from the last such measurement of its search (none for the first: its first attempt's limits
count the whole budget). When a tighter reserve changes nothing the plan needs (the estimates still
leave a block untiled), the next one tightens twice as far, at least a 64th of the budget, and one
past what the slicer can cut goes half of it back. No hand-set caps: every limit derives from the budget.

That loop alone is not monotone: a budget above one it fits may miss (the tightening follows the
shortfalls of its own attempts). So when it misses, fit_to_budget searches the smallest budget the
loop fits (`smallest_budget`, bisection; every probe sliced, prepared, planned and run once in the
child that measures the uncounted RSS): at or above it, that slicing is taken, planned for the budget
asked (a profile that plans within a budget plans within any larger one); below it, the error names
it. Feasibility is then monotone in the budget the user gives, and the named budget was verified.
Because the loop is not monotone, a probe is not either: it starts from what earlier loops measured
beside the arena and, when it misses, again from nothing reserved (as a direct run starts); and the
attempts that missed are kept under the budget their plans named, whose slicings fit from there up: a
probe at or above such a budget, and the search's answer, take one (sliced and prepared again) where
it plans. Last, the slicing found may plan within less than the probe it fitted: its own smallest
budget (prepare's smallest plan, measured running) is the answer when lower. The answer is kept on
disk (verified.py): a later fit that misses a budget at or above it takes its slicing before searching
again, and a later search starts with it, so another process does not name a larger one. Within one
fit or search, probes and confirmations come back to the same budgets and slicings: each slicing is
prepared once per budget and each loop that misses runs once per budget and starting reserve (Attempts).
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .. import planning, sidecar
from ..analysis import analyze
from ..cli import UserError
from ..ncnn_model import BlobShape, Graph, ModelBin, NcnnParam
from ..prepare import RuntimeOptions, prepare_model
from ..units import format_size
from . import spatial, verified
from .meter import LayerMeter
from .slicer import SlicingResult, slice_model, write_sliced
from .streaming import StreamModel
from .target import Target

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 6
NAMED_KEPT = 3  # the missed attempts a search keeps, the smallest budgets their plans named


class Steps:
    """What a user at a terminal sees while the fit and the search work (nothing elsewhere): a count of
    the slicings prepared, each of which runs the model, and the budget being tried."""

    def __init__(self, shown: bool):
        self._bar = tqdm(desc="fitting", bar_format="{desc}: {n_fmt} slicings prepared, {elapsed}{postfix}",
                         disable=None if shown else True, leave=False)

    def prepare(self, what: str) -> None:
        self._bar.set_postfix_str(what, refresh=False)
        self._bar.update()

    def __enter__(self) -> Steps:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()


def tiler_of(param: NcnnParam, modelbin: ModelBin, graph: Graph, shapes: dict[str, BlobShape],
             target: Target) -> spatial.Tiler:
    """The model's spatial.Tiler: made once per search, its tiled models serve every attempt and probe."""
    return spatial.Tiler(spatial.TiledModel(param, modelbin, graph, shapes, analyze(graph, shapes), ()), target)


Outcome = sidecar.Sidecar | planning.InfeasibleBudget  # a slicing prepared for a budget
LoopOutcome = tuple[SlicingResult | None, int, int]  # _fit's


class Attempts:
    """What one fit or search keeps across its attempts and probes: the model's spatial tiler (its tiled
    models serve every slicing), each slicing's prepared outcome by its .param and budget, and the
    outcome of each fit loop that missed by its budget and starting reserve. Probes and confirmations
    come back to the same budgets and slicings, and what a loop decides follows from the measurements
    the meter recalls and the outcomes kept here: so each slicing is prepared once per budget (it runs
    the model) and each loop that misses runs once. Nothing kept holds a slicing's weights (a fitting
    loop's slicing is made again, its prepare recalled: kept, NCNN's VGG-16 search held 24 GB of them
    before the kernel killed it). `steps` shows each slicing prepared."""

    def __init__(self, tiler: spatial.Tiler, steps: Steps, graph: Graph, shapes: dict[str, BlobShape],
                 options: RuntimeOptions, scratch: Path):
        self.tiler, self.steps = tiler, steps
        self._graph, self._shapes, self._options, self._scratch = graph, shapes, options, scratch
        self._prepared: dict[tuple[str, int | None], Outcome] = {}
        self.missed: dict[tuple[int, int], LoopOutcome] = {}

    def prepared(self, result: SlicingResult, budget: int | None, stem: str, shown: str) -> sidecar.Sidecar:
        """_prepared(result, budget, ...), once per slicing and budget (shown as `shown` then); raises the
        InfeasibleBudget it raised."""
        key = (hashlib.sha256(result.param.format().encode()).hexdigest(), budget)
        if key not in self._prepared:
            self.steps.prepare(shown)
            try:
                self._prepared[key] = _prepared(result, budget, self._graph, self._shapes, self._options, self._scratch, stem)
            except planning.InfeasibleBudget as e:
                self._prepared[key] = _unraised(e)
        outcome = self._prepared[key]
        if isinstance(outcome, planning.InfeasibleBudget):
            raise _unraised(outcome)
        return outcome


def _unraised(e: planning.InfeasibleBudget) -> planning.InfeasibleBudget:
    """A copy of `e` that was never raised: a raised one's traceback holds the frames it passed, and
    they the slicing and its weights."""
    copy = planning.InfeasibleBudget(e.budget, e.min_feasible_budget, e.reason, beside_arena=e.beside_arena)
    copy.args = e.args
    return copy


def fit_to_budget(param: NcnnParam, modelbin: ModelBin, graph: Graph, shapes: dict[str, BlobShape], budget: int,
                  target: Target, options: RuntimeOptions, scratch: Path, progress: bool = False,
                  stream: StreamModel | None = None) -> SlicingResult:
    """The slicing whose prepared profile plans within `budget`: the fit loop's, else the smallest
    budget's when `budget` is at or above it; each attempt is prepared in a folder of `scratch` (_prepared). Raises
    InfeasibleBudget naming the smallest budget the search verified. With `progress`, a terminal shows
    each slicing prepared (Steps)."""
    named: dict[int, Missed] = {}  # the attempts that missed, for the search
    with Steps(progress) as steps:
        attempts = Attempts(tiler_of(param, modelbin, graph, shapes, target), steps, graph, shapes, options, scratch)
        try:
            return _fit_confirming(param, modelbin, graph, shapes, budget, target, options, stream, attempts, 0, named)[0]
        except planning.InfeasibleBudget as missed:
            log.info("no slicing fitted %s (%s): searching the smallest budget that fits", format_size(budget), missed)
            beside = missed.beside_arena
        key = verified.search_key(param, modelbin, {name: shapes[name] for name in graph.inputs}, target, options, stream)
        known = verified.recall(key)
        if known is not None and known.need <= budget:
            result = _sliced_again(param, modelbin, graph, shapes, Missed(known.budget, known.reserve), budget, target,
                                   options, stream, LayerMeter(options), attempts,
                                   f"{format_size(budget)}, the smallest budget's slicing")
            if result is not None:
                log.info("%s fits with the slicing an earlier search verified at %s", format_size(budget),
                         format_size(known.need))
                return result
        found = smallest_budget(param, modelbin, graph, shapes, target, options, scratch, stream, attempts=attempts,
                                beside=beside, named=named, key=key)
    if found.budget <= budget:
        log.info("the slicing for the smallest budget, %s, fits %s", format_size(found.budget), format_size(budget))
        return found.result
    raise planning.InfeasibleBudget(budget, found.budget, "no slicing of the model plans within the budget",
                                    f"verified: a slicing for it was sliced, prepared, planned and run ({len(found.probes)} "
                                    "probes); every budget from it up slices")


def _fit_confirming(param: NcnnParam, modelbin: ModelBin, graph: Graph, shapes: dict[str, BlobShape], budget: int,
                    target: Target, options: RuntimeOptions, stream: StreamModel | None, attempts: Attempts, beside: int,
                    named: dict[int, Missed] | None = None, known_fit: int | None = None) -> tuple[SlicingResult, int]:
    """The fit loop (its reserve from `beside`, bytes measured beside the arena) and what its slicing holds
    beside the arena, or, when it misses, the loop again at the smallest budget it reported, followed
    while a new slicing for it still misses and it is below `known_fit` (a budget known to fit): raises
    InfeasibleBudget naming the last one found and what it measured beside the arena. `named` collects
    the attempts that missed (_fit)."""
    result, smallest, beside = _fit(param, modelbin, graph, shapes, budget, target, options, stream, attempts, beside,
                                    named)
    if result is not None:
        return result, beside
    for _ in range(MAX_ATTEMPTS):
        if not smallest or (known_fit is not None and smallest >= known_fit):
            break
        log.info("confirming that %s fits", format_size(smallest))
        confirmed, found, beside = _fit(param, modelbin, graph, shapes, smallest, target, options, stream, attempts,
                                        beside, named)
        if confirmed is not None:
            break
        if not found or found <= smallest:
            break  # no larger candidate: name the last one found
        smallest = found
    raise planning.InfeasibleBudget(budget, smallest, "no slicing of the model plans within the budget", beside_arena=beside)


def _fit(param: NcnnParam, modelbin: ModelBin, graph: Graph, shapes: dict[str, BlobShape], budget: int, target: Target,
         options: RuntimeOptions, stream: StreamModel | None, attempts: Attempts, beside: int,
         named: dict[int, Missed] | None = None) -> LoopOutcome:
    """(the fitting slicing, 0, what it holds beside the arena), or (None, the smallest feasible budget
    any attempt's plan reported, the bytes its last attempt measured beside the arena); the reserve
    starts at `beside`. Each attempt that misses is put in `named` under the budget its plan named. A
    loop that missed runs once per budget and `beside` (attempts.missed): it would decide the same again."""
    key = (budget, beside)
    if key in attempts.missed:
        return attempts.missed[key]
    outcome = _loop(param, modelbin, graph, shapes, budget, target, options, stream, attempts, beside, named)
    if outcome[0] is None:
        attempts.missed[key] = outcome
    return outcome


def _loop(param: NcnnParam, modelbin: ModelBin, graph: Graph, shapes: dict[str, BlobShape], budget: int, target: Target,
          options: RuntimeOptions, stream: StreamModel | None, attempts: Attempts, beside: int,
          named: dict[int, Missed] | None) -> LoopOutcome:
    """_fit's loop."""
    meter = LayerMeter(options)
    reserve = beside
    smallest = 0  # the smallest feasible budget an attempt's plan reported (0: none yet)
    shortfall_before: int | None = None
    step = 0  # the reserve's last increase
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            result = slice_model(param, modelbin, graph, shapes, budget, target, reserve, False, stream, meter.cost,
                                 attempts.tiler)
        except UserError as e:
            log.info("attempt %d (reserve %s): %s", attempt, format_size(reserve), e)
            if reserve and not smallest:
                reserve = 0  # what was measured beside the arena leaves this budget nothing: count the whole budget
                continue
            if not smallest:
                raise
            if step > budget // 64:
                step //= 2  # the last tightening went past what the slicer can cut: go half of it back
                reserve -= step
                continue
            break  # the slicer cannot cut further
        try:
            prepared = attempts.prepared(result, budget, f"attempt{attempt}", f"{format_size(budget)}, attempt {attempt}")
            return result, 0, prepared.reserved_for(prepared.plan) + planning.ARENA_MARGIN
        except planning.InfeasibleBudget as e:
            if not e.min_feasible_budget:
                raise
            smallest = min(smallest or e.min_feasible_budget, e.min_feasible_budget)
            if named is not None:
                _remember(named, e.min_feasible_budget, Missed(budget, reserve))
            shortfall = e.min_feasible_budget - budget
            beside = e.beside_arena
            log.info("attempt %d (reserve %s): the plan needs %s more", attempt, format_size(reserve), format_size(shortfall))
            if shortfall_before is None or shortfall < shortfall_before:
                # never less than what the runtime holds beside the arena (margin, outside it, uncounted RSS)
                step = max(reserve + shortfall, beside) - reserve
                reserve += step
            elif reserve < beside:
                reserve = beside  # more held beside the arena than the reserve counted
            elif shortfall == shortfall_before:
                # limits that tight changed nothing the plan needs (e.g. a block the estimates still
                # leave untiled): tighten further, twice as far as the last time, at least a 64th of the budget
                step = max(2 * step, budget // 64)
                reserve += step
            else:
                break  # slicing tighter no longer helps: the rest is activations or fixed buffers
            shortfall_before = shortfall
    return None, smallest, beside


@dataclass(frozen=True)
class Missed:
    """An attempt of the fit loop that missed its budget: slice_model at `budget` with `reserve` makes its
    slicing again (the meter recalls every measurement)."""

    budget: int
    reserve: int


def _remember(named: dict[int, Missed], need: int, missed: Missed) -> None:
    """`missed` under `need` (the budget its plan named) in `named`, which keeps the NAMED_KEPT smallest."""
    named.setdefault(need, missed)
    for larger in sorted(named)[NAMED_KEPT:]:
        del named[larger]


@dataclass(frozen=True)
class Probe:
    """One budget the search for the smallest tried, and whether a slicing fitted it."""

    budget: int
    fits: bool


@dataclass(frozen=True)
class SmallestBudget:
    budget: int
    result: SlicingResult  # the slicing that fits it
    probes: tuple[Probe, ...]
    seconds: float

    def search_json(self) -> dict[str, Any]:
        """The search, as MODEL.flexnn.slicing.json's `min_search` records it: the budget found, each
        probe [bytes, fits] in order. (The record's own `budget` is what the slicing was cut for, which
        may be an attempt's: the slicing of one that missed, taken where it plans within less.)"""
        return {"smallest": self.budget, "probes": [[p.budget, p.fits] for p in self.probes], "seconds": self.seconds}


def smallest_budget(param: NcnnParam, modelbin: ModelBin, graph: Graph, shapes: dict[str, BlobShape], target: Target,
                    options: RuntimeOptions, scratch: Path, stream: StreamModel | None = None,
                    resolution: int = 64 * 1024, attempts: Attempts | None = None, beside: int = 0,
                    named: dict[int, Missed] | None = None, steps: Steps | None = None,
                    key: dict[str, Any] | None = None) -> SmallestBudget:
    """The smallest budget the fit loop fits, to within `resolution` bytes (or 1%): bisection between
    the slicer's own lower bound, below which no slicing fits, and a budget confirmed to fit (the one
    an infeasible fit names, followed while a new slicing for it still misses). Every probe slices,
    prepares and plans; the budget returned was fitted by one of them. Each probe's loop starts from
    the least any loop measured beside the arena (`beside`: the caller's measurement, 0 if none): a
    slicing tiled deeper for a smaller budget holds more beside it than one for a larger budget needs;
    a probe that misses from there tries again from nothing reserved, as `slice --budget` starts.
    Attempts that missed (`named`: the caller's, then the probes') are kept under the budget their
    plans named: a probe at or above one first slices it again and tries it, and so does the answer.
    The answer an earlier search kept under `key` (verified.search_key; made here if None) is among
    them, and the answer found is kept there. `attempts`: the caller's (its fit's slicings prepared and
    loops run), else made here, showing each slicing prepared on `steps` (none: nothing shown)."""
    started = time.monotonic()
    attempts = attempts or Attempts(tiler_of(param, modelbin, graph, shapes, target), steps or Steps(False), graph, shapes,
                                    options, scratch)
    probes: list[Probe] = []
    measured = [beside] if beside else []  # what loops measured beside the arena
    # every attempt that missed, under the budget its prepared plan named: its slicing fits any budget
    # from there up, though the loop at such a budget may slice otherwise and miss (it is not monotone)
    named = {} if named is None else named
    # the answer an earlier search verified (verified.py) is such a slicing too
    key = key or verified.search_key(param, modelbin, {name: shapes[name] for name in graph.inputs}, target, options, stream)
    known = verified.recall(key)
    if known is not None:
        named.setdefault(known.need, Missed(known.budget, known.reserve))
    meter = LayerMeter(options)

    def named_fitting(budget: int) -> SlicingResult | None:
        """The slicing of the attempt that named the least budget within `budget`, where it plans again."""
        for need in sorted(n for n in named if n <= budget):
            missed = named.pop(need)  # tried once: measured again, a slicing that needs more is no candidate
            result = _sliced_again(param, modelbin, graph, shapes, missed, budget, target, options, stream, meter, attempts,
                                   f"{format_size(budget)}, probe {len(probes) + 1}")
            if result is not None:
                log.info("%s fits with the slicing an attempt at %s planned for %s", format_size(budget),
                         format_size(missed.budget), format_size(need))
                return result
        return None

    def fit(budget: int, known_fit: int | None = None) -> SlicingResult:
        """The slicing that fits `budget`, else raises InfeasibleBudget. A budget its plans name at or
        above `known_fit` is not confirmed: a loop there that misses names more still, which no probe
        below `known_fit` can use, and one that fits tells the bisection nothing."""
        result = named_fitting(budget)
        if result is not None:
            probes.append(Probe(budget, True))
            return result
        # from the least measured beside the arena, then as `slice --budget` starts (nothing reserved):
        # the loop's outcome depends on where it starts, and a probe that misses where a direct run
        # fits would name a smallest budget above budgets that slice
        missed: planning.InfeasibleBudget | None = None
        for start in dict.fromkeys((min(measured, default=0), 0)):
            try:
                result, held = _fit_confirming(param, modelbin, graph, shapes, budget, target, options, stream, attempts,
                                               start, named, known_fit)
            except planning.InfeasibleBudget as e:
                missed = e
                if e.beside_arena:
                    measured.append(e.beside_arena)
                continue
            probes.append(Probe(budget, True))
            measured.append(held)
            log.info("probe %d: %s fits", len(probes), format_size(budget))
            return result
        assert missed is not None
        probes.append(Probe(budget, False))
        log.info("probe %d: %s does not fit (%s)", len(probes), format_size(budget), missed)
        raise missed

    low = slice_model(param, modelbin, graph, shapes, 1 << 62, target, stream=stream, measure=meter.cost,
                      tiler=attempts.tiler).min_budget
    high, best = low, None
    for _ in range(MAX_ATTEMPTS):
        try:
            best = fit(high)
            break
        except planning.InfeasibleBudget as e:
            if not e.min_feasible_budget or e.min_feasible_budget <= high:
                raise
            low, high = high, e.min_feasible_budget
    if best is None:
        raise planning.InfeasibleBudget(high, 0, "no slicing found to fit while following the budgets the fit loop named")
    while high - low > max(resolution, high // 100):
        middle = (low + high) // 2
        try:
            best, high = fit(middle, high), middle
        except planning.InfeasibleBudget:
            low = middle
    # an attempt whose plan named less than the bisection found (between probes that missed)
    below = min((n for n in named if n < high), default=None)
    if below is not None:
        result = named_fitting(below)
        if result is not None:
            probes.append(Probe(below, True))
            best, high = result, below
    # the slicing found may plan within less than the probe it fitted (between probes whose loops
    # sliced otherwise): its own smallest budget, as prepare plans and measures it
    own = attempts.prepared(best, None, "smallest", f"the smallest, {format_size(high)}").plan.budget
    if own < high:
        log.info("the slicing found fits %s, its own smallest budget", format_size(own))
        probes.append(Probe(own, True))
        high = own
    verified.keep(key, verified.Verified(high, best.budget, best.reserve))
    return SmallestBudget(high, best, tuple(probes), time.monotonic() - started)


def _sliced_again(param: NcnnParam, modelbin: ModelBin, graph: Graph, shapes: dict[str, BlobShape], missed: Missed,
                  budget: int, target: Target, options: RuntimeOptions, stream: StreamModel | None,
                  meter: LayerMeter, attempts: Attempts, shown: str) -> SlicingResult | None:
    """The slicing `missed` makes again, when it plans within `budget` (prepared, shown as `shown`), else
    None (also when the slicer refuses it now: what it measures may differ from when it was kept)."""
    try:
        result = slice_model(param, modelbin, graph, shapes, missed.budget, target, missed.reserve, stream=stream,
                             measure=meter.cost, tiler=attempts.tiler)
        attempts.prepared(result, budget, "again", shown)
    except (UserError, planning.InfeasibleBudget):
        return None
    return result


def _prepared(result: SlicingResult, budget: int | None, graph: Graph, shapes: dict[str, BlobShape], options: RuntimeOptions,
              scratch: Path, stem: str) -> sidecar.Sidecar:
    """`result` written to a folder in `scratch` as `stem`, prepared here and planned for `budget` (None: its
    smallest feasible one); raises InfeasibleBudget when it does not plan within it. The folder is removed
    once prepared: the returned sidecar needs none of its files, and a large model's attempts would
    otherwise hold its weights and transformed weights once per attempt on disk."""
    with tempfile.TemporaryDirectory(dir=scratch, prefix=f"{stem}-") as folder:
        sliced_param, sliced_bin, _ = write_sliced(result, Path(folder), stem)
        return prepare_model(sliced_param, sliced_bin, budget, {name: tuple(shapes[name].numpy()) for name in graph.inputs},
                             options)
