"""Attention written as MatMuls, split by heads: each group of heads runs from its columns of the q/k/v
projections to its rows of the output projection, the groups' outputs summed.

A transformer exported without NCNN's MultiHeadAttention layer (pnnx's GPT-2) computes q, k and v with
Gemms, reshapes each to heads (Reshape → Permute), runs MatMul → scale/mask/Softmax → MatMul over all
heads at once, puts the heads back (Permute → Reshape) and projects them with a Gemm. Weights slicing
cuts the Gemms apart, but q, k, v, the scores of every head and their copies through the mask and the
scale stay whole: the step that sets the model's smallest budget. Heads are independent until the
output projection sums over them (its rows of K are the heads' columns), so the attention splits into
groups of heads, each: its columns of the q, k and v Gemms (B and per-column bias), the same reshape
to its heads, the same layers between the MatMuls, and its rows of the output Gemm's B, whose bias
the first group adds. Each group's partial output is added to the sum of those before, starting from
the residual the output flowed into (rewrite.add_partial), as an MLP's branches are (hidden.py). One
group's q, k, v, scores and partial output are alive at a time; every weight is in exactly one group.

Only what keeps each head's arithmetic unchanged is split: Permutes that move the heads onto the
channel axis (order 2 or 3 of a (head_dim, heads, tokens) blob) and back (order 2, from the second
MatMul's (head_dim, tokens, heads)), and between the MatMuls only element-wise layers and a Softmax not
over channels, whose other operands are one channel (a causal mask) or one value. `options` costs 2, 3, 4... groups for every such attention at once, as spatial.py
costs a grid of tiles; the groups' Gemms are ordinary layers the policy slices further. Their names
carry `.flexnn_heads`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from ..analysis import analyze
from ..ncnn_model import BlobShape, Graph, Layer, LayerWeights, ModelBin, NcnnParam
from ..ncnn_model.graph import Residual
from .columns import sliced_gemms
from .hidden import BRANCHES, branch_params, down_records, plain_gemm
from .policy import layer_need
from .rewrite import add_partial, sub_layer, sub_layer_params, substitute
from .target import Target

MARK = ".flexnn_heads"
BETWEEN = frozenset({"BinaryOp", "Softmax", "UnaryOp", "Dropout"})  # layers allowed between the two MatMuls
TO_HEADS = (2, 3)  # Permute orders taking a (head_dim, heads, tokens) blob's heads onto channels (3: transposed)
FROM_HEADS = 2     # the Permute order taking (head_dim, tokens, heads) back to (head_dim, heads, tokens)


@dataclass(frozen=True)
class Projection:
    """q, k or v: columns [lo, hi) of `gemm` (N columns), reshaped to heads and permuted (`reshape`,
    `permute`)."""

    gemm: Layer
    lo: int
    hi: int
    reshape: Layer
    permute: Layer

    @property
    def head_dim(self) -> int:
        return self.reshape.params.get_int(0, 0)


@dataclass(frozen=True)
class Attention:
    """q·k → `between` → ·v over `heads` heads, back to tokens (`permute`, `reshape`) and projected by
    `out`; `sliced` is the Slice cutting q, k and v from one Gemm (None: their own Gemms); `residual`
    the add the output flows into, which the groups' sum then starts from."""

    q: Projection
    k: Projection
    v: Projection
    sliced: Layer | None
    scores: Layer
    between: tuple[Layer, ...]
    weighted: Layer
    permute: Layer
    reshape: Layer
    out: Layer
    residual: Residual | None
    heads: int

    @property
    def projections(self) -> tuple[Projection, Projection, Projection]:
        return self.q, self.k, self.v

    @property
    def layers(self) -> tuple[Layer, ...]:
        gemms = {p.gemm.name: p.gemm for p in self.projections}
        return (*gemms.values(), *([self.sliced] if self.sliced else []),
                *(layer for p in self.projections for layer in (p.reshape, p.permute)),
                self.scores, *self.between, self.weighted, self.permute, self.reshape, self.out,
                *([self.residual.add] if self.residual else []))

    @property
    def top(self) -> str:
        """The blob the split attention writes: the residual add's, else the output Gemm's."""
        return self.residual.add.tops[0] if self.residual else self.out.tops[0]

    def outside(self) -> list[str]:
        """The blobs the layers between the MatMuls read from outside them (a mask), in order."""
        inner = {self.scores.tops[0], *(layer.tops[0] for layer in self.between)}
        return list(dict.fromkeys(b for layer in self.between for b in layer.bottoms if b not in inner))


