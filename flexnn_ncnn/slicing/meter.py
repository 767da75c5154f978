"""Measured per-layer memory: a layer's slice, kernel and tiles run through NCNN on this machine.

analysis.py estimates a layer's weights and intermediates from NCNN's kernels, and an estimate drifts
from what NCNN allocates (layout conversions, a kernel's own scratch, the choice NCNN makes itself).
The slicer's choice rests on this instead (policy.decide): the configuration becomes a one-layer
model — an Input of the layer's input shape, then the layer with its slice's rows and param ids 26/27
— with seeded weights, prepared by the native runtime with the recording allocator and the options the
model will run with (pre-transformed weights included). Its weights are the bytes the layer's load
holds, its intermediates the bytes the planner lays every buffer its forward requests beside its
input and output out in (those NCNN released before its next request share bytes); a weights-sliced
layer's Concat output is added as analysis.py counts it. Answers are kept by measured.py under the
build, so each configuration is measured once.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from .. import measured, native, planning
from ..analysis import (GROUPED, Cost, CostModel, FixedModel, GroupedConvModel, LayerAnalysis, group_convolution,
                        grouped_input)
from ..cli import UserError
from ..ncnn_model import BlobShape, Layer, NcnnParam
from ..ncnn_model.param import ParamDict
from ..ncnn_model.random_weights import random_modelbin
from ..prepare import RuntimeOptions
from .rewrite import sub_layer_params, with_kernel

log = logging.getLogger(__name__)

STEP = 1  # the measured layer's step in its one-layer model (step 0 feeds the input)
WEIGHT, INTERMEDIATE = 0, 2  # planning.ROLES' indices


def _input_layer(shape: BlobShape) -> Layer:
    p = ParamDict()
    p.set(0, shape.w)
    if shape.dims >= 2:
        p.set(1, shape.h)
    if shape.dims == 4:
        p.set(11, shape.d)
    if shape.dims >= 3:
        p.set(2, shape.c)
    return Layer("Input", "in", [], ["in"], p)


def _laid_out_bytes(intermediates: list[tuple[int, int, int]]) -> int:
    """The bytes a layer's (ordinal, size, released_before) intermediates take in a plan: the smallest
    arena of a one-step profile holding only them."""
    if not intermediates:
        return 0
    tensors = tuple(planning.TensorUse(0, "intermediate", o, size, 0, 0, released_before=released) for o, size, released in intermediates)
    return planning.min_feasible_budget(planning.Profile(tensors, (planning.LayerCost(0.0, 0.0),)))


class LayerMeter:
    """Measures (kernel, width, tiles) of layers, on their input shapes, with `options`."""

    def __init__(self, options: RuntimeOptions):
        self.options = options
        self.measurements = 0  # configurations run here (not recalled)

    def cost(self, a: LayerAnalysis, kernel: str, width: int, tiles: int) -> Cost:
        m = a.model
        assert not isinstance(m, FixedModel), "only the slicer's layers are measured"
        assert a.in_shape is not None, "a sliced layer has an input"
        if isinstance(m, GroupedConvModel):
            if kernel == GROUPED:
                return self.held(a.layer, a.in_shape)
            # one group's Convolution, as the rewrite runs it
            return m.ungrouped(self._sliced(group_convolution(a.layer), m.group, grouped_input(a.in_shape, m.groups),
                                            kernel, width, tiles))
        return self._sliced(a.layer, m, a.in_shape, kernel, width, tiles)

    def _sliced(self, layer: Layer, m: CostModel, shape: BlobShape, kernel: str, width: int, tiles: int) -> Cost:
        """`layer` (its model `m`) with `width` of its rows, as the rewrite emits it: with a weights-sliced
        layer's Concat output, as analysis.py counts it."""
        params = sub_layer_params(layer, width, m.rows) if width < m.rows else layer.params.copy()
        held = self.held(with_kernel(Layer(layer.type, "measured", ["in"], ["out"], params), kernel, tiles, shape), shape)
        concat = m.out_bytes if width < m.rows else 0
        return Cost(held.weights, held.intermediates + concat)

    def held(self, layer: Layer, shape: BlobShape) -> Cost:
        """The weights and intermediates NCNN holds running `layer` (one input) on `shape`."""
        probe = replace(layer, name="measured", bottoms=["in"], tops=["out"], _line=None, _signature=None)
        module = native.load()
        key = {"build": measured.build_key(module.__file__), "layer": probe.format(), "input": list(shape.numpy()),
               "options": asdict(self.options)}
        weights, intermediates = measured.recalled("layer_cost", key, lambda: self._measure(module, probe, shape))
        return Cost(weights, intermediates)

    def _measure(self, module, probe: Layer, shape: BlobShape) -> list[int]:
        self.measurements += 1
        param = NcnnParam([_input_layer(shape), probe])
        with tempfile.TemporaryDirectory(prefix="flexnn-meter-") as scratch:
            param_path, bin_path = Path(scratch) / "layer.param", Path(scratch) / "layer.bin"
            param_path.write_text(param.format())
            with open(bin_path, "wb") as f:
                random_modelbin(param, 0).write(f)
            o = self.options
            try:
                prepared = module.prepare(str(param_path), str(bin_path), {"in": np.zeros(shape.numpy(), np.float32)}, ["out"],
                                          threads=o.threads, packing=o.packing, winograd=o.winograd, sgemm=o.sgemm, fp16=o.fp16,
                                          transformed=str(Path(scratch) / "layer.transformed") if o.pretransform else "")
            except RuntimeError as e:
                raise UserError(f"measuring {probe.type} {probe.format()!r} on input {shape.numpy()}: {e}") from None
        tensors = prepared["profile"][0].tolist()
        weights = sum(size for step, role, _, size, *_ in tensors if step == STEP and role == WEIGHT)
        intermediates = _laid_out_bytes([(ordinal, size, released) for step, role, ordinal, size, *_, released in tensors
                                         if step == STEP and role == INTERMEDIATE])
        log.debug("measured %s on %s: weights %d B, intermediates %d B", probe.format(), shape.numpy(), weights, intermediates)
        return [weights, intermediates]
