"""Attention sliced by heads: a self-attention MultiHeadAttention whose weights do not fit its limit runs
as MultiHeadAttentions of a few heads each, their outputs added up (slicing/rewrite._emit_heads).
Stock NCNN runs the rewritten model to the original's outputs (the heads' partial output projections
add in another order: ~1e-7 relative), and the sliced transformer runs in the runtime within its budget
to stock NCNN's outputs on several inputs. Attention with a mask, a cache or inputs of other shapes
stays whole. An attention whose output a residual add takes starts its running sum from the residual,
which then dies at the first head instead of outliving the last."""

from __future__ import annotations

import pytest

from model_helpers import plan_arena, rewrite_error, runtime_error, scaled_inputs, sliced_at_min
from flexnn_ncnn.analysis import AttentionModel, Cost, FixedModel, analyze, live_bytes
from flexnn_ncnn.ncnn_model import Graph, NcnnParam, infer_shapes, parse_input_shape
from flexnn_ncnn.ncnn_model.random_weights import random_modelbin
from flexnn_ncnn.slicing.policy import LayerDecision
from flexnn_ncnn.slicing.rewrite import apply

pytest.importorskip("ncnn")

TOLERANCE = 1e-4

# q, k and v as three blobs (a Split's), q's 48 features projected to 64 (4 heads of 16), then a
# self-attention on one blob (6 heads of 8), then a masked attention the slicer leaves whole
ATTENTION_NET = """7767517
7 10
Input              in     0 1 x 0=48 1=12
Split              sp     1 3 x q k v
MultiHeadAttention mha    3 1 q k v a 0=64 1=4 2=3072 3=48 4=48
MultiHeadAttention self   1 1 a b 0=48 1=6 2=2304
Split              sp2    1 2 b b0 b1
MemoryData         mask   0 1 m 0=12 1=12
MultiHeadAttention masked 3 1 b0 b1 m y 0=48 1=6 2=2304 5=1
"""


@pytest.mark.parametrize("storage", ["fp32", "fp16"])
def test_heads_sliced_apart_add_up_to_the_whole_attention(storage, tmp_path):
    param = NcnnParam.parse(ATTENTION_NET)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"x": parse_input_shape("12,48")})
    models = {a.layer.name: a.model for a in analyze(graph, shapes)}
    assert isinstance(models["mha"], AttentionModel) and models["mha"].rows == 4
    assert isinstance(models["self"], AttentionModel) and models["self"].rows == 6
    assert isinstance(models["masked"], FixedModel)
    modelbin = random_modelbin(param, seed=4, storage=storage)
    zero = Cost(0, 0)
    decisions = {"mha": LayerDecision("mha", "MultiHeadAttention", "attention", "attention", 4, 3, 1, 0, zero, zero, "test"),
                 "self": LayerDecision("self", "MultiHeadAttention", "attention", "attention", 6, 2, 1, 0, zero, zero, "test")}
    sliced, sliced_bin, done = apply(param, modelbin, graph, decisions, shapes, 16)
    assert [len(done[n].sublayers) for n in ("mha", "self")] == [2, 3]
    assert [sliced.layer(s).params.get_int(1, 0) for s in done["mha"].sublayers] == [3, 1]  # heads per slice
    feeds = scaled_inputs("x", (12, 48), 3)
    assert rewrite_error((param, modelbin), (sliced, sliced_bin), tmp_path, feeds, ["a", "b", "y"]) <= TOLERANCE


# a transformer block whose attention (8 heads: 4 MiB of weights) outweighs its activations
TRANSFORMER = """7767517
8 11
Input              in     0 1 x 0=512 1=16
Split              sp     1 2 x x0 x1
LayerNorm          ln     1 1 x1 n 0=512 1=1e-5 2=1
Split              sp2    1 3 n q k v
MultiHeadAttention mha    3 1 q k v a 0=512 1=8 2=262144
BinaryOp           add    2 1 x0 a r 0=0
Gemm               fc     1 1 r g 3=1 5=1 6=1 7=16 8=64 9=512 10=4
Softmax            out    1 1 g y 0=1 1=1
"""


