"""The inputs a model is run on to measure it (its blob shapes, its profile, its uncounted memory):
seeded standard normal, the same in every process, except an image size a Proposal reads.

Caffe's two-stage detectors take the image's size as an input (`im_info`: height, width, scale),
which Proposal clips its boxes to and scales its minimum box size by. Drawn at random, a size below
a pixel or a large scale leaves no box, and NCNN's Proposal fails on none (-100): such an input gets
the image input's height and width and a scale of 1.
"""

from __future__ import annotations

from typing import Collection, Mapping, Sequence

import numpy as np

from .param import NcnnParam


def image_size_inputs(param: NcnnParam) -> list[str]:
    """The model inputs a Proposal reads as its image size (its third input, through Splits)."""
    producer = {top: layer for layer in param for top in layer.tops}
    found: list[str] = []
    for layer in param:
        if layer.type != "Proposal" or len(layer.bottoms) < 3:
            continue
        blob = layer.bottoms[2]
        while (source := producer.get(blob)) is not None and source.type == "Split":
            blob = source.bottoms[0]
        if source is not None and source.type == "Input" and blob not in found:
            found.append(blob)
    return found


def sample_inputs(shapes: Mapping[str, Sequence[int]], image_sizes: Collection[str] = (), seed: int = 0) -> dict[str, np.ndarray]:
    """Standard normal float32 inputs of `shapes` (numpy's, batch-less: c,h,w), drawn in their order;
    those named in `image_sizes` (image_size_inputs) then hold the first image input's (h, w, 1)."""
    rng = np.random.default_rng(seed)
    inputs = {name: rng.standard_normal(tuple(shape)).astype(np.float32) for name, shape in shapes.items()}
    image = next((tuple(s) for name, s in shapes.items() if len(s) == 3 and name not in image_sizes), None)
    for name in image_sizes:
        if name in inputs and image is not None and inputs[name].size >= 3:
            size = np.zeros(inputs[name].size, np.float32)
            size[:3] = (image[1], image[2], 1.0)
            inputs[name] = size.reshape(inputs[name].shape)
    return inputs
