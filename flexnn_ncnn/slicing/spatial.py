"""Spatial tiling (patch-based execution): a block of spatial layers run one output tile at a time.

Channel slicing cannot go below the activation floor: a high-resolution layer's whole input and output
are alive while it runs. A block is the layers between two points of the network that one blob
alone crosses (its source and its sink), all of them layers a tile can run: Convolution,
ConvolutionDepthWise, Pooling, per-element layers, Split, merges of inputs of one size (residual
sums, channel concatenations), and upsampling (Deconvolution, nearest and bilinear Interp by a power
of two), so a UNet's encoder, skips and decoder are one block. It is rewritten as a grid of tiles of the sink: each tile crops the
source to the region its receptive field needs (the halo its neighbours recompute), runs copies of
the block's layers on it (the same weights, one copy of the records per tile), crops again wherever a
layer reads less than its input holds (a residual branch beside a padded one), and the tiles'
outputs are concatenated along w per row of the grid, then the rows along h, into the sink: its
consumers are untouched. A tile's layer pads only the sides where its region meets the image
border, with the full layer's own pads there, so every output pixel is computed from the same inputs
and padding as in the whole layer; Pooling's tail padding (pad_mode 0) and SAME pads (which NCNN
derives from the input's size) become explicit pads. An upsampling layer runs on the input its outputs need and writes
the outputs of all of it (a transposed convolution without pads, an Interp of the tile's size); its
readers crop what they read, so the outputs near the tile's edges, which miss inputs past them or
clamp there, are never used. An LRN within channels, which borders any input it is given with zeros
itself, runs the same way: on the region its outputs need, its readers cropping off what the tile's
zeros made near the inner edges. The result is an ordinary NCNN model (unless it crops int8 blobs, whose
Crops and Concats carry REFERENCE_LAYER_ID, which only the runtime reads): stock NCNN runs it and
gives the sink, bit for bit with kernels whose sums do not depend on a pixel's position (direct convolution),
within rounding with Winograd, whose output blocks then fall elsewhere.

The full-resolution intermediates never exist: while a tile runs, the source, the tiles' outputs so
far and the tile's own (smaller) blobs are alive. `options` enumerates the blocks between
downsampling segments and the grids, each costed step by step as the slicer costs a layer (live
activations + its smallest working set), with its recomputation: the MACs the tiles run over the
untiled block's. `choose` takes the option with the least recomputation that fits a limit; when
none does, `Tiler` tiles one block and searches the rest of the model again, block by block. The
Tiler's options also split a transformer's MLPs by hidden units (hidden.py), its Gemms read by a
column Slice (columns.py) and its attentions written as MatMuls by heads (heads.py), costed alike.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Union

from ..analysis import LayerAnalysis, analyze, conv_pads, pooling_pads, resident_bytes
from ..ncnn_model import BlobShape, Graph, Layer, LayerWeights, ModelBin, NcnnParam, ParamDict
from ..ncnn_model.param import SHAPE_HINT_ID
from . import columns, heads, hidden
from .columns import ColumnSplit
from .heads import HeadSplit
from .hidden import HiddenSplit
from .policy import layer_need
from .rewrite import numpy_crop, unpacked_if, writes_int8
from .target import Target

log = logging.getLogger(__name__)

GRIDS = (2, 3, 4, 6, 8)  # tiles per side tried, fewest first
# layers that compute each output element from the same element of their input (geometry: identity)
PER_ELEMENT = frozenset({
    "AbsVal", "BatchNorm", "Bias", "BNLL", "Clip", "Dropout", "ELU", "Exp", "GELU", "HardSigmoid", "HardSwish",
    "Log", "Mish", "Power", "PReLU", "ReLU", "Scale", "SELU", "Sigmoid", "Swish", "TanH", "UnaryOp",
})
LRN_ACROSS_CHANNELS = 0  # LRN's region type 0 normalises each pixel over its channels: per pixel too
LRN_WITHIN_CHANNEL = 1  # region type 1: over a square window of its channel, zeros beyond its input
# layers that compute each output pixel from the same pixel of their input, across its channels
PER_PIXEL = frozenset({"ShuffleChannel"})
# param ids of (pad left, right, top, bottom) by layer type
PAD_IDS = {"Convolution": (4, 15, 14, 16), "ConvolutionDepthWise": (4, 15, 14, 16), "Pooling": (3, 14, 13, 15),
           "Padding": (2, 3, 0, 1)}
PADDING_CONSTANT = 0  # Padding's type 0: a constant value beyond the borders, as a tile's own pads give
# layers a tile runs with several inputs of one spatial size (geometry: identity per input)
MERGING = frozenset({"BinaryOp", "Eltwise", "Concat"})
MOVING = frozenset({"Split", "Slice", "Crop", "Concat", "Padding"})  # layers that move elements, keeping their type
FORKING = frozenset({"Split", "Slice"})  # one input, several outputs of its h x w: a tile's outputs hold one region
DECONVOLUTION = frozenset({"Deconvolution", "DeconvolutionDepthWise"})
# Interp's resize types a tile can run: nearest (1) and bilinear (2, align_corners off), whose sample
# positions at a power-of-two scale are the same, bit for bit, counted from any whole input position
NEAREST, BILINEAR = 1, 2
MAX_RECOMPUTE = 3.0  # options running more than this many times the untiled MACs are not considered
MAX_BLOCK_LAYERS = 160  # layers a block may span


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


@dataclass(frozen=True)
class Upsampling:
    """An upsampling layer along one axis, in its whole output's coordinates: a transposed convolution
    (output o of the uncropped result gets input i for o in [i·stride, i·stride + extent), then `pad_lo`
    is cut off) or an Interp by `stride` (output o samples input o / stride when nearest, the two
    around (o + 0.5) / stride − 0.5 when `bilinear`)."""

    stride: int
    extent: int   # a transposed convolution's kernel extent; 0 for Interp
    pad_lo: int
    bilinear: bool

    def reads(self, lo: int, hi: int) -> tuple[int, int]:
        """The inputs outputs [lo, hi) are computed from (before clipping to the input)."""
        s = self.stride
        if self.extent:
            u_lo, u_hi = lo + self.pad_lo, hi - 1 + self.pad_lo
            return -((self.extent - 1 - u_lo) // s), u_hi // s + 1
        if not self.bilinear:  # nearest: input floor(o / s)
            return lo // s, (hi - 1) // s + 1
        # bilinear: floor((o + 0.5) / s − 0.5) and the next input
        return (2 * lo + 1 - s) // (2 * s), (2 * (hi - 1) + 1 - s) // (2 * s) + 2

    def writes(self, lo: int, hi: int) -> tuple[int, int]:
        """The outputs a copy of the layer run on inputs [lo, hi) writes (without pads: all of them)."""
        if self.extent:
            return lo * self.stride - self.pad_lo, (hi - 1) * self.stride + self.extent - self.pad_lo
        return lo * self.stride, hi * self.stride


def _upsampling(layer: Layer, in_shape: BlobShape, out_shape: BlobShape | None) -> tuple[Upsampling, Upsampling] | None:
    """(along h, along w) of an upsampling layer a tile can run, None for any other layer."""
    p = layer.params
    if len(layer.bottoms) != 1 or len(layer.tops) != 1 or in_shape.dims != 3:
        return None
    if layer.type in DECONVOLUTION:
        if p.get_int(28, 0) or any(p.get_int(pid, 0) for pid in (18, 19, 20, 21)):
            return None  # weights from a second input, output padding or an output size
        kw, dw, sw = p.get_int(1, 0), p.get_int(2, 1), p.get_int(3, 1)
        kh, dh, sh = p.get_int(11, kw), p.get_int(12, dw), p.get_int(13, sw)
        left = p.get_int(4, 0)
        top = p.get_int(14, left)
        if min(left, top, p.get_int(15, left), p.get_int(16, top)) < 0:
            return None  # SAME
        axes = Upsampling(sh, dh * (kh - 1) + 1, top, False), Upsampling(sw, dw * (kw - 1) + 1, left, False)
        # a kernel narrower than its stride leaves outputs no input reaches: a tile's copy would not write them
        return axes if all(a.extent >= a.stride for a in axes) else None
    if layer.type == "Interp" and out_shape is not None and out_shape.dims == 3:
        if p.get_int(0, 0) not in (NEAREST, BILINEAR) or p.get_int(5, 0) or p.get_int(6, 0) or 9 in p:
            return None  # bicubic, a size from a second input, align_corners, a size expression
        sh, sw = out_shape.h // in_shape.h, out_shape.w // in_shape.w
        if any(s < 2 or s & (s - 1) or s * n != m for s, n, m in ((sh, in_shape.h, out_shape.h), (sw, in_shape.w, out_shape.w))):
            return None  # not a power-of-two integer scale
        scales = (p.get(1, 1.0), p.get(2, 1.0))
        if not (p.get_int(3, 0) or p.get_int(4, 0)) and any(
                not isinstance(v, (int, float)) or float(v) != s for v, s in zip(scales, (sh, sw))):
            return None  # NCNN samples at 1 / scale: only the exact power of two gives these positions
        bilinear = p.get_int(0, 0) == BILINEAR
        return Upsampling(sh, 0, 0, bilinear), Upsampling(sw, 0, 0, bilinear)
    return None


def _bordering(layer: Layer, in_shape: BlobShape) -> Window | None:
    """The window (along h and w alike) of a layer that borders whatever input it is given itself, as
    the whole layer borders the image (LRN within channels: zeros, the sum divided by the whole
    window); None for any other layer."""
    p = layer.params
    if (layer.type != "LRN" or p.get_int(0, 0) != LRN_WITHIN_CHANNEL or len(layer.bottoms) != 1
            or len(layer.tops) != 1 or in_shape.dims != 3):
        return None
    size = p.get_int(1, 5)
    return Window(size, 1, 1, size // 2)


def _windows(layer: Layer, in_shape: BlobShape) -> tuple[Window, Window] | None:
    """(along h, along w) of a layer a tile can run, None for any other layer."""
    p = layer.params
    if len(layer.bottoms) != 1 or len(layer.tops) != 1 or in_shape.dims != 3:
        return None
    if layer.type in PER_ELEMENT | PER_PIXEL or (layer.type == "LRN" and p.get_int(0, 0) == LRN_ACROSS_CHANNELS):
        return IDENTITY, IDENTITY
    if layer.type in ("Convolution", "ConvolutionDepthWise"):
        if p.get_int(19, 0):  # weights from a second input
            return None
        kw, dw, sw = p.get_int(1, 0), p.get_int(2, 1), p.get_int(3, 1)
        kh, dh, sh = p.get_int(11, kw), p.get_int(12, dw), p.get_int(13, sw)
    elif layer.type == "Pooling":
        if p.get_int(4, 0) or p.get_int(7, 0) or p.get_int(5, 0) not in (0, 1, 2, 3):
            return None  # global or adaptive
        kw, sw, dw = p.get_int(1, 0), p.get_int(2, 1), 1
        kh, sh, dh = p.get_int(11, kw), p.get_int(12, sw), 1
    elif layer.type == "Padding":
        if p.get_int(4, 0) != PADDING_CONSTANT or p.get_int(6, 0):
            return None  # replicate or reflect borders, or a value per channel
        kw = sw = dw = kh = sh = dh = 1  # each output pixel is its input's (beyond the borders: the value)
    else:
        return None
    left, right, top, bottom = _pads(layer, in_shape)
    if min(left, right, top, bottom) < 0:
        return None  # negative pads that are not NCNN's SAME
    return Window(kh, sh, dh, top), Window(kw, sw, dw, left)


def _pads(layer: Layer, in_shape: BlobShape) -> tuple[int, int, int, int]:
    """(left, right, top, bottom) the layer pads its whole input with, as NCNN does: Pooling's
    (analysis.pooling_pads: its tail, its SAME pads), a convolution's explicit or SAME pads
    (analysis.conv_pads), Padding's own. A tile's copy gets them explicitly: NCNN would derive SAME
    pads from the tile's size."""
    p = layer.params
    if layer.type == "Pooling":
        return pooling_pads(p, in_shape)
    if layer.type == "Padding":
        left, right, top, bottom = (p.get_int(i, 0) for i in PAD_IDS["Padding"])
        return left, right, top, bottom
    if layer.type in ("Convolution", "ConvolutionDepthWise"):
        return conv_pads(p, in_shape)
    return 0, 0, 0, 0


