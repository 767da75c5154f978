"""Margins cut off a convolution's output, folded into its pads.

Converters emulate TensorFlow's SAME padding of a strided convolution by padding on every side and
then cutting the first row and column off the output: a Slice along h (then one along w) into a
margin of m rows, which only a Caffe Silence (a Noop without outputs) reads, and the rest. Dropping
the first m output rows of a convolution is the same as starting its window m·stride input rows
later: its top pad less m·stride, every output element the same dot product. Folded so, the
convolution writes the cropped blob itself, and the block stays one a spatial tile can run (a Slice
along h or w ends a tiled block): MobileNetV2-SSDLite's expanded blobs no longer sit whole.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ..ncnn_model import Layer, NcnnParam, ParamDict

log = logging.getLogger(__name__)

CONVOLUTIONS = frozenset({"Convolution", "ConvolutionDepthWise"})
REST = -233  # a Slice's size for "what the other outputs leave"
# a 3-D blob's Slice axis (param 1, negative from the end) -> (pad id at its start, stride id, the
# stride's fallback id: NCNN reads h's stride as w's when it is absent)
AXES = {1: (14, 13, 3), -2: (14, 13, 3), 2: (4, 3, 3), -1: (4, 3, 3)}
PAD_IDS = (4, 15, 14, 16)  # left, right, top, bottom


def fold_margins(param: NcnnParam) -> NcnnParam:
    """`param` with every such margin folded into its convolution's pads (the same NcnnParam when
    there is none). The weights are unchanged: no layer with weights is added or removed."""
    layers = list(param.layers)
    folded = 0
    while (found := _foldable(layers)) is not None:
        slice_, conv, m = found
        margin, rest = slice_.tops
        axis = slice_.params.get_int(1, 0)
        p = conv.params.copy()
        pads = _pads(p)
        pads[AXES[axis][0]] -= m * _stride(p, axis)
        for i in PAD_IDS:
            p.set(i, pads[i])
        index = {id(layer): i for i, layer in enumerate(layers)}
        layers[index[id(conv)]] = replace(conv, tops=[rest], params=p)
        layers = [layer for layer in layers if layer is not slice_]
        for i, layer in enumerate(layers):
            if margin in layer.bottoms:  # the Silence: it reads the margin no more
                layers[i] = replace(layer, bottoms=[b for b in layer.bottoms if b != margin])
        layers = [layer for layer in layers if not (layer.type == "Noop" and not layer.bottoms and not layer.tops)]
        folded += 1
    if not folded:
        return param
    log.info("folded %d margin Slice(s) into their convolutions' pads", folded)
    return NcnnParam(layers)


def _foldable(layers: list[Layer]) -> tuple[Layer, Layer, int] | None:
    """The first Slice that cuts m rows or columns off a convolution's output for a Silence to read,
    with the convolution and m, where the convolution's pad on that side covers m strides."""
    producer = {top: layer for layer in layers for top in layer.tops}
    readers: dict[str, list[Layer]] = {}
    for layer in layers:
        for b in layer.bottoms:
            readers.setdefault(b, []).append(layer)
    for layer in layers:
        p = layer.params
        if layer.type != "Slice" or len(layer.bottoms) != 1 or len(layer.tops) != 2 or 2 in p:
            continue
        sizes = p.get_array(0)
        axis = p.get_int(1, 0)
        if axis not in AXES or len(sizes) != 2 or sizes[1] != REST or not isinstance(sizes[0], int) or sizes[0] <= 0:
            continue
        conv = producer.get(layer.bottoms[0])
        silences = readers.get(layer.tops[0], [])  # none: the margin is an output of the model
        if (conv is None or conv.type not in CONVOLUTIONS or len(conv.tops) != 1 or readers[conv.tops[0]] != [layer]
                or not silences or not all(r.type == "Noop" and not r.tops for r in silences)):
            continue
        cp = conv.params
        if cp.get_int(19, 0):  # weights from a second input: its output may be 1-D or 2-D
            continue
        pads = _pads(cp)
        if min(pads.values()) < 0:  # NCNN's own SAME (-233, -234): pads derived from the size
            continue
        if pads[AXES[axis][0]] >= sizes[0] * _stride(cp, axis):
            return layer, conv, sizes[0]
    return None


def _pads(p: ParamDict) -> dict[int, int]:
    """A convolution's pads by param id, as NCNN reads them: top defaults to left, right to left,
    bottom to top."""
    left = p.get_int(4, 0)
    top = p.get_int(14, left)
    return {4: left, 15: p.get_int(15, left), 14: top, 16: p.get_int(16, top)}


def _stride(p: ParamDict, axis: int) -> int:
    """A convolution's stride along a Slice axis (AXES): h's defaults to w's."""
    _, stride_id, fallback = AXES[axis]
    return p.get_int(stride_id, p.get_int(fallback, 1))
