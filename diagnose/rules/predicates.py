"""Field predicates of structured conditions: `count: 0`, `newest_age: ">3600"`, `server: [a, b]`.

Each field of a condition kind has a type; a rule's value for it is parsed once at load time
into a Predicate, and a bad value is a load error with file:line. A Predicate is plain data
(Compare, OneOf, Is, Contains, VersionIn), evaluated by `evaluate(predicate, value)`.
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


# Predicates are plain frozen dataclasses (no functions stored on them), so a parsed RuleSet
# pickles with the standard pickler and loads through rulecache's restricted unpickler.


@dataclass(frozen=True)
class Predicate:
    text: str  # how the rule wrote it, for messages

    def __call__(self, value: Any) -> bool:
        return evaluate(self, value)

    def matches(self, value: Any) -> bool:  # value is never None here
        raise NotImplementedError


@dataclass(frozen=True)
class Compare(Predicate):
    op: str  # one of _OPS
    bound: float

    def matches(self, value: Any) -> bool:
        return bool(_OPS[self.op](value, self.bound))


@dataclass(frozen=True)
class OneOf(Predicate):
    options: tuple[Any, ...] | frozenset[Any]

    def matches(self, value: Any) -> bool:
        return value in self.options


@dataclass(frozen=True)
class Is(Predicate):
    wanted: bool

    def matches(self, value: Any) -> bool:
        return bool(value) is self.wanted


@dataclass(frozen=True)
class Contains(Predicate):
    """True when a tuple of strings (e.g. throttle reasons) holds any of the wanted ones."""

    wanted: frozenset[str]

    def matches(self, value: Any) -> bool:
        return bool(self.wanted.intersection(value))


@dataclass(frozen=True)
class VersionIn(Predicate):
    spec: str  # kept as text: cached rule sets then unpickle without importing packaging

    def matches(self, value: Any) -> bool:
        return _version_matches(self.spec, str(value))


def evaluate(predicate: Predicate, value: Any) -> bool:
    """Whether a collected value satisfies the predicate; an unknown value (None) never does."""
    if value is None:
        return False
    return predicate.matches(value)


_COMPARE = re.compile(r"^\s*(==|!=|>=|<=|>|<)\s*(-?[0-9][0-9_.eE+-]*)\s*$")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
}


def number(raw: Any) -> Predicate:
    """A number (equality), a comparison string like '>0' or '<=1e9', or a list of numbers."""
    if isinstance(raw, bool):
        raise PredicateError(f"expected a number or a comparison like '>0', got {raw!r}")
    if isinstance(raw, (int, float)):
        return Compare(str(raw), "==", float(raw))
    if isinstance(raw, list) and raw and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in raw):
        return OneOf(str(raw), tuple(raw))
    if isinstance(raw, str):
        match = _COMPARE.match(raw)
        if match:
            try:
                bound = float(match.group(2))
            except ValueError:
                raise PredicateError(f"bad number in {raw!r}") from None
            return Compare(raw, match.group(1), bound)
    raise PredicateError(f"expected a number or a comparison like '>0', got {raw!r}")


def boolean(raw: Any) -> Predicate:
    if not isinstance(raw, bool):
        raise PredicateError(f"expected true or false, got {raw!r}")
    return Is(str(raw).lower(), raw)


def choice(options: Sequence[str]) -> Callable[[Any], Predicate]:
    # A parser (kept on FieldSpec), not a predicate: nothing of it is stored on a rule.
    def make(raw: Any) -> Predicate:
        values = raw if isinstance(raw, list) else [raw]
        for value in values:
            if not isinstance(value, str) or value not in options:
                raise PredicateError(f"expected one of {', '.join(options)}, got {value!r}")
        return OneOf(str(raw), frozenset(values))

    return make


def text(raw: Any) -> Predicate:
    values = raw if isinstance(raw, list) else [raw]
    if not values or not all(isinstance(v, str) and v for v in values):
        raise PredicateError(f"expected a name or a list of names, got {raw!r}")
    return OneOf(str(raw), frozenset(values))


def contains(raw: Any) -> Predicate:
    """True when a tuple of strings (e.g. throttle reasons) holds any of the given ones."""
    values = raw if isinstance(raw, list) else [raw]
    if not values or not all(isinstance(v, str) and v for v in values):
        raise PredicateError(f"expected a name or a list of names, got {raw!r}")
    return Contains(str(raw), frozenset(values))


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
    return VersionIn(raw, raw)


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
    return OneOf(str(raw), frozenset(parse_signal(value) for value in values))


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