def _producer(graph: Graph, blob: str) -> Layer | None:
    return graph.order[graph.producer[blob]] if blob in graph.producer else None


def _projection(graph: Graph, shapes: dict[str, BlobShape], blob: str, only_reader: Callable[[str], Layer | None],
                cut: dict[str, tuple[Layer, Layer, int, int]]) -> Projection | None:
    """The projection whose heads `blob` is: Permute(TO_HEADS) of Reshape(head_dim, heads, tokens) of a
    plain Gemm's output or of a column Slice of one (`cut`: each such Slice output → gemm, slice, lo, hi)."""
    permute = _producer(graph, blob)
    if permute is None or permute.type != "Permute" or permute.params.get_int(0, 0) not in TO_HEADS:
        return None
    reshape = _producer(graph, permute.bottoms[0])
    if reshape is None or reshape.type != "Reshape" or only_reader(reshape.tops[0]) is not permute:
        return None
    source, shaped = reshape.bottoms[0], shapes.get(reshape.tops[0])
    if only_reader(source) is not reshape or shaped is None or shaped.dims != 3 or source not in shapes:
        return None
    if shapes[source] != BlobShape(2, shaped.w * shaped.h, shaped.c) or reshape.params.get_int(0, 0) != shaped.w:
        return None
    if source in cut:
        gemm, _, lo, hi = cut[source]
        return Projection(gemm, lo, hi, reshape, permute)
    gemm = _producer(graph, source)
    if gemm is None or not plain_gemm(gemm, shapes) or MARK in gemm.name:
        return None
    return Projection(gemm, 0, gemm.params.get_int(8, 0), reshape, permute)


def _per_head(layer: Layer, shapes: dict[str, BlobShape], inner: set[str], heads: int) -> bool:
    """`layer`, between the MatMuls, computes each head apart: element-wise or a Softmax not over
    channels, writing a blob of `heads` channels, its other operands one channel (a mask) or one value.
    (NCNN broadcasts a 1-D or 2-D operand of a 3-D blob over its channels: it would vary over heads.)"""
    if layer.type not in BETWEEN or len(layer.tops) != 1:
        return False
    if layer.type == "Softmax" and layer.params.get_int(0, 0) in (0, -3):
        return False
    top = shapes.get(layer.tops[0])
    return top is not None and top.dims == 3 and top.c == heads and all(
        b in inner or (b in shapes and ((shapes[b].dims == 3 and shapes[b].c == 1) or shapes[b].numel == 1))
        for b in layer.bottoms)


def attentions(graph: Graph, shapes: dict[str, BlobShape]) -> list[Attention]:
    """Every attention written as MatMuls (module docstring) whose inner blobs have one reader each, in
    run order; a layer is in one attention at most."""
    readers = graph.readers()

    def only_reader(blob: str) -> Layer | None:
        found = readers.get(blob, [])
        return found[0] if len(found) == 1 and blob not in graph.outputs else None

    cut = {top: (s.gemm, s.slice, lo, hi) for s in sliced_gemms(graph, shapes)
           for top, lo, hi in zip(s.slice.tops, s.bounds, s.bounds[1:])}
    found: list[Attention] = []
    taken: set[str] = set()
    for scores in graph.order:
        a = _attention(graph, shapes, scores, only_reader, cut)
        if a is None or any(layer.name in taken for layer in a.layers):
            continue
        written = graph.written_at[a.out.tops[0]]
        if any(graph.written_at.get(b, written) >= written for b in (*(p.gemm.bottoms[0] for p in a.projections),
                                                                     *a.outside())):
            # NCNN loads a .param whose layer reads a blob written further down; the groups are
            # written where the output Gemm was, so what they read must be written before it
            continue
        taken.update(layer.name for layer in a.layers)
        found.append(a)
    residuals = graph.residuals([a.out.tops[0] for a in found], shapes)
    return [replace(a, residual=residuals[a.out.tops[0]]) for a in found]


