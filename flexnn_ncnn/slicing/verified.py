"""The smallest budget a search verified, kept on disk (measured.py) for the model, inputs and options.

The fit loop is not monotone, and a search's path depends on what the measurement store held when it
ran: a later `slice --budget B`, B at or above the smallest budget a search named, may slice otherwise
and miss, and its own search settle on a slicing that needs a few KB more, refusing a budget that was
named as verified. So a search keeps its answer, the budget and the slicer's arguments that make its
slicing again (slice_model at `budget` with `reserve`: the meter recalls every measurement, so the
same layers are decided the same way); a fit that misses takes that slicing where it plans, and a
later search starts with it among the slicings it tries. The key names everything the slicing and
its plan depend on: the model's layers and weights, the input shapes, the target, the runtime
options, the stream model, the build and this package's code.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from .. import measured, native
from ..ncnn_model import BlobShape, ModelBin, NcnnParam
from ..prepare import RuntimeOptions
from .streaming import StreamModel
from .target import Target

KIND = "smallest_budget"


@dataclass(frozen=True)
class Verified:
    """A search's answer: `need`, the smallest budget its slicing planned within and ran at; slice_model
    at `budget` with `reserve` makes that slicing again."""

    need: int
    budget: int
    reserve: int


def weights_digest(modelbin: ModelBin) -> str:
    """Every record of every layer: its layer, flag and bytes."""
    digest = hashlib.sha256()
    for weights in modelbin:
        digest.update(weights.layer.encode() + b"\0")
        for record in weights.records:
            digest.update(b"-" if record.tag is None else record.tag.to_bytes(4, "little"))
            digest.update(record.payload)
    return digest.hexdigest()


def search_key(param: NcnnParam, modelbin: ModelBin, inputs: dict[str, BlobShape], target: Target,
               options: RuntimeOptions, stream: StreamModel | None) -> dict[str, Any]:
    return {"build": measured.build_key(native.load().__file__), "python": measured.python_key(),
            "param": hashlib.sha256(param.format().encode()).hexdigest(), "bin": weights_digest(modelbin),
            "inputs": {name: list(shape.numpy()) for name, shape in sorted(inputs.items())},
            "target": asdict(target), "options": asdict(options), "stream": None if stream is None else stream.to_json()}


def recall(key: dict[str, Any]) -> Verified | None:
    """The answer kept under `key`; None when there is none, or it is not three integers (searched again)."""
    value = measured.stored(KIND, key)
    if not isinstance(value, list) or len(value) != 3 or not all(isinstance(v, int) for v in value):
        return None
    return Verified(*value)


def keep(key: dict[str, Any], answer: Verified) -> None:
    measured.store(KIND, key, [answer.need, answer.budget, answer.reserve])
