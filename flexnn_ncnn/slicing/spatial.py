"""Spatial tiling (patch-based execution): a chain of spatial layers run one output tile at a time.

Channel slicing cannot go below the activation floor: a high-resolution layer's whole input and output
are alive while it runs. A chain of spatial layers (Convolution, ConvolutionDepthWise, Pooling and
per-element layers), each reading the previous one's only output, is rewritten as a grid of tiles of
its last layer's output. Each tile crops the chain's input to the region its receptive field needs
(the halo its neighbours recompute), runs copies of the chain's layers on it (the same weights, one
copy of the records per tile), and the tiles' outputs are concatenated along w per row of the grid,
then the rows along h, into the chain's output blob: consumers are untouched. A tile's layer pads
only the sides where its region meets the image border, with the full layer's own pads there, so
every output pixel is computed from the same inputs and padding as in the whole layer; Pooling's
tail padding (pad_mode 0) becomes an explicit bottom/right pad (pad_mode 1). The result is an
ordinary NCNN model: stock NCNN runs it and gives the chain's output, bit for bit with kernels whose
sums do not depend on a pixel's position (direct, im2col+GEMM at the same tile sizes), within
rounding with Winograd, whose output blocks then fall elsewhere.

The full-resolution intermediates never exist: while a tile runs, the chain's input, the tiles'
outputs so far and the tile's own (smaller) blobs are alive. `options` enumerates the sub-chains
between downsampling layers and the grids, each costed step by step as the slicer costs a layer
(live activations + its smallest working set), with its recomputation: the MACs the tiles run over
the untiled sub-chain's. `choose` takes the option with the least recomputation that fits a limit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..analysis import LayerAnalysis, analyze_layer
from ..ncnn_model import BlobShape, Graph, Layer, LayerWeights, ModelBin, NcnnParam, ParamDict
from ..ncnn_model.param import SHAPE_HINT_ID
from .policy import smallest_working_set
from .target import Target

log = logging.getLogger(__name__)

GRIDS = (2, 3, 4, 6, 8)  # tiles per side tried, fewest first
# layers that compute each output element from the same element of their input (geometry: identity)
PER_ELEMENT = frozenset({
    "AbsVal", "BatchNorm", "Bias", "BNLL", "Clip", "Dropout", "ELU", "Exp", "GELU", "HardSigmoid", "HardSwish",
    "Log", "Mish", "Power", "PReLU", "ReLU", "Scale", "SELU", "Sigmoid", "Swish", "TanH", "UnaryOp",
})
# param ids of (pad left, right, top, bottom) by layer type
PAD_IDS = {"Convolution": (4, 15, 14, 16), "ConvolutionDepthWise": (4, 15, 14, 16), "Pooling": (3, 14, 13, 15)}


@dataclass(frozen=True)
class Window:
    """A spatial layer along one axis: output o reads inputs [o·stride − pad_lo, … + extent)."""

    kernel: int
    stride: int
    dilation: int
    pad_lo: int

    @property
    def extent(self) -> int:
        return self.dilation * (self.kernel - 1) + 1

    def reads(self, lo: int, hi: int) -> tuple[int, int]:
        """The input range outputs [lo, hi) read, padding included (may leave [0, size))."""
        return lo * self.stride - self.pad_lo, (hi - 1) * self.stride - self.pad_lo + self.extent


IDENTITY = Window(1, 1, 1, 0)


def _windows(layer: Layer, in_shape: BlobShape) -> tuple[Window, Window] | None:
    """(along h, along w) of a layer a tile can run, None for any other layer."""
    p = layer.params
    if len(layer.bottoms) != 1 or len(layer.tops) != 1 or in_shape.dims != 3:
        return None
    if layer.type in PER_ELEMENT:
        return None if layer.type == "Scale" and p.get_int(0, 0) == -233 else (IDENTITY, IDENTITY)
    if layer.type in ("Convolution", "ConvolutionDepthWise"):
        if p.get_int(19, 0) or p.get_int(8, 0):  # weights from a second input; int8 (its int8 outputs: no Crop/Concat)
            return None
        kw, dw, sw = p.get_int(1, 0), p.get_int(2, 1), p.get_int(3, 1)
        kh, dh, sh = p.get_int(11, kw), p.get_int(12, dw), p.get_int(13, sw)
    elif layer.type == "Pooling":
        if p.get_int(4, 0) or p.get_int(7, 0) or p.get_int(5, 0) not in (0, 1):
            return None  # global, adaptive, or SAME padding
        kw, sw, dw = p.get_int(1, 0), p.get_int(2, 1), 1
        kh, sh, dh = p.get_int(11, kw), p.get_int(12, sw), 1
    else:
        return None
    left, right, top, bottom = _pads(layer, in_shape)
    if min(left, right, top, bottom) < 0:
        return None  # SAME padding (-233/-234)
    return Window(kh, sh, dh, top), Window(kw, sw, dw, left)


def _pads(layer: Layer, in_shape: BlobShape) -> tuple[int, int, int, int]:
    """(left, right, top, bottom) the layer pads its whole input with; Pooling's full-padding mode
    (pad_mode 0) adds the tail that makes the last window fit, as NCNN does."""
    p = layer.params
    if layer.type not in PAD_IDS:
        return 0, 0, 0, 0
    li, ri, ti, bi = PAD_IDS[layer.type]
    left = p.get_int(li, 0)
    right, top = p.get_int(ri, left), p.get_int(ti, left)
    bottom = p.get_int(bi, top)
    if layer.type == "Pooling" and p.get_int(5, 0) == 0 and min(left, right, top, bottom) >= 0:
        kw, sw = p.get_int(1, 0), p.get_int(2, 1)
        kh, sh = p.get_int(11, kw), p.get_int(12, sw)
        wtail = (in_shape.w + left + right - kw) % sw
        htail = (in_shape.h + top + bottom - kh) % sh
        right += sw - wtail if wtail else 0
        bottom += sh - htail if htail else 0
    return left, right, top, bottom


def _macs_per_pixel(layer: Layer, in_shape: BlobShape, out_shape: BlobShape) -> int:
    """Multiply-adds (or compares) per output pixel: the unit recomputation is counted in."""
    p = layer.params
    if layer.type == "Convolution":
        kw = p.get_int(1, 0)
        return out_shape.c * in_shape.c * kw * p.get_int(11, kw)
    if layer.type in ("ConvolutionDepthWise", "Pooling"):
        kw = p.get_int(1, 0)
        return out_shape.c * kw * p.get_int(11, kw)
    return out_shape.c


@dataclass(frozen=True)
class Chain:
    """Layers of `graph.order` [first, last] each reading the previous one's only output."""

    first: int
    last: int


