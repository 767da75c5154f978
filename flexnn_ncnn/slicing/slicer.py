"""`slice_model`: decide every layer under a budget, rewrite the model, and keep the decisions."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..analysis import FixedModel, LayerAnalysis, analyze
from ..cli import UserError
from ..files import atomic_write_all
from ..ncnn_model import BlobShape, Graph, ModelBin, NcnnParam
from ..units import format_size
from . import spatial
from .columns import ColumnSplit
from .heads import HeadSplit
from .hidden import HiddenSplit
from .policy import LayerDecision, Measure, decide, decide_streamed, layer_need, least_measured
from .rewrite import KERNEL_CODES, KERNEL_PARAM_ID, TILES_PARAM_ID, apply
from .streaming import StreamModel, streamed_share
from .target import Target

log = logging.getLogger(__name__)

SCHEMA = "flexnn-slicing/1"


@dataclass
class SlicingResult:
    """The sliced model, and what was decided for each convolution and matrix layer, in run order."""

    param: NcnnParam
    modelbin: ModelBin
    budget: int
    reserve: int
    target: Target
    inputs: dict[str, BlobShape]
    decisions: list[LayerDecision]
    analyses: list[LayerAnalysis]
    min_budget: int  # the smallest budget this slicer accepts for the model (spatial tiling included)
    tilings: tuple[spatial.Option, ...]  # blocks as grids of spatial tiles, MLPs and sliced Gemms split, in the order applied
    stream: StreamModel | None  # the stream-aware kernel choice's model (None: off)
    streamed_share: float  # the part of the weights streamed on every inference with the fastest kernels (streaming.py)

    @property
    def sliced(self) -> list[LayerDecision]:
        return [d for d in self.decisions if d.changed]

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "budget": self.budget,
            "reserve": self.reserve,
            "min_budget": self.min_budget,
            "target": {"name": self.target.name, "simd_width": self.target.simd_width},
            # NCNN order w, h, (d,) c, as the plan sidecar writes shapes
            "inputs": {name: list(reversed(s.numpy())) for name, s in self.inputs.items()},
            "param_ids": {"kernel": KERNEL_PARAM_ID, "tiles": TILES_PARAM_ID, "kernel_codes": KERNEL_CODES},
            "stream": None if self.stream is None else {**self.stream.to_json(), "streamed_share": self.streamed_share},
            "spatial_tilings": [t.to_json() for t in self.tilings if isinstance(t, spatial.SpatialTiling)],
            "hidden_splits": [t.to_json() for t in self.tilings if isinstance(t, HiddenSplit)],
            "column_splits": [t.to_json() for t in self.tilings if isinstance(t, ColumnSplit)],
            "head_splits": [t.to_json() for t in self.tilings if isinstance(t, HeadSplit)],
            "layers": [{**asdict(d), "slices": d.slices} for d in self.decisions],
        }


def slice_model(param: NcnnParam, modelbin: ModelBin, graph: Graph, shapes: dict[str, BlobShape], budget: int,
                target: Target, reserve: int = 0, progress: bool = False, stream: StreamModel | None = None,
                measure: Measure | None = None, tiler: spatial.Tiler | None = None) -> SlicingResult:
    """Slice so every layer's weights + intermediates fit what `budget` leaves beside live activations.

    `reserve` is taken off every layer's limit: the planner raises it to tighten and retry. With
    `stream`, Winograd decisions are weighed against im2col+GEMM by compute + streamed weights. With
    `measure` (meter.py, on the target), a choice fits when its measurement does; a layer none of whose
    options measures within its limit gets the estimate's choice, and the prepared profile decides.
    `tiler`: the model's spatial.Tiler, when the caller slices it repeatedly (made here if None).
    Raises UserError naming the smallest feasible budget when `budget` is not enough.
    """
    analyses = analyze(graph, shapes)
    need = {a.layer.name: layer_need(a, target) + reserve for a in analyses}
    bottleneck = max(analyses, key=lambda a: need[a.layer.name])
    # with `measure`, the estimate only finds the bottleneck: its need is measured, until the largest
    # need is a measured one (a fixed layer has nothing to measure)
    exact: set[str] = set()
    while measure is not None and bottleneck.layer.name not in exact and not isinstance(bottleneck.model, FixedModel):
        need[bottleneck.layer.name] = layer_need(bottleneck, target, measure) + reserve
        exact.add(bottleneck.layer.name)
        bottleneck = max(analyses, key=lambda a: need[a.layer.name])
    untiled = need[bottleneck.layer.name]
    # below the activation floor: blocks of spatial layers run one output tile at a time (spatial.py)
    if tiler is None:
        tiler = spatial.Tiler(spatial.TiledModel(param, modelbin, graph, shapes, analyses, ()), target)
    min_budget = min(untiled, tiler.smallest_need() + reserve)
    if budget < min_budget:
        tiling = ("spatial tiling of its blocks needs no less" if min_budget == untiled else
                  f"spatial tiling of its blocks brings that to {format_size(min_budget)}, not below")
        raise UserError(
            f"budget {format_size(budget)} is too small: layer {bottleneck.layer.name} ({bottleneck.layer.type}) "
            f"needs {format_size(untiled)} with its live activations even fully sliced, and {tiling}, so no "
            f"budget below {format_size(min_budget)} is feasible (`--budget min` finds the smallest feasible budget)")
    tiled = tiler.tile(budget - reserve) if budget < untiled else None
    tilings: tuple[spatial.Option, ...] = ()
    if tiled is not None:
        param, modelbin, graph, shapes, analyses, tilings = (tiled.param, tiled.modelbin, tiled.graph, tiled.shapes,
                                                             tiled.analyses, tiled.tilings)
    # what the model as sliced leaves for pinning (an option's need bounds its tiled model's analysis)
    least = (tiler.need(tiled) if tiled is not None else untiled - reserve) + reserve
    share = streamed_share(analyses, budget - least) if stream is not None else 0.0
    decisions: dict[str, LayerDecision] = {}
    # disable=None shows the bar only on a terminal: piped stderr keeps to the one-line error contract
    for a in tqdm(analyses, desc="slicing", unit="layer", disable=None if progress else True):
        limit = budget - a.live_bytes - reserve
        measured = measure is not None and not isinstance(a.model, FixedModel)  # a fixed layer has one choice
        if measured:
            assert measure is not None
            d = decide(a, limit, target, measure) or least_measured(a, limit, target, measure)
        else:
            d = decide(a, limit, target)
        assert d is not None, "every layer fits once the budget covers its smallest working set"
        if stream is not None:
            d = decide_streamed(a, d, target, stream, share, measure if measured else None)
        if not isinstance(a.model, FixedModel):
            decisions[a.layer.name] = d
    sliced_param, sliced_bin, done = apply(param, modelbin, graph, decisions, shapes, target.simd_width)
    ordered = [done[a.layer.name] for a in analyses if a.layer.name in done]
    log.info("%d of %d layers sliced or re-kerneled", sum(d.changed for d in ordered), len(ordered))
    inputs = {b: shapes[b] for b in graph.inputs if b in shapes}
    return SlicingResult(sliced_param, sliced_bin, budget, reserve, target, inputs, ordered, analyses, min_budget,
                         tilings, stream, share)


def write_sliced(result: SlicingResult, outdir: Path, stem: str,
                 min_search: dict[str, Any] | None = None) -> tuple[Path, Path, Path]:
    """Write OUTDIR/STEM.flexnn.param, .flexnn.bin and .flexnn.slicing.json, all or none; `min_search`
    (fit.SmallestBudget.search_json) is recorded in the .slicing.json when the budget was searched."""
    out_param, out_bin = outdir / f"{stem}.flexnn.param", outdir / f"{stem}.flexnn.bin"
    out_json = outdir / f"{stem}.flexnn.slicing.json"
    param_text = result.param.format().encode()
    record = result.to_json()
    if min_search is not None:
        record["min_search"] = min_search
    decisions = (json.dumps(record, indent=1) + "\n").encode()
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        atomic_write_all({out_param: lambda f: f.write(param_text), out_bin: result.modelbin.write,
                          out_json: lambda f: f.write(decisions)})
    except OSError as e:
        raise UserError(f"cannot write to {outdir}: {e.strerror or e}") from None
    return out_param, out_bin, out_json
