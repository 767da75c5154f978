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
from typing import Sequence

from ..planning import Profile


def activation_floor(profile: Profile, input_uses: Sequence[tuple[int, int]] = ()) -> int:
    """max over steps of the summed size of the activations alive at that step (0 without activations),
    the inputs NCNN reads in place (the schedule's input_uses: bytes, last step held) among them: the
    caller's arrays are activations of the model, wherever they lie."""
    delta = [0] * (len(profile.layers) + 1)  # +size where a lifetime begins, -size where it ends
    lifetimes = [(t.size, t.first_use, t.last_use) for t in profile.tensors if t.role == "activation"]
    for size, first, last in lifetimes + [(size, 0, last) for size, last in input_uses if size]:
        delta[first] += size
        delta[last + 1] -= size
    return max(accumulate(delta), default=0)
