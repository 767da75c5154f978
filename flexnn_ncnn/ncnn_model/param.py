"""NCNN `.param` text: magic 7767517, `layer_count blob_count`, then one layer per line.

A layer line is `Type name bottom_count top_count bottoms... tops... id=value ...`. Values follow
NCNN's ParamDict: an id <= -23300 is the old array form (`-23330=4,3,224,224,3`, first element the
length, stored under id `-(id + 23300)`); a value with `.`, `e` or `E` is a float; `a,b,c` is an
array; a leading letter or quote is a string. Values keep their text so an untouched layer is
written back byte-identically; a layer changed in memory is written in pnnx's column layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from ..cli import UserError

MAGIC = 7767517
SHAPE_HINT_ID = 30  # NetPrivate::load_shape_hints reads pd.get(30): per top [dims, w, h, (d,) c]
_TOKEN = re.compile(r'(?:[^\s"]|"[^"]*")+')  # whitespace-separated, a quoted string may hold spaces

Scalar = int | float
Value = Scalar | list[Scalar] | str


def _is_float_text(text: str) -> bool:
    # ParamDict's vstr_is_float
    return "." in text or "e" in text or "E" in text


def _parse_scalar(text: str, where: str) -> Scalar:
    try:
        return float(text) if _is_float_text(text) else int(text)
    except ValueError:
        raise UserError(f"{where}: cannot read number {text!r}") from None


def _format_scalar(v: Scalar) -> str:
    # NCNN's own writers print floats with %e; an int must never gain a '.'
    return f"{v:e}" if isinstance(v, float) else str(int(v))


class ParamDict:
    """Layer parameters by NCNN id (0..31), each kept with the exact text it was read from."""

    def __init__(self) -> None:
        self._values: dict[int, Value] = {}
        self._texts: dict[int, str] = {}  # id -> `key=value` token as written

    @classmethod
    def parse(cls, tokens: Sequence[str], where: str) -> ParamDict:
        pd = cls()
        for token in tokens:
            key, eq, text = token.partition("=")
            if not eq:
                raise UserError(f"{where}: parameter {token!r} is not id=value")
            try:
                raw_id = int(key)
            except ValueError:
                raise UserError(f"{where}: parameter id {key!r} is not a number") from None
            if raw_id <= -23300:
                pid = -(raw_id + 23300)
                items = text.split(",")
                count = _parse_scalar(items[0], where)
                if not isinstance(count, int) or count != len(items) - 1:
                    raise UserError(f"{where}: array {token!r} declares {items[0]} elements but has {len(items) - 1}")
                value: Value = [_parse_scalar(t, where) for t in items[1:]]
            elif text[:1].isalpha() or text[:1] == '"':
                pid, value = raw_id, text.strip('"')
            elif "," in text:
                pid, value = raw_id, [_parse_scalar(t, where) for t in text.split(",") if t]
            else:
                pid, value = raw_id, _parse_scalar(text, where)
            if not 0 <= pid < 32:
                raise UserError(f"{where}: parameter id {raw_id} out of NCNN's range")
            pd._values[pid] = value
            pd._texts[pid] = token
        return pd

    def get(self, pid: int, default: Value) -> Value:
        return self._values.get(pid, default)

    def get_int(self, pid: int, default: int) -> int:
        v = self._values.get(pid, default)
        if not isinstance(v, (int, float)):
            raise UserError(f"parameter {pid} is {v!r}, expected a number")
        return int(v)

    def get_array(self, pid: int) -> list[Scalar]:
        v = self._values.get(pid, [])
        return v if isinstance(v, list) else [v]  # type: ignore[list-item]

    def __contains__(self, pid: int) -> bool:
        return pid in self._values

    def set(self, pid: int, value: Value) -> None:
        self._values[pid] = value
        if isinstance(value, list):
            # ParamDict stores an array as all-int or all-float: never mix the two spellings
            as_float = any(isinstance(v, float) for v in value)
            items = ",".join(_format_scalar(float(v) if as_float else v) for v in value)
            self._texts[pid] = f"{-23300 - pid}={len(value)},{items}"
        elif isinstance(value, str):
            self._texts[pid] = f'{pid}="{value}"' if " " in value else f"{pid}={value}"
        else:
            self._texts[pid] = f"{pid}={_format_scalar(value)}"

    def remove(self, pid: int) -> None:
        self._values.pop(pid, None)
        self._texts.pop(pid, None)

    def copy(self) -> ParamDict:
        pd = ParamDict()
        pd._values = {k: (list(v) if isinstance(v, list) else v) for k, v in self._values.items()}
        pd._texts = dict(self._texts)
        return pd

    def tokens(self) -> list[str]:
        return list(self._texts.values())


@dataclass
class Layer:
    type: str
    name: str
    bottoms: list[str]
    tops: list[str]
    params: ParamDict = field(default_factory=ParamDict)
    # the line this layer was read from, and what it said, to write it back unchanged
    _line: str | None = field(default=None, repr=False, compare=False)
    _signature: tuple | None = field(default=None, repr=False, compare=False)

    def signature(self) -> tuple:
        return (self.type, self.name, tuple(self.bottoms), tuple(self.tops), tuple(self.params.tokens()))

    def format(self) -> str:
        if self._line is not None and self._signature == self.signature():
            return self._line
        head = f"{self.type:<24} {self.name:<24} {len(self.bottoms)} {len(self.tops)}"
        return " ".join([head, *self.bottoms, *self.tops, *self.params.tokens()])


@dataclass
class NcnnParam:
    """The network structure of one `.param` file, layers in file order."""

    layers: list[Layer]
    # the text this model was read from and what it said, to write it back byte-identically
    _text: str | None = field(default=None, repr=False)
    _signature: tuple | None = field(default=None, repr=False)
    _line_end: str = field(default="\n", repr=False)

    def signature(self) -> tuple:
        return tuple(layer.signature() for layer in self.layers)

    @property
    def blob_names(self) -> list[str]:
        seen: dict[str, None] = {}
        for layer in self.layers:
            for b in (*layer.bottoms, *layer.tops):
                seen.setdefault(b, None)
        return list(seen)

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    @classmethod
    def parse(cls, text: str, source: str = "<param>") -> NcnnParam:
        lines = text.splitlines(keepends=True)
        if not lines or lines[0].strip() != str(MAGIC):
            raise UserError(f"{source}: not an NCNN text .param (first line must be the magic {MAGIC})")
        counts = lines[1].split() if len(lines) > 1 else []
        if len(counts) != 2 or not all(c.isdigit() for c in counts):
            raise UserError(f"{source}:2: expected 'layer_count blob_count'")
        layer_count, blob_count = int(counts[0]), int(counts[1])
        layers = []
        for lineno, line in enumerate(lines[2:], start=3):
            tokens = _TOKEN.findall(line)
            if not tokens:
                continue
            where = f"{source}:{lineno}"
            if len(tokens) < 4 or not tokens[2].isdigit() or not tokens[3].isdigit():
                raise UserError(f"{where}: expected 'Type name bottom_count top_count ...'")
            nb, nt = int(tokens[2]), int(tokens[3])
            if len(tokens) < 4 + nb + nt:
                raise UserError(f"{where}: layer {tokens[1]} lists fewer blobs than its counts {nb} {nt}")
            layer = Layer(tokens[0], tokens[1], tokens[4:4 + nb], tokens[4 + nb:4 + nb + nt],
                          ParamDict.parse(tokens[4 + nb + nt:], where))
            layer._line = line.rstrip("\r\n")
            layer._signature = layer.signature()
            layers.append(layer)
        model = cls(layers, text, None, "\r\n" if lines[0].endswith("\r\n") else "\n")
        model._signature = model.signature()
        if len(layers) != layer_count:
            raise UserError(f"{source}: header says {layer_count} layers, file has {len(layers)}")
        if len(model.blob_names) != blob_count:
            raise UserError(f"{source}: header says {blob_count} blobs, layers name {len(model.blob_names)}")
        return model

    def format(self) -> str:
        if self._text is not None and self._signature == self.signature():
            return self._text
        end = self._line_end
        head = f"{MAGIC}{end}{len(self.layers)} {len(self.blob_names)}{end}"
        return head + "".join(layer.format() + end for layer in self.layers)


def read_param(path: str | Path) -> NcnnParam:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text .param (binary .param.bin is not supported)") from None
    return NcnnParam.parse(text, str(path))
