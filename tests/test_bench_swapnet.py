"""The SwapNet-style baseline (bench/swapnet.py): block-streaming plans on a hand-made profile (blocks
alternate weight regions, each block's loads wait for block k - 2, the checker accepts every plan, the
smallest budget it names is accepted and one byte less is not), and the benchmark's child running the
chain of equal layers through the runtime at that smallest budget and at a generous one, outputs equal
to stock NCNN, memory within the budget. No timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flexnn_ncnn import planning
from flexnn_ncnn.bench import harness, swapnet
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.planning import ARENA_MARGIN, LayerCost, Profile, TensorUse
from flexnn_ncnn.prepare import RuntimeOptions, prepare_model
from helpers import run_module
from test_runtime import _flagged, _floats

# per computing step 1..6: the sizes of its weights (a kernel, a bias); step 0 feeds the input, step 7 the outputs
WEIGHTS = {1: (1000, 40), 2: (3000, 40), 3: (500, 40), 4: (2000, 40), 5: (1500, 40), 6: (800, 40)}


def _aligned(n: int) -> int:
    return -(-n // 64) * 64


def hand_made_profile(weights: dict[int, tuple[int, ...]] = WEIGHTS) -> Profile:
    """A chain: each step reads the previous step's output and has its own weights and one scratch buffer."""
    steps = max(weights) + 2
    tensors = [TensorUse(0, "activation", 0, 4096, 0, 1)]
    for layer in range(1, steps - 1):
        tensors += [TensorUse(layer, "weight", i, size, layer, layer) for i, size in enumerate(weights.get(layer, ()))]
        tensors += [TensorUse(layer, "activation", 0, 4096, layer, layer + 1),
                    TensorUse(layer, "intermediate", 0, 700 * layer, layer, layer)]
    return Profile(tuple(tensors), tuple(LayerCost(10.0, 20.0) for _ in range(steps)))


def smallest_budget(profile: Profile) -> int:
    with pytest.raises(planning.InfeasibleBudget) as info:
        swapnet.swapnet_plan(profile, 0)
    return info.value.min_feasible_budget


def layer_weights(profile: Profile, plan: planning.Plan, layer: int) -> list[tuple[planning.Placement, int]]:
    return [(p, t.size) for t, p in zip(profile.tensors, plan.tensors) if t.role == "weight" and t.layer == layer]


