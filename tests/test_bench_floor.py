"""The activation floor (bench/floor.py) on a hand-built profile, and how the benchmark sets it beside
the smallest budget FlexNN held (harness.floor_summary)."""

from __future__ import annotations

from flexnn_ncnn.bench.floor import activation_floor
from flexnn_ncnn.bench.harness import Summary, floor_summary
from flexnn_ncnn.planning import LayerCost, Profile, TensorUse


def _tensor(layer: int, role: str, size: int, last_use: int, ordinal: int = 0) -> TensorUse:
    return TensorUse(layer, role, ordinal, size, layer, last_use)


def test_the_floor_is_the_largest_sum_of_activations_alive_at_one_step() -> None:
    # live activations per step: 0: a | 1: a+b | 2: a+b | 3: b+c | 4: c+d | 5: d
    profile = Profile((
        _tensor(0, "activation", 100, 2),        # a: steps [0, 3)
        _tensor(1, "weight", 10_000, 1),         # weights never count, however large
        _tensor(1, "activation", 200, 3),        # b: steps [1, 4)
        _tensor(2, "intermediate", 5_000, 2),    # nor does scratch
        _tensor(3, "activation", 50, 4),         # c: [3, 5), begins where a ended (half-open: never together)
        _tensor(4, "activation", 400, 5),        # d: [4, 6)
    ), tuple(LayerCost(1.0, 1.0) for _ in range(6)))

    # c + d at step 4; not the sum of all activations (750), not a + b + c (350: a alive one step too long)
    assert activation_floor(profile) == 450


def test_an_input_read_in_place_counts_over_the_steps_ncnn_holds_it() -> None:
    # the caller's array holds no arena bytes (no step-0 tensor), yet it is an activation of the model
    profile = Profile((
        _tensor(1, "activation", 200, 2),        # b: steps [1, 3)
        _tensor(2, "activation", 300, 3),        # c: steps [2, 4)
    ), tuple(LayerCost(1.0, 1.0) for _ in range(5)))
    assert activation_floor(profile) == 500
    assert activation_floor(profile, ((1000, 1),)) == 1200  # input + b at step 1; gone by step 2
    assert activation_floor(profile, ((1000, 2),)) == 1500  # held through step 2: input + b + c
    assert activation_floor(profile, ((0, -1),)) == 500  # copied into the arena: the profile's own tensor


def test_a_profile_without_activations_has_no_floor() -> None:
    profile = Profile((_tensor(1, "weight", 64, 1),), (LayerCost(0.0, 0.0),) * 3)
    assert activation_floor(profile) == 0


def _summary(config: str, family: str, budget: int | None, ok: bool = True, counted: int | None = None,
             floor: int | None = None, peak: int | None = None) -> Summary:
    return Summary(config, family, budget, ok, runs=1, counted_bytes=counted, activation_floor_bytes=floor,
                   peak_over_idle_bytes=peak)


def test_the_model_floor_is_the_unsliced_run_s_and_the_budget_the_smallest_held() -> None:
    summaries = [
        _summary("ncnn-default", "ncnn-default", None),
        _summary("flexnn@1MB", "flexnn", 10**6, ok=False, floor=900_000),        # wrong output: not held
        _summary("flexnn@2MB", "flexnn", 2 * 10**6, counted=2_100_000, floor=900_000),  # over its budget: not held
        # counted within it, but the process's peak RSS over idle was not: not held
        _summary("flexnn@2.5MB", "flexnn", 2_500_000, counted=2_000_000, floor=900_000, peak=2_600_000),
        _summary("flexnn@3MB", "flexnn", 3 * 10**6, counted=2_900_000, floor=800_000, peak=2_950_000),
        _summary("flexnn@4MB", "flexnn", 4 * 10**6, counted=3_000_000, floor=700_000),
        _summary("flexnn-no-preload@2.5MB", "flexnn-no-preload", 2_500_000, counted=2_000_000),  # not FlexNN itself
        _summary("on-demand", "on-demand", None, counted=5 * 10**6, floor=600_000),
    ]
    floor = floor_summary(summaries)
    assert (floor.activation_floor_bytes, floor.min_budget, floor.min_budget_config) == (600_000, 3 * 10**6, "flexnn@3MB")
    assert floor.to_json()["min_budget_over_floor"] == 5.0


def test_without_an_unsliced_run_the_floor_is_unknown() -> None:
    floor = floor_summary([_summary("flexnn@3MB", "flexnn", 3 * 10**6, counted=10**6, floor=800_000)])
    assert floor.activation_floor_bytes is None and floor.min_budget == 3 * 10**6 and floor.min_budget_over_floor is None


def test_the_searched_budget_is_preferred_and_the_grid_s_smallest_stands_in_when_it_did_not_hold() -> None:
    searched = Summary("flexnn@min", "flexnn", 2_200_000, True, runs=1, counted_bytes=2_000_000, peak_over_idle_bytes=2_100_000,
                       latency_median_ms=12.0, ratio_to_default=1.5, smallest=True,
                       min_search={"probes": [[1_000_000, False], [2_200_000, True]], "seconds": 3.5})
    grid = [_summary("flexnn@2MB", "flexnn", 2 * 10**6, counted=1_900_000, peak=1_950_000),  # held below the search's
            _summary("flexnn@3MB", "flexnn", 3 * 10**6, counted=2_000_000, peak=2_000_000),
            _summary("on-demand", "on-demand", None, floor=10**6)]
    floor = floor_summary([searched, *grid])
    assert (floor.min_budget, floor.min_budget_config, floor.found_by, floor.search_held) == (2_200_000, "flexnn@min", "search", True)
    assert (floor.latency_median_ms, floor.ratio_to_default, floor.peak_over_idle_bytes) == (12.0, 1.5, 2_100_000)
    assert (floor.search_probes, floor.search_seconds, floor.min_budget_over_floor) == (2, 3.5, 2.2)

    over = Summary("flexnn@min", "flexnn", 2_200_000, True, runs=1, counted_bytes=2_000_000, peak_over_idle_bytes=2_300_000,
                   smallest=True, min_search={"probes": [[2_200_000, True]], "seconds": 1.0})  # its peak RSS exceeded it
    floor = floor_summary([over, *grid])
    assert (floor.min_budget, floor.min_budget_config, floor.found_by, floor.search_held) == (2 * 10**6, "flexnn@2MB", "grid", False)
    assert floor.search_probes is None and floor.peak_over_idle_bytes == 1_950_000
    floor = floor_summary([over, grid[2]])
    assert (floor.min_budget, floor.found_by, floor.search_held) == (None, None, False)
