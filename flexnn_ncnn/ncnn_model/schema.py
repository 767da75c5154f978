"""What each NCNN layer type reads from the `.bin`, in order: a transcription of every `load_model`
in NCNN 1.0.20261020 `src/layer/*.cpp` (each function below names its source).

Each read is `ModelBin::load(count, load_type)`: type 0 is a tagged record (4-byte flag, then fp32,
fp16, int8, ... payload), type 1 raw fp32 with no tag, types 3/4/6/8 raw bytes padded to 4. A layer
type NCNN does not register, or one whose weights this table cannot lay out, is a `UserError`: a
guessed layout would shift every later layer's weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..cli import UserError
from .param import Layer, ParamDict


@dataclass(frozen=True)
class WeightSpec:
    """One `ModelBin::load` call: `count` elements of `load_type`."""

    role: str
    count: int
    load_type: int


# NCNN's registered layers without a load_model (src/CMakeLists.txt minus the table below).
WEIGHTLESS_TYPES = frozenset("""
    AbsVal ArgMax BNLL Concat Crop Dropout Eltwise ELU Exp Flatten Input Log LRN MVN Pooling Power
    Proposal Reduction ReLU Reshape ROIPooling Sigmoid Slice Softmax Split SPP TanH Threshold Tile
    BinaryOp UnaryOp Squeeze ExpandDims Permute PriorBox DetectionOutput Interp ShuffleChannel Clip
    Reorg YoloDetectionOutput Yolov3DetectionOutput PSROIPooling ROIAlign Packing Cast HardSigmoid SELU
    HardSwish Noop PixelShuffle DeepCopy Mish StatisticsPooling Swish Softplus GELU Pooling1D Pooling3D
    MatMul Einsum GLU Fold Unfold GridSample CumulativeSum CopyTo Erf Diag CELU Shrink Spectrogram
    InverseSpectrogram Flip SDPA RotaryEmbed
