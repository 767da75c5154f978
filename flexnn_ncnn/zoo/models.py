"""Plain-torch definitions of the evaluation architectures (torchvision is not available).

Each follows its paper's structure; width, depth and resolution are parameters so tests can build
small instances of the same shape: VGG-19 (Simonyan & Zisserman, config E), ResNet with bottleneck
blocks (He et al.; ResNet-50/152 by depth), an MLP, and a ViT (Dosovitskiy et al., pre-norm encoder).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

VGG19_CONFIG = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M")
RESNET50_BLOCKS = (3, 4, 6, 3)
RESNET152_BLOCKS = (3, 8, 36, 3)


class VGG(nn.Module):
    def __init__(self, config: Sequence[int | str] = VGG19_CONFIG, width: float = 1.0, fc_dim: int = 4096,
                 pool_size: int = 7, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for v in config:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                c_out = max(int(int(v) * width), 1)
                layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(inplace=True)]
                c_in = c_out
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((pool_size, pool_size))
        self.classifier = nn.Sequential(
            nn.Linear(c_in * pool_size * pool_size, fc_dim), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(fc_dim, fc_dim), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(fc_dim, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def vgg19(width: float = 1.0, fc_dim: int = 4096, pool_size: int = 7, num_classes: int = 1000) -> VGG:
    return VGG(VGG19_CONFIG, width, fc_dim, pool_size, num_classes)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, c_in: int, planes: int, stride: int) -> None:
        super().__init__()
        c_out = planes * self.expansion
        self.conv1 = nn.Conv2d(c_in, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, blocks: Sequence[int] = RESNET50_BLOCKS, width: int = 64, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages: list[nn.Module] = []
        c_in = width
        for i, n in enumerate(blocks):
            planes = width * 2 ** i
            for j in range(n):
                stages.append(Bottleneck(c_in, planes, 2 if (j == 0 and i > 0) else 1))
                c_in = planes * Bottleneck.expansion
        self.stages = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.avgpool(self.stages(self.stem(x))), 1))


def resnet(depth: int = 50, width: int = 64, num_classes: int = 1000) -> ResNet:
    blocks = {50: RESNET50_BLOCKS, 152: RESNET152_BLOCKS}.get(depth)
    if blocks is None:
        raise ValueError(f"bottleneck ResNet depth {depth}: 50 or 152")
    return ResNet(blocks, width, num_classes)


class MLP(nn.Module):
    def __init__(self, in_features: int = 784, hidden: Sequence[int] = (1024, 1024), num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [nn.Linear(in_features, h), nn.ReLU(inplace=True)]
            in_features = h
        layers.append(nn.Linear(in_features, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_dim: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln_1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    def __init__(self, image_size: int = 224, patch: int = 16, dim: int = 768, depth: int = 12, heads: int = 12,
                 mlp_dim: int = 3072, num_classes: int = 1000) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        tokens = (image_size // patch) ** 2 + 1
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.blocks = nn.Sequential(*[EncoderBlock(dim, heads, mlp_dim) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.ln(self.blocks(x))
        return self.head(x[:, 0])


def vit(image_size: int = 224, patch: int = 16, dim: int = 768, depth: int = 12, heads: int = 12,
        mlp_dim: int = 3072, num_classes: int = 1000) -> ViT:
    """ViT-B/16 by default."""
    return ViT(image_size, patch, dim, depth, heads, mlp_dim, num_classes)
