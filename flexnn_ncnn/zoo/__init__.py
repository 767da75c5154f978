"""Plain-torch model definitions and their pnnx export to NCNN."""

from .export import export_ncnn
from .models import MLP, VGG, ResNet, ViT, gpt2, resnet, vgg19, vit

__all__ = ["export_ncnn", "MLP", "VGG", "ResNet", "ViT", "gpt2", "resnet", "vgg19", "vit"]