def _macs_per_pixel(layer: Layer, in_shape: BlobShape, out_shape: BlobShape) -> int:
    """Multiply-adds (or compares) per output pixel: the unit recomputation is counted in."""
    p = layer.params
    if layer.type == "Convolution":
        kw = p.get_int(1, 0)
        return out_shape.c * in_shape.c * kw * p.get_int(11, kw)
    if layer.type == "ConvolutionDepthWise":  # each output channel reads its group's input channels
        kw = p.get_int(1, 0)
        return out_shape.c * (in_shape.c // p.get_int(7, 1)) * kw * p.get_int(11, kw)
    if layer.type == "Pooling":
        kw = p.get_int(1, 0)
        return out_shape.c * kw * p.get_int(11, kw)
    if layer.type in DECONVOLUTION:  # each input pixel's kernel spread over stride² output pixels
        kw, sw = p.get_int(1, 0), p.get_int(3, 1)
        group = p.get_int(7, 1) if layer.type == "DeconvolutionDepthWise" else 1
        return max(1, out_shape.c * in_shape.c // group * kw * p.get_int(11, kw) // (sw * p.get_int(13, sw)))
    return out_shape.c


def _tileable(layer: Layer, shapes: dict[str, BlobShape]) -> bool:
    """A tile can run the layer on a region of its inputs: a spatial or per-element layer of one c,h,w
    input, a Split, a Slice along channels (ShuffleNetV2's), or a merge of inputs of one spatial size (a
    residual sum, a channel concatenation)."""
    blobs = layer.bottoms + layer.tops
    if not layer.bottoms or not layer.tops or any(b not in shapes or shapes[b].dims != 3 for b in blobs):
        return False
    p = layer.params
    if layer.type == "Split":
        return len(layer.bottoms) == 1
    if layer.type == "Slice":
        ins = shapes[layer.bottoms[0]]
        return (len(layer.bottoms) == 1 and p.get_int(1, 0) in (0, -3)
                and all((shapes[t].h, shapes[t].w) == (ins.h, ins.w) for t in layer.tops))
    if layer.type == "BinaryOp" and len(layer.bottoms) == 1:
        return bool(p.get_int(1, 0))  # with a scalar: per element
    if layer.type in MERGING:
        ins = [shapes[b] for b in layer.bottoms]
        if len(layer.tops) != 1 or len({(s.h, s.w) for s in ins}) != 1:
            return False
        if layer.type == "Concat":
            return p.get_int(0, 0) in (0, -3)  # along channels
        return len(set(ins)) == 1  # no broadcasting
    return (_windows(layer, shapes[layer.bottoms[0]]) is not None
            or _bordering(layer, shapes[layer.bottoms[0]]) is not None
            or _upsampling(layer, shapes[layer.bottoms[0]], shapes[layer.tops[0]]) is not None)


def _bystanders(graph: Graph) -> dict[str, str]:
    """Each model input and Split copy of one -> the input: they are live from the start whatever is
    tiled, so a block may run beside them (an SSD's PriorBox layers read the image's size at the end)."""
    found = {b: b for b in graph.inputs}
    for layer in graph.order:
        if layer.type == "Split" and layer.bottoms[0] in found:
            found.update((top, found[layer.bottoms[0]]) for top in layer.tops)
    return found


def _crossing(graph: Graph, bystanders: dict[str, str]) -> list[str | None]:
    """Per position i of `graph.order`: the one blob besides the bystanders passing from layers <= i to
    layers > i (None when there are more, or none); where only bystanders pass, the one the next layer
    reads. Model outputs pass to the end."""
    ends: dict[int, list[str]] = {}
    for b, last in graph.last_use.items():
        if b not in graph.outputs:
            ends.setdefault(last, []).append(b)
    live: set[str] = set()
    out: list[str | None] = []
    for i, layer in enumerate(graph.order):
        live.update(layer.tops)
        live.difference_update(ends.get(i, []))
        passing = live - bystanders.keys()
        if not passing and i + 1 < len(graph.order):
            passing = live & set(graph.order[i + 1].bottoms)
        out.append(next(iter(passing)) if len(passing) == 1 else None)
    return out


@dataclass(frozen=True)
class Block:
    """Layers of `graph.order` in (first, last]: `source` alone enters them, `sink` alone leaves them;
    `beside` bytes of other model inputs stay live throughout and after them, and `keeps_source`: the
    source is a model input read again after them."""

    first: int
    last: int
    source: str
    sink: str
    beside: int = 0
    keeps_source: bool = False


def blocks(graph: Graph, shapes: dict[str, BlobShape]) -> list[Block]:
    """Blocks a tile can run with at least one spatial layer: from the start of a run of tileable
    layers or the output of a downsampling segment (the layers between two positions one blob
    crosses), to the output of a downsampling segment or the end of the run."""
    bystanders = _bystanders(graph)
    crossing = _crossing(graph, bystanders)
    tileable = [_tileable(layer, shapes) for layer in graph.order]
    consumers = {b: len(readers) for b, readers in graph.readers().items()}
    cuts = [i for i, b in enumerate(crossing) if b is not None and b in shapes and shapes[b].dims == 3]
    found = []
    run: list[int] = []  # the cuts of the current run of tileable layers, in order
    for cut in cuts + [len(graph.order)]:
        if run and (cut == len(graph.order) or not all(tileable[run[-1] + 1:cut + 1])):
            found += _run_blocks(graph, shapes, run, crossing, consumers, bystanders)
            run = []
        if cut < len(graph.order):
            run.append(cut)
    return found


def _run_blocks(graph: Graph, shapes: dict[str, BlobShape], cuts: list[int], crossing: list[str | None],
                consumers: dict[str, int], bystanders: dict[str, str]) -> list[Block]:
    segments = list(zip(cuts, cuts[1:]))  # layers (a, b]
    down = [any(_downsamples(layer) for layer in graph.order[a + 1:b + 1]) for a, b in segments]
    # a block starts at the run's start, after a downsampling segment or at a model input's copy; its
    # source feeds one layer (a model's Split), which reads its crop
    starts = [(a, source) for k, (a, _) in enumerate(segments) if (source := crossing[a]) is not None
              and (k == 0 or down[k - 1] or source in bystanders) and consumers.get(source, 0) == 1]
    ends = [b for k, (_, b) in enumerate(segments) if down[k] or k == len(segments) - 1]
    input_ends: dict[str, int] = {}  # model input -> the last layer reading it or a copy of it
    for b, root in bystanders.items():
        input_ends[root] = max(input_ends.get(root, 0), graph.last_use[b])

    def beside(source: str, b: int) -> int:
        """Bytes of the model inputs other than the source's that are read after layer b."""
        own = bystanders.get(source)
        return sum(shapes[root].nbytes for root, end in input_ends.items() if end > b and root != own and root in shapes)

    def keeps_source(source: str, b: int) -> bool:
        return source in bystanders and input_ends[bystanders[source]] > b

    # a tile's sink is the region of its grid cell: not an upsampling or bordering layer's, whose tile writes more
    return [Block(a, b, source, crossing[b], beside(source, b), keeps_source(source, b))  # type: ignore[arg-type]
            for a, source in starts for b in ends
            if a < b <= a + MAX_BLOCK_LAYERS and any(layer.type in PAD_IDS for layer in graph.order[a + 1:b + 1])
            and not _writes_beyond(graph.order[b], shapes)
            and not any(set(layer.bottoms) & bystanders.keys() - {source} for layer in graph.order[a + 1:b + 1])]


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

    def union(self, other: Region | None) -> Region:
        if other is None:
            return self
        return Region(min(self.top, other.top), max(self.bottom, other.bottom), min(self.left, other.left),
                      max(self.right, other.right))

    def within(self, outer: Region) -> Region:
        """This region in the coordinates of a blob holding `outer`."""
        return Region(self.top - outer.top, self.bottom - outer.top, self.left - outer.left, self.right - outer.left)


@dataclass
class TileGeometry:
    """One tile of a block: the region of every blob it holds, of every input each layer reads, and the
    pads of each spatial layer (left, right, top, bottom: nonzero only at the image border)."""

    regions: dict[str, Region]
    reads: dict[tuple[str, int], Region]
    pads: dict[str, tuple[int, int, int, int]]
    sizes: dict[str, Region]  # what each upsampling layer's copy writes


def _geometry(layers: list[Layer], shapes: dict[str, BlobShape], sink: str, out: Region) -> TileGeometry:
    """Walking back from `out` of the sink: a blob's region is the union of what its readers read (a
    Split's or a Slice's outputs all hold the region of its input they read), each spatial layer reads
    what its window needs for its output."""
    g = TileGeometry({sink: out}, {}, {}, {})
    need: dict[str, Region] = {}
    for layer in reversed(layers):
        if layer.type in FORKING:
            region = None
            for top in layer.tops:  # a top nothing in the block reads holds nothing
                read = out if top == sink else need.get(top)
                region = read.union(region) if read is not None else region
            for top in layer.tops:
                g.regions[top] = region  # type: ignore[assignment]
        else:
            region = out if layer.tops[0] == sink else need[layer.tops[0]]
            g.regions[layer.tops[0]] = region
        assert region is not None
        in_shape = shapes[layer.bottoms[0]]
        windows = _windows(layer, in_shape) if layer.type in PAD_IDS else None
        if windows is not None:
            top, bottom = windows[0].reads(region.top, region.bottom)
            left, right = windows[1].reads(region.left, region.right)
            read = _within(Region(top, bottom, left, right), in_shape)
            g.pads[layer.name] = (read.left - left, right - read.right, read.top - top, bottom - read.bottom)
        elif _is_upsampling(layer):
            axes = _upsampling(layer, in_shape, shapes[layer.tops[0]])
            assert axes is not None, "a block holds upsampling layers a tile can run"
            top, bottom = axes[0].reads(region.top, region.bottom)
            left, right = axes[1].reads(region.left, region.right)
            read = _within(Region(top, bottom, left, right), in_shape)
            (top, bottom), (left, right) = axes[0].writes(read.top, read.bottom), axes[1].writes(read.left, read.right)
            g.sizes[layer.name] = g.regions[layer.tops[0]] = Region(top, bottom, left, right)
        elif (window := _bordering(layer, in_shape)) is not None:
            (top, bottom), (left, right) = window.reads(region.top, region.bottom), window.reads(region.left, region.right)
            read = _within(Region(top, bottom, left, right), in_shape)
            g.regions[layer.tops[0]] = read  # its copy writes all it reads
        else:
            read = region
        for i, b in enumerate(layer.bottoms):
            g.reads[(layer.name, i)] = read
            need[b] = read.union(need.get(b))
    for b, region in need.items():
        g.regions.setdefault(b, region)
    return g


@dataclass(frozen=True)
class SpatialTiling:
    """A block's layers by name, run as a grid of `rows` x `cols` tiles of its sink."""

    layers: tuple[str, ...]
    rows: int
    cols: int
    recompute: float    # MACs the tiles run over the untiled block's (>= 1)
    need: int           # the most bytes (live activations + smallest working set) any layer of the tiled model needs
    block_need: int     # the most any step of the tiled block needs (its source live throughout)

    def to_json(self) -> dict:
        return {"layers": list(self.layers), "grid": [self.rows, self.cols], "recompute": round(self.recompute, 4),
                "need": self.need}

    def describe(self) -> str:
        return f"{self.layers[0]}..{self.layers[-1]} as {self.rows}x{self.cols} tiles of {self.layers[-1]}'s output"

    def apply(self, param: NcnnParam, modelbin: ModelBin, graph: Graph,
              shapes: dict[str, BlobShape]) -> tuple[NcnnParam, ModelBin, dict[str, BlobShape]]:
        """The model, weights and blob shapes with the block tiled."""
        block = next(b for b in blocks(graph, shapes) if tuple(l.name for l in _block_layers(graph, b)) == self.layers)
        log.info("spatial tiling: %s (%.2fx the MACs)", self.describe(), self.recompute)
        return rewrite(param, shapes, _block_layers(graph, block), block.source, block.sink, self.rows, self.cols,
                       modelbin)


# what the Tiler chooses among: a block run as a grid of tiles, a model's MLPs split (hidden.py), its
# Gemms read by a column Slice split (columns.py), its MatMul attentions split by heads (heads.py)
Option = Union[SpatialTiling, HiddenSplit, ColumnSplit, HeadSplit]


def _crop(name: str, bottom: str, top: str, region: Region, int8: bool) -> Layer:
    return unpacked_if(int8, numpy_crop(name, bottom, top, [region.top, region.left], [region.bottom, region.right], [1, 2]))


def _axis(axis: int) -> ParamDict:
    p = ParamDict()
    p.set(0, axis)
    return p


def _grid(out: BlobShape, rows: int, cols: int) -> list[list[Region]]:
    hb = [out.h * i // rows for i in range(rows + 1)]
    wb = [out.w * i // cols for i in range(cols + 1)]
    return [[Region(hb[r], hb[r + 1], wb[c], wb[c + 1]) for c in range(cols)] for r in range(rows)]


def _shape(c: int, region: Region) -> BlobShape:
    return BlobShape(3, region.w, region.h, 1, c)


def _tile_layers(layers: list[Layer], shapes: dict[str, BlobShape], source: str, g: TileGeometry, suffix: str,
                 full_source: str, int8_blobs: set[str]) -> tuple[list[Layer], dict[str, BlobShape]]:
    """The layers one tile runs, in order: the crop of the source region from `full_source`, a crop
    wherever a layer reads less than its input holds, and the block's layers, named with `suffix`,
    their pads set; with the shapes of the blobs they write. `int8_blobs`: the blobs that hold int8."""
    names = {source: f"{source}{suffix}"}
    out: list[Layer] = [_crop(f"{source}{suffix}.crop", full_source, names[source], g.regions[source],
                              source in int8_blobs)]
    blob_shapes = {names[source]: _shape(shapes[source].c, g.regions[source])}
    for layer in layers:
        bottoms = []
        for i, b in enumerate(layer.bottoms):
            read, held = g.reads[(layer.name, i)], g.regions[b]
            if read == held:
                bottoms.append(names[b])
                continue
            cropped = f"{b}{suffix}.for_{layer.name}"
            out.append(_crop(f"{layer.name}{suffix}.crop{i}", names[b], cropped, read.within(held), b in int8_blobs))
            blob_shapes[cropped] = _shape(shapes[b].c, read)
            bottoms.append(cropped)
        p = layer.params.copy()
        p.remove(SHAPE_HINT_ID)
        if layer.name in g.pads:
            for pid, pad in zip(PAD_IDS[layer.type], g.pads[layer.name]):
                p.set(pid, pad)
            if layer.type == "Pooling":
                if p.get_int(5, 0) in (2, 3) and p.get_int(0, 0) == 1:
                    p.set(6, 1)  # NCNN's SAME average divides by the whole window, pads included
                p.set(5, 1)  # the pads as given: the tail is in them
        if layer.name in g.sizes:
            if layer.type in DECONVOLUTION:
                for pid in (4, 15, 14, 16):  # every output its inputs reach: the readers crop
                    p.set(pid, 0)
            elif p.get_int(3, 0) or p.get_int(4, 0):  # Interp to a size: the tile's
                p.set(3, g.sizes[layer.name].h)
                p.set(4, g.sizes[layer.name].w)
        for top in layer.tops:
            names[top] = f"{top}{suffix}"
            blob_shapes[names[top]] = _shape(shapes[top].c, g.regions[top])
        out.append(Layer(layer.type, f"{layer.name}{suffix}", bottoms, [names[t] for t in layer.tops], p))
    return out, blob_shapes


def _block_layers(graph: Graph, block: Block) -> list[Layer]:
    return graph.order[block.first + 1:block.last + 1]


def _macs(layers: list[Layer], shapes: dict[str, BlobShape], regions: dict[str, Region] | None = None) -> int:
    total = 0
    for layer in layers:
        top = shapes[layer.tops[0]]
        area = top.h * top.w if regions is None else regions[layer.tops[0]].h * regions[layer.tops[0]].w
        total += area * _macs_per_pixel(layer, shapes[layer.bottoms[0]], top)
    return total


def _free_mark(param: NcnnParam) -> str:
    """What a rewrite's names carry after `.flexnn_`: `t` for the first block tiled, `b2t`, `b3t`, ...
    for the next (their tiles' blobs are named after blobs an earlier tiling named)."""
    names = {n for layer in param for n in (layer.name, *layer.bottoms, *layer.tops)}
    marks = ("t" if k == 1 else f"b{k}t" for k in range(1, len(names) + 2))
    return next(m for m in marks if not any(f".flexnn_{m}" in n for n in names))


def rewrite(param: NcnnParam, shapes: dict[str, BlobShape], block_layers: list[Layer], source: str, sink: str,
            rows: int, cols: int, modelbin: ModelBin) -> tuple[NcnnParam, ModelBin, dict[str, BlobShape]]:
    """The model with `block_layers` (from `source` to `sink`) run as a grid of tiles of the sink, its
    weights and its blob shapes."""
    assert rows * cols > 1, "a grid of one tile is the block itself"
    out_shape = shapes[sink]
    hinted = SHAPE_HINT_ID in block_layers[-1].params
    names = {layer.name for layer in block_layers}
    inside = {top for layer in block_layers for top in layer.tops} - {sink}
    new_shapes = {b: s for b, s in shapes.items() if b not in inside}
    block: list[Layer] = []
    tile_weights: list[LayerWeights] = []

    def add(layers: list[Layer], layer_shapes: dict[str, BlobShape]) -> None:
        for layer in layers:
            if hinted:
                hint = [[3, s.w, s.h, s.c] for s in (layer_shapes[top] for top in layer.tops)]  # per top: dims, w, h, c
                layer.params.set(SHAPE_HINT_ID, [v for top in hint for v in top])
            block.append(layer)
        new_shapes.update(layer_shapes)

    tag = block_layers[-1].name
    mark = _free_mark(param)
    int8_blobs = _int8_blobs(param.layers)
    inputs = [f"{source}.flexnn_{mark}in{r}_{c}" for r in range(rows) for c in range(cols)]
    block.append(Layer("Split", f"{tag}.flexnn_{mark}split", [source], inputs))
    row_blobs = []
    for r, row in enumerate(_grid(out_shape, rows, cols)):
        row_tiles = []
        for c, region in enumerate(row):
            suffix = f".flexnn_{mark}{r}_{c}"
            g = _geometry(block_layers, shapes, sink, region)
            layers, layer_shapes = _tile_layers(block_layers, shapes, source, g, suffix, inputs[r * cols + c], int8_blobs)
            add(layers, layer_shapes)
            for layer in block_layers:
                weights = modelbin.get(layer.name)
                if weights is not None:
                    tile_weights.append(LayerWeights(layer.name + suffix, 0, weights.records))
            row_tiles.append(sink + suffix)
        if cols > 1:
            row_blob = sink if rows == 1 else f"{sink}.flexnn_{mark}row{r}"
            add([unpacked_if(sink in int8_blobs, Layer("Concat", f"{tag}.flexnn_{mark}row{r}", row_tiles, [row_blob], _axis(2)))],
                {row_blob: _shape(out_shape.c, Region(row[0].top, row[0].bottom, 0, out_shape.w))})
            row_tiles = [row_blob]
        row_blobs += row_tiles
    if rows > 1:
        add([unpacked_if(sink in int8_blobs, Layer("Concat", f"{tag}.flexnn_{mark}concat", row_blobs, [sink], _axis(1)))],
            {sink: out_shape})
    at = next(i for i, layer in enumerate(param) if layer.name in names)
    layers = ([layer for layer in param.layers[:at] if layer.name not in names] + block
              + [layer for layer in param.layers[at:] if layer.name not in names])
    order = {layer.name: i for i, layer in enumerate(layers)}
    kept = [lw for lw in modelbin if lw.layer not in names] + tile_weights
    return NcnnParam(layers), ModelBin(ModelBin(sorted(kept, key=lambda lw: order[lw.layer])).layout()), new_shapes


def _tile_need(block_layers: list[Layer], shapes: dict[str, BlobShape], source: str, g: TileGeometry,
               held: int, target: Target) -> int:
    """The most bytes a step of one tile needs: its own live blobs and working set beside `held`."""
    layers, layer_shapes = _tile_layers(block_layers, shapes, source, g, "", "in", set())
    entry = _shape(shapes[source].c, g.regions[source])
    tile = NcnnParam([Layer("Input", "in", [], [source])] + layers[1:])  # the source crop is the tile's input
    tile_shapes = {**layer_shapes, source: entry}
    tile_graph = Graph.build(tile)
    return held + max([entry.nbytes] + [layer_need(a, target)  # the crop is in the arena
                                        for a in analyze(tile_graph, tile_shapes, caller_inputs=False)[1:]])


def _block_need(block_layers: list[Layer], shapes: dict[str, BlobShape], block: Block, source_bytes: int,
                rows: int, cols: int, target: Target) -> tuple[int, int] | None:
    """The most bytes any step of the tiled block needs (the source's `source_bytes`, 0 when it is a
    model input read in place, and the block's `beside` bytes are all that is live from outside it) and
    the MACs its tiles run; None when the MACs exceed MAX_RECOMPUTE times the untiled block's. The
    steps: the Split, per tile its layers, per row the Concat along w, then
    the Concat along h."""
    source, sink = block.source, block.sink
    out_shape = shapes[sink]
    geometries = [[_geometry(block_layers, shapes, sink, region) for region in row] for row in _grid(out_shape, rows, cols)]
    macs = sum(_macs(block_layers, shapes, g.regions) for row in geometries for g in row)
    if macs > MAX_RECOMPUTE * _macs(block_layers, shapes):
        return None
    need, done_rows = 0, 0
    for row in geometries:
        done_tiles = 0
        for g in row:
            held = source_bytes + block.beside + done_rows + done_tiles
            need = max(need, _tile_need(block_layers, shapes, source, g, held, target))
            done_tiles += _shape(out_shape.c, g.regions[sink]).nbytes
        if cols > 1:
            region = row[0].regions[sink]
            row_bytes = _shape(out_shape.c, Region(region.top, region.bottom, 0, out_shape.w)).nbytes
            need = max(need, source_bytes + block.beside + done_rows + done_tiles + row_bytes)
            done_tiles = row_bytes
        done_rows += done_tiles
    if rows > 1:
        kept = source_bytes if block.keeps_source else 0
        need = max(need, block.beside + kept + done_rows + out_shape.nbytes)
    return need, macs


def _int8_blobs(layers: list[Layer]) -> set[str]:
    """The blobs of `layers` (in order) that hold int8: requantizing layers' outputs and what Split, Crop,
    Concat and Padding make of them (an earlier tiling's crops and Concats included)."""
    found: set[str] = set()
    for layer in layers:
        if writes_int8(layer) or (layer.type in MOVING and layer.bottoms[0] in found):
            found.update(layer.tops)
    return found


def _within(region: Region, shape: BlobShape) -> Region:
    """`region` clipped to a blob of `shape`."""
    return Region(max(region.top, 0), min(region.bottom, shape.h), max(region.left, 0), min(region.right, shape.w))


def _is_upsampling(layer: Layer) -> bool:
    return layer.type in DECONVOLUTION or layer.type == "Interp"


def _writes_beyond(layer: Layer, shapes: dict[str, BlobShape]) -> bool:
    """A tile's copy of the layer writes more than its outputs the tile needs."""
    return _is_upsampling(layer) or (layer.bottoms[0] in shapes and _bordering(layer, shapes[layer.bottoms[0]]) is not None)


def _downsamples(layer: Layer) -> bool:
    stride_id = {"Convolution": 3, "ConvolutionDepthWise": 3, "Pooling": 2}.get(layer.type)
    return stride_id is not None and layer.params.get_int(stride_id, 1) > 1


def options(graph: Graph, shapes: dict[str, BlobShape], analyses: list[LayerAnalysis], target: Target) -> list[SpatialTiling]:
    """Every block and square grid whose recomputation stays within MAX_RECOMPUTE, with the need of the
    whole model so tiled."""
    needs = [layer_need(a, target) for a in analyses]
    found = []
    for block in blocks(graph, shapes):
        layers = _block_layers(graph, block)
        outside = max((n for i, n in enumerate(needs) if not block.first < i <= block.last), default=0)
        out = shapes[block.sink]
        source_bytes = resident_bytes(graph, shapes, block.source)
        untiled = _macs(layers, shapes)
        for grid in GRIDS:
            if grid > min(out.h, out.w):
                break
            found_need = _block_need(layers, shapes, block, source_bytes, grid, grid, target)
            if found_need is None:
                break  # finer grids recompute more
            need, macs = found_need
            found.append(SpatialTiling(tuple(layer.name for layer in layers), grid, grid, macs / untiled,
                                       max(need, outside), need))
    return found


def model_need(analyses: list[LayerAnalysis], target: Target) -> int:
    """The most any layer needs: its live activations and its smallest working set."""
    return max(layer_need(a, target) for a in analyses)


@dataclass(frozen=True)
class TiledModel:
    """A model with `tilings` applied in turn (none: the model as given)."""

    param: NcnnParam
    modelbin: ModelBin
    graph: Graph
    shapes: dict[str, BlobShape]
    analyses: list[LayerAnalysis]
    tilings: tuple[Option, ...]

    def tiled(self, tiling: Option) -> TiledModel:
        param, modelbin, shapes = tiling.apply(self.param, self.modelbin, self.graph, self.shapes)
        graph = Graph.build(param)
        return TiledModel(param, modelbin, graph, shapes, analyze(graph, shapes), (*self.tilings, tiling))


class Tiler:
    """The model tiled block by block: with one block tiled, the next high-resolution stage sets the
    need (ResNet's stage 2 once stage 1 is tiled), and one block spanning both would recompute their
    halos through every layer. Below a limit no single option fits, the block tiled first is the one
    that lowers the model's need most among those whose own steps fit the limit (least
    recomputation), then the rest of the model is searched again (a tiled block's Crops and Concats
    end runs). Tiled models and their options are kept by the tilings applied: a fit slices the same
    model many times. `enabled=False`: no options."""

    def __init__(self, model: TiledModel, target: Target, enabled: bool = True):
        self.target = target
        self.enabled = enabled
        self.models: dict[tuple[Option, ...], tuple[TiledModel, list[Option]]] = {}
        self.needs: dict[tuple[Option, ...], int] = {}  # model_need of each tiled model, by its tilings
        self.root = self._with_options(model)

    def need(self, model: TiledModel) -> int:
        """model_need of `model` (a pass over every layer's working sets), computed once."""
        if model.tilings not in self.needs:
            self.needs[model.tilings] = model_need(model.analyses, self.target)
        return self.needs[model.tilings]

    def _with_options(self, model: TiledModel) -> tuple[TiledModel, list[Option]]:
        if model.tilings not in self.models:
            found: list[Option] = [*options(model.graph, model.shapes, model.analyses, self.target),
                                   *hidden.options(model.graph, model.shapes, model.analyses, self.target),
                                   *columns.options(model.graph, model.shapes, self.target),
                                   *heads.options(model.graph, model.shapes, self.target)] if self.enabled else []
            self.models[model.tilings] = (model, found)
        return self.models[model.tilings]

    def _then(self, model: TiledModel, tiling: Option) -> tuple[TiledModel, list[Option]]:
        key = (*model.tilings, tiling)
        return self.models[key] if key in self.models else self._with_options(model.tiled(tiling))

    def _step(self, model: TiledModel, found: list[Option], limit: int) -> Option | None:
        """The block to tile first when no option fits `limit`: lowering the need most, then, among
        those whose own steps fit `limit`, the least recomputation (fewer tiles: fewer layers, each of
        which the process holds); when none fits, the one whose own steps need least."""
        need = self.need(model)
        lowering = [o for o in found if o.need < need]
        within = [o for o in lowering if o.block_need <= limit]
        if within:
            return min(within, key=lambda o: (o.need, o.recompute))
        return min(lowering, key=lambda o: (o.need, o.block_need, o.recompute), default=None)

    def tile(self, limit: int) -> TiledModel | None:
        """The model with blocks tiled until it fits `limit` (the last block with the least
        recomputation that does), or None when tiling never gets there: first stepping through blocks
        whose own steps fit the limit, else the way smallest_need goes, which gets there whenever
        `limit` is at least smallest_need()."""
        return self._descend(limit, limit) or self._descend(limit, 0)

    def smallest_need(self) -> int:
        """The least need tiling block by block reaches (each step's own tiles as small as its options go)."""
        model, found = self.root
        while True:
            step = self._step(model, found, 0)
            if step is None:
                return min([self.need(model)] + [o.need for o in found])
            model, found = self._then(model, step)

    def _descend(self, limit: int, step_limit: int) -> TiledModel | None:
        model, found = self.root
        while True:
            if model.tilings and self.need(model) <= limit:
                return model
            tiling = choose(found, limit)
            if tiling is not None:
                return self._then(model, tiling)[0]
            step = self._step(model, found, step_limit)
            if step is None:
                return None
            model, found = self._then(model, step)


def choose(candidates: list[Option], limit: int) -> Option | None:
    """The option whose need fits `limit` with the least recomputation (then the least need); None
    when none fits."""
    fitting = [o for o in candidates if o.need <= limit]
    return min(fitting, key=lambda o: (o.recompute, o.need)) if fitting else None
