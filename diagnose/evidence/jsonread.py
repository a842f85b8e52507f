"""Typed reads of one field of a JSON object, for the facts' from_json decoders.

Each read names the field's path in its ValueError (`checkpoints.newest.mtime: expected a
number or null, got str`), so a hostile manifest or a mistyped rule test case gets one clear
line, never a crash deeper in. `known` makes an object strict: a key it does not list is an
error (rule test cases, where a misspelt key would make the test mean nothing); manifests
stay lenient, so a bundle of a later version with more fields still reads.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any


def obj(data: object, what: str, known: Collection[str] | None = None) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{what}: expected an object, got {type(data).__name__}")
    if known is not None:
        unknown = [str(key) for key in data if key not in known]
        if unknown:
            raise ValueError(f"{what}: unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")
    return data


def string(data: Mapping[str, Any], key: str, what: str, default: str | None = "") -> str:
    """A string; `default` None makes the key required."""
    value = data.get(key, default)
    if value is None and default is None:
        raise ValueError(f"{what}.{key}: missing")
    if not isinstance(value, str):
        raise ValueError(f"{what}.{key}: expected a string, got {type(value).__name__}")
    return value


def opt_string(data: Mapping[str, Any], key: str, what: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{what}.{key}: expected a string or null, got {type(value).__name__}")
    return value


def opt_number(data: Mapping[str, Any], key: str, what: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what}.{key}: expected a number or null, got {type(value).__name__}")
    return float(value)


def number(data: Mapping[str, Any], key: str, what: str, default: float | None = None) -> float:
    value = opt_number(data, key, what)
    if value is None:
        if default is None:
            raise ValueError(f"{what}.{key}: missing")
        return default
    return value


def opt_int(data: Mapping[str, Any], key: str, what: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}.{key}: expected an integer or null, got {type(value).__name__}")
    return value


def integer(data: Mapping[str, Any], key: str, what: str, default: int | None = None) -> int:
    value = opt_int(data, key, what)
    if value is None:
        if default is None:
            raise ValueError(f"{what}.{key}: missing")
        return default
    return value


def boolean(data: Mapping[str, Any], key: str, what: str, default: bool = False) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{what}.{key}: expected true or false, got {type(value).__name__}")
    return value


def opt_bool(data: Mapping[str, Any], key: str, what: str) -> bool | None:
    value = data.get(key)
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{what}.{key}: expected true, false or null, got {type(value).__name__}")
    return value


def items(data: Mapping[str, Any], key: str, what: str) -> list[Any]:
    """A list; null or missing is the empty list."""
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{what}.{key}: expected a list, got {type(value).__name__}")
    return value


def strings(data: Mapping[str, Any], key: str, what: str) -> tuple[str, ...]:
    found = items(data, key, what)
    if not all(isinstance(item, str) for item in found):
        raise ValueError(f"{what}.{key}: expected a list of strings")
    return tuple(found)


def ints(data: Mapping[str, Any], key: str, what: str) -> tuple[int, ...]:
    found = items(data, key, what)
    if not all(isinstance(item, int) and not isinstance(item, bool) for item in found):
        raise ValueError(f"{what}.{key}: expected a list of integers")
    return tuple(found)
