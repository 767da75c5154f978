"""Apply slicing decisions to a model: weights slicing becomes Split → N sub-layers → Concat, a
grouped convolution run apart becomes Split → per group Crop → Convolution → Concat, and attention
sliced by heads becomes Split of its inputs → per slice a MultiHeadAttention of its heads, each
output added to the previous ones' sum (BinaryOp), the last add writing the original top.

The sliced model is an ordinary NCNN model (stock NCNN runs it unchanged), unless it concatenates
or crops int8 blobs (REFERENCE_LAYER_ID): a requantizing int8 layer's slices, or spatial tiling's
crops (spatial.py). Each sub-layer carries
one contiguous range of output channels/rows with its weights in the storage they had (fp16 stays
fp16, byte for byte). The Concat takes the original top's name, so consumers are untouched.

Convolutions also record the chosen kernel and im2col tile count in param ids 26 and 27, which stock
NCNN's Convolution ignores (it reads 0-19, 30, 31) and the patched layer (26=2, 27) or the runtime
(26=1: direct) reads; see docs/SLICING.md.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..analysis import GROUPED, crop_through, group_convolution
from ..ncnn_model import BlobShape, Graph, Layer, LayerWeights, ModelBin, NcnnParam, WeightRecord, WeightSpec
from ..ncnn_model.graph import Residual
from ..ncnn_model.param import SHAPE_HINT_ID, ParamDict
from .policy import LayerDecision

KERNEL_PARAM_ID = 26
TILES_PARAM_ID = 27
GEMM_TILE_M_ID = 20  # Gemm's constant_TILE_M: the rows of its input it packs at a time, per thread
REFERENCE_LAYER_ID = 29  # =1: the runtime builds NCNN's reference layer, not its CPU one (runtime/planned_layer.h)
KERNEL_CODES = {"direct": 1, "im2col_gemm": 2, "winograd43": 3, "winograd63": 4}
PER_ROW = ("weight", "bias", "weight_int8_scales")  # records of Convolution/InnerProduct laid out by output row


def slice_rows(record: WeightRecord, rows: int, lo: int, hi: int, columns: bool = False) -> WeightRecord:
    """Rows [lo, hi) of a record laid out as `rows` rows (or, with `columns`, columns of a K×rows matrix)."""
    e = record.elements()
    e = e.reshape(-1, rows)[:, lo:hi] if columns else e.reshape(rows, -1)[lo:hi]
    spec = WeightSpec(record.spec.role, e.size, record.spec.load_type)
    return WeightRecord.from_elements(spec, record.tag, np.ascontiguousarray(e).reshape(-1))


def sub_layer_params(layer: Layer, width: int, rows: int) -> ParamDict:
    """Params of a sub-layer computing `width` of the layer's `rows` output rows."""
    p = layer.params.copy()
    p.remove(SHAPE_HINT_ID)
    if layer.type in ("Convolution", "Deconvolution", "InnerProduct"):
        p.set(0, width)
        size_id = 2 if layer.type == "InnerProduct" else 6
        p.set(size_id, layer.params.get_int(size_id, 0) // rows * width)
    elif layer.type == "Gemm":
        p.set(8, width)
    elif layer.type == "MultiHeadAttention":
        # `rows` heads; kdim and vdim default to embed_dim, so they are set; the scale (6) defaults to
        # 1/sqrt(embed_dim / num_heads), which whole heads keep
        embed = layer.params.get_int(0, 0)
        head_dim, qdim = embed // rows, layer.params.get_int(2, 0) // embed
        p.set(0, width * head_dim)
        p.set(1, width)
        p.set(2, width * head_dim * qdim)
        p.set(3, layer.params.get_int(3, embed))
        p.set(4, layer.params.get_int(4, embed))
    else:
        raise AssertionError(f"no weights slicing for {layer.type}")
    return p


def sub_layer(layer: Layer, weights: LayerWeights, lo: int, hi: int, rows: int) -> tuple[ParamDict, list[WeightRecord]]:
    """Params and weight records of the sub-layer computing output rows [lo, hi)."""
    p = sub_layer_params(layer, hi - lo, rows)
    records = []
    if layer.type == "MultiHeadAttention":
        # q, k, v: `rows` heads of rows (weights and bias); out: a head's columns of each qdim row, its
        # bias added once, by the first slice
        for r in weights.records:
            if r.spec.role == "out_weight":
                e = r.elements()
                e = e.reshape(e.size // layer.params.get_int(0, 0), rows, -1)[:, lo:hi]
                records.append(WeightRecord.from_elements(WeightSpec(r.spec.role, e.size, r.spec.load_type), r.tag,
                                                          np.ascontiguousarray(e).reshape(-1)))
            elif r.spec.role == "out_bias":
                records.append(r if lo == 0 else WeightRecord.from_elements(r.spec, r.tag, np.zeros_like(r.elements())))
            else:
                records.append(slice_rows(r, rows, lo, hi))
    elif layer.type in ("Convolution", "Deconvolution", "InnerProduct"):
        # weights are laid out by output channel (Deconvolution too: [out][in][kh·kw]); an int8 layer's
        # weight scales go with their rows; its input (and output) scale to every slice
        records = [slice_rows(r, rows, lo, hi) if r.spec.role in PER_ROW else r for r in weights.records]
    else:
        trans_b, broadcast_c = layer.params.get_int(3, 0), layer.params.get_int(10, 0)
        for r in weights.records:
            if r.spec.role == "B":
                records.append(slice_rows(r, rows, lo, hi, columns=not trans_b))
            elif r.spec.role == "C" and broadcast_c in (3, 4):
                records.append(slice_rows(r, rows, lo, hi, columns=broadcast_c == 3))
            else:
                records.append(r)
    return p, records


def with_kernel(layer: Layer, kernel: str, tiles: int, in_shape: BlobShape | None = None) -> Layer:
    """`layer` recording `kernel` and `tiles` in param ids 26 and 27 when it is an fp32 Convolution (NCNN
    chooses an int8 layer's kernel itself); a Gemm cut into `tiles` of the rows of its input (`in_shape`)
    packs that many at a time (GEMM_TILE_M_ID)."""
    if layer.type == "Gemm" and tiles > 1:
        assert in_shape is not None, "a Gemm's tiles are rows of its input"
        p = layer.params.copy()
        p.set(GEMM_TILE_M_ID, math.ceil(in_shape.h / tiles))
        return replace(layer, params=p, _line=None, _signature=None)
    if kernel not in KERNEL_CODES or layer.type != "Convolution":
        return layer
    p = layer.params.copy()
    p.set(KERNEL_PARAM_ID, KERNEL_CODES[kernel])
    p.set(TILES_PARAM_ID, tiles)
    return replace(layer, params=p, _line=None, _signature=None)


def apply(param: NcnnParam, modelbin: ModelBin, graph: Graph, decisions: dict[str, LayerDecision],
          shapes: dict[str, BlobShape], simd_width: int) -> tuple[NcnnParam, ModelBin, dict[str, LayerDecision]]:
    """The sliced model and its weights; `param` and `modelbin` are not modified. An attention sliced
    by heads whose output is a residual add's folds it into its running sum (add_partial). `simd_width`
    is the target's (Target.simd_width): the widest pack NCNN gives a blob's channels there."""
    by_heads = [layer for layer in graph.order if layer.type == "MultiHeadAttention"
                and layer.name in decisions and decisions[layer.name].slices > 1]
    residuals = graph.residuals([layer.tops[0] for layer in by_heads], shapes)
    folded = {layer.name: residuals[layer.tops[0]] for layer in by_heads}
    removed = {r.add.name for r in folded.values() if r is not None}
    layers: list[Layer] = []
    weights: list[LayerWeights] = []
    done: dict[str, LayerDecision] = {}
    for layer in param:
        if layer.name in removed:
            continue
        d = decisions.get(layer.name)
        lw = modelbin.get(layer.name)
        if d is not None and layer.type == "ConvolutionDepthWise" and d.kernel != GROUPED:
            names = _emit_groups(layer, lw, d, shapes, simd_width, layers, weights)
        elif d is not None and layer.type == "MultiHeadAttention" and d.slices > 1:
            names = _emit_heads(layer, lw, d, layers, weights, folded[layer.name])
        elif d is not None:
            names = _emit(layer, lw, d, shapes, layers, weights)
        else:
            layers.append(layer)
            if lw is not None:
                weights.append(lw)
            continue
        done[layer.name] = replace(d, sublayers=names)
    return NcnnParam(layers), ModelBin(ModelBin(weights).layout()), done


def substitute(param: NcnnParam, modelbin: ModelBin, removed: set[str],
               inserted: dict[str, tuple[list[Layer], list[LayerWeights]]]) -> tuple[NcnnParam, ModelBin]:
    """The model without the layers `removed`, with each value of `inserted` (layers and their weights)
    where the layer its key names was; the weights laid out in the new layers' order."""
    layers: list[Layer] = []
    kept = [lw for lw in modelbin if lw.layer not in removed]
    for layer in param:
        if layer.name in inserted:
            layers += inserted[layer.name][0]
            kept += inserted[layer.name][1]
        elif layer.name not in removed:
            layers.append(layer)
    order = {layer.name: i for i, layer in enumerate(layers)}
    return NcnnParam(layers), ModelBin(ModelBin(sorted(kept, key=lambda lw: order[lw.layer])).layout())


def numpy_crop(name: str, bottom: str, top: str, starts: list[int], ends: list[int], axes: list[int]) -> Layer:
    """A Crop of `bottom` from `starts` to `ends` (exclusive) along `axes` of its c,h,w (0, 1, 2), NCNN's
    numpy-style params 9, 10 and 11."""
    p = ParamDict()
    p.set(9, starts)
    p.set(10, ends)
    p.set(11, axes)
    return Layer("Crop", name, [bottom], [top], p)


def running_sum(name: str, total: str, part: str, top: str, hinted_like: Layer | None) -> Layer:
    """A BinaryOp adding a slice's partial output `part` to the sum so far `total`; the last one of a chain
    writes the layer's own top and carries its shape hint (`hinted_like`)."""
    p = ParamDict()  # BinaryOp 0=0: add
    if hinted_like is not None and SHAPE_HINT_ID in hinted_like.params:
        p.set(SHAPE_HINT_ID, hinted_like.params.get_array(SHAPE_HINT_ID))
    return Layer("BinaryOp", name, [total, part], [top], p)


def add_partial(layers: list[Layer], prefix: str, i: int, n: int, total: str, part: str, sliced: Layer,
                residual: Residual | None) -> str:
    """Append the add of partial output `i` of `n` to the running sum `total` (none before the first),
    whose last add writes `sliced`'s top, or, folding `residual`, starts from its other blob and writes
    the residual add's top (Residual). Returns the sum so far."""
    if i == 0 and residual is None:
        return part
    if i == 0:
        total = residual.other
    writer = residual.add if residual is not None else sliced
    last = i == n - 1
    summed = writer.tops[0] if last else f"{prefix}_sum{i}"
    layers.append(running_sum(f"{prefix}_add{i}", total, part, summed, writer if last else None))
    return summed


def writes_int8(layer: Layer) -> bool:
    """The layer writes an int8 blob: a quantizing layer, or an int8 layer that requantizes (param 8 > 100)."""
    return layer.type in ("Quantize", "Requantize") or (
        layer.type in ("Convolution", "ConvolutionDepthWise", "InnerProduct") and layer.params.get_int(8, 0) > 100)


def unpacked_if(int8: bool, layer: Layer) -> Layer:
    """`layer` (a Crop or Concat), computed by NCNN's reference layer where its input holds int8: NCNN's
    packed CPU Crop and Concat read an int8 blob's packs as floats; the runtime builds the reference
    layer, whose input the Net unpacks first, for REFERENCE_LAYER_ID=1."""
    if int8:
        layer.params.set(REFERENCE_LAYER_ID, 1)
    return layer


def _concat(name: str, bottoms: list[str], top: str, axis: int, like: Layer) -> Layer:
    """A Concat merging `bottoms` into `like`'s top, with its shape hint."""
    p = ParamDict()
    p.set(0, axis)
    if SHAPE_HINT_ID in like.params:
        p.set(SHAPE_HINT_ID, like.params.get_array(SHAPE_HINT_ID))
    return Layer("Concat", name, bottoms, [top], p)


def _emit(layer: Layer, lw: LayerWeights | None, d: LayerDecision, shapes: dict[str, BlobShape],
          layers: list[Layer], weights: list[LayerWeights]) -> tuple[str, ...]:
    """Append `layer` as decided (whole, or Split → sub-layers → Concat); the names of its computing layers."""
    if d.slices == 1:
        layers.append(with_kernel(layer, d.kernel, d.tiles, shapes.get(layer.bottoms[0])))
        if lw is not None:
            weights.append(lw)
        return (layer.name,)
    assert lw is not None and len(layer.bottoms) == 1 and len(layer.tops) == 1
    top, n = layer.tops[0], d.slices
    ins = [f"{layer.name}.flexnn_in{i}" for i in range(n)]
    outs = [f"{layer.name}.flexnn_out{i}" for i in range(n)]
    names = [f"{layer.name}.flexnn{i}" for i in range(n)]
    layers.append(Layer("Split", f"{layer.name}.flexnn_split", [layer.bottoms[0]], ins))
    for i in range(n):
        lo, hi = i * d.slice_width, min((i + 1) * d.slice_width, d.rows)
        p, records = sub_layer(layer, lw, lo, hi, d.rows)
        layers.append(with_kernel(Layer(layer.type, names[i], [ins[i]], [outs[i]], p), d.kernel, d.tiles,
                                  shapes.get(layer.bottoms[0])))
        weights.append(LayerWeights(names[i], 0, records))
    # channels (axis 0) of a conv's c,h,w output; the last axis (w) of a matrix layer's output
    axis = 0 if layer.type in ("Convolution", "Deconvolution") else shapes[top].dims - 1
    layers.append(unpacked_if(writes_int8(layer), _concat(f"{layer.name}.flexnn_concat", outs, top, axis, layer)))
    return tuple(names)


def _emit_heads(layer: Layer, lw: LayerWeights | None, d: LayerDecision, layers: list[Layer],
                weights: list[LayerWeights], residual: Residual | None) -> tuple[str, ...]:
    """Append a MultiHeadAttention sliced by heads: each input Split to every slice, per slice a
    MultiHeadAttention of its heads, its output added to the sum of those before (the last add writes
    the layer's top, or `residual`'s: add_partial). One partial output and the running sum are alive
    at a time."""
    assert lw is not None and len(layer.tops) == 1
    n = d.slices
    copies = [[f"{layer.name}.flexnn_in{j}_{i}" for i in range(n)] for j in range(len(layer.bottoms))]
    for j, bottom in enumerate(layer.bottoms):
        layers.append(Layer("Split", f"{layer.name}.flexnn_split{j}", [bottom], copies[j]))
    names = [f"{layer.name}.flexnn{i}" for i in range(n)]
    total = ""
    for i in range(n):
        lo, hi = i * d.slice_width, min((i + 1) * d.slice_width, d.rows)
        p, records = sub_layer(layer, lw, lo, hi, d.rows)
        out = f"{layer.name}.flexnn_out{i}"
        layers.append(Layer(layer.type, names[i], [c[i] for c in copies], [out], p))
        weights.append(LayerWeights(names[i], 0, records))
        total = add_partial(layers, f"{layer.name}.flexnn", i, n, total, out, layer, residual)
    return tuple(names)


def channel_crop(name: str, bottom: str, top: str, start: int, end: int, channels: int, simd_width: int) -> list[Layer]:
    """Crops of channels [start, end) of `bottom` (c,h,w of `channels` channels) into `top`: through the
    pack-aligned range around them where there is one (crop_through), so that NCNN unpacks only that
    range's copy, not the whole blob."""
    through = crop_through(start, end, channels, simd_width)
    if through is None:
        return [numpy_crop(name, bottom, top, [start], [end], [0])]
    low, high = through
    aligned = f"{name}.aligned"
    return [numpy_crop(f"{name}_aligned", bottom, aligned, [low], [high], [0]),
            numpy_crop(name, aligned, top, [start - low], [end - low], [0])]


def _emit_groups(layer: Layer, lw: LayerWeights | None, d: LayerDecision, shapes: dict[str, BlobShape],
                 simd_width: int, layers: list[Layer], weights: list[LayerWeights]) -> tuple[str, ...]:
    """Append a grouped ConvolutionDepthWise as one Convolution per group, each as decided: Split → per
    group a Crop of its input channels (channel_crop) → Convolution → Concat of the groups' outputs."""
    groups = layer.params.get_int(7, 1)
    assert lw is not None and len(layer.bottoms) == 1 and len(layer.tops) == 1 and groups > 1 and d.kernel in KERNEL_CODES
    group = group_convolution(layer)
    channels = shapes[layer.bottoms[0]].c
    cin = channels // groups
    ins = [f"{layer.name}.flexnn_group_in{i}" for i in range(groups)]
    outs = [f"{layer.name}.flexnn_group_out{i}" for i in range(groups)]
    layers.append(Layer("Split", f"{layer.name}.flexnn_group_split", [layer.bottoms[0]], ins))
    names: list[str] = []
    for i in range(groups):
        cropped = f"{layer.name}.flexnn_group_channels{i}"  # the group's channels (axis 0 of c,h,w)
        layers += channel_crop(f"{layer.name}.flexnn_group_crop{i}", ins[i], cropped, i * cin, (i + 1) * cin, channels,
                               simd_width)
        # the group's rows of every per-output record ([groups][outputs/groups][...]): weights and bias
        records = [slice_rows(r, groups, i, i + 1) for r in lw.records]
        conv = replace(group, name=f"{layer.name}.flexnn_group{i}", bottoms=[cropped], tops=[outs[i]])
        names += _emit(conv, LayerWeights(conv.name, 0, records), d, shapes, layers, weights)
    layers.append(_concat(f"{layer.name}.flexnn_group_concat", outs, layer.tops[0], 0, layer))
    return tuple(names)
