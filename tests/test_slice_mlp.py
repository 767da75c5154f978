"""A transformer's MLP split by hidden units (slicing/hidden.py): Gemm → activation → Gemm runs as
branches of a few hidden units each, their outputs added up, so the wide hidden blob never exists
whole; a residual add of the MLP's output starts the branches' sum, so the residual dies at the
first branch. Stock NCNN runs the rewritten model to the original's outputs (the second Gemm's sum over
hidden units in another order: ~1e-7 relative), and a block whose hidden blob alone exceeds the budget
slices, runs in the runtime within it and equals stock NCNN on several inputs."""

from __future__ import annotations

import pytest

from model_helpers import plan_arena, rewrite_error, runtime_error, scaled_inputs, sliced_at_min
from flexnn_ncnn.analysis import analyze
from flexnn_ncnn.ncnn_model import Graph, NcnnParam, infer_shapes, parse_input_shape
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.slicing import hidden
from flexnn_ncnn.slicing.target import target_for

pytest.importorskip("ncnn")

TOLERANCE = 1e-4
HOST = target_for("host")

# three MLPs: B transposed up and plain down (biases per column); B plain up, no activation, no
# bias down; then a hidden blob read twice, which is not split
MLPS = """7767517
14 16
Input     in    0 1 x 0=40 1=24
Split     sp    1 2 x x0 x1
LayerNorm ln    1 1 x1 n 0=40 1=1e-5 2=1
Gemm      up    1 1 n h 3=1 5=1 6=1 8=160 9=40 10=4
GELU      act   1 1 h a 0=1
Gemm      down  1 1 a o 5=1 6=1 8=40 9=160 10=4
BinaryOp  add   2 1 x0 o r 0=0
Gemm      up2   1 1 r h2 5=1 8=96 9=40
Gemm      down2 1 1 h2 o2 3=1 5=1 8=40 9=96
Gemm      up3   1 1 o2 h3 3=1 5=1 8=64 9=40
Split     sp3   1 2 h3 h3a h3b
Gemm      down3 1 1 h3a o3 3=1 5=1 8=40 9=64
Gemm      other 1 1 h3b o4 3=1 5=1 8=40 9=64
BinaryOp  y     2 1 o3 o4 y 0=0
"""


@pytest.mark.parametrize("storage", ["fp32", "fp16"])
def test_mlp_branches_add_up_to_the_whole_mlp(storage, tmp_path):
    param = NcnnParam.parse(MLPS)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"x": parse_input_shape("24,40")})
    assert [(m.up.name, m.act and m.act.name, m.down.name) for m in hidden.mlps(graph, shapes)] == \
        [("up", "act", "down"), ("up2", None, "down2")]  # up3's hidden blob has two readers
    modelbin = random_modelbin(param, seed=4, storage=storage)
    options = hidden.options(graph, shapes, analyze(graph, shapes), HOST)
    assert options and all(o.layers == (("down", "down2") if o.width < 96 else ("down",)) for o in options)
    option = min(options, key=lambda o: o.width)  # the most branches
    split, split_bin, split_shapes = option.apply(param, modelbin, graph, shapes)
    names = {layer.name for layer in split}
    assert "h" not in split_shapes and not names & {"up", "act", "down", "up2", "down2"} and "up3" in names
    # the residual add x0 + o is folded: the first branch's output is added to x0, the last add writes r
    split_graph = Graph.build(split)
    assert "add" not in names and "o" not in split_shapes
    order = [layer.name for layer in split_graph.order]
    assert split_graph.last_use["x0"] < order.index(f"down{hidden.MARK}1") < split_graph.producer["r"]
    feeds = scaled_inputs("x", (24, 40), 3)
    assert rewrite_error((param, modelbin), (split, split_bin), tmp_path, feeds, ["r", "o2", "y"]) <= TOLERANCE


# a transformer block's MLP whose hidden blob (256 tokens x 4096, 4 MiB) outweighs the rest
BLOCK = """7767517
9 11
Input     in   0 1 x 0=256 1=256
Split     sp   1 2 x x0 x1
LayerNorm ln   1 1 x1 n 0=256 1=1e-5 2=1
Gemm      up   1 1 n h 3=1 5=1 6=1 8=4096 9=256 10=4
GELU      act  1 1 h a 0=1
Gemm      down 1 1 a o 3=1 5=1 6=1 8=256 9=4096 10=4
BinaryOp  add  2 1 x0 o r 0=0
Gemm      fc   1 1 r g 3=1 5=1 6=1 8=16 9=256 10=4
Softmax   out  1 1 g y 0=1 1=1
"""


def test_a_block_whose_hidden_blob_exceeds_the_budget_runs_split(tmp_path):
    record, plan, param_path, bin_path = sliced_at_min(BLOCK, "1,256,256", tmp_path)
    assert [s["mlps"] for s in record["hidden_splits"]] == [["down"]], record["hidden_splits"]
    assert plan_arena(plan) < 4 << 20  # below the hidden blob alone
    assert runtime_error(plan, param_path, bin_path, scaled_inputs("x", (256, 256), 4), ["y"]) <= TOLERANCE
