"""The project's own corpus of network structures, written as NCNN's converters write them.

Each builder returns an `NcnnParam` of real NCNN layer types and params: BN-folded convolutions with
fused activations (param 9/10) beside standalone ReLU / Clip / BatchNorm / Scale layers, and a `Split`
wherever a blob feeds several layers (`splitncnn_N`, tops `BLOB_splitncnn_I`). The small structures
(3x64x64 to 3x96x96 inputs, at most 5 MB of fp32 weights) cover the layer mixes of NCNN's benchmark
folder; `alexnet` and `vgg16` are NCNN's benchmark structures at full size, layer for layer (shape
hints aside). Weights come from `random_weights.random_modelbin`: the detectors' thresholds are set
for its value ranges, so that for any weight seed random inputs give tens of detections, a number
that varies with the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .param import Layer, NcnnParam, ParamDict, Value

# fused activation (param 9) and its params (param 10), as convolution and InnerProduct read them
_ACTIVATIONS: dict[str, tuple[int, list[float] | None]] = {
    "relu": (1, None), "leaky": (2, [0.1]), "relu6": (3, [0.0, 6.0]), "sigmoid": (4, None)}


class _Net:
    """Layers in file order, each top named after its layer unless given; tracks channels of 3-D blobs."""

    def __init__(self, c: int, h: int, w: int) -> None:
        self.layers: list[Layer] = []
        self.channels: dict[str, int] = {}
        self.data = self.add("Input", "data", [], {0: w, 1: h, 2: c}, channels=c)

    def add(self, type_: str, name: str, bottoms: Sequence[str], params: dict[int, Value] | None = None, *,
            tops: Sequence[str] | None = None, channels: int | None = None) -> str:
        """Append a layer (params written in id order); returns its first top. `channels`: its tops' channels."""
        pd = ParamDict()
        for pid, value in sorted((params or {}).items()):
            pd.set(pid, value)
        layer = Layer(type_, name, list(bottoms), list(tops or [name]), pd)
        self.layers.append(layer)
        if channels is not None:
            for top in layer.tops:
                self.channels[top] = channels
        return layer.tops[0]

    def conv(self, name: str, x: str, cout: int, k: int = 1, stride: int = 1, *, pad: int | None = None,
             act: str | None = None, group: int = 1, bias: bool = True, top: str | None = None) -> str:
        """Convolution (ConvolutionDepthWise when grouped), padded to keep the size at stride 1 by default."""
        cin = self.channels[x]
        params: dict[int, Value] = {0: cout, 1: k, 6: cout * cin // group * k * k}
        if stride != 1:
            params[3] = stride
        if pad is None:
            pad = k // 2
        if pad:
            params[4] = pad
        if bias:
            params[5] = 1
        if group > 1:
            params[7] = group
        if act is not None:
            code, act_params = _ACTIVATIONS[act]
            params[9] = code
            if act_params is not None:
                params[10] = act_params
        kind = "ConvolutionDepthWise" if group > 1 else "Convolution"
        return self.add(kind, name, [x], params, tops=[top] if top else None, channels=cout)

    def dw(self, name: str, x: str, k: int = 3, stride: int = 1, *, act: str | None = None) -> str:
        c = self.channels[x]
        return self.conv(name, x, c, k, stride, act=act, group=c)

    def unary(self, type_: str, name: str, x: str, params: dict[int, Value] | None = None) -> str:
        """A layer that keeps its input's shape (ReLU, Clip, Swish, LRN, BatchNorm, Scale, ...)."""
        return self.add(type_, name, [x], params, channels=self.channels.get(x))

    def pool(self, name: str, x: str, k: int, stride: int, *, pads: dict[int, Value] | None = None) -> str:
        """Max pooling, with Caffe's ceil rounding unless `pads` (pad mode and sizes) says otherwise."""
        return self.add("Pooling", name, [x], {1: k, 2: stride, **(pads or {})}, channels=self.channels[x])

    def global_pool(self, name: str, x: str) -> str:
        return self.add("Pooling", name, [x], {0: 1, 4: 1})

    def fc(self, name: str, x: str, cin: int, cout: int, *, act: str | None = None, top: str | None = None) -> str:
        params: dict[int, Value] = {0: cout, 1: 1, 2: cin * cout}
        if act is not None:
            params[9] = _ACTIVATIONS[act][0]
        return self.add("InnerProduct", name, [x], params, tops=[top] if top else None)

    def concat(self, name: str, xs: Sequence[str], axis: int = 0) -> str:
        channels = sum(self.channels[x] for x in xs) if axis == 0 and all(x in self.channels for x in xs) else None
        return self.add("Concat", name, xs, {0: axis} if axis else None, channels=channels)

    def add_residual(self, name: str, a: str, b: str, *, eltwise: bool) -> str:
        """a + b: Caffe's Eltwise SUM or ONNX's BinaryOp ADD."""
        if eltwise:
            return self.add("Eltwise", name, [a, b], {0: 1}, channels=self.channels[a])
        return self.add("BinaryOp", name, [a, b], {0: 0}, channels=self.channels[a])

    def finish(self) -> NcnnParam:
        """The layers with a Split after every blob that more than one layer reads."""
        readers: dict[str, list[Layer]] = {}
        for layer in self.layers:
            for b in layer.bottoms:
                readers.setdefault(b, []).append(layer)
        out: list[Layer] = []
        splits = 0
        for layer in self.layers:
            out.append(layer)
            for top in layer.tops:
                consumers = readers.get(top, [])
                if len(consumers) < 2:
                    continue
                branches = [f"{top}_splitncnn_{i}" for i in range(len(consumers))]
                out.append(Layer("Split", f"splitncnn_{splits}", [top], branches))
                splits += 1
                for consumer, branch in zip(consumers, branches):
                    consumer.bottoms[consumer.bottoms.index(top)] = branch
        return NcnnParam(out)


def mobilenet() -> NcnnParam:
    """MobileNet V1/V2-style: depthwise-separable blocks (fused and standalone ReLU / ReLU6), an inverted
    residual with a linear bottleneck, a squeeze-excitation block (EfficientNet's Swish and sigmoid
    InnerProducts, BinaryOp MUL), global average pooling, InnerProduct, Softmax."""
    n = _Net(3, 64, 64)
    x = n.conv("conv0", n.data, 16, 3, 2, act="relu6")                            # 32x32
    x = n.dw("conv1/dw", x, act="relu")
    x = n.conv("conv1", x, 32)
    x = n.unary("Clip", "conv1/relu6", x, {0: 0.0, 1: 6.0})
    x = n.dw("conv2/dw", x, stride=2, act="relu6")                                # 16x16
    x = n.conv("conv2", x, 64)
    block = n.unary("ReLU", "conv2/relu", x)
    x = n.conv("block3/expand", block, 128, act="relu6")
    x = n.dw("block3/dw", x, act="relu6")
    x = n.conv("block3/project", x, 64)
    x = n.add_residual("block3/add", x, block, eltwise=True)
    x = n.dw("conv4/dw", x, stride=2, act="relu")                                 # 8x8
    x = n.conv("conv4", x, 128)
    features = n.unary("Swish", "conv4/swish", x)
    s = n.global_pool("se/pool", features)
    s = n.fc("se/reduce", s, 128, 32)
    s = n.add("Swish", "se/swish", [s])
    s = n.fc("se/expand", s, 32, 128, act="sigmoid")
    x = n.add("BinaryOp", "se/scale", [features, s], {0: 2}, channels=128)
    x = n.dw("conv5/dw", x, stride=2, act="relu6")                                # 4x4
    x = n.conv("conv5", x, 256, act="relu6")
    x = n.global_pool("pool6", x)
    x = n.fc("fc7", x, 256, 1000)
    n.add("Softmax", "prob", [x], tops=["output"])
    return n.finish()


def squeezenet() -> NcnnParam:
    """SqueezeNet-style fire modules (squeeze 1x1, expand 1x1 and 3x3 joined by Concat) at odd channel
    counts, with Caffe's LRN and ceil-rounded max pooling, a 1x1 classifier, global average pooling."""
    n = _Net(3, 64, 64)
    x = n.conv("conv1", n.data, 61, 3, 2, pad=0)                                  # 31x31
    x = n.unary("ReLU", "relu_conv1", x)
    x = n.unary("LRN", "norm1", x, {2: 1e-4})
    x = n.pool("pool1", x, 3, 2)                                                  # 15x15
    for fire, (squeeze, expand1, expand3) in enumerate([(13, 27, 29), (17, 35, 37), (23, 51, 53)], start=2):
        if fire == 4:
            x = n.pool("pool3", x, 3, 2)                                          # 7x7
        s = n.conv(f"fire{fire}/squeeze1x1", x, squeeze, act="relu")
        e1 = n.conv(f"fire{fire}/expand1x1", s, expand1, act="relu")
        e3 = n.conv(f"fire{fire}/expand3x3", s, expand3, 3, act="relu")
        x = n.concat(f"fire{fire}/concat", [e1, e3])
    x = n.conv("conv10", x, 1000, act="relu")
    x = n.global_pool("pool10", x)
    n.add("Softmax", "prob", [x], tops=["output"])
    return n.finish()


def resnet() -> NcnnParam:
    """ResNet-style: a Caffe stem (Convolution without bias, BatchNorm, Scale, ReLU), basic blocks with
    Eltwise SUM and BinaryOp ADD residuals and 1x1 projections, and a BlazeFace-style downsampling
    shortcut (max pooling, channels zero-padded by Padding); global pooling, InnerProduct, Softmax."""
    n = _Net(3, 64, 64)
    x = n.conv("conv1", n.data, 32, 3, 2, bias=False)                             # 32x32
    x = n.unary("BatchNorm", "bn_conv1", x, {0: 32, 1: 1e-5})
    x = n.unary("Scale", "scale_conv1", x, {0: 32, 1: 1})
    x = n.unary("ReLU", "conv1_relu", x)
    x = n.pool("pool1", x, 2, 2)                                                  # 16x16
    # res2: identity shortcut
    y = n.conv("res2_conv1", x, 32, 3, act="relu")
    y = n.conv("res2_conv2", y, 32, 3)
    x = n.unary("ReLU", "res2_relu", n.add_residual("res2", y, x, eltwise=True))
    # res3: stride 2, projection shortcut with its own BatchNorm and Scale
    y = n.conv("res3_conv1", x, 64, 3, 2, act="relu")                             # 8x8
    y = n.conv("res3_conv2", y, 64, 3)
    p = n.conv("res3_proj", x, 64, 1, 2, bias=False)
    p = n.unary("BatchNorm", "res3_proj_bn", p, {0: 64, 1: 1e-5})
    p = n.unary("Scale", "res3_proj_scale", p, {0: 64, 1: 1})
    x = n.unary("ReLU", "res3_relu", n.add_residual("res3", y, p, eltwise=False))
    # res4: BlazeFace's downsampling block, 64 -> 96 channels
    y = n.dw("res4_dw", x, 5, 2)                                                  # 4x4
    y = n.conv("res4_pw", y, 96)
    p = n.pool("res4_pool", x, 2, 2)
    p = n.add("Padding", "res4_pad", [p], {8: 32}, channels=96)
    x = n.unary("ReLU", "res4_relu", n.add_residual("res4", y, p, eltwise=False))
    # res5: 96 -> 128 with a 1x1 projection
    y = n.conv("res5_conv1", x, 128, 3, act="relu")
    y = n.conv("res5_conv2", y, 128, 3)
    p = n.conv("res5_proj", x, 128)
    x = n.unary("ReLU", "res5_relu", n.add_residual("res5", y, p, eltwise=True))
    x = n.global_pool("pool5", x)
    x = n.fc("fc1000", x, 128, 1000)
    n.add("Softmax", "prob", [x], tops=["output"])
    return n.finish()


def shufflenet() -> NcnnParam:
    """ShuffleNet V2-style units (Slice into halves, Concat, ShuffleChannel; stride-2 units with two
    depthwise branches) and a ShuffleNet V1-style grouped 1x1 convolution before the classifier."""
    n = _Net(3, 64, 64)
    x = n.conv("conv1", n.data, 24, 3, 2, act="relu")                             # 32x32
    x = n.pool("pool1", x, 3, 2)                                                  # 16x16
    for stage, cout in enumerate([48, 96], start=2):
        half = cout // 2
        # stride 2: both branches downsample
        a = n.dw(f"stage{stage}_1/branch1_dw", x, stride=2)
        a = n.conv(f"stage{stage}_1/branch1_pw", a, half, act="relu")
        b = n.conv(f"stage{stage}_1/branch2_pw1", x, half, act="relu")
        b = n.dw(f"stage{stage}_1/branch2_dw", b, stride=2)
        b = n.conv(f"stage{stage}_1/branch2_pw2", b, half, act="relu")
        x = n.concat(f"stage{stage}_1/concat", [a, b])
        x = n.unary("ShuffleChannel", f"stage{stage}_1/shuffle", x, {0: 2})
        # stride 1: half passes through, half through the branch
        a = n.add("Slice", f"stage{stage}_2/slice", [x], {0: [-233, -233]},
                  tops=[f"stage{stage}_2/split_a", f"stage{stage}_2/split_b"], channels=half)
        b = n.conv(f"stage{stage}_2/branch2_pw1", f"stage{stage}_2/split_b", half, act="relu")
        b = n.dw(f"stage{stage}_2/branch2_dw", b)
        b = n.conv(f"stage{stage}_2/branch2_pw2", b, half, act="relu")
        x = n.concat(f"stage{stage}_2/concat", [a, b])
        x = n.unary("ShuffleChannel", f"stage{stage}_2/shuffle", x, {0: 2})
    x = n.conv("conv5", x, 192, act="relu", group=4)                              # 4x4
    x = n.global_pool("pool_ave", x)
    x = n.fc("fc1000", x, 192, 1000)
    n.add("Softmax", "prob", [x], tops=["output"])
    return n.finish()


def _head_input(n: _Net, name: str, x: str) -> str:
    """MVN (each channel to zero mean, unit variance) before a detection head. It stands in for the
    statistics a trained network has and random weights lack: without it the constant each channel
    builds up through the layers outweighs what the input changes, and the detections barely depend
    on the input (or on the weight seed, all or none pass the thresholds)."""
    return n.unary("MVN", f"{name}_mvn", x, {0: 1})


def mobilenet_ssd() -> NcnnParam:
    """MobileNet-SSD: a depthwise-separable backbone and extra layers, three heads (12x12, 6x6, 3x3) whose
    loc and conf convolutions go through Permute and Flatten, PriorBox per head, the three Concats, the
    class scores softmaxed through Reshape, and DetectionOutput over 21 classes (VOC's)."""
    classes = 21
    n = _Net(3, 96, 96)
    x = n.conv("conv0", n.data, 16, 3, 2, act="relu")                             # 48x48
    for i, (cout, stride) in enumerate([(32, 1), (64, 2), (64, 1), (128, 2), (256, 2)], start=1):
        x = n.dw(f"conv{i}/dw", x, stride=stride, act="relu")
        x = n.conv(f"conv{i}", x, cout, act="relu")
        if i == 4:
            head12 = x                                                            # 12x12
    head6 = x                                                                     # 6x6
    x = n.conv("conv6_1", x, 64, act="relu")
    head3 = n.conv("conv6_2", x, 128, 3, 2, act="relu")                           # 3x3
    # per head: min size, max size, aspect ratios (each also flipped), in pixels of the input
    priors = {"conv4": (head12, 12.0, None, [2.0]), "conv5": (head6, 30.0, 48.0, [2.0, 3.0]),
              "conv6_2": (head3, 60.0, 84.0, [2.0, 3.0])}
    locs, confs, boxes = [], [], []
    for name, (feature, min_size, max_size, ratios) in priors.items():
        count = 1 + (max_size is not None) + 2 * len(ratios)
        y = _head_input(n, name, feature)
        for kind, width, out in (("loc", 4, locs), ("conf", classes, confs)):
            z = n.conv(f"{name}_mbox_{kind}", y, count * width)
            z = n.add("Permute", f"{name}_mbox_{kind}_perm", [z], {0: 3})
            out.append(n.add("Flatten", f"{name}_mbox_{kind}_flat", [z]))
        prior: dict[int, Value] = {0: [min_size], 2: ratios, 9: -233, 10: -233, 13: 0.5}
        if max_size is not None:
            prior[1] = [max_size]
        boxes.append(n.add("PriorBox", f"{name}_mbox_priorbox", [feature, n.data], prior))
    loc = n.concat("mbox_loc", locs)
    conf = n.concat("mbox_conf", confs)
    box = n.concat("mbox_priorbox", boxes, axis=1)
    conf = n.add("Reshape", "mbox_conf_reshape", [conf], {0: classes, 1: -1})
    conf = n.add("Softmax", "mbox_conf_softmax", [conf], {0: 1, 1: 1})
    conf = n.add("Flatten", "mbox_conf_flatten", [conf])
    n.add("DetectionOutput", "detection_out", [loc, conf, box], {0: classes, 1: 0.45, 2: 100, 4: 0.3},
          tops=["output"])
    return n.finish()


def _darknet_backbone(n: _Net) -> tuple[str, str]:
    """YOLO's darknet stem: 3x3 leaky convolutions and 2x2 max pooling down to stride 16; returns the
    stride-8 and stride-16 features. The last pooling is darknet's stride-1 one, padded right and below."""
    x = n.data
    for i, cout in enumerate([16, 32, 64, 128], start=1):
        x = n.conv(f"conv{i}", x, cout, 3, act="leaky")
        if i == 4:
            stride8 = x                                                           # 12x12
        x = n.pool(f"pool{i}", x, 2, 2, pads={5: 1})
    x = n.conv("conv5", x, 256, 3, bias=False)                                    # 6x6
    x = n.unary("ReLU", "conv5/leaky", x, {0: 0.1})
    x = n.pool("pool5", x, 2, 1, pads={14: 1, 15: 1})
    return stride8, x


def yolov3_tiny() -> NcnnParam:
    """YOLOv3-tiny: a darknet backbone, a 6x6 head and a 12x12 head reached through nearest Interp
    upsampling and a Concat with the stride-8 feature, Yolov3DetectionOutput over 20 classes."""
    classes, boxes = 20, 3
    n = _Net(3, 96, 96)
    stride8, x = _darknet_backbone(n)
    route = n.conv("conv6", x, 128, act="leaky")
    x = n.conv("conv7", route, 256, 3, act="leaky")
    head6 = n.conv("head6", _head_input(n, "head6", x), boxes * (5 + classes))
    x = n.conv("conv8", route, 64, act="leaky")
    x = n.add("Interp", "upsample", [x], {0: 1, 1: 2.0, 2: 2.0}, channels=64)     # 12x12
    x = n.concat("route", [x, stride8])
    x = n.conv("conv9", x, 128, 3, act="leaky")
    head12 = n.conv("head12", _head_input(n, "head12", x), boxes * (5 + classes))
    # darknet's anchors scaled from 416 to 96 pixels; the 6x6 head takes the large three
    anchors = [2.0, 3.0, 5.0, 6.0, 8.0, 13.0, 19.0, 19.0, 31.0, 39.0, 79.0, 74.0]
    n.add("Yolov3DetectionOutput", "detection_out", [head6, head12],
          {0: classes, 1: boxes, 2: 0.8, 3: 0.45, 4: anchors, 5: [3.0, 4.0, 5.0, 0.0, 1.0, 2.0], 6: [16.0, 8.0]},
          tops=["output"])
    return n.finish()


def yolov2() -> NcnnParam:
    """YOLOv2: a darknet backbone, the passthrough (1x1 convolution, Reorg stride 2, Concat) and a 6x6
    region head, YoloDetectionOutput with VOC's 5 anchors (in cells) over 20 classes."""
    classes, boxes = 20, 5
    n = _Net(3, 96, 96)
    stride8, x = _darknet_backbone(n)
    x = n.conv("conv6", x, 128, act="leaky")
    x = n.conv("conv7", x, 256, 3, act="leaky")
    p = n.conv("passthrough", stride8, 32, act="leaky")
    p = n.add("Reorg", "reorg", [p], {0: 2}, channels=128)                        # 6x6
    x = n.concat("route", [p, x])
    x = n.conv("conv8", x, 128, 3, act="leaky")
    x = n.conv("head", _head_input(n, "head", x), boxes * (5 + classes))
    n.add("YoloDetectionOutput", "detection_out", [x],
          {0: classes, 1: boxes, 2: 0.15, 3: 0.45, 4: [1.08, 1.19, 3.42, 4.41, 6.63, 11.38, 9.42, 5.11, 16.62, 10.52]},
          tops=["output"])
    return n.finish()


def unet() -> NcnnParam:
    """A UNet (segmentation, 2 classes): three levels of two 3x3 convolutions, max pooling down, up by
    a 2x2 stride-2 transposed convolution and by bilinear Interp with a 1x1 convolution, each joined
    to its level's skip by a channel Concat; every full-resolution blob is alive across the network."""
    n = _Net(3, 128, 128)
    x, skips = n.data, []
    for level, c in enumerate((16, 32), start=1):
        x = n.conv(f"enc{level}a", x, c, 3, act="relu")
        x = n.conv(f"enc{level}b", x, c, 3, act="relu")
        skips.append(x)
        x = n.pool(f"pool{level}", x, 2, 2)
    x = n.conv("mid_a", x, 64, 3, act="relu")
    x = n.conv("mid_b", x, 64, 3, act="relu")                                     # 32x32
    x = n.add("Deconvolution", "up2", [x], {0: 32, 1: 2, 3: 2, 5: 1, 6: 64 * 32 * 4}, channels=32)
    x = n.concat("cat2", [x, skips[1]])
    x = n.conv("dec2a", x, 32, 3, act="relu")
    x = n.conv("dec2b", x, 32, 3, act="relu")                                     # 64x64
    x = n.add("Interp", "up1", [x], {0: 2, 1: 2.0, 2: 2.0}, channels=32)
    x = n.conv("up1_proj", x, 16)
    x = n.concat("cat1", [x, skips[0]])
    x = n.conv("dec1a", x, 16, 3, act="relu")
    x = n.conv("dec1b", x, 16, 3, act="relu")
    n.conv("head", x, 2, top="output")
    return n.finish()


def alexnet() -> NcnnParam:
    """NCNN's benchmark AlexNet (227x227): grouped convolutions, LRN, 244 MB of weights, 89% in fc6/fc7."""
    n = _Net(3, 227, 227)
    x = n.conv("conv1", n.data, 96, 11, 4, pad=0, act="relu", top="conv1_relu1")
    x = n.unary("LRN", "norm1", x, {2: 1e-4})
    x = n.pool("pool1", x, 3, 2)
    for i, (cout, k, group) in enumerate([(256, 5, 2), (384, 3, 1), (384, 3, 2), (256, 3, 2)], start=2):
        x = n.conv(f"conv{i}", x, cout, k, act="relu", group=group, top=f"conv{i}_relu{i}")
        if i == 2:
            x = n.unary("LRN", "norm2", x, {2: 1e-4})
            x = n.pool("pool2", x, 3, 2)
    x = n.pool("pool5", x, 3, 2)
    return _classifier(n, x, 256 * 6 * 6)


def vgg16() -> NcnnParam:
    """NCNN's benchmark VGG-16 (224x224): 13 3x3 convolutions, 553 MB of weights, 74% of them in fc6."""
    n = _Net(3, 224, 224)
    x = n.data
    for stage, (cout, convs) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)], start=1):
        for i in range(1, convs + 1):
            x = n.conv(f"conv{stage}_{i}", x, cout, 3, act="relu", top=f"conv{stage}_{i}_relu{stage}_{i}")
        x = n.pool(f"pool{stage}", x, 2, 2)
    return _classifier(n, x, 512 * 7 * 7)


