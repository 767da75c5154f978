"""Full-size VGG-19 (224x224): after slicing, no layer's working set exceeds the limit the budget
leaves it. VGG-19 is VGG-16 (the project's structure, and NCNN's benchmark file when present) with the
fourth conv of stages 3-5 added (config E); NCNN's file brings its shape hints along, the project's
structure has its shapes measured by one stock run. Stock NCNN runs the sliced result once."""

from __future__ import annotations

import numpy as np
import pytest

from model_helpers import load_param, present, random_input
from flexnn_ncnn.analysis import analyze
from flexnn_ncnn.ncnn_model import Graph, Layer, NcnnParam, declared_input_shapes, infer_shapes
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.slicing import Target, slice_model

pytest.importorskip("ncnn")

BUDGETS = (100 * 10**6, 50 * 10**6)  # the paper's 100 MB, and one where the convolutions are cut too


def vgg19_param(vgg16: NcnnParam) -> NcnnParam:
    layers: list[Layer] = []
    for layer in vgg16:
        if layer.type == "Pooling" and layer.name in ("pool3", "pool4", "pool5"):
            stage = layer.name[-1]
            prev = layers[-1]
            fourth = Layer("Convolution", f"conv{stage}_4", [prev.tops[0]], [f"conv{stage}_4_relu{stage}_4"],
                           prev.params.copy())
            layers.append(fourth)
            layer = Layer(layer.type, layer.name, fourth.tops, layer.tops, layer.params)
        layers.append(layer)
    return NcnnParam(layers)


@pytest.mark.parametrize("vgg16", present("struct:vgg16", "bench:vgg16"))
def test_vgg19_largest_working_set_fits_the_limit(vgg16, scratch, capsys):
    param = vgg19_param(load_param(vgg16))
    assert sum(layer.type == "Convolution" for layer in param) == 16
    graph = Graph.build(param)
    modelbin = random_modelbin(param, seed=19)
    bin_path = scratch / "vgg19.bin"
    with open(bin_path, "wb") as f:
        modelbin.write(f)
    shapes = infer_shapes(param, graph, declared_input_shapes(param, graph), bin_path)
    live = {a.layer.name: a.live_bytes for a in analyze(graph, shapes)}
    for budget in BUDGETS:
        result = slice_model(param, modelbin, graph, shapes, budget, Target("host", 16))
        rows = []
        for d in result.decisions:
            # the limit is what the budget leaves beside the layer's live activations, nothing hand-set
            assert d.after.total <= d.limit == budget - live[d.layer]
            if d.changed:
                slices = f"{d.slices}x{d.slice_width}" if d.slices > 1 else "-"
                rows.append(f"{d.layer:8} {d.kernel:12} {slices:>8} tiles {d.tiles:4}  "
                            f"{d.before.total / 2**20:9.2f} -> {d.after.total / 2**20:7.2f} MiB  "
                            f"(limit {d.limit / 2**20:.2f})")
        largest = max(result.decisions, key=lambda d: d.after.total)
        with capsys.disabled():
            print(f"\nVGG-19 at {budget:,} B: layer kernel slices tiles  working set before -> after")
            print("\n".join(rows))
            print(f"largest working set after slicing: {largest.layer} {largest.after.total / 2**20:.2f} MiB <= its "
                  f"limit {largest.limit / 2**20:.2f} MiB; smallest feasible budget {result.min_budget:,} B")
        # fc6's 411 MB of weights cannot be whole under either budget
        fc6 = next(d for d in result.decisions if d.layer == "fc6")
        assert fc6.slices > 1 and fc6.before.weights > budget
    assert any(d.slices > 1 and d.type == "Convolution" for d in result.decisions)

    # stock NCNN runs the sliced VGG-19 unchanged
    out_param, out_bin = scratch / "vgg19.flexnn.param", scratch / "vgg19.flexnn.bin"
    out_param.write_text(result.param.format())
    with open(out_bin, "wb") as f:
        result.modelbin.write(f)
    out = run_stock(out_param, out_bin, {"data": random_input((1, 3, 224, 224))}, ["fc8"])["fc8"]
    assert out.shape == (1000,) and np.isfinite(out).all()
