"""Seeded random weights for a `.param` (benchncnn ships structures without weights).

Values keep activations of O(1) through deep stacks: weight matrices are uniform with variance
1/fan_in, normalisation statistics and scales near 1, biases small, so stock NCNN's output is finite.
"""

from __future__ import annotations

import numpy as np

from .modelbin import TAG_INT8, LayerWeights, ModelBin, WeightRecord
from .param import Layer, NcnnParam
from .schema import WeightSpec, is_int8, weight_specs

# roles whose values multiply activations or divide them: near 1, never negative
_NEAR_ONE = {"var", "slope", "scale", "gamma", "scale_in", "scale_out", "weight_int8_scales",
             "bottom_int8_scales", "top_int8_scales", "weight_int8_scale", "A_int8_scales",
             "B_int8_scale", "q_int8_scales", "k_int8_scales", "v_int8_scales", "out_int8_scale",
             "weight_xc_int8_scales", "weight_hc_int8_scales"}


def _fan_in(layer: Layer, spec: WeightSpec) -> int:
    p = layer.params
    if layer.type == "Gemm":
        return max(p.get_int(9, 1), 1)  # constantK
    if layer.type == "MultiHeadAttention":
        return max(p.get_int(0, 1), 1)  # embed_dim
    rows = p.get_int(0, 0)  # num_output for convolutions, InnerProduct, Embed, RNNs
    if 0 < rows <= spec.count and spec.count % rows == 0:
        return spec.count // rows
    return max(int(np.sqrt(spec.count)), 1)


def _uniform(rng: np.random.Generator, low: float, high: float, n: int) -> np.ndarray:
    v = rng.random(n, dtype=np.float32)
    v *= high - low
    v += low
    return v


def random_values(layer: Layer, spec: WeightSpec, rng: np.random.Generator) -> np.ndarray:
    if spec.role in _NEAR_ONE:
        return _uniform(rng, 0.5, 1.5, spec.count)
    if spec.load_type != 0 or spec.role in ("data", "C"):
        return _uniform(rng, -0.1, 0.1, spec.count)  # biases, means, constants
    bound = float(np.sqrt(3.0 / _fan_in(layer, spec)))
    return _uniform(rng, -bound, bound, spec.count)


# int8 layers: NCNN quantizes their input with bottom_int8_scales[0] (x * scale, rounded, clipped to
# +-127); activations of O(1) are covered up to this magnitude
INT8_INPUT_RANGE = 4.0

def int8_records(layer: Layer, specs: list[WeightSpec], weights: np.ndarray, rng: np.random.Generator,
                 storage: str) -> list[WeightRecord]:
    """The records of an int8 layer holding `weights` (fp32, output rows first) as NCNN's quantizer writes
    them: int8 weights (flag 0x000D4B38) scaled per output row by 127 / its largest |weight|, those
    scales, and input (and output, for requantize) scales for activations up to INT8_INPUT_RANGE."""
    records = []
    for spec in specs:
        if spec.role == "weight":
            per_scale = weights.reshape(scales_count(layer), -1)
            absmax = np.abs(per_scale).max(axis=1)
            scale = np.where(absmax > 0, 127.0 / np.maximum(absmax, 1e-30), 0.0).astype(np.float32)
            q = np.clip(np.rint(per_scale * scale[:, None]), -127, 127).astype(np.int8).reshape(-1)
            records.append(WeightRecord.from_elements(spec, TAG_INT8, q))
        elif spec.role == "weight_int8_scales":
            records.append(WeightRecord.from_float32(spec, scale))
        elif spec.role in ("bottom_int8_scales", "top_int8_scales"):
            records.append(WeightRecord.from_float32(spec, np.full(spec.count, 127.0 / INT8_INPUT_RANGE, np.float32)))
        else:
            records.append(WeightRecord.from_float32(spec, random_values(layer, spec, rng), storage))
    return records


def scales_count(layer: Layer) -> int:
    """How many weight scales an int8 layer has: one per output row (per group for depthwise), or one
    for the whole layer (ConvolutionDepthWise's int8_scale_term 2 / 102)."""
    spec = next(s for s in weight_specs(layer) if s.role == "weight_int8_scales")
    return spec.count


def random_modelbin(param: NcnnParam, seed: int, storage: str = "fp32") -> ModelBin:
    """Weights for every layer of `param`; tagged weights stored as `storage` (fp32 or fp16), an int8
    layer's as int8 with valid scales (int8_records)."""
    rng = np.random.default_rng(seed)
    layers = []
    for layer in param:
        specs = weight_specs(layer)
        if not specs:
            continue
        if is_int8(layer):
            weight = next(s for s in specs if s.role == "weight")
            records = int8_records(layer, specs, random_values(layer, weight, rng), rng, storage)
        else:
            records = []
            for spec in specs:
                if spec.load_type in (0, 1):
                    records.append(WeightRecord.from_float32(spec, random_values(layer, spec, rng), storage))
                else:  # packed byte weights
                    records.append(WeightRecord.from_elements(spec, None, rng.integers(-127, 128, spec.count, dtype=np.int8)))
        layers.append(LayerWeights(layer.name, 0, records))
    return ModelBin(ModelBin(layers).layout())
