"""Typed reads from parsed JSON: every problem is a UserError naming the field by its path."""

from __future__ import annotations

from typing import Any, Callable, Mapping, TypeVar

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


def columns(d: Any, kinds: Mapping[str, Callable[[Any], Any]], where: str, at_least: Mapping[str, int] | None = None) -> list[list[Any]]:
    """The columns of a table stored as {field: [value per row]}: one list per field of `kinds`, in its
    order, each value of its field's kind (at least `at_least[field]` if given), all of one length; a
    UserError names `where.field[row]`."""
    at_least = at_least or {}
    out = [[_checked(v, kind, f"{where}.{name}[{i}]", at_least.get(name)) for i, v in enumerate(field(d, name, list, where))]
           for name, kind in kinds.items()]
    lengths = {name: len(column) for name, column in zip(kinds, out)}
    if len(set(lengths.values())) > 1:
        raise UserError(f"{where} has columns of different lengths ({', '.join(f'{k} {n}' for k, n in lengths.items())})")
    return out