def _attention(graph: Graph, shapes: dict[str, BlobShape], scores: Layer, only_reader: Callable[[str], Layer | None],
               cut: dict[str, tuple[Layer, Layer, int, int]]) -> Attention | None:
    """The attention whose first MatMul is `scores`, or None (its residual not looked for)."""
    if scores.type != "MatMul" or len(scores.bottoms) != 2 or MARK in scores.name:
        return None
    q, k = (_projection(graph, shapes, b, only_reader, cut) for b in scores.bottoms)
    if q is None or k is None or any(only_reader(b) is not scores for b in scores.bottoms):
        return None
    heads, tokens = shapes[q.reshape.tops[0]].h, shapes[q.reshape.tops[0]].c
    between: list[Layer] = []
    inner, blob = {scores.tops[0]}, scores.tops[0]
    weighted = only_reader(blob)
    while weighted is not None and weighted.type != "MatMul" and _per_head(weighted, shapes, inner, heads):
        between.append(weighted)
        blob = weighted.tops[0]
        inner.add(blob)
        weighted = only_reader(blob)
    if (weighted is None or weighted.type != "MatMul" or len(weighted.bottoms) != 2 or weighted.bottoms[0] != blob
            or only_reader(weighted.bottoms[1]) is not weighted):
        return None
    v = _projection(graph, shapes, weighted.bottoms[1], only_reader, cut)
    permute = only_reader(weighted.tops[0])
    reshape = only_reader(permute.tops[0]) if permute is not None else None
    out = only_reader(reshape.tops[0]) if reshape is not None else None
    if (v is None or permute is None or reshape is None or out is None or permute.type != "Permute"
            or permute.params.get_int(0, 0) != FROM_HEADS or reshape.type != "Reshape" or not plain_gemm(out, shapes)):
        return None
    # each head's (tokens, head_dim) rows back to tokens: head h in columns [h·head_dim, (h+1)·head_dim)
    # of the output Gemm's input, its rows of K
    if (any(shapes[p.reshape.tops[0]].h != heads for p in (k, v)) or q.head_dim != k.head_dim
            or shapes[scores.tops[0]].dims != 3 or shapes[scores.tops[0]].c != heads
            or shapes[weighted.tops[0]] != BlobShape(3, v.head_dim, tokens, c=heads)
            or shapes[permute.tops[0]] != BlobShape(3, v.head_dim, heads, c=tokens)
            or shapes[reshape.tops[0]] != BlobShape(2, heads * v.head_dim, tokens)
            or out.params.get_int(9, 0) != heads * v.head_dim):
        return None
    gemms = {p.gemm.name for p in (q, k, v)}
    sliced = cut[q.reshape.bottoms[0]][1] if q.reshape.bottoms[0] in cut else None
    if sliced is not None and (len(gemms) != 1 or set(sliced.tops) != {p.reshape.bottoms[0] for p in (q, k, v)}):
        return None  # a Slice whose outputs are not exactly q, k and v stays
    if sliced is None and len(gemms) != 3:
        return None
    return Attention(q, k, v, sliced, scores, tuple(between), weighted, permute, reshape, out, None, heads)


def _head_ranges(heads: int, per_group: int) -> list[tuple[int, int]]:
    """Each group's heads [a, b)."""
    return [(lo, min(lo + per_group, heads)) for lo in range(0, heads, per_group)]


