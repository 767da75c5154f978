"""NCNN `.bin`: the concatenation, in layer order, of every `ModelBin::load` a layer makes.

A record of load type 0 starts with a 4-byte little-endian flag (src/modelbin.cpp): 0 raw fp32,
0x01306B47 fp16 and 0x01348B83 bf16 (payload padded to 4 bytes), 0x000D4B38 int8 (padded to 4),
0x0002C056 fp32; any other non-zero flag is a 256-entry fp32 table followed by uint8 indices
(padded to 4). Type 1 is raw fp32 without a flag; types 3/4/6/8 raw bytes padded to 4. Records keep
their bytes, so an untouched model is written back byte-identically.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..cli import UserError
from .param import NcnnParam
from .schema import WeightSpec, weight_specs

TAG_FP32 = 0x00000000
TAG_FP16 = 0x01306B47
TAG_BF16 = 0x01348B83
TAG_INT8 = 0x000D4B38
TAG_FP32_SCALED = 0x0002C056

# element dtype of each tag whose payload is a plain array (the quantized-table flag is not)
_TAG_DTYPES: dict[int, np.dtype] = {
    TAG_FP32: np.dtype("<f4"), TAG_FP16: np.dtype("<f2"), TAG_BF16: np.dtype("<u2"),
    TAG_INT8: np.dtype("i1"), TAG_FP32_SCALED: np.dtype("<f4"),
}


def _align4(n: int) -> int:
    return (n + 3) & ~3


def payload_size(load_type: int, tag: int | None, count: int) -> int:
    """Bytes after the flag (or the whole record when untagged), as ModelBinFromDataReader reads."""
    if load_type == 0:
        assert tag is not None
        if tag in (TAG_FP32, TAG_FP32_SCALED):
            return count * 4
        if tag in _TAG_DTYPES:
            return _align4(count * _TAG_DTYPES[tag].itemsize)
        return 256 * 4 + _align4(count)  # quantized table + indices
    if load_type == 1:
        return count * 4
    if load_type in (3, 4, 6, 8):
        return _align4(count)
    raise UserError(f"ModelBin load type {load_type} is not one NCNN implements")


@dataclass
class WeightRecord:
    """One `ModelBin::load` in the file: its spec, its flag (None if untagged) and payload bytes."""

    spec: WeightSpec
    tag: int | None
    payload: bytes | memoryview

    @property
    def nbytes(self) -> int:
        return len(self.payload) + (4 if self.tag is not None else 0)

    @property
    def storage(self) -> str:
        if self.tag is None:
            return "raw" if self.spec.load_type == 1 else "bytes"
        return {TAG_FP32: "fp32", TAG_FP16: "fp16", TAG_BF16: "bf16", TAG_INT8: "int8",
                TAG_FP32_SCALED: "fp32"}.get(self.tag, "quantized")

    def elements(self) -> np.ndarray:
        """The stored elements in their stored dtype (fp16 stays fp16), without padding."""
        if self.tag is None:
            dtype = np.dtype("<f4") if self.spec.load_type == 1 else np.dtype("u1")
        elif self.tag in _TAG_DTYPES:
            dtype = _TAG_DTYPES[self.tag]
        else:
            raise UserError(f"{self.spec.role}: table-quantized weights (flag {self.tag:#010x}) cannot be sliced")
        return np.frombuffer(self.payload, dtype=dtype, count=self.spec.count)

    def to_float32(self) -> np.ndarray:
        e = self.elements()
        if self.tag == TAG_BF16:
            return (e.astype(np.uint32) << 16).view(np.float32)
        return e.astype(np.float32)

    @classmethod
    def from_elements(cls, spec: WeightSpec, tag: int | None, elements: np.ndarray) -> WeightRecord:
        """A record of `spec` holding `elements` (already in the tag's dtype), padded as NCNN reads."""
        assert elements.size == spec.count
        data = np.ascontiguousarray(elements).tobytes()
        return cls(spec, tag, data + b"\0" * (payload_size(spec.load_type, tag, spec.count) - len(data)))

    @classmethod
    def from_float32(cls, spec: WeightSpec, values: np.ndarray, storage: str = "fp32") -> WeightRecord:
        values = np.asarray(values, dtype=np.float32).reshape(-1)
        if spec.load_type != 0:
            if spec.load_type != 1:
                raise UserError(f"{spec.role}: cannot write float data into byte load type {spec.load_type}")
            return cls.from_elements(spec, None, values)
        if storage == "fp16":
            return cls.from_elements(spec, TAG_FP16, values.astype("<f2"))
        if storage != "fp32":
            raise UserError(f"unknown weight storage {storage!r} (fp32 or fp16)")
        return cls.from_elements(spec, TAG_FP32, values)

    def to_bytes(self) -> bytes:
        head = b"" if self.tag is None else int(self.tag).to_bytes(4, "little")
        return head + bytes(self.payload)


@dataclass
class LayerWeights:
    """The records one layer reads, and where they start in the `.bin`."""

    layer: str
    offset: int
    records: list[WeightRecord]

    @property
    def nbytes(self) -> int:
        return sum(r.nbytes for r in self.records)

    def record(self, role: str) -> WeightRecord:
        for r in self.records:
            if r.spec.role == role:
                return r
        raise KeyError(role)


class ModelBin:
    """The weights of every layer of one model, keyed by layer name, in file order."""

    def __init__(self, layers: list[LayerWeights]) -> None:
        self._layers = {lw.layer: lw for lw in layers}

    def __getitem__(self, layer: str) -> LayerWeights:
        return self._layers[layer]

    def get(self, layer: str) -> LayerWeights | None:
        return self._layers.get(layer)

    def __iter__(self) -> Iterator[LayerWeights]:
        return iter(self._layers.values())

    @property
    def nbytes(self) -> int:
        return sum(lw.nbytes for lw in self)

    @classmethod
    def parse(cls, param: NcnnParam, data: bytes | memoryview, source: str = "<bin>") -> ModelBin:
        view = memoryview(data)
        pos = 0
        layers = []
        for layer in param:
            specs = weight_specs(layer)
            if not specs:
                continue
            start, records = pos, []
            for spec in specs:
                tag = None
                if spec.load_type == 0:
                    if pos + 4 > len(view):
                        raise UserError(f"{source}: truncated at layer {layer.name} ({spec.role} flag at byte {pos})")
                    tag = int.from_bytes(view[pos:pos + 4], "little")
                    pos += 4
                size = payload_size(spec.load_type, tag, spec.count)
                if pos + size > len(view):
                    raise UserError(f"{source}: truncated at layer {layer.name} ({spec.role} needs {size} bytes at "
                                    f"byte {pos}, file has {len(view)})")
                records.append(WeightRecord(spec, tag, view[pos:pos + size]))
                pos += size
            layers.append(LayerWeights(layer.name, start, records))
        if pos != len(view):
            raise UserError(f"{source}: {len(view) - pos} bytes left after the last layer's weights: "
                            f"the .bin does not belong to this .param")
        return cls(layers)

    def layout(self) -> list[LayerWeights]:
        """Layers with their offsets recomputed for the current records, in file order."""
        pos, out = 0, []
        for lw in self:
            out.append(LayerWeights(lw.layer, pos, lw.records))
            pos += lw.nbytes
        return out

    def write(self, f) -> None:  # f: a binary file object
        for lw in self:
            for r in lw.records:
                f.write(r.to_bytes())

    def to_bytes(self) -> bytes:
        return b"".join(r.to_bytes() for lw in self for r in lw.records)


def read_bin(param: NcnnParam, path: str | Path) -> ModelBin:
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    return ModelBin.parse(param, data, str(path))
