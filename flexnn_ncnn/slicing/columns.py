"""A Gemm whose output a Slice cuts into groups of columns, run as one Gemm per group.

A transformer's fused q/k/v projection (GPT-2's c_attn: 128 tokens of 768 → 2304) writes one wide
blob that a Slice along its columns copies into q, k and v at once: the wide blob and its three
copies coexist, and weights slicing would add a Concat of the Gemm's slices beside them. Its groups
of columns are independent, so the Gemm runs as one Gemm per Slice output, each with its columns of
B (and of a per-column bias) writing that output: no wide blob, no copy, and each group is computed
when its readers need it. Every output column is the same sum over K as in the whole Gemm.

`options` offers this for every such Gemm of the model at once, costed by the need of the model so
rewritten (spatial.py's Tiler chooses among its options); the group Gemms are ordinary layers the
policy slices further. Their names carry `.flexnn_cols`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis import LayerAnalysis, analyze
from ..ncnn_model import BlobShape, Graph, Layer, LayerWeights, ModelBin, NcnnParam
from .hidden import plain_gemm
from .policy import layer_need
from .rewrite import sub_layer, sub_layer_params, substitute
from .target import Target

MARK = ".flexnn_cols"
SLICE_REST = -233  # Slice's "the rest, shared evenly by this and the outputs after it"


@dataclass(frozen=True)
class SlicedGemm:
    """`gemm` and the `slice` reading its output, cutting its N columns at `bounds` (one more than outputs)."""

    gemm: Layer
    slice: Layer
    bounds: tuple[int, ...]


def _bounds(layer: Layer, n: int) -> tuple[int, ...] | None:
    """Where a Slice of `n` columns cuts them, as NCNN's Slice computes it from its sizes (param 0); None
    for cuts by indices (param 2)."""
    if 2 in layer.params:
        return None
    sizes = layer.params.get_array(0)
    if len(sizes) != len(layer.tops):
        return None
    bounds = [0]
    for i, size in enumerate(sizes):
        size = (n - bounds[-1]) // (len(sizes) - i) if size == SLICE_REST else int(size)
        bounds.append(bounds[-1] + size)
    return tuple(bounds) if bounds[-1] == n and all(a < b for a, b in zip(bounds, bounds[1:])) else None


def sliced_gemms(graph: Graph, shapes: dict[str, BlobShape]) -> list[SlicedGemm]:
    """Every plain Gemm (hidden.plain_gemm) whose output only a Slice along its columns reads."""
    readers = graph.readers()
    found = []
    for gemm in graph.order:
        if not plain_gemm(gemm, shapes) or MARK in gemm.name or gemm.tops[0] in graph.outputs:
            continue
        reader = readers.get(gemm.tops[0], [])
        if len(reader) != 1 or reader[0].type != "Slice" or reader[0].params.get_int(1, 0) not in (1, -1):
            continue
        bounds = _bounds(reader[0], gemm.params.get_int(8, 0))
        if bounds is not None:
            found.append(SlicedGemm(gemm, reader[0], bounds))
    return found


def _groups(s: SlicedGemm, weights: dict[str, LayerWeights]) -> tuple[list[Layer], list[LayerWeights]]:
    """A Split of the Gemm's input, then one Gemm per Slice output (with its weights, where `weights`
    has the Gemm's)."""
    gemm, n = s.gemm, s.gemm.params.get_int(8, 0)
    copies = [f"{gemm.name}{MARK}_in{i}" for i in range(len(s.slice.tops))]
    layers = [Layer("Split", f"{gemm.name}{MARK}_split", [gemm.bottoms[0]], copies)]
    group_weights = []
    for i, (lo, hi, top) in enumerate(zip(s.bounds, s.bounds[1:], s.slice.tops)):
        name = f"{gemm.name}{MARK}{i}"
        layers.append(Layer("Gemm", name, [copies[i]], [top], sub_layer_params(gemm, hi - lo, n)))
        if gemm.name in weights:
            group_weights.append(LayerWeights(name, 0, sub_layer(gemm, weights[gemm.name], lo, hi, n)[1]))
    return layers, group_weights


def _rewrite(param: NcnnParam, modelbin: ModelBin, found: list[SlicedGemm]) -> tuple[NcnnParam, ModelBin]:
    weights = {lw.layer: lw for lw in modelbin}
    removed = {name for s in found for name in (s.gemm.name, s.slice.name)}
    return substitute(param, modelbin, removed, {s.gemm.name: _groups(s, weights) for s in found})


def _shapes(shapes: dict[str, BlobShape], found: list[SlicedGemm]) -> dict[str, BlobShape]:
    """The blob shapes without the wide outputs, with the Splits' copies."""
    wide = {s.gemm.tops[0] for s in found}
    copies = {f"{s.gemm.name}{MARK}_in{i}": shapes[s.gemm.bottoms[0]] for s in found for i in range(len(s.slice.tops))}
    return {**{b: v for b, v in shapes.items() if b not in wide}, **copies}


@dataclass(frozen=True)
class ColumnSplit:
    """Every Gemm read by a column Slice of `layers` (the Slices, by name: their tops stay) run as one
    Gemm per output of the Slice."""

    layers: tuple[str, ...]
    need: int           # the most bytes any layer of the model so rewritten needs
    block_need: int     # the most any of the group Gemms needs
    recompute: float = 1.0  # the same MACs

    def to_json(self) -> dict:
        return {"slices": list(self.layers), "need": self.need}

    def describe(self) -> str:
        return f"{len(self.layers)} Gemms read by a Slice ({self.layers[0]}...) as one Gemm per slice"

    def apply(self, param: NcnnParam, modelbin: ModelBin, graph: Graph,
              shapes: dict[str, BlobShape]) -> tuple[NcnnParam, ModelBin, dict[str, BlobShape]]:
        """The model, weights and blob shapes with the Gemms split."""
        found = [s for s in sliced_gemms(graph, shapes) if s.slice.name in self.layers]
        assert len(found) == len(self.layers), "a split names the Gemms of the model it was costed on"
        return (*_rewrite(param, modelbin, found), _shapes(shapes, found))


def options(graph: Graph, shapes: dict[str, BlobShape], target: Target) -> list[ColumnSplit]:
    """The one option: every Gemm read by a column Slice split, with the need of the model so rewritten."""
    found = sliced_gemms(graph, shapes)
    if not found:
        return []
    param, _ = _rewrite(NcnnParam(graph.order), ModelBin([]), found)  # the layers only: no weights
    new_graph = Graph.build(param)
    analyses: list[LayerAnalysis] = analyze(new_graph, _shapes(shapes, found))
    needs = {a.layer.name: layer_need(a, target) for a in analyses}
    groups = [n for name, n in needs.items() if MARK in name]
    return [ColumnSplit(tuple(s.slice.name for s in found), max(needs.values()), max(groups))]
