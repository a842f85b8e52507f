"""Guards against rule patterns that would hang the scan (catastrophic backtracking).

Two checks: a static one (a repeated group whose body can itself repeat without bound, the
`(a+)+` shape) and a torture run on adversarial 16 KiB lines under a time limit. At scan time
every confirmation also runs under a per-line time limit, so a pattern that slips through
costs a reported gap, never a hang.
"""

from __future__ import annotations

import re
from typing import Any

import regex

from diagnose.patterns.sre import parser as sre_parse

TORTURE_TIMEOUT = 0.5
_UNBOUNDED = 65535  # sre's MAXREPEAT shows as a large number


def _is_unbounded(max_count: Any) -> bool:
    return bool(int(max_count) >= _UNBOUNDED)


def _body_can_repeat(items: Any) -> bool:
    for op, arg in items:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            _low, high, sub = arg
            if _is_unbounded(high):
                return True
            if _body_can_repeat(sub):
                return True
        elif name == "SUBPATTERN":
            if _body_can_repeat(arg[-1]):
                return True
        elif name == "BRANCH" and any(_body_can_repeat(branch) for branch in arg[1]):
            return True
    return False


def _nested_unbounded(items: Any) -> bool:
    for op, arg in items:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            _low, high, sub = arg
            if _is_unbounded(high) and _body_can_repeat(sub) and not _separated(sub):
                return True
            if _nested_unbounded(sub):
                return True
        elif name == "SUBPATTERN":
            if _nested_unbounded(arg[-1]):
                return True
        elif name == "BRANCH":
            if any(_nested_unbounded(branch) for branch in arg[1]):
                return True
        elif name in ("ASSERT", "ASSERT_NOT") and _nested_unbounded(arg[1]):
            return True
    return False


def _separated(sub: Any) -> bool:
    """`(?:\\d+\\.)+` is safe: each round must end in a literal that the inner repeat cannot eat."""
    items = list(sub)
    while len(items) == 1 and str(items[0][0]) == "SUBPATTERN":
        items = list(items[0][1][-1])
    if len(items) < 2:
        return False
    last_op, last_arg = items[-1]
    if str(last_op) != "LITERAL":
        return False
    char = chr(last_arg)
    for op, arg in items[:-1]:
        if str(op) in ("MAX_REPEAT", "MIN_REPEAT") and _is_unbounded(arg[1]) and _can_match_char(arg[2], char):
            return False
    return True


def _can_match_char(items: Any, char: str) -> bool:
    # Rebuild a tiny pattern and ask `re` itself; anything unusual counts as "can match".
    try:
        for op, arg in items:
            name = str(op)
            if name == "LITERAL":
                return chr(arg) == char
            if name == "NOT_LITERAL":
                return chr(arg) != char
            if name == "IN":
                probe = "".join(_class_text(x) for x in arg)
                return re.fullmatch(f"[{probe}]", char) is not None
            if name == "ANY":
                return char != "\n"
            return True
    except Exception:
        return True
    return True


def _class_text(item: Any) -> str:
    op, arg = item
    name = str(op)
    if name == "LITERAL":
        return re.escape(chr(arg))
    if name == "RANGE":
        return f"{re.escape(chr(arg[0]))}-{re.escape(chr(arg[1]))}"
    if name == "CATEGORY":
        return {"CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
                "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W"}.get(str(arg), r"\s\S")
    if name == "NEGATE":
        return "^"
    return r"\s\S"


def static_problem(pattern: str) -> str | None:
    """A reason the pattern can backtrack catastrophically, or None."""
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:
        return None  # `regex`-only syntax: the torture run still applies
    if _nested_unbounded(parsed):
        return "nested unbounded repeats (like (a+)+) can backtrack catastrophically"
    return None


def _torture_lines(pattern: str) -> list[str]:
    words = [w for w in re.findall(r"[A-Za-z]{3,}", pattern)][:4]
    lines = [" " * 16384 + "\x01", "a" * 16384 + "!", "0" * 16384 + "!", "a " * 8192, "1." * 8192 + "!"]
    lines += [(w + " ") * (16384 // (len(w) + 1)) for w in words]
    # A pattern's own words followed by a long run that almost fits is where backtracking bites.
    lines += [w + " " * 16384 + "\x01" for w in words]
    lines += [w + ": " + "a " * 8192 + "\x01" for w in words]
    return lines


def torture_problem(pattern: str, timeout: float = TORTURE_TIMEOUT) -> str | None:
    """Run the pattern over adversarial 16 KiB lines; a timeout means it would hang on real logs."""
    compiled = regex.compile(pattern)
    for line in _torture_lines(pattern):
        try:
            compiled.search(line, timeout=timeout)
        except TimeoutError:
            return f"took over {timeout} s on a 16 KiB test line: it would hang on long log lines"
    return None


def check_pattern(pattern: str, check_hang: bool = True) -> str | None:
    """Why a line pattern is unusable, or None."""
    import regex

    try:
        compiled = regex.compile(pattern)
    except regex.error as exc:
        return f"bad regex {pattern!r}: {exc}"
    if compiled.search("") is not None:
        return f"regex {pattern!r} matches an empty line, so it would match every line"
    if check_hang:
        problem = static_problem(pattern) or torture_problem(pattern)
        if problem:
            return f"regex {pattern!r}: {problem}"
    return None
