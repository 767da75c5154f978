"""Bottleneck-aware layer slicing (paper §3.2): decide per layer, then rewrite the model."""

from .slicer import SlicingResult, slice_model
from .policy import LayerDecision
from .rewrite import KERNEL_CODES, KERNEL_PARAM_ID, TILES_PARAM_ID
from .target import TARGETS, Target, target_for

__all__ = ["SlicingResult", "slice_model", "LayerDecision", "KERNEL_CODES", "KERNEL_PARAM_ID",
           "TILES_PARAM_ID", "TARGETS", "Target", "target_for"]
