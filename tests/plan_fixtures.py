"""Profiles for the planner, sidecar and plan CLI tests: hand-made cases and a hypothesis strategy."""

from __future__ import annotations

from hypothesis import strategies as st

from flexnn_ncnn.planning import LayerCost, Profile, TensorUse


def chain_profile(layers: int = 6, weight: int = 4096, activation: int = 2048, scratch: int = 1024) -> Profile:
    """A chain: layer l loads one weight, reads layer l-1's activation, writes its own, uses one scratch."""
    tensors = []
    for l in range(layers):
        if l > 0:
            tensors.append(TensorUse(l, "weight", 0, weight, l, l))
            tensors.append(TensorUse(l, "intermediate", 0, scratch, l, l))
        tensors.append(TensorUse(l, "activation", 0, activation, l, min(l + 1, layers - 1)))
    return Profile(tuple(tensors), tuple(LayerCost(load_us=weight / 100, compute_us=50.0) for _ in range(layers)))


@st.composite
def profiles(draw: st.DrawFn, max_layers: int = 10) -> Profile:
    """Random valid profiles: per layer 0-3 weights (sometimes shared with later layers), 0-2
    activations (the first layer has one) living 1-4 layers, 0-3 intermediates, each held to its
    layer's end or released before a later one is requested."""
    layer_count = draw(st.integers(1, max_layers))
    sizes = st.integers(1, 20_000)
    tensors = []
    for l in range(layer_count):
        reach = st.integers(l, min(layer_count - 1, l + 3))
        for o in range(draw(st.integers(0, 3))):
            last = draw(st.one_of(st.just(l), reach))
            tensors.append(TensorUse(l, "weight", o, draw(sizes), l, last))
        for o in range(draw(st.integers(1 if l == 0 else 0, 2))):
            tensors.append(TensorUse(l, "activation", o, draw(sizes), l, draw(reach)))
        count = draw(st.integers(0, 3))
        for o in range(count):
            released = draw(st.one_of(st.just(-1), st.integers(o + 1, count)))
            tensors.append(TensorUse(l, "intermediate", o, draw(sizes), l, l, released_before=released))
    costs = st.floats(0, 1000, allow_nan=False)
    layers = tuple(LayerCost(draw(costs), draw(costs)) for _ in range(layer_count))
    return Profile(tuple(tensors), layers)


def chain_sidecar(budget: int = 64_000, layers: int = 6):
    """A valid sidecar around chain_profile(layers) planned at `budget`, as if for this checkout's build."""
    from flexnn_ncnn import planning, sidecar

    profile = chain_profile(layers)
    computed = layers - 2
    return sidecar.Sidecar(
        model=sidecar.Model("chain.flexnn.param", "a" * 64, "chain.flexnn.bin", "4096:" + "b" * 64, "", ""),
        build=sidecar.Build.current(),
        target=sidecar.Target("x86_64", "avx,fma,f16c,avx2", 1 << 20, 2, True, True, True, False),
        inputs={"data": [16, 8, 4]},  # w, h, c: the 2048 B of chain_profile()'s input copy
        # model layer 0 is Input; layers 1..computed compute at those steps (the first and last steps:
        # inputs in, outputs out)
        schedule=sidecar.Schedule(("output",), tuple(range(1, computed + 1)),
                                  ((0, 0),) + tuple((4096 * i, 4096 * (i + 1)) for i in range(computed)), (0,) * (computed + 1),
                                  ((0, -1),)),  # the input copied into the arena
        profile=profile,
        plan=planning.make_plan(profile, budget),
    )
