"""Rule patterns as POSIX ERE supersets for `LC_ALL=C grep -a -n -E -f -` on another machine.

A remote log is not copied: grep runs beside it and sends back only the lines that may match,
which the local scanner then confirms with the real patterns (engine/scan.py). So each ERE
must match, on the raw bytes of a '\\n'-ended line, wherever the rule pattern matches one of
the lines as users see them (split at '\\r' too, ANSI escapes removed, invalid UTF-8 as U+FFFD):
a superset, never a translation that could miss a line. It is written from the same parsed
and trimmed items as the hyperscan superset (prefilter.py), with ERE spelling:

- `^`/`$` also hold at a '\\r' (`(^|CR)`, `($|CR)` with a raw CR byte); under LC_ALL=C every
  byte is one character, so a decoded non-ASCII character is `[\\x80-\\xff]{1,4}` (raw bytes)
  and non-ASCII literals are their UTF-8 bytes;
- NUL and newline bytes cannot be written in a pattern file: a class holding NUL is written
  as the negation of what it lacks, a literal NUL or newline as `.` (wider, still sound);
- bounded repeats with large counts are loosened (`{lo,hi}` -> `{min(lo,16),}`), as grep's
  DFA grows with the count;
- lookaround, `\\b`, backreferences are dropped or widened (prefilter.py), never kept.

Lines holding an escape character (ESC) are always candidates: the scanner removes escape
sequences before matching, so a pattern may match across one (`ESCAPE_PATTERN`).
"""

from __future__ import annotations

from typing import Any

from diagnose.patterns.prefilter import MAXREPEAT, Anchors, Unsupported, _Writer, prepared

CR = "\r"
HIGH = "[\x80-\xff]"  # one byte >= 0x80, raw (the pattern file is bytes, latin-1 here)
ESCAPE_PATTERN = "\x1b"
_SPECIAL = set(".[()*+?{|^$\\")
_BRACKET_SPECIAL = {ord("]"), ord("^"), ord("-"), ord("[")}
_MAX_COUNT = 16
FOR_ERE = Anchors(f"(^|{CR})", f"($|{CR})")


class _EreWriter(_Writer):
    OPEN = "("
    NEVER = "$.$"  # the end of a line followed by a byte: never (GNU ERE takes $ anywhere as an anchor)
    ANY_RUN = ".*"

    def char(self, code: int) -> str:
        if code in (0, 10):
            return "."  # cannot be written in a pattern file; `.` is wider
        ch = chr(code)
        return "\\" + ch if ch in _SPECIAL else ch

    def klass(self, codes: set[int]) -> str:
        codes = set(codes) - {10}  # a line never holds '\n': dropping it changes nothing
        if not codes:
            return self.NEVER
        if 0 in codes:
            # NUL cannot be written: write what the class lacks, negated (its complement holds no NUL).
            missing = set(range(1, 256)) - codes - {10}
            return "." if not missing else "[^" + _bracket_body(missing) + "]"
        if len(codes) == 1:
            return self.char(next(iter(codes)))
        return "[" + _bracket_body(codes) + "]"

    def nonascii(self) -> str:
        return HIGH + "{1,4}"

    def utf8(self, ch: str) -> str:
        return "".join(chr(b) for b in ch.encode("utf-8"))  # raw bytes, as latin-1 characters

    def repeat(self, body: str, lo: int, hi: int) -> str:
        if hi != MAXREPEAT and hi > _MAX_COUNT:
            hi = MAXREPEAT
        if lo > _MAX_COUNT:
            lo = _MAX_COUNT
        if hi == 1 and lo == 0:
            return body + "?"
        return super().repeat(body, lo, hi)

    def item(self, op: Any, arg: Any, flags: int) -> str:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = arg
            sub_items = list(sub)
            # One character repeated a bounded number of times: as bytes, each 1-4 of them, a
            # class with the bytes >= 0x80 repeated up to 4x as often says the same without
            # the alternation that multiplies grep's automaton.
            if (int(hi) != MAXREPEAT and len(sub_items) == 1 and str(sub_items[0][0]) in ("ANY", "IN", "NOT_LITERAL")):
                body = self.one_char(sub_items[0][0], sub_items[0][1], flags, repeated=True)
                return self.repeat(body, int(lo), int(hi) * 4)
        return super().item(op, arg, flags)


def _bracket_body(codes: set[int]) -> str:
    """Bracket members (no NUL, no newline) in POSIX's rules: ']' first, '[' late (never before
    ':', '.', '='), '^' not first, '-' last; ranges of three or more between plain bytes."""
    plain = sorted(codes - _BRACKET_SPECIAL)
    parts: list[str] = []
    i = 0
    while i < len(plain):
        j = i
        while j + 1 < len(plain) and plain[j + 1] == plain[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{chr(plain[i])}-{chr(plain[j])}")
        else:
            parts.extend(chr(code) for code in plain[i : j + 1])
        i = j + 1
    body = ("]" if ord("]") in codes else "") + "".join(parts) + ("[" if ord("[") in codes else "")
    if ord("^") in codes:
        body += "^"
    if ord("-") in codes:
        body = "-" + body if body == "^" else body + "-"
    return body  # a lone "^" comes only negated ("[^^]"): one member is written as itself


def to_ere(pattern: str) -> bytes:
    """The ERE superset of `pattern`, as the bytes of one pattern-file line (no NUL, no newline).

    Raises Unsupported for what Python's parser cannot read as `regex` does (`\\p{L}`, POSIX
    classes): such a pattern cannot be searched remotely."""
    items, flags = prepared(pattern)
    text = _EreWriter(FOR_ERE).seq(items, flags)
    if not text:
        raise Unsupported("nothing left to search for")
    data = text.encode("latin-1")
    assert b"\n" not in data and b"\0" not in data
    return data


def pattern_file(patterns: list[str]) -> tuple[bytes, list[int]]:
    """The pattern file for grep -E -f: every pattern it can write, plus ESC; and the indexes of
    the patterns it could not write (those need the whole file, or a gap)."""
    lines: list[bytes] = [ESCAPE_PATTERN.encode()]
    refused: list[int] = []
    seen: set[bytes] = set()
    for index, pattern in enumerate(patterns):
        try:
            line = to_ere(pattern)
        except Unsupported:
            refused.append(index)
            continue
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return b"\n".join(lines) + b"\n", refused
