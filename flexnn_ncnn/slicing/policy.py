"""Kernel selection and slice counts under a budget (paper §3.2).

Each layer gets the limit the budget leaves it: budget − activations resident while it runs −
`reserve` (what the planner holds back when it tightens and retries). The kernels are tried fastest
first, each with its own slicing: Winograd with weights slicing (fewest slices that fit), Im2col+GEMM
with input slicing (as many tiles as SIMD efficiency allows, only when the whole im2col does not fit),
direct with weights slicing; matrix layers (InnerProduct, constant-B Gemm) with weights slicing.
Slice widths are multiples of the target's SIMD width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator

from ..analysis import Cost, FixedModel, LayerAnalysis
from .target import Target

# how each kernel cuts its layer: by output channels/rows, by im2col tiles, or not at all
SLICING_OF = {"winograd63": "weights", "winograd43": "weights", "im2col_gemm": "input", "direct": "weights",
              "gemm": "weights"}


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
    before: Cost         # fastest kernel, unsliced: what stock NCNN would hold
    after: Cost          # one sub-layer of the chosen kernel, as sliced
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
        elif mode == "weights" and m.rows:
            for width in slice_widths(m.rows, target.simd_width):
                if width < m.rows:
                    yield kernel, width, 1


def smallest_working_set(a: LayerAnalysis, target: Target) -> int:
    return min(a.model.cost(k, w, t).total for k, w, t in _options(a, target))


def decide(a: LayerAnalysis, limit: int, target: Target) -> LayerDecision | None:
    """The first option that fits `limit`, or None."""
    m = a.model
    fastest = m.kernels[0]
    before = m.cost(fastest, m.rows)
    for kernel, width, tiles in _options(a, target):
        cost = m.cost(kernel, width, tiles)
        if cost.total > limit:
            continue
        whole = width == m.rows and tiles == 1
        if whole and kernel == fastest:
            reason = "fits" if not isinstance(m, FixedModel) else "fits, not sliceable"
        else:
            why = f"{fastest} needs {before.total:,} B > limit" if kernel == fastest else \
                f"{fastest} does not fit even sliced"
            reason = f"{why}; {kernel} {'whole' if whole else SLICING_OF[kernel] + ' sliced'}"
        return LayerDecision(a.layer.name, a.layer.type, kernel, fastest, m.rows, width, tiles, limit, before,
                             cost, reason)
    return None