def _groups(a: Attention, per_group: int, shapes: dict[str, BlobShape],
            weights: dict[str, LayerWeights] | None) -> tuple[list[Layer], dict[str, BlobShape], list[LayerWeights]]:
    """The attention as groups of `per_group` heads: layers in run order, the shapes of the blobs they
    write, and (given the Gemms' weights) the groups' weights."""
    groups = _head_ranges(a.heads, per_group)
    n = len(groups)
    layers: list[Layer] = []
    new_shapes: dict[str, BlobShape] = {}
    copies: dict[str, list[str]] = {}  # a blob the groups read from outside → its copies, one per reader
    readers = [p.gemm.bottoms[0] for p in a.projections for _ in groups] + [b for _ in groups for b in a.outside()]
    for blob in dict.fromkeys(readers):
        count = readers.count(blob)
        copies[blob] = [f"{a.out.name}{MARK}_{blob}_{i}" for i in range(count)]
        layers.append(Layer("Split", f"{a.out.name}{MARK}_split_{blob}", [blob], list(copies[blob])))
        new_shapes.update({c: shapes[blob] for c in copies[blob]})

    def copy_of(blob: str) -> str:
        return copies[blob].pop(0)

    group_weights: list[LayerWeights] = []
    total = ""
    for i, (h0, h1) in enumerate(groups):
        tag = f"{MARK}{i}"
        heads = h1 - h0
        ins = []
        for p in a.projections:
            dim, tokens = p.head_dim, shapes[p.reshape.tops[0]].c
            n_cols = p.gemm.params.get_int(8, 0)
            lo, hi = p.lo + h0 * dim, p.lo + h1 * dim
            name, cols = f"{p.reshape.name}{tag}_gemm", f"{p.reshape.bottoms[0]}{tag}"
            layers.append(Layer("Gemm", name, [copy_of(p.gemm.bottoms[0])], [cols],
                                sub_layer_params(p.gemm, hi - lo, n_cols)))
            new_shapes[cols] = BlobShape(2, hi - lo, tokens)
            if weights is not None:
                group_weights.append(LayerWeights(name, 0, sub_layer(p.gemm, weights[p.gemm.name], lo, hi, n_cols)[1]))
            shaped, permuted = f"{p.reshape.tops[0]}{tag}", f"{p.permute.tops[0]}{tag}"
            layers.append(Layer("Reshape", f"{p.reshape.name}{tag}", [cols], [shaped],
                                branch_params(p.reshape, {0: dim, 1: heads, 2: tokens})))
            layers.append(Layer("Permute", f"{p.permute.name}{tag}", [shaped], [permuted],
                                branch_params(p.permute, {})))
            new_shapes[shaped] = BlobShape(3, dim, heads, c=tokens)
            whole = shapes[p.permute.tops[0]]
            new_shapes[permuted] = BlobShape(3, whole.w, whole.h, c=heads)
            ins.append(permuted)
        renamed = {a.scores.bottoms[0]: ins[0], a.scores.bottoms[1]: ins[1], a.weighted.bottoms[1]: ins[2]}
        for layer in (a.scores, *a.between, a.weighted):
            bottoms = [renamed[b] if b in renamed else copy_of(b) for b in layer.bottoms]
            top = f"{layer.tops[0]}{tag}"
            layers.append(Layer(layer.type, f"{layer.name}{tag}", bottoms, [top], branch_params(layer, {})))
            whole = shapes[layer.tops[0]]
            new_shapes[top] = BlobShape(3, whole.w, whole.h, c=heads)
            renamed[layer.tops[0]] = top
        dim, tokens = a.v.head_dim, shapes[a.q.reshape.tops[0]].c
        back, flat = f"{a.permute.tops[0]}{tag}", f"{a.reshape.tops[0]}{tag}"
        layers.append(Layer("Permute", f"{a.permute.name}{tag}", [renamed[a.weighted.tops[0]]], [back],
                            branch_params(a.permute, {})))
        new_shapes[back] = BlobShape(3, dim, heads, c=tokens)
        layers.append(Layer("Reshape", f"{a.reshape.name}{tag}", [back], [flat],
                            branch_params(a.reshape, {0: heads * dim, 1: tokens})))
        new_shapes[flat] = BlobShape(2, heads * dim, tokens)
        out_i, part = f"{a.out.name}{tag}", f"{a.out.tops[0]}{MARK}_part{i}"
        # the output projection's bias (constant C) is added once, by the first group
        updates = {9: heads * dim} if i == 0 else {9: heads * dim, 6: 0}
        layers.append(Layer("Gemm", out_i, [flat], [part], branch_params(a.out, updates)))
        new_shapes[part] = shapes[a.out.tops[0]]
        if weights is not None:
            group_weights.append(LayerWeights(out_i, 0, down_records(a.out, weights[a.out.name], h0 * dim, h1 * dim,
                                                                     first=i == 0)))
        total = add_partial(layers, f"{a.out.name}{MARK}", i, n, total, part, a.out, a.residual)
        new_shapes[total] = shapes[a.out.tops[0]]
    return layers, new_shapes, group_weights


