"""Blob shapes for a given input shape: from the model's shape hints when they were recorded for
that input, else measured by running stock NCNN once (random weights if none are given)."""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..cli import UserError
from .graph import Graph
from .param import SHAPE_HINT_ID, NcnnParam
from .sample_inputs import image_size_inputs, sample_inputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BlobShape:
    """An NCNN Mat shape (elempack 1): `dims` of w, h, d, c, of `element_bytes` each (4: fp32; 1: an
    int8 blob, as stock NCNN stores a requantizing layer's output)."""

    dims: int
    w: int
    h: int = 1
    d: int = 1
    c: int = 1
    element_bytes: int = 4

    @classmethod
    def from_numpy(cls, shape: tuple[int, ...], element_bytes: int = 4) -> BlobShape:
        """`(c, d, h, w)`, `(c, h, w)`, `(h, w)` or `(w,)` as NCNN's Python Mat arrays are shaped."""
        dims = len(shape)
        if not 1 <= dims <= 4:
            raise UserError(f"NCNN blobs have 1 to 4 dimensions, not {shape}")
        return cls(dims, shape[-1], shape[-2] if dims >= 2 else 1, shape[-3] if dims == 4 else 1,
                   shape[0] if dims >= 3 else 1, element_bytes)

    def numpy(self) -> tuple[int, ...]:
        return ((self.w,), (self.h, self.w), (self.c, self.h, self.w), (self.c, self.d, self.h, self.w))[self.dims - 1]

    @property
    def numel(self) -> int:
        return self.w * self.h * self.d * self.c

    @property
    def read_in_place(self) -> bool:
        """Whether the runtime reads a model input of this shape where the caller's array lies, without
        a copy in the arena: fp32 of 3 or 4 dims whose channel planes are whole multiples of 16 bytes
        (csrc/runtime/read_only_input.h; prepare records what it did, schedule.input_uses)."""
        return self.dims >= 3 and self.element_bytes == 4 and self.w * self.h * self.d * 4 % 16 == 0

    @property
    def nbytes(self) -> int:
        # Mat::create: each channel's w*h*d elements padded to 16 bytes (cstep)
        return self.c * ((self.w * self.h * self.d * self.element_bytes + 15) // 16 * 16)

    def __str__(self) -> str:
        return "x".join(str(v) for v in self.numpy())


def parse_input_shape(text: str) -> BlobShape:
    """`1,3,224,224` (torch NCHW, batch 1 dropped) -> c=3 h=224 w=224. Four numbers are NCHW, so
    their first is a batch and must be 1; a 4-D blob is 1,C,D,H,W."""
    try:
        values = [int(v) for v in text.replace("x", ",").split(",") if v.strip()]
    except ValueError:
        raise UserError(f"input shape {text!r}: write numbers separated by commas, e.g. 1,3,224,224") from None
    if len(values) == 4 and values[0] != 1:
        raise UserError(f"input shape {text!r}: a batch of {values[0]}; NCNN runs one sample at a time, give "
                        f"1,{','.join(map(str, values[1:]))} (a 4-D blob with its batch: 1,C,D,H,W)")
    if len(values) >= 2 and values[0] == 1:
        values = values[1:]
    if not values or any(v <= 0 for v in values) or len(values) > 4:
        raise UserError(f"input shape {text!r}: 1 to 4 positive dimensions after a batch of 1")
    return BlobShape.from_numpy(tuple(values))


def named_input_shapes(texts: Sequence[str], inputs: Sequence[str], flag: str) -> dict[str, BlobShape]:
    """The shapes `flag`'s values give the model's `inputs` (a shape per input in their order, or
    NAME=SHAPE for any of them), by input name."""
    named: dict[str, BlobShape] = {}
    bare = []
    for text in texts:
        name, _, dims = text.rpartition("=")
        if not name:
            bare.append(dims)
        elif name not in inputs:
            raise UserError(f"{flag} {text}: the model has no input '{name}'; its inputs: {', '.join(inputs)}")
        elif name in named:
            raise UserError(f"{flag} gives input '{name}' twice")
        else:
            named[name] = parse_input_shape(dims)
    if bare:
        if named or len(bare) != len(inputs):
            raise UserError(f"{flag}: {len(texts)} shape(s) for {len(inputs)} input(s) ({', '.join(inputs)}): "
                            f"give one per input in that order, or each as NAME=SHAPE")
        named = {name: parse_input_shape(text) for name, text in zip(inputs, bare)}
    return named


def parse_input_shapes(texts: Sequence[str], param: NcnnParam, graph: Graph, flag: str) -> dict[str, BlobShape]:
    """Every input's shape: `flag`'s values (named_input_shapes), the shapes the model declares for the
    inputs not named."""
    shapes = {**declared_input_shapes(param, graph), **named_input_shapes(texts, graph.inputs, flag)}
    missing = [name for name in graph.inputs if name not in shapes]
    if missing:
        raise UserError(f"the model does not state the shape of input '{missing[0]}': give {flag} {missing[0]}=1,3,224,224 "
                        f"(NAME=SHAPE once per input, or a shape alone for a model with one input)")
    return {name: shapes[name] for name in graph.inputs}


def _hinted(param: NcnnParam) -> dict[str, BlobShape]:
    shapes = {}
    for layer in param:
        hint = layer.params.get_array(SHAPE_HINT_ID)
        if not hint or not layer.tops or len(hint) % len(layer.tops):
            continue
        step = len(hint) // len(layer.tops)
        for j, top in enumerate(layer.tops):
            p = [int(v) for v in hint[j * step:(j + 1) * step]]
            dims = p[0]
            if 1 <= dims <= 4:
                shapes[top] = BlobShape(dims, p[1], p[2] if dims >= 2 else 1, p[3] if dims == 4 else 1,
                                        p[step - 1] if dims >= 3 else 1)
    return shapes


def declared_input_shapes(param: NcnnParam, graph: Graph) -> dict[str, BlobShape]:
    """Input shapes the model states: its Input layers' w/h/d/c params, else their shape hints."""
    hints = _hinted(param)
    shapes = {}
    for layer in graph.order:
        if layer.type != "Input":
            continue
        top = layer.tops[0]
        w, h, d, c = (layer.params.get_int(i, 0) for i in (0, 1, 11, 2))
        if top in hints:
            shapes[top] = hints[top]
        elif w > 0:
            dims = 4 if d > 0 else 3 if c > 0 else 2 if h > 0 else 1
            shapes[top] = BlobShape(dims, w, max(h, 1), max(d, 1), max(c, 1))
    return shapes


def infer_shapes(param: NcnnParam, graph: Graph, inputs: dict[str, BlobShape],
                 bin_path: str | Path | None = None) -> dict[str, BlobShape]:
    """Shape of every blob for `inputs`: hints if they cover all blobs for these very inputs, else stock NCNN."""
    hints = _hinted(param)
    if all(b in hints for b in graph.producer) and all(hints[b] == s for b, s in inputs.items()):
        log.info("blob shapes from the model's shape hints")
        return hints
    log.info("blob shapes measured by running stock NCNN")
    from .random_weights import random_modelbin
    from .stock import blob_shapes_isolated
    feeds = sample_inputs({name: s.numpy() for name, s in inputs.items()}, image_size_inputs(param))
    with tempfile.TemporaryDirectory(prefix="flexnn-shapes-") as tmp:
        param_path = Path(tmp) / "model.param"
        param_path.write_text(param.format())
        if bin_path is None:
            bin_path = Path(tmp) / "model.bin"
            with open(bin_path, "wb") as f:
                random_modelbin(param, seed=0).write(f)
        blobs = [b for b in graph.producer if b not in inputs]
        measured = blob_shapes_isolated(param_path, bin_path, feeds, blobs, " to measure its blob shapes")
    shapes = dict(inputs)
    # an int8 blob is costed at a byte an element; every other one as fp32, as NCNN's fp32 run stores it
    shapes.update({b: BlobShape.from_numpy(shape, 1 if size == 1 else 4) for b, (shape, size) in measured.items()})
    return shapes