def test_a_transformer_whose_attention_does_not_fit_runs_sliced_by_heads(tmp_path):
    record, plan, param_path, bin_path = sliced_at_min(TRANSFORMER, "1,16,512", tmp_path)
    decisions = {d["layer"]: d for d in record["layers"]}
    attention = decisions["mha"]
    assert attention["kernel"] == "attention" and attention["slice_width"] < attention["rows"] == 8, attention
    assert plan_arena(plan) < 4 << 20  # below the attention's weights alone
    feeds = scaled_inputs("x", (16, 512), 4)
    assert runtime_error(plan, param_path, bin_path, feeds, ["y"]) <= TOLERANCE


def test_a_residual_add_starts_the_heads_running_sum(tmp_path):
    param = NcnnParam.parse(TRANSFORMER)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"x": parse_input_shape("16,512")})
    token_bytes = shapes["x"].nbytes
    attention = next(a for a in analyze(graph, shapes) if a.layer.name == "mha").model
    assert isinstance(attention, AttentionModel) and attention.out_bytes == token_bytes  # one partial output, no sum
    zero = Cost(0, 0)
    decisions = {"mha": LayerDecision("mha", "MultiHeadAttention", "attention", "attention", 8, 2, 1, 0, zero, zero, "test")}
    modelbin = random_modelbin(param, seed=5)
    sliced, sliced_bin, done = apply(param, modelbin, graph, decisions, shapes, 16)
    sliced_graph = Graph.build(sliced)
    names = [layer.name for layer in sliced_graph.order]
    assert "add" not in names and sliced_graph.producer["r"] == names.index("mha.flexnn_add3")
    # the residual x0 is last read by the first head's add, before the second head runs
    assert sliced_graph.last_use["x0"] == names.index("mha.flexnn_add0") < names.index(done["mha"].sublayers[1])
    live = dict(zip(names, live_bytes(sliced_graph, infer_shapes(sliced, sliced_graph, {"x": shapes["x"]}))))
    # at every head after the first: the normalised input, the sum so far and the head's output
    assert all(live[head] == 3 * token_bytes for head in done["mha"].sublayers[1:])
    feeds = scaled_inputs("x", (16, 512), 3)
    assert rewrite_error((param, modelbin), (sliced, sliced_bin), tmp_path, feeds, ["y"]) <= TOLERANCE


# two attentions read in parallel and summed by one add (r = attn1(x) + attn2(x)): one add, one fold
PARALLEL = """7767517
6 7
Input              in     0 1 x 0=64 1=10
Split              sp     1 2 x x0 x1
MultiHeadAttention a1     1 1 x0 a 0=64 1=4 2=4096
MultiHeadAttention a2     1 1 x1 b 0=64 1=4 2=4096
BinaryOp           add    2 1 a b r 0=0
Softmax            out    1 1 r y 0=1 1=1
"""


def test_two_attentions_summed_by_one_add_fold_into_one_sum(tmp_path):
    param = NcnnParam.parse(PARALLEL)
    graph = Graph.build(param)
    shapes = infer_shapes(param, graph, {"x": parse_input_shape("10,64")})
    zero = Cost(0, 0)
    decisions = {n: LayerDecision(n, "MultiHeadAttention", "attention", "attention", 4, 2, 1, 0, zero, zero, "test")
                 for n in ("a1", "a2")}
    modelbin = random_modelbin(param, seed=6)
    sliced, sliced_bin, _ = apply(param, modelbin, graph, decisions, shapes, 16)
    # each blob written once, after what it reads: a2's sum starts from a1's output (written before it
    # in the file), a1's stays its own
    sliced_graph = Graph.build(sliced)
    assert [layer.name for layer in sliced if "r" in layer.tops] == ["a2.flexnn_add1"] and "b" not in sliced_graph.producer
    assert sliced_graph.written_at["a"] < sliced_graph.written_at["r"]
    feeds = scaled_inputs("x", (10, 64), 3)
    assert rewrite_error((param, modelbin), (sliced, sliced_bin), tmp_path, feeds, ["y"]) <= TOLERANCE