def _rewrite(param: NcnnParam, modelbin: ModelBin, shapes: dict[str, BlobShape], found: list[Attention],
             per_group: int) -> tuple[NcnnParam, ModelBin, dict[str, BlobShape]]:
    weights = {lw.layer: lw for lw in modelbin}
    inner = {top for a in found for layer in a.layers for top in layer.tops} - {a.top for a in found}
    new_shapes = {b: s for b, s in shapes.items() if b not in inner}
    inserted = {}
    for a in found:
        layers, group_shapes, group_weights = _groups(a, per_group, shapes, weights if weights else None)
        inserted[a.out.name] = (layers, group_weights)
        new_shapes.update(group_shapes)
    removed = {layer.name for a in found for layer in a.layers}
    new_param, new_bin = substitute(param, modelbin, removed, inserted)
    return new_param, new_bin, new_shapes


@dataclass(frozen=True)
class HeadSplit:
    """Every attention of `layers` (their output Gemms, by name) run as groups of `heads` heads."""

    layers: tuple[str, ...]
    heads: int
    recompute: float    # the MACs run over the unsplit attentions' (the groups' sums: just above 1)
    need: int           # the most bytes any layer of the model so split needs
    block_need: int     # the most any step of a split attention needs

    def to_json(self) -> dict:
        return {"attentions": list(self.layers), "heads_per_group": self.heads, "need": self.need}

    def describe(self) -> str:
        return f"{len(self.layers)} attentions ({self.layers[0]}...) as groups of {self.heads} heads"

    def apply(self, param: NcnnParam, modelbin: ModelBin, graph: Graph,
              shapes: dict[str, BlobShape]) -> tuple[NcnnParam, ModelBin, dict[str, BlobShape]]:
        """The model, weights and blob shapes with the attentions split."""
        chosen = [a for a in attentions(graph, shapes) if a.out.name in self.layers]
        assert len(chosen) == len(self.layers), "a split names the attentions of the model it was costed on"
        return _rewrite(param, modelbin, shapes, chosen, self.heads)


def _macs(a: Attention, shapes: dict[str, BlobShape]) -> int:
    """The attention's multiply-adds: projections, the two MatMuls, the output projection."""
    def tokens(p: Projection) -> int:
        return shapes[p.reshape.tops[0]].c
    projected = sum((p.hi - p.lo) * p.gemm.params.get_int(9, 0) * tokens(p) for p in a.projections)
    attended = a.heads * tokens(a.q) * tokens(a.k) * (a.q.head_dim + a.v.head_dim)
    return projected + attended + tokens(a.q) * a.out.params.get_int(9, 0) * a.out.params.get_int(8, 0)


def options(graph: Graph, shapes: dict[str, BlobShape], target: Target) -> list[HeadSplit]:
    """Per group size, every attention of more heads split so (one option), with the need of the model
    so split (the most live activations + smallest working set of any layer)."""
    found = attentions(graph, shapes)
    if not found:
        return []
    most = max(a.heads for a in found)
    sizes = dict.fromkeys(math.ceil(most / n) for n in BRANCHES if n <= most)
    result = []
    for per_group in sizes:
        split = [a for a in found if a.heads > per_group]
        if not split:
            continue
        param, _, new_shapes = _rewrite(NcnnParam(graph.order), ModelBin([]), shapes, split, per_group)
        needs = {a.layer.name: layer_need(a, target) for a in analyze(Graph.build(param), new_shapes)}
        inserted = set(needs) - {layer.name for layer in graph.order}  # the groups' layers, not an earlier split's
        adds = sum((len(_head_ranges(a.heads, per_group)) - 1) * shapes[a.out.tops[0]].numel for a in split)
        macs = sum(_macs(a, shapes) for a in split)
        result.append(HeadSplit(tuple(a.out.name for a in split), per_group, (macs + adds) / macs,
                                max(needs.values()), max(needs[name] for name in inserted)))
    return result
