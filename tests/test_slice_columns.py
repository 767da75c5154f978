"""A Gemm whose output a Slice cuts into groups of columns, run as one Gemm per group (slicing/columns.py):
a fused q/k/v projection's wide blob and the Slice's copies of it never exist. Stock NCNN runs the
rewritten model to the original's outputs, and a model whose wide blob and its copies exceed the
budget slices, runs in the runtime within it and equals stock NCNN on several inputs."""

from __future__ import annotations

import pytest

from model_helpers import plan_arena, rewrite_error, runtime_error, scaled_inputs, sliced_at_min
from flexnn_ncnn.analysis import analyze
from flexnn_ncnn.ncnn_model import Graph, NcnnParam, infer_shapes, parse_input_shape
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.slicing import columns
from flexnn_ncnn.slicing.spatial import model_need
from flexnn_ncnn.slicing.target import target_for

pytest.importorskip("ncnn")

TOLERANCE = 1e-4
HOST = target_for("host")


def _net(tokens: int, width: int, k: int) -> str:
    """q, k, v from one Gemm (B transposed, per-column bias) cut by a Slice of sizes (w, w, rest);
    then a Gemm (plain B) cut along its rows, which stays whole; y = q * k + v."""
    return f"""7767517
8 12
Input    in   0 1 x 0={k} 1={tokens}
Split    sp   1 2 x x0 x1
Gemm     qkv  1 1 x0 w 3=1 5=1 6=1 8={3 * width} 9={k} 10=4
Slice    cut  1 3 w q kk v -23300=3,{width},{width},-233 1=1
BinaryOp mul  2 1 q kk qk 0=2
BinaryOp y    2 1 qk v y 0=0
Gemm     g2   1 1 x1 w2 5=1 8=8 9={k}
Slice    rows 1 2 w2 r0 r1 -23300=2,-233,-233 1=0
"""


@pytest.mark.parametrize("storage", ["fp32", "fp16"])
def test_gemm_groups_equal_the_sliced_gemm(storage, tmp_path):
    param = NcnnParam.parse(_net(24, 48, 40))
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"x": parse_input_shape("24,40")})
    found = columns.sliced_gemms(graph, shapes)
    assert [(s.gemm.name, s.bounds) for s in found] == [("qkv", (0, 48, 96, 144))]  # g2's Slice cuts rows
    analyses = analyze(graph, shapes)
    [option] = columns.options(graph, shapes, HOST)
    assert option.layers == ("cut",) and option.need < model_need(analyses, HOST)
    modelbin = random_modelbin(param, seed=3, storage=storage)
    split, split_bin, split_shapes = option.apply(param, modelbin, graph, shapes)
    names = {layer.name for layer in split}
    assert "w" not in split_shapes and "cut" not in names and "qkv" not in names and "rows" in names
    feeds = scaled_inputs("x", (24, 40), 3)
    assert rewrite_error((param, modelbin), (split, split_bin), tmp_path, feeds, ["q", "kk", "v", "y", "r1"]) <= TOLERANCE


def test_a_model_whose_wide_blob_exceeds_the_budget_runs_split(tmp_path):
    # 512 tokens: the 6 MiB wide blob and the Slice's 6 MiB of copies coexist unless it is split
    record, plan, param_path, bin_path = sliced_at_min(_net(512, 1024, 256), "1,512,256", tmp_path)
    assert [s["slices"] for s in record["column_splits"]] == [["cut"]], record["column_splits"]
    assert plan_arena(plan) < 12 << 20  # below the wide blob beside its copies
    feeds = scaled_inputs("x", (512, 256), 4)
    assert runtime_error(plan, param_path, bin_path, feeds, ["y", "r0", "r1"]) <= TOLERANCE
