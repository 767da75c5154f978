"""Batched blobs (NCNN_BATCH): a blob of n > 1 items, which a Reshape with batch axes makes (pnnx writes
them, e.g. for a GPT-2 decoding one token), reaches layers that do not take batches. NCNN's Net runs
such a layer once per item; in the runtime that loop is the layer's one step (PlannedLayer), so
prepare records each layer once, the plan holds the items' buffers in that step, and the outputs
equal stock NCNN's, from the generous budget to the tightest, and after `slice --budget min`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import Session, sidecar
from flexnn_ncnn.ncnn_model.stock import run_stock
from flexnn_ncnn.prepare import RuntimeOptions, prepare_model, write_plan_file
from helpers import assert_counted_within_budget, run_module
from model_helpers import relative_error, written_text_model
from test_runtime import ModelCase, assert_close, budgets_for

pytest.importorskip("ncnn")

ITEMS, WIDTH = 6, 8
# rows of the input become a batch of 1-D items (Reshape's output batch axis 0); InnerProduct, Softmax
# and Permute run per item; the last Reshape takes the batch back into rows
BATCHED = f"""7767517
6 6
Input       in0        0 1 in0 0={WIDTH} 1={ITEMS}
Reshape     tobatch    1 1 in0 a 0={WIDTH} 1={ITEMS} 12=0 13=0
InnerProduct fc        1 1 a b 0=16 1=1 2={16 * WIDTH}
Softmax     sm         1 1 b c 0=0
Permute     pm         1 1 c d 0=0
Reshape     frombatch  1 1 d out 0=16 1={ITEMS} 12=0
"""


@pytest.fixture(scope="module")
def batched(tmp_path_factory: pytest.TempPathFactory) -> ModelCase:
    folder = tmp_path_factory.mktemp("batched")
    written_text_model(BATCHED, (1, ITEMS, WIDTH), seed=3, folder=folder)
    x = np.random.default_rng(0).standard_normal((ITEMS, WIDTH)).astype(np.float32)
    param, bin_ = folder / "a.param", folder / "a.bin"
    return ModelCase("batched", param, bin_, x, run_stock(param, bin_, {"in0": x}, ["out"])["out"])


def test_a_layer_run_per_item_of_a_batch_is_one_step(batched: ModelCase, tmp_path: Path) -> None:
    content = prepare_model(batched.param, batched.bin, 1 << 30, options=RuntimeOptions(fp16=False))  # stock's fp32
    path = tmp_path / f"batched{sidecar.SUFFIX}"
    write_plan_file(content, path)
    assert sorted(content.schedule.order) == list(range(1, 6))  # every layer but the Input, once
    assert_close(batched.ref.sum(axis=1), np.ones(ITEMS, dtype=np.float32))  # a softmax per item
    for label, budget in budgets_for(content).items():
        session = Session(path, budget=budget)
        for seed in range(3):
            x = np.random.default_rng(seed).standard_normal((ITEMS, WIDTH)).astype(np.float32) * (1 + seed)
            ref = run_stock(batched.param, batched.bin, {"in0": x}, ["out"])["out"]
            assert_close(session.run({"in0": x})["out"], ref)
        assert_counted_within_budget(session.stats())


def test_a_one_token_gpt2_slices_and_runs_equal_to_stock_ncnn(tmp_path: Path) -> None:
    """pnnx exports a GPT-2 decoding one token with batched blobs in its attention (each head an item)."""
    from flexnn_ncnn.zoo import gpt2
    from flexnn_ncnn.zoo.export import export_ncnn
    import torch
    torch.manual_seed(0)
    param, bin_ = export_ncnn(gpt2(seq_len=1, vocab=50, context=8, dim=64, depth=2, heads=4), (1, 1, 64), tmp_path, "g")
    out = tmp_path / "out"
    proc = run_module("slice", str(param), "--input-shape", "1,1,64", "--budget", "min", "--threads", "2", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    session = Session(out / "g.flexnn.plan.json")
    for seed in range(3):
        x = {"in0": np.random.default_rng(seed).standard_normal((1, 64)).astype(np.float32) * (1 + seed)}
        got = session.run(x)
        ref = run_stock(param, bin_, x, list(got))
        assert max(relative_error(ref[b], got[b]) for b in got) < 1e-4
    assert_counted_within_budget(session.stats())
