"""Field predicates of structured conditions: `count: 0`, `newest_age: ">3600"`, `server: [a, b]`.

Each field of a condition kind has a type; a rule's value for it is parsed once at load time
into a Predicate, and a bad value is a load error with file:line.
"""

from __future__ import annotations

import operator
import re
import signal as signal_module
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class PredicateError(ValueError):
    pass


@dataclass(frozen=True)
class Predicate:
    text: str  # how the rule wrote it, for messages
    test: Callable[[Any], bool]

    def __call__(self, value: Any) -> bool:
        if value is None:
            return False
        return self.test(value)


_COMPARE = re.compile(r"^\s*(==|!=|>=|<=|>|<)\s*(-?[0-9][0-9_.eE+-]*)\s*$")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
}


def number(raw: Any) -> Predicate:
    """A number (equality), a comparison string like '>0' or '<=1e9', or a list of numbers."""
    if isinstance(raw, bool):
        raise PredicateError(f"expected a number or a comparison like '>0', got {raw!r}")
    if isinstance(raw, (int, float)):
        wanted = float(raw)
        return Predicate(str(raw), lambda v: bool(v == wanted))
    if isinstance(raw, list) and raw and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in raw):
        options = tuple(raw)
        return Predicate(str(raw), lambda v: v in options)
    if isinstance(raw, str):
        match = _COMPARE.match(raw)
        if match:
            try:
                bound = float(match.group(2))
            except ValueError:
                raise PredicateError(f"bad number in {raw!r}") from None
            op = _OPS[match.group(1)]
            return Predicate(raw, lambda v: op(v, bound))
    raise PredicateError(f"expected a number or a comparison like '>0', got {raw!r}")


def boolean(raw: Any) -> Predicate:
    if not isinstance(raw, bool):
        raise PredicateError(f"expected true or false, got {raw!r}")
    return Predicate(str(raw).lower(), lambda v: bool(v) is raw)


def choice(options: Sequence[str]) -> Callable[[Any], Predicate]:
    def make(raw: Any) -> Predicate:
        values = raw if isinstance(raw, list) else [raw]
        for value in values:
            if not isinstance(value, str) or value not in options:
                raise PredicateError(f"expected one of {', '.join(options)}, got {value!r}")
        allowed = frozenset(values)
        return Predicate(str(raw), lambda v: v in allowed)

    return make


def text(raw: Any) -> Predicate:
    values = raw if isinstance(raw, list) else [raw]
    if not values or not all(isinstance(v, str) and v for v in values):
        raise PredicateError(f"expected a name or a list of names, got {raw!r}")
    allowed = frozenset(values)
    return Predicate(str(raw), lambda v: v in allowed)


def contains(raw: Any) -> Predicate:
    """True when a tuple of strings (e.g. throttle reasons) holds any of the given ones."""
    values = raw if isinstance(raw, list) else [raw]
    if not values or not all(isinstance(v, str) and v for v in values):
        raise PredicateError(f"expected a name or a list of names, got {raw!r}")
    wanted = frozenset(values)
    return Predicate(str(raw), lambda v: bool(wanted.intersection(v)))


def version_spec(raw: Any) -> Predicate:
    """A PEP 440 specifier set such as '>=0.19' or '>=2.0,<2.3'."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raw = f"=={raw}"
    if not isinstance(raw, str):
        raise PredicateError(f"expected a version specifier like '>=0.19', got {raw!r}")
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        spec = SpecifierSet(raw)
    except InvalidSpecifier:
        raise PredicateError(f"invalid version specifier {raw!r}") from None
    if not str(spec):
        raise PredicateError(f"empty version specifier {raw!r}")
    text = raw  # the closure keeps the text: cached rule sets then unpickle without packaging

    def test(value: Any) -> bool:
        return _version_matches(text, str(value))

    return Predicate(raw, test)


def _version_matches(spec_text: str, value: str) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        version = Version(value)
    except InvalidVersion:
        return False
    # Local and pre-release builds (2.4.0+cu121, 0.19.0rc1) still count as their release.
    return SpecifierSet(spec_text).contains(version, prereleases=True)


def signal_number(raw: Any) -> Predicate:
    """A signal by number (9) or name (SIGKILL, KILL), or a list of them."""
    values = raw if isinstance(raw, list) else [raw]
    numbers: set[int] = set()
    for value in values:
        numbers.add(parse_signal(value))
    return Predicate(str(raw), lambda v: v in numbers)


def parse_signal(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 128:
        return value
    if isinstance(value, str):
        name = value.upper()
        name = name if name.startswith("SIG") else "SIG" + name
        member = getattr(signal_module.Signals, name, None)
        if member is not None:
            return int(member)
    raise PredicateError(f"expected a signal number or name like SIGKILL, got {value!r}")
