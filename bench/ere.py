"""Translate rule patterns (Python `regex` syntax) into POSIX ERE for `grep -E` (and into the
same shapes in Rust regex syntax for `rg`).

The pattern is parsed with Python's own regex parser and written back as ERE, so the
translation is structural, not textual: named and non-capturing groups become plain groups,
\\d becomes [0-9], \\s [[:space:]], \\w [[:alnum:]_], (?i) spells each letter as [aA],
lazy quantifiers become greedy (same set of matching lines). What ERE cannot say at all
(lookaround, backreferences, possessive/atomic groups) is dropped or loosened, which can only
make grep match more lines; such patterns are reported as approximate. The benchmark checks
the translation by comparing grep's line count with Python's on a sample.
"""

from __future__ import annotations

from typing import Any

from diagnose.patterns.sre import constants as _constants
from diagnose.patterns.sre import parser as _parser

_SPECIAL = set(".[]()*+?{}|^$\\")
_MAXREPEAT = _constants.MAXREPEAT
_IGNORECASE = _constants.SRE_FLAG_IGNORECASE
_CLASS = {
    "CATEGORY_DIGIT": "0-9",
    "CATEGORY_SPACE": "[:space:]",
    "CATEGORY_WORD": "[:alnum:]_",
}
_NEGATED = {
    "CATEGORY_NOT_DIGIT": "CATEGORY_DIGIT",
    "CATEGORY_NOT_SPACE": "CATEGORY_SPACE",
    "CATEGORY_NOT_WORD": "CATEGORY_WORD",
}


_ATOMS = ("LITERAL", "NOT_LITERAL", "ANY", "IN", "SUBPATTERN", "BRANCH", "ATOMIC_GROUP")


class Untranslatable(ValueError):
    pass


class _Writer:
    def __init__(self, rust: bool = False) -> None:
        self.rust = rust  # Rust regex (rg): '\\' escapes inside brackets too
        self.approximate: list[str] = []

    def group(self) -> str:
        return "(?:" if self.rust else "("

    def seq(self, items: Any, fold: bool) -> str:
        return "".join(self.item(op, arg, fold) for op, arg in items)

    def char(self, code: int, fold: bool) -> str:
        ch = chr(code)
        if fold and ch.lower() != ch.upper() and len(ch.lower()) == 1 and len(ch.upper()) == 1:
            return f"[{ch.lower()}{ch.upper()}]"
        if self.rust and (code < 32 or code == 127):
            return f"\\x{code:02x}"
        return "\\" + ch if ch in _SPECIAL else ch

    def bracket(self, items: Any, fold: bool) -> str:
        negate = False
        parts: list[str] = []
        literals: set[str] = set()
        for op, arg in items:
            name = str(op)
            if name == "NEGATE":
                negate = True
            elif name == "LITERAL":
                ch = chr(arg)
                literals.add(ch)
                if fold:
                    literals.update({ch.lower(), ch.upper()})
            elif name == "RANGE":
                lo, hi = arg
                parts.append(f"{chr(lo)}-{chr(hi)}")
                if fold:
                    for code in range(lo, hi + 1):
                        c = chr(code)
                        if c.lower() != c.upper():
                            literals.update({c.lower(), c.upper()})
            elif name == "CATEGORY":
                cat = str(arg)
                if cat in _CLASS:
                    parts.append(_CLASS[cat])
                else:
                    raise Untranslatable(f"negated class {cat} inside brackets")
            else:
                raise Untranslatable(f"bracket item {name}")
        if self.rust:
            body = "".join(
                f"\\x{ord(c):02x}" if ord(c) < 32 or ord(c) == 127 else "\\" + c if c in "\\[]-^&~" else c
                for c in sorted(literals)
            ) + "".join(parts)
            return f"[{'^' if negate else ''}{body}]"
        # POSIX bracket rules: ']' first, '-' last, '^' not first; '\\' is literal.
        close = "]" in literals
        dash = "-" in literals
        caret = "^" in literals
        rest = sorted(literals - {"]", "-", "^"})
        body = ("]" if close else "") + "".join(rest) + "".join(parts) + ("^" if caret else "") + ("-" if dash else "")
        if body == "^":  # '[^]' would not parse
            return "[^^]" if negate else "\\^"
        return f"[{'^' if negate else ''}{body}]"

    def item(self, op: Any, arg: Any, fold: bool) -> str:
        name = str(op)
        if name == "LITERAL":
            return self.char(arg, fold)
        if name == "NOT_LITERAL":
            return self.bracket([(_constants.NEGATE, None), (_constants.LITERAL, arg)], fold)
        if name == "ANY":
            return "."
        if name == "IN":
            if len(arg) == 1 and str(arg[0][0]) == "CATEGORY" and str(arg[0][1]) in _NEGATED:
                return "[^" + _CLASS[_NEGATED[str(arg[0][1])]] + "]"
            return self.bracket(arg, fold)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = arg
            if name == "POSSESSIVE_REPEAT":
                self.approximate.append("possessive repeat written as greedy")
            body = self.seq(sub, fold)
            if not (len(sub) == 1 and str(sub[0][0]) in _ATOMS):
                body = f"{self.group()}{body})"
            if hi == _MAXREPEAT:
                return body + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
            if lo == 0 and hi == 1:
                return body + "?"
            return body + (f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}")
        if name == "SUBPATTERN":
            _group, add_flags, del_flags, sub = arg
            inner_fold = (fold or bool(add_flags & _IGNORECASE)) and not bool(del_flags & _IGNORECASE)
            return self.group() + self.seq(sub, inner_fold) + ")"
        if name == "ATOMIC_GROUP":
            self.approximate.append("atomic group written as a plain group")
            return self.group() + self.seq(arg, fold) + ")"
        if name == "BRANCH":
            _none, branches = arg
            return self.group() + "|".join(self.seq(b, fold) for b in branches) + ")"
        if name == "AT":
            at = str(arg)
            if at in ("AT_BEGINNING", "AT_BEGINNING_STRING"):
                return "^"
            if at in ("AT_END", "AT_END_STRING"):
                return "$"
            if at == "AT_BOUNDARY":
                return "\\b"
            if at == "AT_NON_BOUNDARY":
                return "\\B"
            raise Untranslatable(f"anchor {at}")
        if name in ("ASSERT", "ASSERT_NOT"):
            self.approximate.append("lookaround dropped")
            return ""
        if name in ("GROUPREF", "GROUPREF_EXISTS"):
            raise Untranslatable("backreference")
        raise Untranslatable(f"construct {name}")


def to_ere(pattern: str, rust: bool = False) -> tuple[str, list[str]]:
    """(ERE text, or Rust regex text for rg; notes on what had to be approximated)."""
    try:
        parsed = _parser.parse(pattern)
    except Exception as exc:  # regex-module-only syntax, e.g. \p{L}
        raise Untranslatable(f"not parseable by Python's re: {exc}") from None
    writer = _Writer(rust)
    fold = bool(parsed.state.flags & _IGNORECASE)
    text = writer.seq(list(parsed), fold)
    return text, writer.approximate
