"""Typed reads from parsed JSON: every problem is a UserError naming the field by its path.

A table's numeric column is stored as one string of numbers separated by spaces (`number_text`,
read by `numbers`): it parses straight into an array, without a Python object per value, whose
pages a process that loads it would keep resident (docs/PLAN_FORMAT.md).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from typing import Any, Callable, Mapping, TypeVar

import numpy as np

from .cli import UserError

T = TypeVar("T")

_JSON_TYPES: dict[Any, Any] = {int: int, float: (int, float), bool: bool, str: str, dict: dict, list: list}
_JSON_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "an object", list: "a list"}


def _checked(value: Any, kind: Callable[[Any], T], name: str, at_least: int | None) -> T:
    # JSON true/false are Python bools, which are also ints: never accept one for the other
    if not isinstance(value, _JSON_TYPES[kind]) or (kind is not bool and isinstance(value, bool)):
        raise UserError(f"{name} must be {_JSON_NAMES[kind]}, not {type(value).__name__}")
    if at_least is not None and value < at_least:
        raise UserError(f"{name} is {value}, less than {at_least}")
    return kind(value)


def field(d: Any, key: str, kind: Callable[[Any], T], where: str, at_least: int | None = None) -> T:
    """`d[key]` as `kind` (int, float, bool, str, dict or list), at least `at_least` if given, or a
    UserError naming `where.key`."""
    if not isinstance(d, Mapping):
        raise UserError(f"{where} must be a JSON object")
    if key not in d:
        raise UserError(f"{where}.{key} is missing")
    return _checked(d[key], kind, f"{where}.{key}", at_least)


# an integer of this many digits is past every byte count, step or index a table holds (and past
# what int64 parses without saturating)
_TOO_LONG = re.compile(r"\d{19}")
_NUMBER_NAMES = {np.int64: "an integer", np.float64: "a number"}


def number_text(values: Sequence[int] | Sequence[float] | np.ndarray) -> str:
    """A column as `numbers` reads it: its values in decimal (floats as Python's shortest exact
    form), separated by single spaces."""
    return " ".join(map(str, values.tolist() if isinstance(values, np.ndarray) else values))


def numbers(d: Any, key: str, dtype: type, where: str) -> np.ndarray:
    """`d[key]`, a string of numbers separated by white space, as a one-dimensional array of `dtype`
    (np.int64 or np.float64); a UserError names `where.key[i]` and what it holds where a value is not
    one of that kind, or an integer has 19 digits or more."""
    text = field(d, key, str, where)
    if not _TOO_LONG.search(text):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # older numpy warns where it stops at a value it cannot read
                return np.fromstring(text, dtype=dtype, sep=" ")
        except (ValueError, DeprecationWarning):
            pass
    parse = int if dtype is np.int64 else float  # the failure path: find the value, one object per value
    for i, token in enumerate(text.split()):
        if parse is int and _TOO_LONG.search(token):
            raise UserError(f"{where}.{key}[{i}] is {token}, past 10^18")
        try:
            parse(token)
        except ValueError:
            raise UserError(f"{where}.{key}[{i}] is {token!r}, not {_NUMBER_NAMES[dtype]}") from None
    raise UserError(f"{where}.{key} is not a list of numbers separated by spaces")


def number_columns(d: Any, dtypes: Mapping[str, type], where: str) -> list[np.ndarray]:
    """The columns of a table stored as {field: numbers}: one array per field of `dtypes`, in its order,
    of that field's dtype, all of one length; a UserError names the field."""
    out = [numbers(d, name, dtype, where) for name, dtype in dtypes.items()]
    lengths = {name: len(column) for name, column in zip(dtypes, out)}
    if len(set(lengths.values())) > 1:
        raise UserError(f"{where} has columns of different lengths ({', '.join(f'{k} {n}' for k, n in lengths.items())})")
    return out
