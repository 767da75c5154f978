"""The preload-aware planner and its independent checker (flexnn_ncnn._planner via planning.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexnn_ncnn import planning
from flexnn_ncnn.cli import UserError
from flexnn_ncnn.planning import InfeasibleBudget, InvalidPlan, LayerCost, Placement, Profile, TensorUse

from plan_fixtures import chain_profile, profiles

ALIGN = planning.DEFAULT_ALIGNMENT
PROPERTY = settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def plan_bytes(plan: planning.Plan) -> bytes:
    return json.dumps(plan.to_dict(), sort_keys=True).encode()


def assert_tight(profile: Profile, algorithm: str, minimum: int) -> None:
    """`minimum` is feasible and checks; one byte less (the search granularity) is not."""
    planning.check_plan(profile, planning.make_plan(profile, minimum, algorithm))
    with pytest.raises(InfeasibleBudget):
        planning.make_plan(profile, minimum - 1, algorithm)


@PROPERTY
@given(profile=profiles(), scale=st.floats(0.5, 4.0), algorithm=st.sampled_from(planning.ALGORITHMS))
def test_every_plan_passes_the_checker_or_names_a_feasible_budget(profile: Profile, scale: float, algorithm: str) -> None:
    lower = planning.lower_bound(profile)
    budget = max(1, int(lower * scale))
    try:
        plan = planning.make_plan(profile, budget, algorithm)
    except InfeasibleBudget as e:
        assert e.min_feasible_budget > budget
        assert_tight(profile, algorithm, e.min_feasible_budget)
        return
    planning.check_plan(profile, plan)
    assert lower <= plan.arena_bytes <= budget
    assert plan.lower_bound == lower and plan.ratio >= 1.0
    assert plan.algorithm == algorithm


@PROPERTY
@given(profile=profiles(), algorithm=st.sampled_from(planning.ALGORITHMS))
def test_min_feasible_budget_is_feasible_and_one_byte_less_is_not(profile: Profile, algorithm: str) -> None:
    minimum = planning.min_feasible_budget(profile, algorithm)
    assert minimum >= planning.lower_bound(profile)
    assert minimum % ALIGN == 0
    assert_tight(profile, algorithm, minimum)


@settings(max_examples=40, derandomize=True, deadline=None)
@given(profile=profiles(), scale=st.floats(1.0, 3.0), algorithm=st.sampled_from(planning.ALGORITHMS))
def test_same_profile_and_budget_give_a_byte_identical_plan(profile: Profile, scale: float, algorithm: str) -> None:
    budget = int(planning.min_feasible_budget(profile, algorithm) * scale)
    assert plan_bytes(planning.make_plan(profile, budget, algorithm)) == plan_bytes(planning.make_plan(profile, budget, algorithm))


def test_a_tensor_dying_at_step_t_shares_bytes_with_one_born_at_t() -> None:
    # layer 0's activation is last used by layer 0: [0, 1); layer 1's: [1, 2). Half-open: they touch.
    touching = Profile((TensorUse(0, "activation", 0, 4096, 0, 0), TensorUse(1, "activation", 0, 4096, 1, 1)),
                       (LayerCost(0, 1), LayerCost(0, 1)))
    assert planning.lower_bound(touching) == 4096
    plan = planning.make_plan(touching, 4096)
    assert [p.offset for p in plan.tensors] == [0, 0]
    planning.check_plan(touching, plan)
    # one step longer and they overlap in time: sharing is refused by planner and checker alike
    overlapping = Profile((TensorUse(0, "activation", 0, 4096, 0, 1), touching.tensors[1]), touching.layers)
    with pytest.raises(InfeasibleBudget) as e:
        planning.make_plan(overlapping, 4096)
    assert e.value.min_feasible_budget == 8192
    with pytest.raises(InvalidPlan, match="layer 0 activation 0 and layer 1 activation 0 share"):
        planning.check_plan(overlapping, dataclasses.replace(plan, budget=8192, arena_bytes=8192))


def test_intermediates_released_before_the_next_request_share_bytes() -> None:
    """Within a step, an intermediate released before the layer requests the next one lends it its
    bytes (NCNN's per-group buffers of a grouped layer, a kernel's temporaries); one still held does
    not, for the planner, the lower bound and the checker alike."""
    layers = (LayerCost(0, 1), LayerCost(0, 1))
    activations = (TensorUse(0, "activation", 0, 64, 0, 1), TensorUse(1, "activation", 0, 64, 1, 1))
    # four 4 KiB intermediates: 0 held to the end; 1 released before 2 is requested, 2 before 3
    scratch = (TensorUse(1, "intermediate", 0, 4096, 1, 1), TensorUse(1, "intermediate", 1, 4096, 1, 1, released_before=2),
               TensorUse(1, "intermediate", 2, 4096, 1, 1, released_before=3), TensorUse(1, "intermediate", 3, 4096, 1, 1))
    shared = Profile(activations + scratch, layers)
    assert planning.lower_bound(shared) == 2 * 4096 + 2 * 64
    plan = planning.make_plan(shared, planning.min_feasible_budget(shared))
    planning.check_plan(shared, plan)
    assert plan.arena_bytes == 2 * 4096 + 2 * 64
    offsets = [plan.tensors[i].offset for i in range(2, 6)]
    assert offsets[1] == offsets[2] == offsets[3] != offsets[0]
    held = Profile(activations + tuple(dataclasses.replace(t, released_before=-1) for t in scratch), layers)
    assert planning.lower_bound(held) == 4 * 4096 + 2 * 64
    with pytest.raises(InvalidPlan, match="layer 1 intermediate 1 and layer 1 intermediate 2 share"):
        planning.check_plan(held, dataclasses.replace(plan, budget=plan.budget))
    # released before 2 but requested after 1 was: 1 and 0 still overlap in time
    with pytest.raises(InvalidPlan, match="layer 1 intermediate 0 and layer 1 intermediate 1 share"):
        planning.check_plan(shared, dataclasses.replace(plan, tensors=(*plan.tensors[:3], dataclasses.replace(plan.tensors[3], offset=offsets[0]),
                                                                       *plan.tensors[4:])))


@pytest.mark.parametrize("tensor, message", [
    (TensorUse(0, "activation", 0, 64, 0, 0, released_before=1), "only an intermediate can be released within its step"),
    (TensorUse(0, "intermediate", 1, 64, 0, 0, released_before=1), "released before request 1, but only an intermediate can"),
])
def test_a_release_before_its_own_request_or_of_an_activation_is_refused(tensor: TensorUse, message: str) -> None:
    bad = Profile((TensorUse(0, "activation", 0, 64, 0, 0), tensor) if tensor.role != "activation" else (tensor,), (LayerCost(0, 0),))
    with pytest.raises(UserError, match=message):
        planning.make_plan(bad, 10**6)


def test_a_weight_is_loaded_into_bytes_freed_by_the_layer_before_its_own() -> None:
    # at the tight budget a weight can only take bytes whose tensor dies after the previous layer:
    # it loads right after that computation, and the dependency says so
    profile = chain_profile()
    minimum = planning.min_feasible_budget(profile)
    plan = planning.make_plan(profile, minimum)
    planning.check_plan(profile, plan)
    assert plan.dependencies, "a tight plan reuses bytes, so some load waits for a computation"
    for comp, load in plan.dependencies:
        assert 0 <= comp < load


@pytest.mark.parametrize("tensors, steps, algorithm1_min", [
    # four activations whose lives nest: the layer-order pass (activations at whichever end keeps
    # their side lower) leaves a gap the last one does not fit, and needs 13,312 B, as algorithm1
    # still does; FlexNN lays them out greedily there and fits the peak of step 3 (4096 + 4096 + 3072)
    ([(0, 4096, 3), (1, 2048, 2), (2, 4096, 3), (3, 3072, 3)], 4, 13312),
    # by area (bytes x steps) the 3072 B activation of steps 3-4 is placed before the 4096 B one of
    # step 4, which then lands above it (10,240 B), and the layer-order pass needs 8192 B; by size,
    # the largest first, all four pack at the peak of steps 3 and 4 (7168 B): each order is tried
    ([(0, 3072, 3), (1, 1024, 3), (3, 3072, 4), (4, 4096, 4)], 5, 8192),
], ids=["nested", "by-size"])
def test_the_smallest_budget_packs_at_the_live_bytes_peak(tensors, steps: int, algorithm1_min: int) -> None:
    # (layer, bytes, last use): each activation made by its layer
    profile = Profile(tuple(TensorUse(layer, "activation", 0, size, layer, last) for layer, size, last in tensors),
                      (LayerCost(1.0, 1.0),) * steps)
    assert planning.min_feasible_budget(profile, "algorithm1") == algorithm1_min
    minimum = planning.min_feasible_budget(profile)
    assert minimum == planning.lower_bound(profile) < algorithm1_min
    assert_tight(profile, "flexnn", minimum)


def test_a_generous_budget_preloads_with_algorithm1_and_pins_with_flexnn() -> None:
    profile = chain_profile()
    weights = [i for i, t in enumerate(profile.tensors) if t.role == "weight"]
    budget = 10 * planning.lower_bound(profile) + sum(t.size for t in profile.tensors)
    baseline = planning.make_plan(profile, budget, "algorithm1")
    assert not baseline.pinned_weights
    assert all(baseline.tensors[i].load_after == -1 for i in weights), "everything fits at the start"
    assert not baseline.dependencies
    flexnn = planning.make_plan(profile, budget, "flexnn")
    assert flexnn.pinned_weights == weights
    assert planning.expected_stall_us(profile, flexnn) == 0.0  # nothing left to load
    for plan in (baseline, flexnn):
        planning.check_plan(profile, plan)


def test_flexnn_packs_the_resnet_like_synthetic_profile_no_worse_than_algorithm1() -> None:
    from flexnn_ncnn.bench import synthetic

    profile = synthetic.resnet152()
    assert planning.min_feasible_budget(profile, "flexnn") <= planning.min_feasible_budget(profile, "algorithm1")


def test_an_invalid_profile_is_a_user_error_not_an_infeasible_budget() -> None:
    bad = Profile((TensorUse(0, "intermediate", 0, 64, 0, 1),), (LayerCost(0, 0), LayerCost(0, 0)))
    with pytest.raises(UserError, match="layer 0 intermediate 0: an intermediate must die with its layer") as e:
        planning.make_plan(bad, 10**6)
    assert not isinstance(e.value, InfeasibleBudget)
    with pytest.raises(UserError, match="unknown planning algorithm"):
        planning.make_plan(chain_profile(), 10**6, "greedy")


# --- the checker catches hand-corrupted plans, one test per violation ---------------------------

@pytest.fixture(scope="module")
def tight() -> tuple[Profile, planning.Plan]:
    profile = chain_profile()
    plan = planning.make_plan(profile, planning.min_feasible_budget(profile, "algorithm1"), "algorithm1")
    planning.check_plan(profile, plan)
    return profile, plan


def replace_tensor(plan: planning.Plan, index: int, **changes: object) -> planning.Plan:
    tensors = list(plan.tensors)
    tensors[index] = dataclasses.replace(tensors[index], **changes)
    return dataclasses.replace(plan, tensors=tuple(tensors))


def index_of(profile: Profile, layer: int, role: str) -> int:
    return next(i for i, t in enumerate(profile.tensors) if t.layer == layer and t.role == role)


def test_checker_catches_an_overlap(tight: tuple[Profile, planning.Plan]) -> None:
    profile, plan = tight
    weight, scratch = index_of(profile, 3, "weight"), index_of(profile, 3, "intermediate")
    bad = replace_tensor(plan, scratch, offset=plan.tensors[weight].offset)
    with pytest.raises(InvalidPlan, match=r"layer 3 (weight|intermediate) 0 and layer 3 (weight|intermediate) 0 share bytes"):
        planning.check_plan(profile, bad)


def test_checker_catches_a_plan_over_budget(tight: tuple[Profile, planning.Plan]) -> None:
    profile, plan = tight
    with pytest.raises(InvalidPlan, match="exceeds the budget"):
        planning.check_plan(profile, dataclasses.replace(plan, budget=plan.arena_bytes - 1))
    with pytest.raises(InvalidPlan, match="layer 2 activation 0 at .* lies outside the arena"):
        planning.check_plan(profile, replace_tensor(plan, index_of(profile, 2, "activation"), offset=plan.arena_bytes))


def test_checker_catches_a_late_load(tight: tuple[Profile, planning.Plan]) -> None:
    profile, plan = tight
    with pytest.raises(InvalidPlan, match="layer 4 weight 0 loads after comp\\(4\\), too late for its first use by layer 4"):
        planning.check_plan(profile, replace_tensor(plan, index_of(profile, 4, "weight"), load_after=4))


def test_checker_catches_a_load_before_the_inference_and_a_moved_activation(tight: tuple[Profile, planning.Plan]) -> None:
    profile, plan = tight
    with pytest.raises(InvalidPlan, match="layer 4 weight 0 loads after comp\\(-2\\), before the inference starts"):
        planning.check_plan(profile, replace_tensor(plan, index_of(profile, 4, "weight"), load_after=-2))
    with pytest.raises(InvalidPlan, match="layer 4 activation 0 is claimed after comp\\(2\\), not at its first use 4"):
        planning.check_plan(profile, replace_tensor(plan, index_of(profile, 4, "activation"), load_after=2))
    with pytest.raises(InvalidPlan, match="layer 4 activation 0 is pinned, but only weights can be"):
        planning.check_plan(profile, replace_tensor(plan, index_of(profile, 4, "activation"), pinned=True))


def test_checker_catches_an_unsound_dependency(tight: tuple[Profile, planning.Plan]) -> None:
    profile, plan = tight
    comp, load = plan.dependencies[-1]
    missing = dataclasses.replace(plan, dependencies=plan.dependencies[:-1])
    with pytest.raises(InvalidPlan, match=rf"load\({load}\) of layer {load} weight 0 may overwrite layer \d+ \w+ \d+ while comp\(\d+\) still uses it"):
        planning.check_plan(profile, missing)
    too_early = dataclasses.replace(plan, dependencies=plan.dependencies[:-1] + ((comp - 1, load),))
    with pytest.raises(InvalidPlan, match="may overwrite"):
        planning.check_plan(profile, too_early)
    backwards = dataclasses.replace(plan, dependencies=(*plan.dependencies, (load, load)))
    with pytest.raises(InvalidPlan, match=rf"dependency comp\({load}\) -> load\({load}\) is out of order"):
        planning.check_plan(profile, backwards)


def test_checker_catches_weights_of_one_layer_loaded_apart() -> None:
    profile = Profile((TensorUse(0, "activation", 0, 64, 0, 1), TensorUse(1, "weight", 0, 64, 1, 1), TensorUse(1, "weight", 1, 64, 1, 1)),
                      (LayerCost(0, 1), LayerCost(1, 1)))
    plan = planning.make_plan(profile, 10**4, "algorithm1")
    bad = replace_tensor(plan, 2, load_after=0)
    with pytest.raises(InvalidPlan, match="layer 1 weight 1 loads after comp\\(0\\), another weight of its layer after comp\\(-1\\)"):
        planning.check_plan(profile, bad)


def test_plan_and_profile_survive_their_json_form(tight: tuple[Profile, planning.Plan]) -> None:
    profile, plan = tight
    pinned = planning.make_plan(profile, 10**7)
    for p in (plan, pinned):
        assert planning.Plan.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    assert Profile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile
    assert pinned.pinned_weights and all(isinstance(p, Placement) for p in pinned.tensors)


def test_a_missing_planner_module_tells_how_to_build_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import flexnn_ncnn

    planning._module.cache_clear()
    monkeypatch.setitem(sys.modules, "flexnn_ncnn._planner", None)  # makes the import fail
    monkeypatch.delattr(flexnn_ncnn, "_planner", raising=False)
    try:
        with pytest.raises(UserError, match=r"the planner module is not built .*python -m flexnn_ncnn.build --target host"):
            planning.make_plan(chain_profile(), 10**6)
    finally:
        planning._module.cache_clear()
