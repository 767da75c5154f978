"""Kernel selection and slice counts under a budget (paper §3.2).

Each layer gets the limit the budget leaves it: budget − activations resident while it runs −
`reserve` (what the planner holds back when it tightens and retries). The kernels are tried fastest
first, each with its own slicing: Winograd with weights slicing (fewest slices that fit), Im2col+GEMM
with input slicing (as many tiles as SIMD efficiency allows, only when the whole im2col does not fit)
and then weights slicing too (a wide layer's raw-size weights can exceed the limit), direct with
weights slicing; matrix layers (InnerProduct, constant-B Gemm) with weights slicing, a Gemm also
packing its input's tokens in smaller tiles (as im2col's input slicing: whole if it fits, else the
most tiles, then weights slicing too); self-attention by heads. Slice widths are multiples of the
target's SIMD width (whole heads for attention).

On the target (fit.py) each choice is measured (meter.py): an option fits when its measurement does,
and the estimates (analysis.py) only order the options and skip those that, corrected by the first
measurement of their kernel on the layer, cannot fit.

When part of the weights must be streamed on every inference (streaming.py), a Winograd decision is
weighed against im2col+GEMM, whose transformed weights are the raw size (whole, input-sliced, or
also weights-sliced): the cheaper estimate of compute plus that part of the layer's streamed bytes wins.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from ..analysis import GROUPED, AttentionModel, ConvModel, Cost, CostModel, FixedModel, GroupedConvModel, LayerAnalysis
from .streaming import StreamModel
from .target import Target

log = logging.getLogger(__name__)

# a layer's (kernel, width, tiles) measured on the target (meter.LayerMeter.cost)
Measure = Callable[[LayerAnalysis, str, int, int], Cost]

# how each kernel cuts its layer: by output channels/rows, by im2col tiles, or not at all
SLICING_OF = {"winograd63": "weights", "winograd43": "weights", "im2col_gemm": "input", "direct": "weights",
              "gemm": "input", "int8": "weights", "deconv": "weights", "attention": "weights", GROUPED: "none"}


@dataclass(frozen=True)
class LayerDecision:
    """What the slicer chose for one layer, and the numbers it chose by."""

    layer: str
    type: str
    kernel: str
    fastest: str         # the first candidate kernel, which the decision fell back from
    rows: int            # output channels / rows of the whole layer
    slice_width: int     # rows per sub-layer (== rows when not weights-sliced)
    tiles: int           # im2col tiles (1 = whole im2col matrix)
    limit: int           # bytes the budget leaves this layer for weights + intermediates
    before: Cost         # fastest kernel, unsliced: what stock NCNN would hold (measured when the choice was)
    after: Cost          # one sub-layer of the chosen kernel, as sliced (measured when the slicer measures)
    reason: str
    sublayers: tuple[str, ...] = field(default=())

    @property
    def slices(self) -> int:
        return math.ceil(self.rows / self.slice_width) if self.rows else 1

    @property
    def changed(self) -> bool:
        return self.slices > 1 or self.tiles > 1 or self.kernel != self.fastest


def slice_widths(rows: int, simd: int) -> Iterator[int]:
    """Candidate widths for 1, 2, 3... slices, widest first, each a multiple of `simd` (or all rows)."""
    last = None
    for n in range(1, rows + 1):
        width = min(rows, math.ceil(math.ceil(rows / n) / simd) * simd)
        if width != last:
            yield width
            last = width
        if width <= simd:
            return


def slice_unit(m: CostModel, target: Target) -> int:
    """What a weights slice's width is a multiple of: a head of attention, else the SIMD width."""
    return 1 if isinstance(m, AttentionModel) else target.simd_width


def _options(a: LayerAnalysis, target: Target) -> Iterator[tuple[str, int, int]]:
    """(kernel, width, tiles) in the order they are tried."""
    m = a.model
    for kernel in m.kernels:
        yield kernel, m.rows, 1
        mode = SLICING_OF.get(kernel)
        if mode == "input":
            tiles = m.max_tiles(kernel, target.min_tile_pixels)
            if tiles > 1:
                yield kernel, m.rows, tiles
            yield from _weights_sliced(kernel, m.rows, tiles, target)
        elif mode == "weights" and m.rows:
            for width in slice_widths(m.rows, slice_unit(m, target)):
                if width < m.rows:
                    yield kernel, width, 1


