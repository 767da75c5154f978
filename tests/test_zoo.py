"""The plain-torch zoo is faithful: at default size each model has exactly the parameter count of
the reference implementation (torchvision's vgg19, resnet50, resnet152, vit_b_16)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from flexnn_ncnn.zoo import resnet, vgg19, vit  # noqa: E402


@pytest.mark.parametrize("make, params", [
    (vgg19, 143_667_240),
    (lambda: resnet(50), 25_557_032),
    (lambda: resnet(152), 60_192_808),
    (vit, 86_567_656),
])
def test_default_size_matches_reference_parameter_count(make, params):
    with torch.device("meta"):  # shapes only, no memory
        model = make()
    assert sum(p.numel() for p in model.parameters()) == params


def test_small_instances_keep_the_output_shape():
    torch.manual_seed(0)
    x = torch.rand(2, 3, 32, 32)
    assert vgg19(width=1 / 8, fc_dim=32, pool_size=1, num_classes=7)(x).shape == (2, 7)
    assert resnet(50, width=8, num_classes=7)(x).shape == (2, 7)
    assert vit(image_size=32, patch=8, dim=32, depth=1, heads=2, mlp_dim=64, num_classes=7)(x).shape == (2, 7)
