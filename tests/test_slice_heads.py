"""Attention written as MatMuls split by heads (slicing/heads.py): each group of heads runs from its
columns of the q/k/v Gemms through its scores to its rows of the output Gemm, the groups' outputs
added up from the residual, so q, k, v and every head's scores never exist whole. Stock NCNN runs the
rewritten model to the original's outputs (fused and separate q/k/v projections, a causal mask, fp32
and fp16 storage), what would change a head's arithmetic stays whole, and a block whose attention
sets the budget slices by heads, runs in the runtime within it and equals stock NCNN on several inputs."""

from __future__ import annotations

import numpy as np
import pytest

from model_helpers import plan_arena, rewrite_error, runtime_error, scaled_inputs, sliced_at_min, written_text_model
from flexnn_ncnn.ncnn_model import Graph, NcnnParam, infer_shapes, parse_input_shape, read_param
from flexnn_ncnn.ncnn_model.modelbin import read_bin
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.slicing import heads
from flexnn_ncnn.slicing.target import target_for

pytest.importorskip("ncnn")

TOLERANCE = 1e-4
HOST = target_for("host")


def _block(tokens: int, heads_: int, dim: int, fused: bool = True, softmax_axis: int = 2, mask: str = "causal",
           orders: tuple[int, int, int] = (2, 3, 2)) -> str:
    """pnnx's GPT-2 attention: q, k, v (one Gemm cut by a Slice, or three Gemms), each reshaped to
    (dim, heads, tokens) and permuted to heads by `orders` (k transposed), scores scaled, masked (a
    causal (tokens, tokens) mask of one channel; mask="heads": a bias per head, a 1-D blob NCNN adds
    per channel; "none"), softmaxed, weighted over v, back to tokens, projected, added to the residual;
    then a Gemm of the sum."""
    width = heads_ * dim
    if fused:
        qkv = f"""Gemm     qkv  1 1 n w 3=1 5=1 6=1 8={3 * width} 9={width} 10=4
Slice    cut  1 3 w q k v -23300=3,{width},{width},-233 1=1
"""
    else:
        qkv = f"""Split    spn  1 3 n n0 n1 n2
Gemm     gq   1 1 n0 q 3=1 5=1 6=1 8={width} 9={width} 10=4
Gemm     gk   1 1 n1 k 5=1 6=1 8={width} 9={width} 10=4
Gemm     gv   1 1 n2 v 3=1 5=1 8={width} 9={width}
"""
    masked, reshaped, add = {
        "causal": (f"MemoryData mask 0 1 m 0={tokens} 1={tokens}\n", f"Reshape rm 1 1 m m3 0={tokens} 1={tokens} 2=1\n",
                   "BinaryOp masked 2 1 s1 m3 s2 0=0"),
        "heads": (f"MemoryData mask 0 1 m 0={heads_}\n", "Split rm 1 1 m m3\n", "BinaryOp masked 2 1 s1 m3 s2 0=0"),
        "none": ("", "", "Dropout masked 1 1 s1 s2")}[mask]
    body = f"""Input    in   0 1 x 0={width} 1={tokens}
{masked}Split    sp   1 2 x x0 x1
LayerNorm ln  1 1 x1 n 0={width} 1=1e-5 2=1
{qkv}Reshape  rq   1 1 q q3 0={dim} 1={heads_} 2={tokens}
Permute  pq   1 1 q3 qh 0={orders[0]}
Reshape  rk   1 1 k k3 0={dim} 1={heads_} 2={tokens}
Permute  pk   1 1 k3 kh 0={orders[1]}
Reshape  rv   1 1 v v3 0={dim} 1={heads_} 2={tokens}
Permute  pv   1 1 v3 vh 0={orders[2]}
MatMul   qk   2 1 qh kh s
BinaryOp scale 1 1 s s1 0=2 1=1 2=0.125
{reshaped}{add}
Softmax  sm   1 1 s2 p 0={softmax_axis} 1=1
MatMul   pv2  2 1 p vh o
Permute  po   1 1 o o3 0=2
Reshape  ro   1 1 o3 o2 0={width} 1={tokens}
Gemm     proj 1 1 o2 a 3=1 5=1 6=1 8={width} 9={width} 10=4
BinaryOp add  2 1 x0 a r 0=0
Gemm     fc   1 1 r y 3=1 5=1 8=8 9={width}
"""
    lines = body.strip().splitlines()
    tops = [line.split()[4 + int(line.split()[2]):][:int(line.split()[3])] for line in lines]
    blobs = {t for written in tops for t in written}
    return f"7767517\n{len(lines)} {len(blobs)}\n{body}"


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("storage", ["fp32", "fp16"])
def test_head_groups_add_up_to_the_whole_attention(fused, storage, tmp_path):
    param = NcnnParam.parse(_block(12, 6, 16, fused))
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"x": parse_input_shape("12,96")})
    [found] = heads.attentions(graph, shapes)
    assert (found.out.name, found.heads) == ("proj", 6)
    assert [layer.name for layer in found.between] == ["scale", "masked", "sm"]
    assert found.residual is not None and found.residual.other == "x0"
    options = heads.options(graph, shapes, HOST)
    assert sorted(o.heads for o in options) == [1, 2, 3]  # 6 heads in 6, 3 and 2 groups
    modelbin = random_modelbin(param, seed=5, storage=storage)
    feeds = scaled_inputs("x", (12, 96), 3)
    for option in options:  # 4 of 6 heads is not offered: [1, 2, 3] are the sizes 2..12 groups give
        split, split_bin, split_shapes = option.apply(param, modelbin, graph, shapes)
        names = {layer.name for layer in split}
        assert not names & {"qk", "pv2", "proj", "add", "qkv", "cut", "gq"} and {"rm", "fc"} <= names
        assert not {"s", "p", "qh", "o2", "a"} & set(split_shapes)
        # a group's scores hold its heads only
        assert max(s.c for b, s in split_shapes.items() if b.startswith("s2")) == option.heads
        assert rewrite_error((param, modelbin), (split, split_bin), tmp_path, feeds, ["r", "y"]) <= TOLERANCE


