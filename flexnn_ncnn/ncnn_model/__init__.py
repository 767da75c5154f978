"""Tencent NCNN model files: `.param` text, `.bin` weight records, graph and blob shapes."""

from .graph import Graph
from .modelbin import (TAG_BF16, TAG_FP16, TAG_FP32, TAG_INT8, LayerWeights, ModelBin, WeightRecord,
                       read_bin)
from .param import Layer, NcnnParam, ParamDict, read_param
from .schema import WeightSpec, weight_specs
from .shapes import BlobShape, declared_input_shapes, infer_shapes, parse_input_shape, parse_input_shapes

__all__ = [
    "Graph", "TAG_BF16", "TAG_FP16", "TAG_FP32", "TAG_INT8", "LayerWeights", "ModelBin", "WeightRecord",
    "read_bin", "Layer", "NcnnParam", "ParamDict", "read_param", "WeightSpec", "weight_specs",
    "BlobShape", "declared_input_shapes", "infer_shapes", "parse_input_shape", "parse_input_shapes",
]
