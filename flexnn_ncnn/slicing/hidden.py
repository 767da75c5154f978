"""A transformer's MLP split by hidden units: Gemm → activation → Gemm run as branches whose sum is its output.

A block's MLP widens its tokens (145x768 → 145x3072 in a ViT) and narrows them again. Weights
slicing cuts each Gemm apart, but the wide hidden blob still exists whole, beside the Concat of the
first Gemm's slices: the step that sets a transformer's smallest budget. The hidden units are
independent until the second Gemm sums over them, so the MLP splits into branches, each a group of
hidden units: its columns of the first Gemm's B (and bias), the activation, and its rows of the
second Gemm's B, that Gemm's bias added by the first branch only. Each branch's output is added to
the sum of those before (BinaryOp), the last add writing the MLP's output, as attention sliced by
heads is (rewrite._emit_heads). One branch's hidden slice, its partial output and the running sum
are alive at a time; every weight is in exactly one branch, so nothing more is streamed. The sum
over hidden units is taken in another order than one Gemm takes it: the output equals stock NCNN's
within rounding.

`options` costs splitting every such MLP into 2, 3, 4... branches, as spatial.py costs a grid of tiles
(the Tiler chooses between both kinds): the branches' Gemms are then ordinary layers the policy
slices further. A branch's layers carry `.flexnn_mlp` in their names and are not split again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..analysis import LayerAnalysis, analyze
from ..ncnn_model import BlobShape, Graph, Layer, LayerWeights, ModelBin, NcnnParam, WeightRecord
from ..ncnn_model.graph import Residual
from ..ncnn_model.param import SHAPE_HINT_ID, ParamDict
from .policy import layer_need
from .rewrite import add_partial, slice_rows, sub_layer, sub_layer_params, substitute
from .target import Target

# weightless layers computing each element from the same element: a hidden unit's activation
ACTIVATIONS = frozenset({"AbsVal", "BNLL", "Clip", "ELU", "Exp", "GELU", "HardSigmoid", "HardSwish", "Log", "Mish",
                         "Power", "ReLU", "SELU", "Sigmoid", "Swish", "TanH", "UnaryOp"})
BRANCHES = (2, 3, 4, 6, 8, 12, 16)  # branches tried, fewest first
MARK = ".flexnn_mlp"


@dataclass(frozen=True)
class Mlp:
    """`up` (Gemm, N = hidden units) → `act` (or None) → `down` (Gemm, K = hidden units), its output
    read by `residual`'s add alone when there is one: split, the branches' sum starts from it."""

    up: Layer
    act: Layer | None
    down: Layer
    residual: Residual | None

    @property
    def hidden(self) -> int:
        return self.up.params.get_int(8, 0)

    @property
    def layers(self) -> tuple[Layer, ...]:
        return tuple(layer for layer in (self.up, self.act, self.down) if layer is not None)


def plain_gemm(layer: Layer, shapes: dict[str, BlobShape]) -> bool:
    """A fp32 Gemm of one 2-D input (rows first) by a constant B, written rows first as fp32."""
    p = layer.params
    return (layer.type == "Gemm" and MARK not in layer.name and len(layer.bottoms) == 1 and len(layer.tops) == 1
            and p.get_int(5, 0) == 1 and not any(p.get_int(i, 0) for i in (2, 4, 11, 13, 14, 18))
            and layer.bottoms[0] in shapes and shapes[layer.bottoms[0]].dims == 2)


def mlps(graph: Graph, shapes: dict[str, BlobShape]) -> list[Mlp]:
    """Every Gemm → (activation →) Gemm widening its input (N > K) into a hidden blob, whose inner blobs
    have one reader each, in run order; a layer is in one MLP at most."""
    readers = graph.readers()

    def only_reader(blob: str) -> Layer | None:
        found = readers.get(blob, [])
        return found[0] if len(found) == 1 and blob not in graph.outputs else None

    found: list[Mlp] = []
    for up in graph.order:
        if (not plain_gemm(up, shapes) or up.params.get_int(8, 0) <= up.params.get_int(9, 0)
                or any(m.down is up for m in found)):
            continue
        act = only_reader(up.tops[0])
        if act is not None and act.type in ACTIVATIONS and len(act.bottoms) == 1 and len(act.tops) == 1:
            down = only_reader(act.tops[0])
        else:
            act, down = None, act
        if down is not None and plain_gemm(down, shapes) and down.params.get_int(9, 0) == up.params.get_int(8, 0):
            found.append(Mlp(up, act, down, None))
    residuals = graph.residuals([m.down.tops[0] for m in found], shapes)
    # the branches are written where the first Gemm was: a residual written after it stays apart
    return [replace(m, residual=r if r is None or graph.written_at[r.other] < graph.written_at[m.up.tops[0]] else None)
            for m, r in ((m, residuals[m.down.tops[0]]) for m in found)]


def _widths(hidden: int, simd: int) -> list[int]:
    """Branch widths (hidden units) for BRANCHES, each a multiple of `simd`, widest first, no repeats."""
    found: list[int] = []
    for n in BRANCHES:
        width = math.ceil(math.ceil(hidden / n) / simd) * simd
        if width < hidden and width not in found:
            found.append(width)
    return found


def branch_params(layer: Layer, updates: dict[int, int]) -> ParamDict:
    """`layer`'s params without its shape hint (a branch's shapes differ), with `updates`."""
    p = layer.params.copy()
    p.remove(SHAPE_HINT_ID)
    for key, value in updates.items():
        p.set(key, value)
    return p


def _branches(mlp: Mlp, width: int, shapes: dict[str, BlobShape],
              weights: dict[str, LayerWeights] | None) -> tuple[list[Layer], dict[str, BlobShape], list[LayerWeights]]:
    """The MLP as branches of `width` hidden units: layers in run order, the shapes of the blobs they
    write, and (given the two Gemms' weights) the branches' weights."""
    up, act, down = mlp.up, mlp.act, mlp.down
    hidden, n = mlp.hidden, math.ceil(mlp.hidden / width)
    tokens, out = shapes[up.bottoms[0]].h, shapes[down.tops[0]]
    copies = [f"{up.name}{MARK}_in{i}" for i in range(n)]
    layers = [Layer("Split", f"{up.name}{MARK}_split", [up.bottoms[0]], copies)]
    new_shapes = {c: shapes[up.bottoms[0]] for c in copies}
    branch_weights: list[LayerWeights] = []
    total = ""
    for i in range(n):
        lo, hi = i * width, min((i + 1) * width, hidden)
        h = BlobShape(2, hi - lo, tokens)
        up_i, down_i = f"{up.name}{MARK}{i}", f"{down.name}{MARK}{i}"
        wide, part = f"{up.tops[0]}{MARK}{i}", f"{down.tops[0]}{MARK}_part{i}"
        layers.append(Layer("Gemm", up_i, [copies[i]], [wide], sub_layer_params(up, hi - lo, hidden)))
        new_shapes[wide] = h
        if act is not None:
            activated = f"{act.tops[0]}{MARK}{i}"
            layers.append(Layer(act.type, f"{act.name}{MARK}{i}", [wide], [activated], branch_params(act, {})))
            new_shapes[activated] = h
            wide = activated
        # the down projection's bias (constant C) is added once, by the first branch
        down_updates = {9: hi - lo} if i == 0 else {9: hi - lo, 6: 0}
        layers.append(Layer("Gemm", down_i, [wide], [part], branch_params(down, down_updates)))
        new_shapes[part] = out
        if weights is not None:
            branch_weights += [LayerWeights(up_i, 0, sub_layer(up, weights[up.name], lo, hi, hidden)[1]),
                               LayerWeights(down_i, 0, down_records(down, weights[down.name], lo, hi, first=i == 0))]
        total = add_partial(layers, f"{down.name}{MARK}", i, n, total, part, down, mlp.residual)
        new_shapes[total] = out
    return layers, new_shapes, branch_weights


def down_records(down: Layer, lw: LayerWeights, lo: int, hi: int, first: bool) -> list[WeightRecord]:
    """Hidden units [lo, hi) of the second Gemm: its B's rows of K (columns of a transposed B); its C
    only for the first branch."""
    k, trans_b = down.params.get_int(9, 0), down.params.get_int(3, 0)
    records = []
    for r in lw.records:
        if r.spec.role == "B":
            records.append(slice_rows(r, k, lo, hi, columns=bool(trans_b)))
        elif r.spec.role != "C" or first:
            records.append(r)
    return records


@dataclass(frozen=True)
class HiddenSplit:
    """Every MLP of `layers` (their last Gemms, by name: their tops stay) run as branches of `width`
    hidden units."""

    layers: tuple[str, ...]
    width: int
    recompute: float    # the MACs run over the unsplit MLPs' (the branch sums' adds: just above 1)
    need: int           # the most bytes any layer of the model so split needs
    block_need: int     # the most any step of a split MLP needs

    def to_json(self) -> dict:
        return {"mlps": list(self.layers), "hidden_width": self.width, "need": self.need}

    def describe(self) -> str:
        return f"{len(self.layers)} MLPs ({self.layers[0]}...) as branches of {self.width} hidden units"

    def apply(self, param: NcnnParam, modelbin: ModelBin, graph: Graph,
              shapes: dict[str, BlobShape]) -> tuple[NcnnParam, ModelBin, dict[str, BlobShape]]:
        """The model, weights and blob shapes with the MLPs split."""
        chosen = [m for m in mlps(graph, shapes) if m.down.name in self.layers]
        assert len(chosen) == len(self.layers), "a split names the MLPs of the model it was costed on"
        weights = {lw.layer: lw for lw in modelbin}
        # blobs no longer written: the hidden ones, and an output the residual add now takes in the sum
        inner = {layer.tops[0] for m in chosen for layer in (m.layers if m.residual else m.layers[:-1])}
        new_shapes = {b: s for b, s in shapes.items() if b not in inner}
        inserted = {}
        for m in chosen:
            branch_layers, branch_shapes, branch_weights = _branches(m, self.width, shapes, weights)
            inserted[m.up.name] = (branch_layers, branch_weights)
            new_shapes.update(branch_shapes)
        removed = {layer.name for m in chosen for layer in (*m.layers, *([m.residual.add] if m.residual else []))}
        new_param, new_bin = substitute(param, modelbin, removed, inserted)
        return new_param, new_bin, new_shapes


def _split_need(mlp: Mlp, width: int, shapes: dict[str, BlobShape], held: int, target: Target) -> int:
    """The most bytes a step of the split MLP needs beside `held` bytes of other live blobs (a residual
    the branches' sum starts from is the block's own)."""
    layers, layer_shapes, _ = _branches(mlp, width, shapes, None)
    sources = [mlp.up.bottoms[0], *([mlp.residual.other] if mlp.residual else [])]
    block = NcnnParam([Layer("Input", f"in{i}", [], [b]) for i, b in enumerate(sources)] + layers)
    analyses = analyze(Graph.build(block), {**shapes, **layer_shapes}, caller_inputs=False)
    return held + max(layer_need(a, target) for a in analyses[1:])


def options(graph: Graph, shapes: dict[str, BlobShape], analyses: list[LayerAnalysis], target: Target) -> list[HiddenSplit]:
    """Per branch width, every MLP wider than it split so (one option), with the need of the model so
    split (the most live activations + smallest working set of any layer)."""
    found_mlps = mlps(graph, shapes)
    if not found_mlps:
        return []
    needs = {a.layer.name: layer_need(a, target) for a in analyses}
    lives = {a.layer.name: a.live_bytes for a in analyses}
    inside = {layer.name for m in found_mlps for layer in m.layers}
    outside = max((n for name, n in needs.items() if name not in inside), default=0)
    found = []
    for width in _widths(max(m.hidden for m in found_mlps), target.simd_width):
        split = [m for m in found_mlps if m.hidden > width]
        block_need = max((needs[layer.name] for m in found_mlps if m not in split for layer in m.layers), default=0)
        for m in split:
            # the blobs live beside the MLP's own: at its first Gemm (its input and hidden output aside)
            # and at its second (its hidden input and output aside)
            held = max(lives[m.up.name] - shapes[m.up.bottoms[0]].nbytes - shapes[m.up.tops[0]].nbytes,
                       lives[m.down.name] - shapes[m.down.bottoms[0]].nbytes - shapes[m.down.tops[0]].nbytes)
            if m.residual:
                held -= shapes[m.residual.other].nbytes
            block_need = max(block_need, _split_need(m, width, shapes, held, target))
        adds = sum((math.ceil(m.hidden / width) - 1) * shapes[m.down.tops[0]].numel for m in split)
        macs = sum(shapes[m.up.bottoms[0]].h * m.hidden * (m.up.params.get_int(9, 0) + m.down.params.get_int(8, 0))
                   for m in split)
        found.append(HiddenSplit(tuple(m.down.name for m in split), width, (macs + adds) / macs,
                                 max(block_need, outside), block_need))
    return found