def smallest_working_set(a: LayerAnalysis, target: Target, measure: Measure | None = None) -> int:
    """The least weights + intermediates any option of `a` takes: estimated, or with `measure` the least
    measured of each kernel's finest cut (its last option)."""
    if measure is None:
        return min(a.model.cost(k, w, t).total for k, w, t in _options(a, target))
    return min(measure(a, *option).total for option in _finest(a, target))


def layer_need(a: LayerAnalysis, target: Target, measure: Measure | None = None) -> int:
    """What `a`'s step needs at least: its live activations and its smallest working set."""
    return a.live_bytes + smallest_working_set(a, target, measure)


def _finest(a: LayerAnalysis, target: Target) -> set[tuple[str, int, int]]:
    """Each kernel's finest cut (its last option)."""
    return set({kernel: (kernel, width, tiles) for kernel, width, tiles in _options(a, target)}.values())


class _Gate:
    """Which of a layer's options fit a limit. Without `measure`, by the estimate. With it, an option
    fits when its measurement does; it is measured when its estimate, scaled by what the first
    measurement of the same kernel and path on this layer found (measured / estimated), fits: a choice
    rests on measurements, and the estimate only orders and skips options, corrected by them. The
    tiled path (tiles > 1) is scaled apart from the whole one: what the estimate misses there is often
    the very buffer tiles cut (a 1x1 convolution's packed input: estimated 0 B, measured a full input
    whole and a tile's worth tiled), so the whole path's ratio would skip the option that fits. Each
    kernel's finest cut is always measured: smallest_working_set measured it, and a budget that covers
    that need must find it."""

    def __init__(self, a: LayerAnalysis, limit: int, measure: Measure | None, target: Target):
        self.a, self.limit, self.measure = a, limit, measure
        self.scale: dict[tuple[str, bool], float] = {}
        self.finest = _finest(a, target) if measure is not None else set()

    def fits(self, kernel: str, width: int, tiles: int) -> Cost | None:
        estimate = self.a.model.cost(kernel, width, tiles)
        if self.measure is None:
            return estimate if estimate.total <= self.limit else None
        path = (kernel, tiles > 1)
        if (path in self.scale and estimate.total * self.scale[path] > self.limit
                and (kernel, width, tiles) not in self.finest):
            return None
        measured = self.measure(self.a, kernel, width, tiles)
        self.scale.setdefault(path, measured.total / max(estimate.total, 1))
        if measured.total > self.limit:
            log.debug("%s %s x%d tiles %d: measured %s B > limit %s B (estimated %s B)", self.a.layer.name, kernel, width,
                      tiles, f"{measured.total:,}", f"{self.limit:,}", f"{estimate.total:,}")
            return None
        return measured


def decide(a: LayerAnalysis, limit: int, target: Target, measure: Measure | None = None) -> LayerDecision | None:
    """The first option that fits `limit` (see _Gate: with `measure`, by its measurement), or None."""
    m = a.model
    fastest = m.kernels[0]
    before = measure(a, fastest, m.rows, 1) if measure else m.cost(fastest, m.rows)
    gate = _Gate(a, limit, measure, target)
    for kernel, width, tiles in _options(a, target):
        cost = gate.fits(kernel, width, tiles)
        if cost is None:
            continue
        whole = width == m.rows and tiles == 1
        if whole and kernel == fastest:
            reason = "fits" if not isinstance(m, FixedModel) else "fits, not sliceable"
        else:
            why = f"{fastest} needs {before.total:,} B > limit" if kernel == fastest else \
                f"{fastest} does not fit even sliced"
            reason = f"{why}; {kernel} {_cuts(width < m.rows, tiles > 1)}"
        return LayerDecision(a.layer.name, a.layer.type, kernel, fastest, m.rows, width, tiles, limit, before,
                             cost, reason)
    return None


def least_measured(a: LayerAnalysis, limit: int, target: Target, measure: Measure) -> LayerDecision:
    """Where no option measures within `limit`: of each kernel's finest cut, the one measured least (its
    smallest working set). Not the estimate's choice: an estimate that misses what NCNN holds (a grouped
    layer's unpacked input) would pick a cut holding more as the limit tightens, and the fit loop
    (fit.py) would then tighten without getting closer."""
    m = a.model
    before = measure(a, m.kernels[0], m.rows, 1)
    costs = {option: measure(a, *option) for option in _finest(a, target)}
    kernel, width, tiles = min(costs, key=lambda option: (costs[option].total, option))
    return LayerDecision(a.layer.name, a.layer.type, kernel, m.kernels[0], m.rows, width, tiles, limit, before,
                         costs[kernel, width, tiles],
                         f"nothing measures within the limit; the least measured: {kernel} {_cuts(width < m.rows, tiles > 1)}")