@pytest.mark.parametrize("variant", [{"softmax_axis": 0}, {"mask": "heads"}, {"orders": (3, 2, 3), "mask": "none"}],
                         ids=["softmax-over-heads", "bias-per-head", "heads-not-back-in-order"])
def test_what_would_change_a_heads_arithmetic_stays_whole(variant, tmp_path):
    """A Softmax over heads; a 1-D operand NCNN adds per channel (a bias per head); q and v transposed
    (scores over head_dim, the second MatMul writing (tokens, head_dim): the Reshape back no longer
    puts a head's features in its own columns). Each is a model stock NCNN runs."""
    _, _, graph, shapes = written_text_model(_block(12, 6, 16, **variant), (12, 96), 5, tmp_path)
    out = run_stock(tmp_path / "a.param", tmp_path / "a.bin", scaled_inputs("x", (12, 96), 1)[0], ["y"])
    assert np.isfinite(out["y"]).all()
    assert heads.attentions(graph, shapes) == [] and heads.options(graph, shapes, HOST) == []


def test_an_attention_whose_scores_exceed_the_budget_runs_by_heads(tmp_path):
    # 12 heads of 256 tokens: each of the scores' three blobs is 3 MiB whole
    record, plan, param_path, bin_path = sliced_at_min(_block(256, 12, 16), "1,256,192", tmp_path)
    [split] = record["head_splits"]
    assert split["attentions"] == ["proj"] and split["heads_per_group"] < 12, record["head_splits"]
    assert plan_arena(plan) < 6 << 20  # below two of the scores' blobs
    feeds = scaled_inputs("x", (256, 192), 4)
    assert runtime_error(plan, param_path, bin_path, feeds, ["y"]) <= TOLERANCE


@pytest.mark.parametrize("storage", ["fp16", "fp32"])
def test_pnnx_gpt2_attention_by_heads_equals_stock_ncnn(storage, zoo_exports, tmp_path):
    """pnnx's export of a small GPT-2 (2 blocks of 4 heads, 24 tokens, a causal mask): both attentions
    are found, and split into 2 and 4 groups the model equals stock NCNN on three inputs."""
    model = zoo_exports[f"gpt2_{storage}"]
    param = read_param(model.param)
    graph = Graph.build(param)
    shape = model.input_shape[1:]
    shapes = infer_shapes(param, graph, {graph.inputs[0]: parse_input_shape(",".join(map(str, shape)))}, model.bin)
    found = heads.attentions(graph, shapes)
    assert len(found) == 2 and all(a.heads == 4 and a.sliced is not None and a.residual for a in found)
    modelbin = read_bin(param, model.bin)
    feeds = scaled_inputs(graph.inputs[0], shape, 3)
    for option in heads.options(graph, shapes, HOST):
        split, split_bin, _ = option.apply(param, modelbin, graph, shapes)
        assert rewrite_error((param, modelbin), (split, split_bin), tmp_path, feeds, graph.outputs) <= TOLERANCE