def test_blocks_alternate_regions_and_wait_for_block_k_minus_2() -> None:
    profile = hand_made_profile()
    layer_bytes = swapnet.layer_weight_bytes(profile)
    assert list(layer_bytes) == [1, 2, 3, 4, 5, 6] and layer_bytes[2] == _aligned(3000) + _aligned(40)
    smallest = smallest_budget(profile)
    # streaming: two regions each as large as the largest layer's weights
    activations = smallest - ARENA_MARGIN - 2 * layer_bytes[2]
    assert activations > 0
    for budget in (smallest, smallest + 1200, smallest + 3000):  # all below every weight beside the activations
        plan = swapnet.swapnet_plan(profile, budget)
        planning.check_plan(profile, plan)
        assert plan.algorithm == "swapnet" and plan.budget == budget
        assert plan.arena_bytes + ARENA_MARGIN <= budget and not plan.pinned_weights
        blocks = swapnet.form_blocks(layer_bytes, (budget - ARENA_MARGIN - activations) // 2 // 64 * 64)
        assert [layer for block in blocks.layers for layer in block] == [1, 2, 3, 4, 5, 6]
        region_start = (0, blocks.regions[0])
        expected_dependencies = []
        for k, block in enumerate(blocks.layers):
            region = range(region_start[k % 2], region_start[k % 2] + blocks.regions[k % 2])
            previous = blocks.layers[k - 2][-1] if k >= 2 else -1
            for layer in block:
                for placement, size in layer_weights(profile, plan, layer):
                    # block k lies in region k % 2, and loads once block k - 2 has computed
                    assert placement.offset in region and placement.offset + size <= region.stop
                    assert placement.load_after == previous
                if previous >= 0:
                    expected_dependencies.append((previous, layer))
        assert list(plan.dependencies) == expected_dependencies
        # weights below the activation region, which the FlexNN planner laid out on its own
        assert all(p.offset >= sum(blocks.regions) for t, p in zip(profile.tensors, plan.tensors) if t.role != "weight")
    # at the smallest budget a block holds the largest layer's 3,072 B: blocks (1), (2), (3, 4), (5, 6)
    assert swapnet.form_blocks(layer_bytes, layer_bytes[2]).layers == ((1,), (2,), (3, 4), (5, 6))
    assert swapnet.swapnet_plan(profile, smallest).dependencies == ((1, 3), (1, 4), (2, 5), (2, 6))


def test_smallest_budget_is_accepted_and_one_byte_less_is_not() -> None:
    for weights in (WEIGHTS, {1: (100,), 2: (20000,), 3: (100,)}):  # streaming; one dominant layer (every weight pinned)
        profile = hand_made_profile(weights)
        smallest = smallest_budget(profile)
        planning.check_plan(profile, swapnet.swapnet_plan(profile, smallest))
        with pytest.raises(planning.InfeasibleBudget) as info:
            swapnet.swapnet_plan(profile, smallest - 1)
        assert info.value.min_feasible_budget == smallest and info.value.budget == smallest - 1
    # one dominant layer: the two regions would exceed all the weights, so the smallest budget pins them
    plan = swapnet.swapnet_plan(profile, smallest)
    assert plan.pinned_weights and not plan.dependencies
    assert all(p.load_after == -1 for t, p in zip(profile.tensors, plan.tensors) if t.role == "weight")


def test_a_generous_budget_pins_every_weight_and_labels_round_trip() -> None:
    profile = hand_made_profile()
    plan = swapnet.swapnet_plan(profile, 10**6)
    planning.check_plan(profile, plan)
    assert len(plan.pinned_weights) == sum(len(w) for w in WEIGHTS.values()) and not plan.dependencies
    assert planning.Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


def test_a_weight_outliving_its_layer_is_refused() -> None:
    profile = hand_made_profile()
    tensors = list(profile.tensors)
    tensors[1] = TensorUse(1, "weight", 0, 1000, 1, 3)
    with pytest.raises(UserError, match="layer 1 weight 0 is used until step 3"):
        swapnet.swapnet_plan(Profile(tuple(tensors), profile.layers), 10**6)


# four equal InnerProducts: whatever kernels and packing the host picks, every layer's weights are
# alike, so all of them (4x) exceed two layers' (2x) and the smallest budget streams blocks
CHAIN_PARAM = """7767517
5 5
Input            data   0 1 data 0=64
InnerProduct     fc1    1 1 data h1 0=64 1=1 2=4096 9=1
InnerProduct     fc2    1 1 h1 h2 0=64 1=1 2=4096 9=1
InnerProduct     fc3    1 1 h2 h3 0=64 1=1 2=4096 9=1
InnerProduct     fc4    1 1 h3 output 0=64 1=1 2=4096
"""


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chain, described as `python -m flexnn_ncnn.models` writes a model."""
    folder = tmp_path_factory.mktemp("chain")
    rng = np.random.default_rng(4)
    (folder / "chain.param").write_text(CHAIN_PARAM)
    (folder / "chain.bin").write_bytes(b"".join(_flagged(rng, 4096) + _floats(rng, 64) for _ in range(4)))
    description = {"name": "chain", "param": "chain.param", "bin": "chain.bin", "storage": "fp32",
                   "inputs": [{"name": "data", "shape": [64]}], "outputs": ["output"]}
    path = folder / "chain.json"
    path.write_text(json.dumps(description))
    return path


def _child(model: Path, budget: int, outputs: Path) -> dict:
    proc = run_module("bench.flexnn_child", "--model", str(model), "--mode", "swapnet", "--budget", str(budget),
                      "--threads", "1", "--warmup", "1", "--loops", "2", "--outputs", str(outputs))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_child_streams_blocks_through_the_runtime(chain: Path, tmp_path: Path) -> None:
    from flexnn_ncnn.models import read_description
    refused = _child(chain, 1, tmp_path / "refused.npz")
    assert refused["config"] == "swapnet" and refused["budget"] == 1 and "latency_ms" not in refused
    smallest = refused["min_feasible_budget"]
    assert f"the smallest feasible budget is {smallest:,} B" in refused["infeasible"]
    oracle = harness.oracle_outputs(read_description(chain), 0)
    # every child's prepare recalls the same measured uncounted RSS (flexnn_ncnn/measured.py)
    for budget in (smallest, 4 * smallest):
        record = _child(chain, budget, tmp_path / f"{budget}.npz")
        assert record["config"] == "swapnet" and record["budget"] == budget and record["plan_ms"] >= 0
        assert "slice_ms" not in record and record["prepare_ms"] > 0  # the unsliced model, prepared as on-demand's
        assert 0 < record["counted_bytes"] <= record["counted_limit_bytes"] < budget
        with np.load(record["outputs_npz"]) as npz:
            assert harness.relative_error(oracle, {k: npz[k] for k in npz.files}) <= 1e-4
    # the same layout from the same profile (nothing beside the arena: the child's budgets also held the
    # uncounted RSS): at its smallest budget the blocks stream, at four times it all is pinned
    description = read_description(chain)
    profile = prepare_model(description["param"], description["bin"], None, options=RuntimeOptions(threads=1, fp16=False)).profile
    alone = smallest_budget(profile)
    streaming, pinned = swapnet.swapnet_plan(profile, alone), swapnet.swapnet_plan(profile, 4 * alone)
    assert streaming.dependencies and not streaming.pinned_weights
    assert not pinned.dependencies and len(pinned.pinned_weights) == sum(t.role == "weight" for t in profile.tensors)
