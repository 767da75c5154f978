"""Per-layer memory: live activations, and weights + intermediates for each candidate kernel.

Bytes are fp32 at run time (fp16-stored weights are widened when NCNN loads them). The kernel
formulas follow NCNN's x86/ARM convolution paths (paper §3.2):

- Winograd F(m,3), 3x3 stride 1 dilation 1 only: transformed weights (m+2)^2·Cin·Cout, an input
  bordered to whole m-tiles, its transform (m+2)^2·tiles·Cin and the output transform (m+2)^2·tiles·Cout.
- Im2col+GEMM: packed weights Cin·k·k·Cout, the padded input (none when tiled with explicit zero
  padding: each slice borders its own band, patch 0002) and the im2col matrix K×N (K = Cin·k·k,
  N = output pixels; a 1x1 stride-1 conv multiplies the input directly), K×ceil(N/T) with T tiles.
- Direct: raw weights and the padded input.
- InnerProduct / constant-B Gemm: the weight matrix (a 3-D InnerProduct input is flattened first).
  A Gemm packs its input's rows (tokens) a tile at a time, each thread its own tile of them: with one
  tile for every thread, that is a copy of the whole input. Cut by tokens, the tile is set smaller
  (Gemm's constant_TILE_M, param 20, which stock NCNN reads).
- Deconvolution (group 1, static weights): NCNN multiplies the input by the weights (a GEMM) into a
  column buffer of k·k·Cout rows of input pixels, then scatters it (col2im) into the output, bordered
  when it is padded or cropped; slicing by output channels cuts the weights, the column buffer and the
  bordered output alike.
- Grouped ConvolutionDepthWise (1 < group, not depthwise): NCNN runs one Convolution per group and
  holds every group's (transformed) weights at once. The slicer may run the groups as Convolutions of
  their own, one after another (Split → per group a Crop of its input channels → Convolution →
  Concat), each cut like any Convolution: one group's weights at a time, beside the cropped channels
  and the group outputs the Concat waits for.
- Self-attention MultiHeadAttention (q, k and v of one shape; no mask, no cache, fp32): each head's
  rows of the q, k and v projections and its columns of the output projection, as NCNN packs them
  for its GEMMs beside the stored ones; its q, k, v and output rows and one score matrix per head.
  Sliced by heads: each slice is a MultiHeadAttention of its heads, whose partial outputs add up
  (a slice's output beside the running sum; where the output is a residual add's, the sum starts from
  the residual, which then dies at the first slice).
- Layers not cut (FixedModel): their weights, and the scratch NCNN makes: a padded Pooling's or
  depthwise convolution's bordered input (an int8 depthwise one quantizes its input, then borders
  it), LRN's squares and sums, a requantizing int8 convolution's quantized input, im2col and sums.

Weights slicing to `width` output channels/rows leaves one slice resident, and adds one output-sized
buffer: the partial outputs are all alive when Concat writes the merged one.

For the stream-aware kernel choice (slicing/streaming.py) a layer also has, per kernel, the bytes
loading it reads (its transformed weights: (m+2)²/9 × the raw 3x3 weights for Winograd F(m,3), the
raw size for the others) and its multiply-accumulates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .cli import UserError
from .ncnn_model import BlobShape, Graph, Layer, weight_specs
from .ncnn_model.param import SHAPE_HINT_ID, ParamDict
from .ncnn_model.schema import is_int8

CONV_KERNELS = ("winograd63", "winograd43", "im2col_gemm", "direct")
GROUPED = "grouped"  # a grouped convolution run as NCNN runs it, every group in one layer
WIDEST_PACK = 16  # channels in the widest SIMD pack NCNN lays activations out in (fp32 on AVX-512)


def channel_pack(channels: int, simd_width: int) -> int:
    """A multiple of the pack NCNN gives a blob of `channels` on a target of `simd_width`: the largest
    power of two up to the width that divides them (NCNN packs by such a power of two, or not at all)."""
    pack = 1
    while 2 * pack <= simd_width and channels % (2 * pack) == 0:
        pack *= 2
    return pack


def crop_through(start: int, end: int, channels: int, simd_width: int) -> tuple[int, int] | None:
    """The pack-aligned channels a Crop of [start, end) of a blob of `channels` goes through first
    (rewrite.channel_crop), or None when it crops them directly. NCNN crops a packed blob as it is only
    from an offset and to a count that are multiples of its pack, and unpacks the whole blob for any
    other range; so an unaligned range is cropped from the smallest aligned range around it, whose copy
    alone is then unpacked, unless that range is the whole blob."""
    pack = channel_pack(channels, simd_width)
    low, high = start // pack * pack, min(channels, -(-end // pack) * pack)
    return None if (low, high) == (start, end) or high - low == channels else (low, high)


def _mat_bytes(c: int, plane: int, elemsize: int = 4) -> int:
    return c * ((plane * elemsize + 15) // 16 * 16)


def _winograd_m(kernel: str) -> int:
    """Output tile size m of Winograd F(m,3)."""
    return 6 if kernel == "winograd63" else 4


@dataclass(frozen=True)
class Cost:
    weights: int
    intermediates: int

    @property
    def total(self) -> int:
        return self.weights + self.intermediates


@dataclass(frozen=True)
class ConvModel:
    """A group-1 Convolution: costs per kernel, output-channel slice width and im2col tile count."""

    cin: int
    cout: int
    kh: int
    kw: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    in_hw: tuple[int, int]
    pads: tuple[int, int, int, int]  # left right top bottom
    out_hw: tuple[int, int]
    bias: bool
    out_bytes: int
    # explicit zero padding: a tiled im2col borders each slice's band itself, with no bordered copy
    # of the input (patch 0002)
    bands_border: bool = False

    @property
    def rows(self) -> int:
        return self.cout

    @property
    def kernels(self) -> tuple[str, ...]:
        winograd = (self.kh, self.kw) == (3, 3) and self.stride == (1, 1) and self.dilation == (1, 1)
        return CONV_KERNELS if winograd else CONV_KERNELS[2:]

    @property
    def pixels(self) -> int:
        return self.out_hw[0] * self.out_hw[1]

    def _padded_input(self) -> int:
        l, r, t, b = self.pads
        if not any(self.pads):
            return 0
        return _mat_bytes(self.cin, (self.in_hw[0] + t + b) * (self.in_hw[1] + l + r))

    def cost(self, kernel: str, width: int, tiles: int = 1) -> Cost:
        # Loading a layer holds its stored weights and, while create_pipeline builds it, their
        # transformed copy (every x86/ARM kernel transforms, then releases the stored ones).
        k = self.cin * self.kh * self.kw
        stored = k * width * 4 + (width * 4 if self.bias else 0)
        concat = self.out_bytes if width < self.cout else 0
        outh, outw = self.out_hw
        if kernel.startswith("winograd"):
            m = _winograd_m(kernel)
            th, tw = math.ceil(outh / m), math.ceil(outw / m)
            b = (m + 2) ** 2
            bordered = _mat_bytes(self.cin, (th * m + 2) * (tw * m + 2))
            tm = b * th * tw * 4 * (self.cin + width)
            return Cost(b * self.cin * width * 4 + stored, bordered + tm + concat)
        if kernel == "im2col_gemm":
            direct_gemm = (self.kh, self.kw) == (1, 1) and self.stride == (1, 1)
            im2col = 0 if direct_gemm else k * math.ceil(self.pixels / tiles) * 4
            padded = 0 if tiles > 1 and self.bands_border else self._padded_input()
            return Cost(k * width * 4 + stored, padded + im2col + concat)
        if kernel == "direct":
            return Cost(k * width * 4 + stored, self._padded_input() + concat)
        raise ValueError(kernel)

    def max_tiles(self, kernel: str, min_tile_pixels: int) -> int:
        """Most im2col tiles whose width stays at least `min_tile_pixels` output pixels."""
        if kernel != "im2col_gemm":
            return 1
        return max(1, self.pixels // min_tile_pixels)

    def streamed_bytes(self, kernel: str) -> int:
        """The whole layer's transformed weights (+ bias): what loading it reads from the pre-transformed file.
        For Winograd, those of the F(m,3) NCNN settles on for this shape (ncnn_winograd_m), whichever
        Winograd kernel the slicer names: param 26 does not make NCNN use another."""
        per_row = self.cin * ((self.ncnn_winograd_m() + 2) ** 2 if kernel.startswith("winograd") else self.kh * self.kw)
        return (per_row + int(self.bias)) * self.cout * 4

    def ncnn_winograd_m(self) -> int:
        """The output tile m of the Winograd F(m,3) NCNN's x86 Convolution transforms its weights for when
        the model carries no shape hints (neither the models here nor the sliced ones do): F(6,3) up to
        32 channels in and out, F(4,3) above."""
        return 6 if self.cin <= 32 and self.cout <= 32 else 4

    def macs(self, kernel: str) -> int:
        """Multiply-accumulates of the whole layer: Winograd's in the transformed domain over whole output
        tiles, the other kernels' Cin·k²·Cout per output pixel."""
        if kernel.startswith("winograd"):
            m = _winograd_m(kernel)
            tiles = math.ceil(self.out_hw[0] / m) * math.ceil(self.out_hw[1] / m)
            return (m + 2) ** 2 * tiles * self.cin * self.cout
        return self.cin * self.kh * self.kw * self.cout * self.pixels


