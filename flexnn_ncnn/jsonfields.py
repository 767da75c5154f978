"""Typed reads from parsed JSON: every problem is a UserError naming the field by its path."""

from __future__ import annotations

from typing import Any, Callable, Mapping, TypeVar

from .cli import UserError

T = TypeVar("T")

_JSON_TYPES: dict[Any, Any] = {int: int, float: (int, float), bool: bool, str: str, dict: dict, list: list}
_JSON_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "an object", list: "a list"}


def field(d: Any, key: str, kind: Callable[[Any], T], where: str, at_least: int | None = None) -> T:
    """`d[key]` as `kind` (int, float, bool, str, dict or list), at least `at_least` if given, or a
    UserError naming `where.key`."""
    if not isinstance(d, Mapping):
        raise UserError(f"{where} must be a JSON object")
    if key not in d:
        raise UserError(f"{where}.{key} is missing")
    value = d[key]
    # JSON true/false are Python bools, which are also ints: never accept one for the other
    if not isinstance(value, _JSON_TYPES[kind]) or (kind is not bool and isinstance(value, bool)):
        raise UserError(f"{where}.{key} must be {_JSON_NAMES[kind]}, not {type(value).__name__}")
    if at_least is not None and value < at_least:
        raise UserError(f"{where}.{key} is {value}, less than {at_least}")
    return kind(value)
