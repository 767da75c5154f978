"""NCNN `.param` text: magic 7767517, `layer_count blob_count`, then one layer per line.

A layer line is `Type name bottom_count top_count bottoms... tops... id=value ...`. It is read as
NCNN's `Net::load_param` reads it: the header and blob names are whitespace-separated tokens (blank
lines mean nothing), a layer's params are the rest of the line its last blob name is on, exactly
`layer_count` layers are read and what follows them is ignored (with a warning, as is a
`blob_count` larger than the blob slots the layers take; fewer is refused, as NCNN refuses it). A
slot is taken by every top (a top name always gets a fresh one) and by every bottom no earlier slot
names. Integers are NCNN's (sign, digits, int32, at most 31 characters), names at most 255 bytes.
Values follow NCNN's ParamDict: an id <= -23300 is the old array form (`-23330=4,3,224,224,3`,
first element the length, stored under id `-(id + 23300)`); a value with `.`, `e` or `E` is a
float; `a,b,c` is an array; a leading letter or quote is a string. Values keep their text so an
untouched model is written back byte-identically, what followed its layers included; a changed one
is written from its layers alone, a changed layer in pnnx's column layout.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from ..cli import UserError

log = logging.getLogger(__name__)

MAGIC = 7767517
MAX_NET_COUNT = 1000000  # net.cpp max_net_count: layers and blobs a .param may declare
MAX_NAME_BYTES = 255  # scan_net_value's %255s: a longer type, layer or blob name is refused
_MAX_INT_CHARS = 31  # scan_net_value's %31s: a longer integer token is refused
_INT32 = range(-2**31, 2**31)
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


def _is_count(value: int | None, least: int) -> bool:
    # Net::load_param's NCNN_VALIDATION bounds on layer, blob, bottom and top counts
    return value is not None and least <= value <= MAX_NET_COUNT


def _format_scalar(v: Scalar) -> str:
    # NCNN's own writers print floats with %e; an int must never gain a '.'
    return f"{v:e}" if isinstance(v, float) else str(int(v))


class _Scanner:
    """NCNN's DataReader scan over the text: `token()` is `%s` (whitespace, newlines included, skipped
    first), `rest_of_line()` what ParamDict::load_param reads (up to the line's end)."""

    _SPACE = re.compile(r"[ \t\n\v\f\r]*")  # C's isspace, what %s skips
    _WORD = re.compile(r"[^ \t\n\v\f\r]+")

    def __init__(self, text: str) -> None:
        self.text = text
        self.position = 0

    @property
    def lineno(self) -> int:
        return self.text.count("\n", 0, self.position) + 1

    def skip_space(self) -> None:
        self.position = self._SPACE.match(self.text, self.position).end()

    def token(self) -> str:
        """The next whitespace-separated token, "" at the end."""
        self.skip_space()
        word = self._WORD.match(self.text, self.position)
        if not word:
            return ""
        self.position = word.end()
        return word.group()

    def integer(self) -> int | None:
        """scan_net_value's int: an optional sign and digits within int32; None for anything else."""
        word = self.token()
        if len(word) > _MAX_INT_CHARS or not re.fullmatch(r"[+-]?[0-9]+", word) or int(word) not in _INT32:
            return None
        return int(word)

    def rest_of_line(self) -> str:
        end = len(self.text)
        for stop in ("\r", "\n"):
            found = self.text.find(stop, self.position)
            if found >= 0:
                end = min(end, found)
        line, self.position = self.text[self.position:end], end
        return line


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
        """The blob slots NCNN's loader gives these layers, in its order: each bottom no earlier slot
        names, then every top (a top always takes a fresh slot, so a name may repeat)."""
        slots: list[str] = []
        named: set[str] = set()
        for layer in self.layers:
            external = [b for b in dict.fromkeys(layer.bottoms) if b not in named]
            slots += external + layer.tops
            named.update(external, layer.tops)
        return slots

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    @classmethod
    def parse(cls, text: str, source: str = "<param>") -> NcnnParam:
        scan = _Scanner(text)
        if scan.integer() != MAGIC:
            raise UserError(f"{source}: not an NCNN text .param (it must start with the magic {MAGIC})")
        layer_count, blob_count = scan.integer(), scan.integer()
        if not (_is_count(layer_count, 1) and _is_count(blob_count, 1)):
            raise UserError(f"{source}:{scan.lineno}: expected 'layer_count blob_count', each 1 to {MAX_NET_COUNT}")
        layers = []
        for index in range(layer_count):
            begin = scan.position
            type_, name, nb, nt = scan.token(), scan.token(), scan.integer(), scan.integer()
            where = f"{source}:{scan.lineno}"
            if not (_is_count(nb, 0) and _is_count(nt, 0)):
                raise UserError(f"{where}: layer {index} of {layer_count}: expected 'Type name bottom_count top_count ...'")
            blobs = [scan.token() for _ in range(nb + nt)]
            if not all(blobs):
                raise UserError(f"{where}: layer {name} lists fewer blobs than its counts {nb} {nt}")
            too_long = next((n for n in (type_, name, *blobs) if len(n.encode()) > MAX_NAME_BYTES), None)
            if too_long is not None:
                raise UserError(f"{where}: name {too_long[:32]}... is longer than NCNN's {MAX_NAME_BYTES} bytes")
            layer = Layer(type_, name, blobs[:nb], blobs[nb:], ParamDict.parse(_TOKEN.findall(scan.rest_of_line()), where))
            layer._line = text[begin:scan.position].strip()
            layer._signature = layer.signature()
            layers.append(layer)
        model = cls(layers, text, None, "\r\n" if "\r\n" in text else "\n")
        model._signature = model.signature()
        slots = len(model.blob_names)
        if slots > blob_count:
            raise UserError(f"{source}: header says {blob_count} blobs, the layers take {slots} (NCNN refuses: too many blobs)")
        if slots < blob_count:
            log.warning("%s: header says %d blobs, the layers take %d: NCNN leaves the other %d empty",
                        source, blob_count, slots, blob_count - slots)
        scan.skip_space()
        if scan.position < len(text):
            log.warning("%s:%d: ignoring what follows the %d layers the header counts, as NCNN does",
                        source, scan.lineno, layer_count)
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