def chains(graph: Graph, shapes: dict[str, BlobShape]) -> list[Chain]:
    """The maximal chains of layers a tile can run (at least one of them spatial)."""
    consumers: dict[str, int] = {}
    for layer in graph.order:
        for b in layer.bottoms:
            consumers[b] = consumers.get(b, 0) + 1
    tileable = [bool(layer.bottoms) and layer.bottoms[0] in shapes and _windows(layer, shapes[layer.bottoms[0]]) is not None
                for layer in graph.order]
    found, start = [], None
    for i, layer in enumerate(graph.order):
        if not tileable[i]:
            start = None
            continue
        if start is None or graph.order[i - 1].tops[0] != layer.bottoms[0] or consumers.get(layer.bottoms[0], 0) != 1:
            start = i
        if not (i + 1 < len(graph.order) and tileable[i + 1] and graph.order[i + 1].bottoms[0] == layer.tops[0]
                and consumers.get(layer.tops[0], 0) == 1 and layer.tops[0] not in graph.outputs):
            if any(graph.order[j].type in PAD_IDS for j in range(start, i + 1)):
                found.append(Chain(start, i))
            start = None
    return found


@dataclass(frozen=True)
class Region:
    """Rows [top, bottom) and columns [left, right) of a blob."""

    top: int
    bottom: int
    left: int
    right: int

    @property
    def h(self) -> int:
        return self.bottom - self.top

    @property
    def w(self) -> int:
        return self.right - self.left


