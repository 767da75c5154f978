"""SwapNet-style block streaming as a plan the FlexNN runtime runs: the benchmark's baseline (issue 5).

The layers that have weights are grouped, in execution order, into blocks of consecutive layers. The
arena holds two weight regions and one region for activations and intermediates. Block k's weights
lie contiguously in region k % 2, so two blocks are resident: the one computing and the one loading.
Block k's loads wait for the last computation of block k - 2 (the previous user of its region), so
the next block streams in while the current one computes. Activations and intermediates are laid
out by the FlexNN planner at the smallest arena it finds for them alone. When every weight fits
beside them, all weights are pinned (loaded once: SwapNet with nothing to swap).

Blocks are formed greedily: each as long as its weights fit in a region, the two regions being equal
halves of what the budget leaves beside the activation region. The one difference from SwapNet: the
runtime starts a layer's computation once that layer's weights are in (there is no barrier per
block), so this baseline overlaps loading and computing at least as much as swapping whole blocks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping

from ..cli import UserError
from ..planning import (ARENA_MARGIN, DEFAULT_ALIGNMENT, InfeasibleBudget, Placement, Plan, Profile, lower_bound, make_plan,
                        min_feasible_budget)

log = logging.getLogger(__name__)

ALGORITHM = "swapnet"  # the plan's label (planning.PLAN_ALGORITHMS)


def _aligned(size: int) -> int:
    return -(-size // DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT


@dataclass(frozen=True)
class Blocks:
    """Layers with weights in blocks of consecutive layers (execution order), and the bytes each weight
    region needs: region r holds blocks r, r + 2, r + 4, ... one at a time."""

    layers: tuple[tuple[int, ...], ...]
    regions: tuple[int, int]


def layer_weight_bytes(profile: Profile) -> dict[int, int]:
    """Aligned weight bytes of each layer that has weights, in execution order.

    Every weight must die with its layer (prepare records them so): a region is then free again once
    the last layer of the block it holds has computed."""
    out: dict[int, int] = {}
    for t in profile.tensors:
        if t.role != "weight":
            continue
        if t.last_use != t.layer:
            raise UserError(f"layer {t.layer} weight {t.ordinal} is used until step {t.last_use}: "
                            "block streaming takes weights used by their own layer only")
        out[t.layer] = out.get(t.layer, 0) + _aligned(t.size)
    return dict(sorted(out.items()))


def form_blocks(weights: Mapping[int, int], capacity: int) -> Blocks:
    """Consecutive layers, each block's weights at most `capacity` bytes (each layer's alone must fit)."""
    blocks: list[list[int]] = []
    used = 0
    for layer, size in weights.items():
        if size > capacity:
            raise ValueError(f"layer {layer}'s {size} B of weights exceed a block's {capacity} B")
        if not blocks or used + size > capacity:
            blocks.append([])
            used = 0
        blocks[-1].append(layer)
        used += size
    sums = [sum(weights[layer] for layer in block) for block in blocks]
    return Blocks(tuple(tuple(block) for block in blocks), (max(sums[0::2], default=0), max(sums[1::2], default=0)))


def _activation_layout(profile: Profile) -> tuple[dict[int, int], int]:
    """Offsets (by profile tensor index) of the activations and intermediates, and their region's bytes:
    the FlexNN planner's layout of those tensors alone, at the smallest arena it finds for them."""
    index = [i for i, t in enumerate(profile.tensors) if t.role != "weight"]
    alone = Profile(tuple(profile.tensors[i] for i in index), profile.layers)
    plan = make_plan(alone, min_feasible_budget(alone))
    return {i: p.offset for i, p in zip(index, plan.tensors)}, plan.arena_bytes


def swapnet_plan(profile: Profile, budget: int, reserved: int = 0) -> Plan:
    """The block-streaming plan for a runtime budget: its arena plus ARENA_MARGIN plus `reserved` (what
    the runtime's process holds beside the arena: the sidecar's reserved_bytes) fit in `budget`.

    Raises InfeasibleBudget naming the smallest budget this layout accepts: the activation region
    beside every weight, or beside two regions each holding the largest layer's weights, whichever
    is smaller."""
    weights = layer_weight_bytes(profile)
    activations, activation_bytes = _activation_layout(profile)
    total = sum(weights.values())
    beside = ARENA_MARGIN + reserved
    smallest = activation_bytes + min(total, 2 * max(weights.values(), default=0)) + beside
    if budget < smallest:
        raise InfeasibleBudget(budget, smallest, "two blocks of weights do not fit beside the activations")
    room = budget - beside - activation_bytes  # for weights; >= the largest layer's twice, or >= all of them
    pinned = total <= room
    if pinned:
        blocks = Blocks((tuple(weights),) if weights else (), (total, 0))
    else:
        blocks = form_blocks(weights, room // 2 // DEFAULT_ALIGNMENT * DEFAULT_ALIGNMENT)
    region_start = (0, blocks.regions[0])
    start: dict[int, int] = {}  # layer -> offset of its first weight
    load_after: dict[int, int] = {}  # layer -> the computation after which its weights load
    dependencies: list[tuple[int, int]] = []
    for k, block in enumerate(blocks.layers):
        # region k % 2 is free once block k - 2's last layer has computed (weights die with their layer)
        previous = blocks.layers[k - 2][-1] if k >= 2 else -1
        offset = region_start[k % 2]
        for layer in block:
            start[layer], load_after[layer] = offset, previous
            offset += weights[layer]
            if previous >= 0:
                dependencies.append((previous, layer))  # layers ascend: sorted by load
    activation_start = sum(blocks.regions)
    placements: list[Placement] = []
    placed: dict[int, int] = {}  # layer -> bytes of its weights placed so far
    for i, t in enumerate(profile.tensors):
        if t.role == "weight":
            offset = start[t.layer] + placed.get(t.layer, 0)
            placed[t.layer] = placed.get(t.layer, 0) + _aligned(t.size)
            placements.append(Placement(offset, -1 if pinned else load_after[t.layer], pinned))
        else:
            placements.append(Placement(activation_start + activations[i], t.first_use - 1, False))
    log.info("swapnet: %d blocks, weight regions %d + %d B, activations %d B%s", len(blocks.layers), *blocks.regions,
             activation_bytes, ", every weight pinned" if pinned else "")
    arena_bytes = activation_start + activation_bytes
    return Plan(ALGORITHM, budget, DEFAULT_ALIGNMENT, arena_bytes, lower_bound(profile), tuple(placements), tuple(dependencies),
                False)
