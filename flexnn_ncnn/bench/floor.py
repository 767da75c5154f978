"""The activation floor of a profiled model: the most bytes of activations that must coexist at any step.

Slicing cuts weights and intermediates, never a layer's output blob (a weights-sliced layer's pieces
are concatenated back into it), so on the profile of the model as given no slicing can run in less
memory than this (a sliced model's own profile can have a higher floor: a sliced layer's pieces
coexist with the blob they are concatenated into). Measured on the profile the runtime
recorded (docs/PLAN_FORMAT.md): requested sizes, without the arena's alignment, over the half-open
lifetimes [first_use, last_use + 1).
"""

from __future__ import annotations

from itertools import accumulate

from ..planning import Profile


def activation_floor(profile: Profile) -> int:
    """max over steps of the summed size of the activations alive at that step (0 without activations)."""
    delta = [0] * (len(profile.layers) + 1)  # +size where a lifetime begins, -size where it ends
    for t in profile.tensors:
        if t.role == "activation":
            delta[t.first_use] += t.size
            delta[t.last_use + 1] -= t.size
    return max(accumulate(delta), default=0)