def decide_streamed(a: LayerAnalysis, d: LayerDecision, target: Target, stream: StreamModel, share: float,
                    measure: Measure | None = None) -> LayerDecision:
    """`d` for a layer whose weights are streamed (`share` of the model's, > 0): a grouped convolution's
    groups run apart (_groups_apart), and a Winograd kernel gives way to im2col+GEMM (its first option
    within d.limit) when its estimated compute + loading is less; the reason gives both estimates."""
    m = a.model
    if share <= 0:
        return d
    if isinstance(m, GroupedConvModel):
        d = _groups_apart(a, d, target, measure)
    if not d.kernel.startswith("winograd") or not isinstance(m, (ConvModel, GroupedConvModel)):
        return d
    conv = m if isinstance(m, ConvModel) else m.group  # a grouped layer's groups, each alike
    gate = _Gate(a, d.limit, measure, target)
    fitting = ((o, gate.fits(*o)) for o in _streamed_im2col_options(conv, target))
    option, cost = next(((o, c) for o, c in fitting if c is not None), (None, None))
    if option is None or cost is None:
        return replace(d, reason=f"{d.reason}; im2col_gemm does not fit")
    estimates = {k: (stream.compute_us(conv, k), stream.load_us(conv, k, share)) for k in (d.kernel, "im2col_gemm")}
    keep, switch = (sum(estimates[k]) for k in (d.kernel, "im2col_gemm"))
    why = f"{share:.1%} streamed: " + ", ".join(f"{k} {c / 1e3:.2f}+{l / 1e3:.2f} ms" for k, (c, l) in estimates.items()) + \
        " (compute+load)"
    if keep <= switch:
        return replace(d, reason=f"{d.reason}; {why}")
    kernel, width, tiles = option
    return replace(d, kernel=kernel, slice_width=width, tiles=tiles, after=cost,
                   reason=f"{d.reason}; {why}; {kernel} {_cuts(width < m.rows, tiles > 1)}")


def _groups_apart(a: LayerAnalysis, d: LayerDecision, target: Target, measure: Measure | None) -> LayerDecision:
    """A streamed grouped convolution, decided `d`, with its groups run apart (the first such option
    within d.limit): NCNN's grouped layer builds every group's kernel from the raw weights on every
    load, where a group's own Convolution loads its pre-transformed weights (patch 0003)."""
    assert isinstance(a.model, GroupedConvModel)
    if d.kernel != GROUPED or not a.model.worth_apart_when_streamed():
        return d
    gate = _Gate(a, d.limit, measure, target)
    for kernel, width, tiles in _options(a, target):
        cost = gate.fits(kernel, width, tiles) if kernel != GROUPED else None
        if cost is not None:
            return replace(d, kernel=kernel, slice_width=width, tiles=tiles, after=cost,
                           reason=f"{d.reason}; streamed: groups apart, {kernel} {_cuts(width < a.model.rows, tiles > 1)}")
    return replace(d, reason=f"{d.reason}; streamed, no option with its groups apart fits")


def _cuts(weights: bool, tiles: bool) -> str:
    """How an option cuts its layer, for a decision's reason."""
    cuts = [what for what, cut in (("weights", weights), ("input", tiles)) if cut]
    return " and ".join(cuts) + " sliced" if cuts else "whole"


def _streamed_im2col_options(m: ConvModel, target: Target) -> Iterator[tuple[str, int, int]]:
    """im2col+GEMM's options for a streamed layer, tried in order: whole, input-sliced, then also
    weights-sliced (fewest slices, most tiles): its raw-size weights can then dominate the layer."""
    tiles = m.max_tiles("im2col_gemm", target.min_tile_pixels)
    yield "im2col_gemm", m.rows, 1
    if tiles > 1:
        yield "im2col_gemm", m.rows, tiles
    yield from _weights_sliced("im2col_gemm", m.rows, tiles, target)


def _weights_sliced(kernel: str, rows: int, tiles: int, target: Target) -> Iterator[tuple[str, int, int]]:
    """An input-sliced kernel also cut by output channels, fewest slices first, each with `tiles`: the
    raw-size weights of a wide layer can then dominate it (where Winograd fits nowhere, this is the
    way down before the slower direct kernel)."""
    for width in slice_widths(rows, target.simd_width):
        if width < rows:
            yield kernel, width, tiles