""".split())


Schema = Callable[[ParamDict], list[WeightSpec]]


def _conv(pd: ParamDict, dynamic_id: int | None, scales: Schema | None = None) -> list[WeightSpec]:
    # convolution*.cpp / deconvolution*.cpp / deformableconv2d.cpp: weight (tagged), bias (raw)
    if dynamic_id is not None and pd.get_int(dynamic_id, 0):
        return []
    num_output = pd.get_int(0, 0)
    specs = [WeightSpec("weight", pd.get_int(6, 0), 0)]
    if pd.get_int(5, 0):
        specs.append(WeightSpec("bias", num_output, 1))
    if scales is not None:
        specs += scales(pd)
    return specs


def _conv_int8_scales(pd: ParamDict) -> list[WeightSpec]:
    # convolution.cpp, innerproduct.cpp under NCNN_INT8
    term = pd.get_int(8, 0)
    specs = []
    if term:
        specs += [WeightSpec("weight_int8_scales", pd.get_int(0, 0), 1), WeightSpec("bottom_int8_scales", 1, 1)]
    if term > 100:
        specs.append(WeightSpec("top_int8_scales", 1, 1))
    return specs


def _convdw_int8_scales(pd: ParamDict) -> list[WeightSpec]:
    # convolutiondepthwise.cpp under NCNN_INT8
    term, group = pd.get_int(8, 0), pd.get_int(7, 1)
    specs = []
    if term in (1, 101):
        specs += [WeightSpec("weight_int8_scales", group, 1), WeightSpec("bottom_int8_scales", 1, 1)]
    elif term in (2, 102):
        specs += [WeightSpec("weight_int8_scales", 1, 1), WeightSpec("bottom_int8_scales", 1, 1)]
    if term > 100:
        specs.append(WeightSpec("top_int8_scales", 1, 1))
    return specs


def _innerproduct(pd: ParamDict) -> list[WeightSpec]:
    specs = [WeightSpec("weight", pd.get_int(2, 0), 0)]
    if pd.get_int(1, 0):
        specs.append(WeightSpec("bias", pd.get_int(0, 0), 1))
    if pd.get_int(8, 0):
        specs += [WeightSpec("weight_int8_scales", pd.get_int(0, 0), 1), WeightSpec("bottom_int8_scales", 1, 1)]
    return specs


def _embed(pd: ParamDict) -> list[WeightSpec]:
    specs = [WeightSpec("weight", pd.get_int(3, 0), 0)]
    if pd.get_int(2, 0):
        specs.append(WeightSpec("bias", pd.get_int(0, 0), 1))
    if pd.get_int(18, 0):
        specs.append(WeightSpec("weight_int8_scale", 1, 1))
    return specs


def _gemm(pd: ParamDict) -> list[WeightSpec]:
    # transA/transB change A's and B's shapes, not their element counts
    const_a, const_b, const_c = pd.get_int(4, 0), pd.get_int(5, 0), pd.get_int(6, 0)
    m, n, k = pd.get_int(7, 0), pd.get_int(8, 0), pd.get_int(9, 0)
    broadcast_c, quantize_term = pd.get_int(10, 0), pd.get_int(18, 0)
    if quantize_term >= 400:
        raise UserError("Gemm with block-quantized weights (18>=400) is not supported")
    specs = []
    if const_a:
        specs.append(WeightSpec("A", m * k, 0))
    if const_b:
        specs.append(WeightSpec("B", n * k, 0))
    if const_c and broadcast_c != -1:
        count = {0: 1, 1: m, 2: m, 3: m * n, 4: n}.get(broadcast_c)
        if count is None:
            raise UserError(f"Gemm constant C broadcast type {broadcast_c} is not one NCNN loads")
        specs.append(WeightSpec("C", count, 0))
    if quantize_term:
        if const_a:
            specs.append(WeightSpec("A_int8_scales", m, 1))
        if const_b:
            specs.append(WeightSpec("B_int8_scale", 1, 1))
    return specs


def _mha(pd: ParamDict) -> list[WeightSpec]:
    embed_dim, weight_data_size = pd.get_int(0, 0), pd.get_int(2, 0)
    kdim, vdim, quantize_term = pd.get_int(3, embed_dim), pd.get_int(4, embed_dim), pd.get_int(18, 0)
    if quantize_term >= 400:
        raise UserError("MultiHeadAttention with block-quantized weights (18>=400) is not supported")
    if embed_dim <= 0:
        raise UserError("MultiHeadAttention embed_dim (0=) must be positive")
    qdim = weight_data_size // embed_dim
    specs = [WeightSpec("q_weight", embed_dim * qdim, 0), WeightSpec("q_bias", embed_dim, 1),
             WeightSpec("k_weight", embed_dim * kdim, 0), WeightSpec("k_bias", embed_dim, 1),
             WeightSpec("v_weight", embed_dim * vdim, 0), WeightSpec("v_bias", embed_dim, 1),
             WeightSpec("out_weight", qdim * embed_dim, 0), WeightSpec("out_bias", qdim, 1)]
    if quantize_term:
        specs += [WeightSpec("q_int8_scales", embed_dim, 1), WeightSpec("k_int8_scales", embed_dim, 1),
                  WeightSpec("v_int8_scales", embed_dim, 1), WeightSpec("out_int8_scale", 1, 1)]
    return specs


def _memorydata(pd: ParamDict) -> list[WeightSpec]:
    w, h, d, c, load_type = pd.get_int(0, 0), pd.get_int(1, 0), pd.get_int(11, 0), pd.get_int(2, 0), pd.get_int(21, 1)
    # the first non-zero of d, c, h, w picks how many of them multiply, as in memorydata.cpp
    count = w * h * d * c if d else w * h * c if c else w * h if h else w
    if not (w or h or c or d):
        return []  # data.create(1), nothing read
    return [WeightSpec("data", count, load_type)]


def _recurrent(gates: int) -> Schema:
    # rnn.cpp (1 gate), gru.cpp (3 gates; bias has 4 rows)
    def schema(pd: ParamDict) -> list[WeightSpec]:
        num_output, weight_data_size = pd.get_int(0, 0), pd.get_int(1, 0)
        dirs = 2 if pd.get_int(2, 0) == 2 else 1
        size = weight_data_size // dirs // num_output // gates
        bias_rows = 4 if gates == 3 else 1
        specs = [WeightSpec("weight_xc", size * num_output * gates * dirs, 0),
                 WeightSpec("bias_c", num_output * bias_rows * dirs, 0),
                 WeightSpec("weight_hc", num_output * num_output * gates * dirs, 0)]
        if pd.get_int(8, 0):
            specs += [WeightSpec("weight_xc_int8_scales", num_output * gates * dirs, 1),
                      WeightSpec("weight_hc_int8_scales", num_output * gates * dirs, 1)]
        return specs
    return schema


def _lstm(pd: ParamDict) -> list[WeightSpec]:
    num_output, weight_data_size = pd.get_int(0, 0), pd.get_int(1, 0)
    dirs = 2 if pd.get_int(2, 0) == 2 else 1
    hidden = pd.get_int(3, num_output)
    size = weight_data_size // dirs // hidden // 4
    specs = [WeightSpec("weight_xc", size * hidden * 4 * dirs, 0),
             WeightSpec("bias_c", hidden * 4 * dirs, 0),
             WeightSpec("weight_hc", num_output * hidden * 4 * dirs, 0)]
    if num_output != hidden:
        specs.append(WeightSpec("weight_hr", hidden * num_output * dirs, 0))
    if pd.get_int(8, 0):
        specs += [WeightSpec("weight_xc_int8_scales", hidden * 4 * dirs, 1),
                  WeightSpec("weight_hc_int8_scales", hidden * 4 * dirs, 1)]
    return specs


def _affine(size_id: int, affine_id: int, roles: tuple[str, ...]) -> Schema:
    # layernorm.cpp, groupnorm.cpp, instancenorm.cpp, rmsnorm.cpp
    def schema(pd: ParamDict) -> list[WeightSpec]:
        if not pd.get_int(affine_id, 1):
            return []
        return [WeightSpec(role, pd.get_int(size_id, 0), 1) for role in roles]
    return schema


def _raw(*fields: tuple[str, int]) -> Schema:
    # raw fp32 reads sized by a param id; a negative id marks a read skipped when that size is 0
    def schema(pd: ParamDict) -> list[WeightSpec]:
        return [WeightSpec(role, pd.get_int(abs(pid), 0), 1) for role, pid in fields
                if pid >= 0 or pd.get_int(-pid, 0)]
    return schema


def _scale(pd: ParamDict) -> list[WeightSpec]:
    size = pd.get_int(0, 0)
    if size == -233:
        return []  # scale comes from a second bottom
    return [WeightSpec("scale", size, 1)] + ([WeightSpec("bias", size, 1)] if pd.get_int(1, 0) else [])


SCHEMAS: dict[str, Schema] = {
    "Convolution": lambda pd: _conv(pd, 19, _conv_int8_scales),
    "ConvolutionDepthWise": lambda pd: _conv(pd, 19, _convdw_int8_scales),
    "Convolution1D": lambda pd: _conv(pd, 19),
    "ConvolutionDepthWise1D": lambda pd: _conv(pd, 19),
    "Convolution3D": lambda pd: _conv(pd, None),
    "ConvolutionDepthWise3D": lambda pd: _conv(pd, None),
    "Deconvolution": lambda pd: _conv(pd, 28),
    "DeconvolutionDepthWise": lambda pd: _conv(pd, 28),
    "Deconvolution1D": lambda pd: _conv(pd, 28),
    "DeconvolutionDepthWise1D": lambda pd: _conv(pd, 28),
    "Deconvolution3D": lambda pd: _conv(pd, None),
    "DeconvolutionDepthWise3D": lambda pd: _conv(pd, None),
    "DeformableConv2D": lambda pd: _conv(pd, None),
    "InnerProduct": _innerproduct,
    "Embed": _embed,
    "Gemm": _gemm,
    "MultiHeadAttention": _mha,
    "MemoryData": _memorydata,
    "RNN": _recurrent(1),
    "GRU": _recurrent(3),
    "LSTM": _lstm,
    "BatchNorm": lambda pd: [WeightSpec(r, pd.get_int(0, 0), 1) for r in ("slope", "mean", "var", "bias")],
    "Bias": _raw(("bias", 0)),
    "Scale": _scale,
    "PReLU": _raw(("slope", 0)),
    "Normalize": _raw(("scale", 3)),
    "Padding": _raw(("per_channel_pad", -6)),
    "Quantize": _raw(("scale", 0)),
    "Dequantize": _raw(("scale", 0), ("bias", -1)),
    "Requantize": _raw(("scale_in", 0), ("scale_out", 1), ("bias", -2)),
    "LayerNorm": _affine(0, 2, ("gamma", "beta")),
    "GroupNorm": _affine(1, 3, ("gamma", "beta")),
    "InstanceNorm": _affine(0, 2, ("gamma", "beta")),
    "RMSNorm": _affine(0, 2, ("gamma",)),
}


def is_int8(layer: Layer) -> bool:
    """A convolution or InnerProduct whose weights NCNN stores and computes in int8 (int8_scale_term,
    param 8): its weight record is int8, followed by fp32 weight and input (and output) scales."""
    return layer.type in ("Convolution", "ConvolutionDepthWise", "InnerProduct") and layer.params.get_int(8, 0) != 0


def weight_specs(layer: Layer) -> list[WeightSpec]:
    """The `.bin` reads of one layer, in NCNN's order."""
    if layer.type in WEIGHTLESS_TYPES:
        return []
    schema = SCHEMAS.get(layer.type)
    if schema is None and "." in layer.type:
        # pnnx writes an operator it has no NCNN layer for under its torch name (torch.var, Tensor.slice)
        raise UserError(f"layer {layer.name}: unknown layer type {layer.type!r}, an operator the exporter (pnnx) could not "
                        "convert to an NCNN layer, so stock NCNN cannot run the model either: express it with operators "
                        "it converts and re-export")
    if schema is None:
        raise UserError(f"layer {layer.name}: unknown layer type {layer.type!r}, cannot tell its weight layout (a custom "
                        "layer an application registers with NCNN: only NCNN's built-in layers run here)")
    try:
        specs = schema(layer.params)
    except UserError as e:
        raise UserError(f"layer {layer.name} ({layer.type}): {e}") from None
    except ZeroDivisionError:
        raise UserError(f"layer {layer.name} ({layer.type}): a size parameter is 0") from None
    for spec in specs:
        if spec.count <= 0:
            raise UserError(f"layer {layer.name} ({layer.type}): {spec.role} has {spec.count} elements")
    return specs
