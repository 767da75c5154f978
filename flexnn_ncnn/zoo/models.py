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


def _divisible(v: float, divisor: int = 8) -> int:
    """MobileNet's channel rounding: nearest multiple of `divisor`, never below 90% of `v`."""
    rounded = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * v else rounded


def _conv_bn_relu6(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """1x1 expand (skipped at ratio 1), 3x3 depthwise, linear 1x1 project; identity shortcut when shapes agree."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = c_in * expand_ratio
        layers: list[nn.Module] = [_conv_bn_relu6(c_in, hidden, 1)] if expand_ratio != 1 else []
        layers += [_conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, c_out, 1, bias=False), nn.BatchNorm2d(c_out)]
        self.conv = nn.Sequential(*layers)
        self.use_shortcut = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_shortcut else self.conv(x)


# (expand ratio, channels, blocks, first stride) per stage (Sandler et al., Table 2)
MOBILENETV2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 1000) -> None:
        super().__init__()
        c_in = _divisible(32 * width)
        last = _divisible(1280 * max(width, 1.0))
        layers: list[nn.Module] = [_conv_bn_relu6(3, c_in, 3, 2)]
        for t, c, n, s in MOBILENETV2_STAGES:
            c_out = _divisible(c * width)
            for i in range(n):
                layers.append(InvertedResidual(c_in, c_out, s if i == 0 else 1, t))
                c_in = c_out
        layers.append(_conv_bn_relu6(c_in, last, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def mobilenet_v2(width: float = 1.0, num_classes: int = 1000) -> MobileNetV2:
    return MobileNetV2(width, num_classes)


class Fire(nn.Module):
    """Squeeze 1x1, then 1x1 and 3x3 expand branches concatenated by channel."""

    def __init__(self, c_in: int, squeeze: int, expand1x1: int, expand3x3: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(c_in, squeeze, 1), nn.ReLU(inplace=True))
        self.expand1x1 = nn.Sequential(nn.Conv2d(squeeze, expand1x1, 1), nn.ReLU(inplace=True))
        self.expand3x3 = nn.Sequential(nn.Conv2d(squeeze, expand3x3, 3, padding=1), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze(x)
        return torch.cat([self.expand1x1(x), self.expand3x3(x)], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.0 (Iandola et al.) or 1.1 (fewer stem channels, earlier pooling); `width` scales every conv."""

    def __init__(self, version: str = "1_0", width: float = 1.0, num_classes: int = 1000) -> None:
        super().__init__()

        def w(c: int) -> int:
            return max(int(c * width), 1)

        def fire(c_in: int, s: int, e: int) -> Fire:
            return Fire(w(c_in), w(s), w(e), w(e))

        pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        if version == "1_0":
            layers = [nn.Conv2d(3, w(96), 7, 2), nn.ReLU(inplace=True), pool,
                      fire(96, 16, 64), fire(128, 16, 64), fire(128, 32, 128), pool,
                      fire(256, 32, 128), fire(256, 48, 192), fire(384, 48, 192), fire(384, 64, 256), pool,
                      fire(512, 64, 256)]
        elif version == "1_1":
            layers = [nn.Conv2d(3, w(64), 3, 2), nn.ReLU(inplace=True), pool,
                      fire(64, 16, 64), fire(128, 16, 64), pool,
                      fire(128, 32, 128), fire(256, 32, 128), pool,
                      fire(256, 48, 192), fire(384, 48, 192), fire(384, 64, 256), fire(512, 64, 256)]
        else:
            raise ValueError(f"SqueezeNet version {version!r}: 1_0 or 1_1")
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(w(512), num_classes, 1), nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


def squeezenet(version: str = "1_0", width: float = 1.0, num_classes: int = 1000) -> SqueezeNet:
    return SqueezeNet(version, width, num_classes)


class CausalSelfAttention(nn.Module):
    """GPT-2's attention written out (fused qkv `c_attn`, output `c_proj`): pnnx 20261020 passes the
    mask before the query when it fuses nn.MultiheadAttention with an attn_mask, so it is not used."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, causal_mask: torch.Tensor) -> torch.Tensor:
        tokens, dim = x.shape[1], x.shape[2]
        head_dim = dim // self.heads
        q, k, v = self.c_attn(x).split(dim, dim=2)
        q = q.reshape(tokens, self.heads, head_dim).permute(1, 0, 2)
        k = k.reshape(tokens, self.heads, head_dim).permute(1, 2, 0)
        v = v.reshape(tokens, self.heads, head_dim).permute(1, 0, 2)
        weights = torch.softmax(torch.matmul(q, k) * head_dim ** -0.5 + causal_mask, dim=-1)
        return self.c_proj(torch.matmul(weights, v).permute(1, 0, 2).reshape(1, tokens, dim))


class DecoderBlock(nn.Module):
    """GPT-2's pre-norm block: causal self-attention and a tanh-GELU MLP (batch 1)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, causal_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), causal_mask)
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """A GPT-2 decoder (Radford et al.) over `seq_len` positions, fed token embeddings.

    The input is the token embeddings (1, seq_len, dim), i.e. the rows of `wte` for the prompt's ids
    (the lookup is the caller's, so the model exports with a float input); the output is the
    next-token logits of the last position, through the LM head tied to `wte`.
    """

    def __init__(self, seq_len: int = 128, vocab: int = 50257, context: int = 1024, dim: int = 768, depth: int = 12,
                 heads: int = 12) -> None:
        super().__init__()
        if not 1 <= seq_len <= context:
            raise ValueError(f"sequence length {seq_len}: 1 to the context size {context}")
        self.seq_len = seq_len
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(DecoderBlock(dim, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)
        # additive mask, position i attends to positions <= i; -1e4 as GPT-2's own code masks, finite
        # so NCNN's softmax never sees inf - inf, and within fp16's range
        mask = torch.full((seq_len, seq_len), -1e4).triu(1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = tokens + self.wpe.weight[: self.seq_len]
        for block in self.blocks:
            x = block(x, self.causal_mask)
        return nn.functional.linear(self.ln_f(x[:, -1]), self.wte.weight)


def gpt2(seq_len: int = 128, vocab: int = 50257, context: int = 1024, dim: int = 768, depth: int = 12, heads: int = 12) -> GPT2:
    """GPT-2 small by default: 124,439,808 parameters counting the tied `wte` once."""
    return GPT2(seq_len, vocab, context, dim, depth, heads)