@dataclass(frozen=True)
class MatrixModel:
    """InnerProduct, or Gemm with a constant B: `rows` output features of `k` inputs each."""

    rows: int
    k: int
    extra_per_row: int  # bias / C elements per output row
    fixed: int          # elements not sliced (C broadcast over all rows)
    flatten: int        # bytes of a flattened input copy
    out_bytes: int
    tokens: int = 0     # rows of the input a Gemm packs, tile by tile (0: an InnerProduct, not cut by them)

    kernels = ("gemm",)

    def cost(self, kernel: str, width: int, tiles: int = 1) -> Cost:
        concat = self.out_bytes if width < self.rows else 0
        packed = math.ceil(self.tokens / tiles) * self.k * 4
        # the stored matrix and its packed copy coexist while create_pipeline transforms (as ConvModel)
        return Cost((width * (2 * self.k + self.extra_per_row) + self.fixed) * 4, self.flatten + concat + packed)

    def max_tiles(self, kernel: str, min_tile_pixels: int) -> int:
        """Most tiles of tokens, each at least a quarter of `min_tile_pixels` (a SIMD width) of them."""
        return max(1, self.tokens // max(1, min_tile_pixels // 4))

    def streamed_bytes(self, kernel: str) -> int:
        return (self.rows * (self.k + self.extra_per_row) + self.fixed) * 4


@dataclass(frozen=True)
class AttentionModel:
    """A self-attention MultiHeadAttention: `rows` heads of `head_dim` over `seq` tokens of `qdim`
    features (k and v have them too)."""

    rows: int
    head_dim: int
    qdim: int
    seq: int
    out_bytes: int  # what slicing adds: a slice's partial output beside the running sum

    kernels = ("attention",)

    def _weight_elements(self, heads: int) -> int:
        # per head: q, k, v rows (weights and bias) and out columns; the out bias once
        return heads * self.head_dim * (4 * self.qdim + 3) + self.qdim

    def cost(self, kernel: str, width: int, tiles: int = 1) -> Cost:
        merge = self.out_bytes if width < self.rows else 0
        # q, k, v and the heads' output over every token, and one score matrix per head
        scratch = (4 * self.seq * width * self.head_dim + width * self.seq * self.seq) * 4
        return Cost(2 * self._weight_elements(width) * 4, scratch + merge)

    def max_tiles(self, kernel: str, min_tile_pixels: int) -> int:
        return 1

    def streamed_bytes(self, kernel: str) -> int:
        return self._weight_elements(self.rows) * 4


@dataclass(frozen=True)
class Int8Model:
    """An int8 Convolution or InnerProduct, its output dequantized to fp32 (int8_scale_term below 100)
    or requantized to int8: one byte per weight, sliced by output rows with their fp32 bias and weight
    scale (a requantizing layer's slices write int8, concatenated by NCNN's reference layer). NCNN picks
    its own int8 kernel (Winograd F(4,3)/F(2,3) for 3x3 stride 1, else GEMM or packed), whose
    transformed weights coexist with the stored ones while create_pipeline builds them."""

    rows: int
    k: int                # weights per output row
    transformed_per_row: int  # bytes of the kernel's transformed weights per output row
    extra_per_row: int    # fp32 elements per row beside the weights (bias, weight scale)
    quantized_in: int     # the input quantized to int8, bordered when padded
    im2col: int           # the int8 im2col matrix (0 when the kernel multiplies the input directly)
    accumulator_per_row: int  # bytes per output row of the int32 sums dequantized into the output
    out_bytes: int

    kernels = ("int8",)

    def cost(self, kernel: str, width: int, tiles: int = 1) -> Cost:
        concat = self.out_bytes if width < self.rows else 0
        weights = width * (self.k + self.transformed_per_row + 4 * self.extra_per_row)
        return Cost(weights, self.quantized_in + self.im2col + width * self.accumulator_per_row + concat)

    def max_tiles(self, kernel: str, min_tile_pixels: int) -> int:
        return 1

    def streamed_bytes(self, kernel: str) -> int:
        return self.rows * (self.transformed_per_row + 4 * self.extra_per_row)


@dataclass(frozen=True)
class FixedModel:
    """A layer the slicer does not cut: its weights as loaded and its known scratch."""

    weights: int
    intermediates: int
    kernel: str

    rows = 0

    @property
    def kernels(self) -> tuple[str, ...]:
        return (self.kernel,)

    def cost(self, kernel: str, width: int = 0, tiles: int = 1) -> Cost:
        return Cost(self.weights, self.intermediates)

    def max_tiles(self, kernel: str, min_tile_pixels: int) -> int:
        return 1

    def streamed_bytes(self, kernel: str) -> int:
        return self.weights


@dataclass(frozen=True)
class DeconvModel:
    """A group-1 Deconvolution with static weights: `rows` output channels of `k` (Cin·kh·kw) weights
    each, its column buffer `column_per_row` bytes per output channel, and the bordered output
    NCNN crops from (`bordered_per_row` per channel, 0 when it writes the output directly)."""

    rows: int
    k: int
    bias: int             # 1 with a bias term
    column_per_row: int   # kh·kw·input pixels·4
    bordered_per_row: int
    out_bytes: int

    kernels = ("deconv",)

    def cost(self, kernel: str, width: int, tiles: int = 1) -> Cost:
        concat = self.out_bytes if width < self.rows else 0
        # the stored weights and their GEMM-packed copy coexist while create_pipeline transforms (as ConvModel)
        return Cost(width * (2 * self.k + self.bias) * 4, width * (self.column_per_row + self.bordered_per_row) + concat)

    def max_tiles(self, kernel: str, min_tile_pixels: int) -> int:
        return 1

    def streamed_bytes(self, kernel: str) -> int:
        return self.rows * (self.k + self.bias) * 4


@dataclass(frozen=True)
class GroupedConvModel:
    """A grouped ConvolutionDepthWise: "grouped" is NCNN's own run (every group's weights held), the
    other kernels run `groups` Convolutions of `group`'s shape, each cut by output channels within its
    group (`rows`) and im2col tiles."""

    group: ConvModel
    groups: int
    in_bytes: int   # the layer's whole input
    out_bytes: int  # the layer's whole output

    @property
    def rows(self) -> int:
        return self.group.cout

    @property
    def kernels(self) -> tuple[str, ...]:
        return (GROUPED,) + self.group.kernels

    def cost(self, kernel: str, width: int, tiles: int = 1) -> Cost:
        if kernel == GROUPED:
            one = self.group.cost(self.group.kernels[0], self.group.cout)
            return Cost(one.weights * self.groups, one.intermediates)
        return self.ungrouped(self.group.cost(kernel, width, tiles))

    def ungrouped(self, group_cost: Cost) -> Cost:
        """What one group's Convolution run apart holds (`group_cost`), with its Crops' copies and every
        group's output, alive until the Concat: the most any group's channels cost to crop (crop_through,
        on the widest pack, which covers every target's): the group's own copy, and where its channels
        are off the pack the aligned range around them and its unpacked copy (the whole input's,
        when that range is the whole input)."""
        cin, channels = self.group.cin, self.group.cin * self.groups
        held = cin  # channels: the group's copy, and beside it when unaligned the aligned range's two
        if cin % channel_pack(channels, WIDEST_PACK):
            held += max(channels if through is None else 2 * (through[1] - through[0])
                        for through in (crop_through(start, start + cin, channels, WIDEST_PACK)
                                        for start in range(0, channels, cin)))
        crop = self.in_bytes * held // channels
        return Cost(group_cost.weights, group_cost.intermediates + crop + self.out_bytes)

    def worth_apart_when_streamed(self) -> bool:
        """Whether running the groups apart saves a streamed layer more than it adds: NCNN's grouped layer
        transforms every group's raw weights on each load, the groups apart copy the input (Crops) and
        the output (Concat) once."""
        return self.groups * self.group.streamed_bytes("im2col_gemm") > self.in_bytes + self.out_bytes

    def max_tiles(self, kernel: str, min_tile_pixels: int) -> int:
        return 1 if kernel == GROUPED else self.group.max_tiles(kernel, min_tile_pixels)

    def streamed_bytes(self, kernel: str) -> int:
        return self.groups * self.group.streamed_bytes(self.group.kernels[0] if kernel == GROUPED else kernel)


CostModel = ConvModel | MatrixModel | AttentionModel | Int8Model | DeconvModel | GroupedConvModel | FixedModel


@dataclass(frozen=True)
class LayerAnalysis:
    index: int            # position in NCNN's run order (Graph.order)
    layer: Layer
    live_bytes: int       # activations resident while the layer runs (its inputs and outputs included)
    weight_bytes: int     # the layer's weights as NCNN holds them after loading (fp32)
    model: CostModel
    in_shape: BlobShape | None  # its (first) input's shape

    def candidates(self) -> list[tuple[str, Cost]]:
        """Each candidate kernel, fastest first, unsliced."""
        return [(k, self.model.cost(k, self.model.rows)) for k in self.model.kernels]


def _conv_model(layer: Layer, in_shape: BlobShape, out_shape: BlobShape) -> ConvModel | None:
    p = layer.params
    if (layer.type != "Convolution" or p.get_int(19, 0) or p.get_int(8, 0) or len(layer.bottoms) != 1
            or in_shape.dims != 3):
        return None  # dynamic weights, int8, or not a plain 2-D conv
    kw = p.get_int(1, 0)
    kh = p.get_int(11, kw)
    dw = p.get_int(2, 1)
    sw = p.get_int(3, 1)
    sh, dh = p.get_int(13, sw), p.get_int(12, dw)
    # explicit zero padding (not SAME, no pad value): a tiled im2col borders each band itself
    bands_border = p.get_int(4, 0) >= 0 and p.get(18, 0) == 0
    pads = conv_pads(p, in_shape)
    return ConvModel(in_shape.c, p.get_int(0, 0), kh, kw, (sh, sw), (dh, dw), (in_shape.h, in_shape.w), pads,
                     (out_shape.h, out_shape.w), bool(p.get_int(5, 0)), out_shape.nbytes, bands_border)


def conv_pads(p: ParamDict, in_shape: BlobShape) -> tuple[int, int, int, int]:
    """(left, right, top, bottom) a Convolution or ConvolutionDepthWise borders its whole input with,
    as NCNN does: the explicit pads, or SAME (all four -233 upper / -234 lower) the total that keeps
    ceil(size / stride) outputs."""
    left = p.get_int(4, 0)
    right, top = p.get_int(15, left), p.get_int(14, left)
    bottom = p.get_int(16, top)
    if {left, right, top, bottom} in ({-233}, {-234}):
        kw, dw, sw = p.get_int(1, 0), p.get_int(2, 1), p.get_int(3, 1)
        kh, dh, sh = p.get_int(11, kw), p.get_int(12, dw), p.get_int(13, sw)
        (left, right), (top, bottom) = (same_pads(max(0, d * (k - 1) + 1 + (n - 1) // st * st - n), left == -234)
                                        for k, d, st, n in ((kw, dw, sw, in_shape.w), (kh, dh, sh, in_shape.h)))
    return left, right, top, bottom


def group_convolution(layer: Layer) -> Layer:
    """The Convolution one group of a grouped ConvolutionDepthWise runs as (NCNN's own per-group op): the
    group's share of the outputs and weights, the same kernel, padding, bias and activation."""
    p = layer.params.copy()
    groups = p.get_int(7, 1)
    p.set(0, p.get_int(0, 0) // groups)
    p.set(6, p.get_int(6, 0) // groups)
    p.remove(7)
    p.remove(SHAPE_HINT_ID)
    return Layer("Convolution", layer.name, layer.bottoms, layer.tops, p)


def grouped_input(in_shape: BlobShape, groups: int) -> BlobShape:
    """One group's input channels."""
    return replace(in_shape, c=in_shape.c // groups)


def _grouped_model(layer: Layer, in_shape: BlobShape, out_shape: BlobShape) -> GroupedConvModel | None:
    if layer.type != "ConvolutionDepthWise":
        return None
    groups, cout = layer.params.get_int(7, 1), layer.params.get_int(0, 0)
    if groups <= 1 or in_shape.dims != 3 or in_shape.c % groups or cout % groups or groups == in_shape.c:
        return None  # depthwise (one input channel a group, with or without a multiplier) or not a grouped 2-D conv
    group = _conv_model(group_convolution(layer), grouped_input(in_shape, groups), replace(out_shape, c=cout // groups))
    return None if group is None else GroupedConvModel(group, groups, in_shape.nbytes, out_shape.nbytes)


def _matrix_model(layer: Layer, in_shape: BlobShape, out_shape: BlobShape) -> MatrixModel | None:
    p = layer.params
    if layer.type == "InnerProduct" and not p.get_int(8, 0):
        rows = p.get_int(0, 0)
        flatten = in_shape.nbytes if in_shape.dims == 3 else 0
        return MatrixModel(rows, p.get_int(2, 0) // rows, int(bool(p.get_int(1, 0))), 0, flatten, out_shape.nbytes)
    if (layer.type == "Gemm" and p.get_int(5, 0) == 1 and p.get_int(4, 0) == 0 and not p.get_int(18, 0)
            and not p.get_int(11, 0) and not p.get_int(14, 0) and len(layer.bottoms) == 1):
        m, n, k = p.get_int(7, 0), p.get_int(8, 0), p.get_int(9, 0)
        bc = p.get_int(10, 0) if p.get_int(6, 0) else -1
        per_row = {3: m, 4: 1}.get(bc, 0)
        fixed = {0: 1, 1: m, 2: m}.get(bc, 0)
        # a 2-D input, rows not transposed (2=0), written rows first (14=0): its rows are the tokens
        tokens = in_shape.h if in_shape.dims == 2 and not p.get_int(2, 0) else 0
        return MatrixModel(n, k, per_row, fixed, 0, out_shape.nbytes, tokens)
    return None


def _attention_model(layer: Layer, in_shape: BlobShape, out_shape: BlobShape, residual: bool) -> AttentionModel | None:
    """A MultiHeadAttention the slicer cuts by heads: fp32 self-attention, every input of `in_shape` (the
    caller checks), 2 heads or more, no attention mask (5) or cache (7). With `residual` (its output
    only added to a blob of its shape), the running sum starts from that blob, which then dies
    (rewrite.add_partial)."""
    p = layer.params
    if layer.type != "MultiHeadAttention" or in_shape.dims != 2 or p.get_int(5, 0) or p.get_int(7, 0) or p.get_int(18, 0):
        return None
    embed, heads = p.get_int(0, 0), p.get_int(1, 1)
    if heads < 2 or embed % heads or len(set(layer.bottoms)) != len(layer.bottoms):
        return None
    qdim = p.get_int(2, 0) // embed
    if not qdim == p.get_int(3, embed) == p.get_int(4, embed) == in_shape.w:
        return None
    # a head's partial output and the sum so far beside the live blobs; folding the residual, the sum
    # takes the residual's place and one output is counted (with none, `slice --budget min` of NCNN's
    # vision_transformer found 6.65 MB, not 6.25: its fit chose slicings that measured over their limits)
    return AttentionModel(heads, embed // heads, qdim, in_shape.h, (1 if residual else 2) * out_shape.nbytes)


def _deconv_model(layer: Layer, in_shape: BlobShape, out_shape: BlobShape) -> DeconvModel | None:
    p = layer.params
    if layer.type != "Deconvolution" or p.get_int(28, 0) or len(layer.bottoms) != 1 or in_shape.dims != 3:
        return None  # dynamic weights, or not a plain 2-D transposed conv
    rows = p.get_int(0, 0)
    kw = p.get_int(1, 0)
    kh, dw, sw = p.get_int(11, kw), p.get_int(2, 1), p.get_int(3, 1)
    dh, sh = p.get_int(12, dw), p.get_int(13, sw)
    if not rows or p.get_int(6, 0) != rows * in_shape.c * kh * kw:
        return None
    # NCNN computes the full transposed conv, then crops pads / output size from it
    full_w, full_h = (in_shape.w - 1) * sw + dw * (kw - 1) + 1, (in_shape.h - 1) * sh + dh * (kh - 1) + 1
    cropped = (full_w, full_h) != (out_shape.w, out_shape.h)
    return DeconvModel(rows, in_shape.c * kh * kw, int(bool(p.get_int(5, 0))), kh * kw * in_shape.h * in_shape.w * 4,
                       _mat_bytes(1, full_w * full_h) if cropped else 0, out_shape.nbytes)


def _int8_model(layer: Layer, in_shape: BlobShape, out_shape: BlobShape) -> Int8Model | None:
    """An int8 group-1 Convolution or InnerProduct, its output dequantized (fp32) or requantized (int8,
    param 8 above 100: the same int32 sums, requantized per element); None otherwise."""
    if not is_int8(layer) or layer.type == "ConvolutionDepthWise" or len(layer.bottoms) != 1:
        return None
    p = layer.params
    extra = 1 + int(bool(p.get_int(5 if layer.type == "Convolution" else 1, 0)))  # weight scale, bias
    if layer.type == "InnerProduct":
        rows = p.get_int(0, 0)
        k = p.get_int(2, 0) // rows
        return Int8Model(rows, k, k, extra, k, 0, 4, out_shape.nbytes)
    if in_shape.dims != 3 or p.get_int(19, 0):
        return None
    conv = _conv_model(replace(layer, params=_without(p, 8)), in_shape, out_shape)
    if conv is None:
        return None
    k = conv.cin * conv.kh * conv.kw
    pixels = conv.pixels
    l, r, t, b = conv.pads
    quantized = conv.cin * (conv.in_hw[0] + t + b) * (conv.in_hw[1] + l + r)
    winograd = "winograd43" in conv.kernels and (conv.cin > 8 or conv.cout > 8)
    direct_gemm = (conv.kh, conv.kw) == (1, 1) and conv.stride == (1, 1)
    if winograd:  # F(4,3): 36 int16 per input channel; input and output transformed over 4x4 tiles
        tiles = math.ceil(conv.out_hw[0] / 4) * math.ceil(conv.out_hw[1] / 4)
        return Int8Model(conv.cout, k, 36 * 2 * conv.cin, extra, quantized + 36 * 2 * tiles * conv.cin, 0,
                         36 * 4 * tiles, out_shape.nbytes)
    return Int8Model(conv.cout, k, k, extra, quantized, 0 if direct_gemm else k * pixels, 4 * pixels, out_shape.nbytes)


def _without(p: ParamDict, pid: int) -> ParamDict:
    q = p.copy()
    q.remove(pid)
    return q


def _runtime_weight_bytes(layer: Layer) -> int:
    """The layer's weights as NCNN holds them once loaded: fp32, an int8 layer's weights one byte each."""
    int8 = is_int8(layer)
    return sum(s.count if int8 and s.role == "weight" else s.count * 4 if s.load_type in (0, 1) else s.count
               for s in weight_specs(layer))


def _fixed_model(layer: Layer, in_shape: BlobShape | None, out_shape: BlobShape | None) -> FixedModel:
    weights = _runtime_weight_bytes(layer)
    if layer.type == "MultiHeadAttention" and in_shape is not None:
        seq, embed = in_shape.h, in_shape.w
        heads = layer.params.get_int(1, 1)
        # q, k, v projections and one attention matrix per head
        return FixedModel(weights, (3 * seq * embed + heads * seq * seq) * 4, "attention")
    if layer.type == "Pooling" and in_shape is not None and in_shape.dims == 3:
        return FixedModel(weights, _pooling_border_bytes(layer.params, in_shape), "-")
    if layer.type == "LRN" and in_shape is not None and in_shape.dims == 3:
        return FixedModel(weights, _lrn_scratch_bytes(layer.params, in_shape), "-")
    if layer.type == "ConvolutionDepthWise" and in_shape is not None and in_shape.dims == 3:
        # a depthwise convolution (a grouped one is a GroupedConvModel) computes from a bordered copy;
        # an int8 one quantizes its input first and borders that
        pads = conv_pads(layer.params, in_shape)
        if is_int8(layer):
            scratch = _mat_bytes(in_shape.c, in_shape.h * in_shape.w, 1) + _border_bytes(pads, in_shape, 1)
        else:
            scratch = _border_bytes(pads, in_shape)
        return FixedModel(weights, scratch, "default")
    return FixedModel(weights, 0, "-" if not weights else "default")


def same_pads(total: int, lower: bool) -> tuple[int, int]:
    """(before, after) of `total` SAME padding: the odd one after (SAME_UPPER) or before (SAME_LOWER)."""
    small = total // 2
    return (total - small, small) if lower else (small, total - small)


def pooling_pads(p: ParamDict, shape: BlobShape) -> tuple[int, int, int, int]:
    """(left, right, top, bottom) NCNN's Pooling borders its input with (Pooling::make_padding): the
    explicit pads, with pad_mode 0 the tail that makes the last window whole, with pad_mode 2/3 the
    SAME pads that keep ceil(size / stride) outputs."""
    kw = p.get_int(1, 0)
    kh, sw = p.get_int(11, kw), p.get_int(2, 1)
    sh, left = p.get_int(12, sw), p.get_int(3, 0)
    top, right = p.get_int(13, left), p.get_int(14, left)
    bottom, mode = p.get_int(15, top), p.get_int(5, 0)
    if mode in (2, 3):
        (left, right), (top, bottom) = (same_pads(max(0, k + (n - 1) // st * st - n), mode == 3)
                                        for k, st, n in ((kw, sw, shape.w), (kh, sh, shape.h)))
    elif mode == 0:
        w_tail, h_tail = (shape.w + left + right - kw) % sw, (shape.h + top + bottom - kh) % sh
        right += sw - w_tail if w_tail else 0
        bottom += sh - h_tail if h_tail else 0
    return left, right, top, bottom


def _pooling_border_bytes(p: ParamDict, shape: BlobShape) -> int:
    """The bordered copy of its input a padded Pooling makes; 0 when it pads nothing."""
    if p.get_int(4, 0) or p.get_int(7, 0):  # global and adaptive pooling read the input as it is
        return 0
    return _border_bytes(pooling_pads(p, shape), shape)


def _border_bytes(pads: tuple[int, int, int, int], shape: BlobShape, elemsize: int = 4) -> int:
    """A copy of a `shape` blob bordered by `pads` (left, right, top, bottom); 0 when they pad nothing."""
    left, right, top, bottom = pads
    if not any(pads):
        return 0
    return _mat_bytes(shape.c, (shape.w + left + right) * (shape.h + top + bottom), elemsize)


def _lrn_scratch_bytes(p: ParamDict, shape: BlobShape) -> int:
    """LRN's squares of its input and, across channels, their sums; within a channel, the squares
    bordered by half the window on each side."""
    squares = _mat_bytes(shape.c, shape.w * shape.h)
    if p.get_int(0, 0) == 0:
        return 2 * squares
    size = p.get_int(1, 5)
    return squares + _mat_bytes(shape.c, (shape.w + size - 1) * (shape.h + size - 1))


def analyze_layer(index: int, layer: Layer, live_bytes: int, in_shape: BlobShape | None,
                  out_shape: BlobShape | None, inputs_alike: bool = True, residual: bool = False) -> LayerAnalysis:
    """The cost model of `layer` reading `in_shape` (every input, when `inputs_alike`) and writing
    `out_shape`, beside `live_bytes` of activations; `residual`: its output is only added to another
    blob of its shape (Graph.residuals)."""
    model: CostModel | None = None
    try:
        if in_shape is not None and out_shape is not None:
            model = (_conv_model(layer, in_shape, out_shape) or _grouped_model(layer, in_shape, out_shape)
                     or _matrix_model(layer, in_shape, out_shape)
                     or (_attention_model(layer, in_shape, out_shape, residual) if inputs_alike else None)
                     or _int8_model(layer, in_shape, out_shape) or _deconv_model(layer, in_shape, out_shape))
        if model is None:
            model = _fixed_model(layer, in_shape, out_shape)
        weights = _runtime_weight_bytes(layer)
    except UserError as e:
        raise UserError(f"layer {layer.name} ({layer.type}): {e}") from None
    return LayerAnalysis(index, layer, live_bytes, weights, model, in_shape)


def resident_bytes(graph: Graph, shapes: dict[str, BlobShape], blob: str) -> int:
    """The bytes `blob` holds beside the runtime's other buffers: none for a model input the runtime
    reads where the caller's array lies (BlobShape.read_in_place)."""
    return 0 if blob in graph.inputs and shapes[blob].read_in_place else shapes[blob].nbytes


def live_bytes(graph: Graph, shapes: dict[str, BlobShape], caller_inputs: bool = True) -> list[int]:
    """Per layer of `graph.order`, the bytes of the blobs resident while it runs: produced at or before it and
    still needed at or after it (outputs stay to the end). A Split's outputs share its input's storage
    (NCNN hands each consumer a reference), which lives until the last of them is read. With
    `caller_inputs` (the graph is the model run, not a piece of it), an input the runtime reads where the
    caller's array lies is no resident blob of its own (resident_bytes)."""
    storage: dict[str, str] = {}  # blob -> the blob whose storage it is
    for layer in graph.order:
        for top in layer.tops:
            storage[top] = storage[layer.bottoms[0]] if layer.type == "Split" else top
    ends: dict[str, int] = {}
    for b, root in storage.items():
        last = len(graph.order) if b in graph.outputs else graph.last_use[b]
        ends[root] = max(ends.get(root, 0), last)
    delta = [0] * (len(graph.order) + 1)
    for root, last in ends.items():
        if root in shapes:
            size = resident_bytes(graph, shapes, root) if caller_inputs else shapes[root].nbytes
            delta[graph.producer[root]] += size
            delta[min(last + 1, len(graph.order))] -= size
    live, out = 0, []
    for d in delta[:-1]:
        live += d
        out.append(live)
    return out


def analyze(graph: Graph, shapes: dict[str, BlobShape], caller_inputs: bool = True) -> list[LayerAnalysis]:
    """One entry per layer, in `graph.order` (`caller_inputs`: as live_bytes)."""
    residuals = graph.residuals([layer.tops[0] for layer in graph.order if layer.type == "MultiHeadAttention"], shapes)
    return [analyze_layer(i, layer, live, shapes.get(layer.bottoms[0]) if layer.bottoms else None,
                          shapes.get(layer.tops[0]) if layer.tops else None, len({shapes.get(b) for b in layer.bottoms}) <= 1,
                          residuals.get(layer.tops[0]) is not None if layer.tops else False)
            for i, (layer, live) in enumerate(zip(graph.order, live_bytes(graph, shapes, caller_inputs)))]