def _classifier(n: _Net, x: str, features: int) -> NcnnParam:
    """AlexNet's and VGG's fc6, fc7 (4096, ReLU fused, dropout folded away), fc8 (1000) and Softmax."""
    x = n.fc("fc6", x, features, 4096, act="relu", top="fc6_drop6")
    x = n.fc("fc7", x, 4096, 4096, act="relu", top="fc7_drop7")
    x = n.fc("fc8", x, 4096, 1000)
    n.add("Softmax", "prob", [x], tops=["output"])
    return n.finish()


@dataclass(frozen=True)
class Structure:
    """One entry of the corpus: its builder and how it is fed."""

    name: str
    description: str
    build: Callable[[], NcnnParam]
    input_shape: tuple[int, ...]  # torch NCHW, batch 1
    input_blob: str = "data"
    output_blob: str = "output"


STRUCTURES: dict[str, Structure] = {s.name: s for s in (
    Structure("mobilenet", "MobileNet-style depthwise-separable classifier with an inverted residual and SE",
              mobilenet, (1, 3, 64, 64)),
    Structure("squeezenet", "SqueezeNet-style fire modules at odd channel counts, LRN", squeezenet, (1, 3, 64, 64)),
    Structure("resnet", "ResNet-style basic blocks: Eltwise/BinaryOp residuals, BatchNorm+Scale, channel Padding",
              resnet, (1, 3, 64, 64)),
    Structure("shufflenet", "ShuffleNet V2-style units (Slice, Concat, ShuffleChannel), grouped 1x1 convolution",
              shufflenet, (1, 3, 64, 64)),
    Structure("mobilenet_ssd", "MobileNet-SSD detector: 3 heads, PriorBox, DetectionOutput (21 classes)",
              mobilenet_ssd, (1, 3, 96, 96)),
    Structure("yolov3_tiny", "YOLOv3-tiny detector: 2 scales, Interp upsampling, Yolov3DetectionOutput (20 classes)",
              yolov3_tiny, (1, 3, 96, 96)),
    Structure("yolov2", "YOLOv2 detector: Reorg passthrough, YoloDetectionOutput (20 classes)", yolov2, (1, 3, 96, 96)),
    Structure("unet", "UNet segmentation: 3 levels, skip Concats, transposed-conv and bilinear Interp upsampling",
              unet, (1, 3, 128, 128)),
    Structure("alexnet", "NCNN's benchmark AlexNet at full size (244 MB of weights)", alexnet, (1, 3, 227, 227)),
    Structure("vgg16", "NCNN's benchmark VGG-16 at full size (553 MB of weights)", vgg16, (1, 3, 224, 224)),
)}
