"""A small JSON Schema checker for the subset our own schema files use (no runtime dependency
on jsonschema): type, enum, const, minimum, maximum, maxLength, properties, required,
additionalProperties, items, maxItems and local "$ref": "#/$defs/NAME".

It is stricter than JSON Schema in one way only: an "integer" must be a JSON integer (1, not
1.0), because the decoders behind it hand the value on as a Python int.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_TYPES = {"object", "array", "string", "integer", "number", "boolean", "null"}


def problem(value: Any, schema: Mapping[str, Any], where: str, root: Mapping[str, Any] | None = None) -> str | None:
    """The first way `value` breaks `schema`, as "where: expected ...", or None if it fits."""
    root = root if root is not None else schema
    ref = schema.get("$ref")
    if ref is not None:
        schema = _resolve(root, ref)
    if "const" in schema and not _same(value, schema["const"]):
        return f"{where}: expected {schema['const']!r}"
    if "enum" in schema and not any(_same(value, choice) for choice in schema["enum"]):
        return f"{where}: expected one of {', '.join(repr(c) for c in schema['enum'])}"
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else list(types)
        if not any(_is(value, t) for t in allowed):
            return f"{where}: expected {_describe(schema, allowed)}, got {_kind(value)}"
    if _is(value, "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            return f"{where}: expected {_describe(schema, allowed if types is not None else ['number'])}, got {value!r}"
    elif isinstance(value, str):
        limit = schema.get("maxLength")
        if limit is not None and len(value) > limit:
            return f"{where}: expected a string of at most {limit} characters, got {len(value)}"
    elif isinstance(value, list):
        limit = schema.get("maxItems")
        if limit is not None and len(value) > limit:
            return f"{where}: expected at most {limit} items, got {len(value)}"
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                found = problem(item, items, f"{where}[{index}]", root)
                if found:
                    return found
    elif isinstance(value, dict):
        for name in schema.get("required", ()):
            if name not in value:
                return f"{where}.{name}: missing (required)"
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            sub = properties.get(name)
            if sub is None:
                if extra is False:
                    return f"{where}.{name}: not expected here"
                if not isinstance(extra, Mapping):
                    continue
                sub = extra
            found = problem(item, sub, f"{where}.{name}" if where else name, root)
            if found:
                return found
    return None


def _resolve(root: Mapping[str, Any], ref: str) -> Mapping[str, Any]:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix):] not in root.get("$defs", {}):
        raise ValueError(f"schema: unsupported $ref {ref!r}")  # a bug in our own schema file
    found: Mapping[str, Any] = root["$defs"][ref[len(prefix):]]
    return found


def _is(value: Any, kind: str) -> bool:
    if kind not in _TYPES:
        raise ValueError(f"schema: unknown type {kind!r}")
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and math.isfinite(value))
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


def _same(value: Any, expected: Any) -> bool:
    return type(value) is type(expected) and bool(value == expected)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float) and not math.isfinite(value):
        return "an infinite number"  # 1e400 in JSON text reads as inf
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _describe(schema: Mapping[str, Any], allowed: list[str]) -> str:
    names = {"object": "an object", "array": "an array", "string": "a string", "integer": "a whole number",
             "number": "a number", "boolean": "true or false", "null": "null"}
    text = " or ".join(names[t] for t in allowed)
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        text += f" in range {low}..{high}"
    elif low is not None:
        text += f" >= {low}"
    elif high is not None:
        text += f" <= {high}"
    return text