@dataclass(frozen=True)
class TileLayer:
    """One layer of one tile: the region of the full layer's output it computes and its pads."""

    layer: Layer
    out: Region
    pads: tuple[int, int, int, int]  # left, right, top, bottom


def _tile(layers: list[Layer], shapes: dict[str, BlobShape], out: Region) -> tuple[Region, list[TileLayer]]:
    """The chain's input region a tile of its output needs, and each layer's part, first layer first."""
    parts: list[TileLayer] = []
    for layer in reversed(layers):
        in_shape = shapes[layer.bottoms[0]]
        wh, ww = _windows(layer, in_shape)  # type: ignore[misc]
        top, bottom = wh.reads(out.top, out.bottom)
        left, right = ww.reads(out.left, out.right)
        need = Region(max(top, 0), min(bottom, in_shape.h), max(left, 0), min(right, in_shape.w))
        parts.append(TileLayer(layer, out, (need.left - left, right - need.right, need.top - top, bottom - need.bottom)))
        out = need
    return out, parts[::-1]


@dataclass(frozen=True)
class SpatialTiling:
    """A chain's layers by name, run as a grid of `rows` x `cols` tiles of the last one's output."""

    layers: tuple[str, ...]
    rows: int
    cols: int
    recompute: float    # MACs the tiles run over the untiled chain's (>= 1)
    need: int           # the most bytes (live activations + smallest working set) any layer of the tiled model needs

    def to_json(self) -> dict:
        return {"layers": list(self.layers), "grid": [self.rows, self.cols], "recompute": round(self.recompute, 4),
                "need": self.need}


def _tile_layer(part: TileLayer, suffix: str, bottom: str) -> Layer:
    """The copy of `part.layer` one tile runs: its pads where the tile meets the image border, 0 elsewhere."""
    layer = part.layer
    p = layer.params.copy()
    p.remove(SHAPE_HINT_ID)
    if layer.type in PAD_IDS:
        for pid, pad in zip(PAD_IDS[layer.type], part.pads):
            p.set(pid, pad)
        if layer.type == "Pooling":
            p.set(5, 1)  # the pads as given: the tail is in them
    return Layer(layer.type, layer.name + suffix, [bottom], [layer.tops[0] + suffix], p)


def _crop(name: str, bottom: str, top: str, region: Region) -> Layer:
    p = ParamDict()
    p.set(9, [region.top, region.left])  # numpy-style starts, ends and axes (h, w of a c,h,w blob)
    p.set(10, [region.bottom, region.right])
    p.set(11, [1, 2])
    return Layer("Crop", name, [bottom], [top], p)


def _axis(axis: int) -> ParamDict:
    p = ParamDict()
    p.set(0, axis)
    return p


def _grid(out: BlobShape, rows: int, cols: int) -> list[list[Region]]:
    hb = [out.h * i // rows for i in range(rows + 1)]
    wb = [out.w * i // cols for i in range(cols + 1)]
    return [[Region(hb[r], hb[r + 1], wb[c], wb[c + 1]) for c in range(cols)] for r in range(rows)]


def _macs(layers: list[Layer], shapes: dict[str, BlobShape]) -> int:
    return sum(shapes[layer.tops[0]].h * shapes[layer.tops[0]].w
               * _macs_per_pixel(layer, shapes[layer.bottoms[0]], shapes[layer.tops[0]]) for layer in layers)


def _shape(c: int, region: Region) -> BlobShape:
    return BlobShape(3, region.w, region.h, 1, c)


def rewrite(param: NcnnParam, shapes: dict[str, BlobShape], chain_layers: list[Layer], rows: int, cols: int,
            modelbin: ModelBin) -> tuple[NcnnParam, ModelBin, dict[str, BlobShape]]:
    """The model with `chain_layers` run as a grid of tiles, its weights and its blob shapes."""
    assert rows * cols > 1, "a grid of one tile is the chain itself"
    first, last = chain_layers[0], chain_layers[-1]
    source, output, out_shape = first.bottoms[0], last.tops[0], shapes[last.tops[0]]
    hinted = SHAPE_HINT_ID in last.params
    chain_names = {layer.name for layer in chain_layers}
    new_shapes = {b: s for b, s in shapes.items() if b not in {layer.tops[0] for layer in chain_layers}}
    block: list[Layer] = []
    tile_weights: list[LayerWeights] = []

    def add(layer: Layer, shape: BlobShape) -> None:
        if hinted:
            layer.params.set(SHAPE_HINT_ID, [3, shape.w, shape.h, shape.c])  # dims, w, h, c
        block.append(layer)
        new_shapes[layer.tops[0]] = shape

    grid = _grid(out_shape, rows, cols)
    inputs = [f"{source}.flexnn_t{r}_{c}" for r in range(rows) for c in range(cols)]
    block.append(Layer("Split", f"{last.name}.flexnn_tsplit", [source], inputs))
    row_blobs = []
    for r, row in enumerate(grid):
        row_tiles = []
        for c, region in enumerate(row):
            suffix = f".flexnn_t{r}_{c}"
            need, parts = _tile(chain_layers, shapes, region)
            bottom = f"{source}.flexnn_crop{r}_{c}"
            add(_crop(f"{last.name}.flexnn_crop{r}_{c}", inputs[r * cols + c], bottom, need), _shape(shapes[source].c, need))
            for part in parts:
                tile = _tile_layer(part, suffix, bottom)
                add(tile, _shape(shapes[part.layer.tops[0]].c, part.out))
                weights = modelbin.get(part.layer.name)
                if weights is not None:
                    tile_weights.append(LayerWeights(tile.name, 0, weights.records))
                bottom = tile.tops[0]
            row_tiles.append(bottom)
        if cols > 1:
            row_blob = output if rows == 1 else f"{output}.flexnn_row{r}"
            add(Layer("Concat", f"{last.name}.flexnn_trow{r}", row_tiles, [row_blob], _axis(2)),
                _shape(out_shape.c, Region(row[0].top, row[0].bottom, 0, out_shape.w)))
            row_tiles = [row_blob]
        row_blobs += row_tiles
    if rows > 1:
        add(Layer("Concat", f"{last.name}.flexnn_tconcat", row_blobs, [output], _axis(1)), out_shape)
    at = next(i for i, layer in enumerate(param) if layer.name == first.name)
    layers = ([layer for layer in param.layers[:at] if layer.name not in chain_names] + block
              + [layer for layer in param.layers[at:] if layer.name not in chain_names])
    order = {layer.name: i for i, layer in enumerate(layers)}
    kept = [lw for lw in modelbin if lw.layer not in chain_names] + tile_weights
    return NcnnParam(layers), ModelBin(ModelBin(sorted(kept, key=lambda lw: order[lw.layer])).layout()), new_shapes


def _block_need(chain_layers: list[Layer], shapes: dict[str, BlobShape], beside: int, rows: int, cols: int,
                target: Target) -> tuple[int, int]:
    """The most bytes any step of the tiled chain needs (live activations, `beside` of them from outside
    the chain, + the smallest working set), and the MACs its tiles run. The steps: the Split, per tile
    its Crop and layers, per row the Concat along w, then the Concat along h."""
    source, out_shape = shapes[chain_layers[0].bottoms[0]], shapes[chain_layers[-1].tops[0]]
    need, macs, done_rows = 0, 0, 0
    for row in _grid(out_shape, rows, cols):
        done_tiles = 0
        for region in row:
            held = beside + source.nbytes + done_rows + done_tiles
            needed, parts = _tile(chain_layers, shapes, region)
            in_shape = _shape(source.c, needed)
            need = max(need, held + in_shape.nbytes)
            for part in parts:
                out = _shape(shapes[part.layer.tops[0]].c, part.out)
                a = analyze_layer(0, _tile_layer(part, "", "in"), held + in_shape.nbytes + out.nbytes, in_shape, out)
                need = max(need, a.live_bytes + smallest_working_set(a, target))
                macs += out.h * out.w * _macs_per_pixel(part.layer, shapes[part.layer.bottoms[0]], shapes[part.layer.tops[0]])
                in_shape = out
            done_tiles += in_shape.nbytes
        if cols > 1:
            row_bytes = _shape(out_shape.c, Region(row[0].top, row[0].bottom, 0, out_shape.w)).nbytes
            need = max(need, beside + source.nbytes + done_rows + done_tiles + row_bytes)
            done_tiles = row_bytes
        done_rows += done_tiles
    if rows > 1:
        need = max(need, beside + done_rows + out_shape.nbytes)
    return need, macs


def _downsamples(layer: Layer) -> bool:
    return layer.type in PAD_IDS and layer.params.get_int(3 if layer.type != "Pooling" else 2, 1) > 1


def options(graph: Graph, shapes: dict[str, BlobShape], analyses: list[LayerAnalysis], target: Target) -> list[SpatialTiling]:
    """Every sub-chain (from a chain's start or a downsampling layer's output, to a downsampling layer or
    the chain's end) and square grid, with the need of the whole model so tiled."""
    needs = [a.live_bytes + smallest_working_set(a, target) for a in analyses]
    found = []
    for chain in chains(graph, shapes):
        layers = graph.order[chain.first:chain.last + 1]
        starts = [0] + [i + 1 for i, layer in enumerate(layers[:-1]) if _downsamples(layer)]
        ends = sorted({i for i, layer in enumerate(layers) if _downsamples(layer)} | {len(layers) - 1})
        for s in starts:
            for e in (e for e in ends if e >= s and any(layer.type in PAD_IDS for layer in layers[s:e + 1])):
                sub = layers[s:e + 1]
                first, last = chain.first + s, chain.first + e
                outside = max((n for i, n in enumerate(needs) if not first <= i <= last), default=0)
                beside = (analyses[first].live_bytes - shapes[sub[0].bottoms[0]].nbytes - shapes[sub[0].tops[0]].nbytes)
                out = shapes[sub[-1].tops[0]]
                untiled = _macs(sub, shapes)
                for g in GRIDS:
                    if g > min(out.h, out.w):
                        break
                    need, macs = _block_need(sub, shapes, max(beside, 0), g, g, target)
                    found.append(SpatialTiling(tuple(layer.name for layer in sub), g, g, macs / untiled,
                                               max(need, outside)))
    return found


def choose(candidates: list[SpatialTiling], limit: int) -> SpatialTiling | None:
    """The option whose need fits `limit` with the least recomputation (then the least need); None
    when none fits."""
    fitting = [o for o in candidates if o.need <= limit]
    return min(fitting, key=lambda o: (o.recompute, o.need)) if fitting else None


def apply(param: NcnnParam, modelbin: ModelBin, shapes: dict[str, BlobShape],
          tiling: SpatialTiling) -> tuple[NcnnParam, ModelBin, dict[str, BlobShape]]:
    """The model, weights and blob shapes with `tiling` applied."""
    by_name = {layer.name: layer for layer in param}
    log.info("spatial tiling: %s..%s as %dx%d tiles (%.2fx the MACs)", tiling.layers[0], tiling.layers[-1],
             tiling.rows, tiling.cols, tiling.recompute)
    return rewrite(param, shapes, [by_name[n] for n in tiling.layers], tiling.rows, tiling.cols, modelbin)
