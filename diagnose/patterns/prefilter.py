"""Prefilter patterns: a byte-level superset of each rule pattern, for finding candidate lines.

The scanner searches whole chunks of raw bytes, but a rule pattern is defined on one line as
users see it: decoded text (Unicode `\\w`, `\\d`, `.` as one character), with '\\r' progress
updates as lines of their own. So each pattern is parsed (with Python's own parser) and written
back as a bytes pattern that matches at least wherever the rule pattern matches a line:

- `^`, `$`, `\\A`, `\\Z` also hold at a '\\r', and `^` after a ':', ' ' or ']' that may end a
  launcher's prefix (as `(?<=\\r)`/`(?=\\r)` for `regex`, as a consumed
  '\\r' for hyperscan, which has no lookaround; the scanner maps hyperscan's match end back to
  the line holding the match's last byte);
- a character class or `.` may also eat one non-ASCII character, i.e. 1-4 bytes >= 0x80, and
  non-ASCII literals become their UTF-8 bytes (U+FFFD: any 1-4 bytes >= 0x80, as invalid UTF-8
  decodes to it); case-insensitive letters list their cases;
- zero-width assertions that can't be kept exactly (lookaround, `\\b`, `\\B`) are dropped and
  backreferences become their group's pattern: dropping a condition only widens the match.

Every candidate line is then confirmed with the real pattern, so widening costs a little time
and never changes results. Patterns Python's parser can't read (`regex`-only syntax such as
`\\p{L}` or POSIX classes) get no prefilter: the scanner searches them line by line, exactly.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from diagnose.patterns.sre import constants as _constants
from diagnose.patterns.sre import parser as _parser

MAXREPEAT = int(_constants.MAXREPEAT)
_IGNORECASE = int(_constants.SRE_FLAG_IGNORECASE)
_DOTALL = int(_constants.SRE_FLAG_DOTALL)
_VERBOSE = int(_constants.SRE_FLAG_VERBOSE)
_ASCII = int(_constants.SRE_FLAG_ASCII)
_NONASCII_CHAR = r"[\x80-\xff]{1,4}"  # one decoded character: valid UTF-8, or up to 3 invalid bytes as U+FFFD
_REPLACEMENT = "\ufffd"  # how invalid UTF-8 shows in a line
# Non-ASCII characters that `regex` matches case-insensitively with an ASCII letter.
_ODD_CASES = "\u0130\u0131\u017f\u212a\u212b"
_SINGLE = ("LITERAL", "NOT_LITERAL", "ANY", "IN")


class Unsupported(ValueError):
    """The pattern uses syntax Python's parser does not read the way `regex` does."""


class Anchors:
    """How line starts and ends are written for one engine."""

    def __init__(self, start: str, end: str) -> None:
        self.start = start
        self.end = end


# A line's start also holds after a launcher's prefix (lines.split_prefix), which always ends in
# ':', ' ' or ']': rules read the line as the program wrote it.
FOR_REGEX = Anchors(r"(?:^|(?<=[\r: \]]))", r"(?:$|(?=\r))")
FOR_HYPERSCAN = Anchors(r"(?:^|[\r: \]])", r"(?:$|\r)")


def _byte(code: int) -> str:
    ch = chr(code)
    return ch if ch.isascii() and ch.isalnum() else f"\\x{code:02x}"


def escape_bytes(data: bytes) -> bytes:
    """`data` as a pattern that matches exactly it (for `regex` bytes patterns and hyperscan)."""
    return "".join(_byte(code) for code in data).encode("ascii")


def _ranges(codes: set[int]) -> str:
    out: list[str] = []
    ordered = sorted(codes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        lo, hi = ordered[i], ordered[j]
        out.append(_byte(lo) if lo == hi else f"{_byte(lo)}-{_byte(hi)}")
        i = j + 1
    return "".join(out)


def _case_variants(ch: str) -> set[str]:
    variants = {ch}
    for form in (ch.lower(), ch.upper(), ch.casefold(), ch.title()):
        if form:
            variants.add(form[0])
    for odd in _ODD_CASES:
        low = odd.lower()
        if odd.upper() in variants or (low and low[0] in variants):
            variants.add(odd)
    for variant in list(variants):
        variants.update(v[0] for v in (variant.lower(), variant.upper()) if v)
    return variants


_REGEX_SPACE = "\t\n\x0b\x0c\r "  # the ASCII characters `regex` matches with \s


def _category_has(category: str, ch: str) -> bool:
    if category.endswith("DIGIT"):
        has = ch.isdigit() and ch.isascii() if "NOT" not in category else not (ch.isdigit() and ch.isascii())
        return has
    if category.endswith("SPACE"):
        # Exactly `regex`'s: it does not count \x1c-\x1f as space (str.isspace does), and a
        # negated class ([^\d\s]) is only a superset if what it negates is not widened.
        return ch in _REGEX_SPACE if "NOT" not in category else ch not in _REGEX_SPACE
    if category.endswith("WORD"):
        word = ch.isalnum() or ch == "_"
        return word if "NOT" not in category else not word
    raise Unsupported(f"category {category}")


class _Writer:
    """Writes parsed items as a `regex`/hyperscan bytes pattern; ere.py's writer changes only
    the spelling (the hooks below), never what is matched."""

    OPEN = "(?:"  # a group that captures nothing
    NEVER = "(?!)"  # matches nowhere (a class with no member)
    ANY_RUN = "[^\\n]*"  # a backreference to a group we did not write

    def __init__(self, anchors: Anchors) -> None:
        self.anchors = anchors
        self.groups: dict[int, str] = {}

    def char(self, code: int) -> str:
        """One byte, matched exactly."""
        return _byte(code)

    def klass(self, codes: set[int]) -> str:
        """Any one of these bytes (0-255)."""
        return f"[{_ranges(codes)}]" if codes else self.NEVER

    def nonascii(self) -> str:
        """One decoded non-ASCII character: 1-4 bytes >= 0x80."""
        return _NONASCII_CHAR

    def utf8(self, ch: str) -> str:
        """A non-ASCII character as its UTF-8 bytes."""
        return "".join(f"\\x{b:02x}" for b in ch.encode("utf-8"))

    def repeat(self, body: str, lo: int, hi: int) -> str:
        if hi == MAXREPEAT:
            return body + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
        return body + (f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}")

    def seq(self, items: Any, flags: int) -> str:
        return "".join(self.item(op, arg, flags) for op, arg in items)

    # -- one character

    def literal(self, code: int, flags: int) -> str:
        ch = chr(code)
        if ch == _REPLACEMENT:
            return self.nonascii()  # what invalid UTF-8 decodes to: 1-3 bytes >= 0x80, not EF BF BD
        chars = _case_variants(ch) if flags & _IGNORECASE else {ch}
        ascii_codes = {ord(c) for c in chars if c.isascii()}
        wide = [c for c in chars if not c.isascii()]
        parts = []
        if ascii_codes:
            parts.append(self.char(next(iter(ascii_codes))) if len(ascii_codes) == 1 else self.klass(ascii_codes))
        parts.extend(self.utf8(c) for c in sorted(wide))
        return parts[0] if len(parts) == 1 else self.OPEN + "|".join(parts) + ")"

    def members(self, items: Any, flags: int) -> tuple[set[int], bool]:
        """(ASCII codes the class matches, whether it may match a non-ASCII character)."""
        negate = False
        checks: list[Any] = []
        wide = False
        for op, arg in items:
            name = str(op)
            if name == "NEGATE":
                negate = True
            elif name == "LITERAL":
                chars = _case_variants(chr(arg)) if flags & _IGNORECASE else {chr(arg)}
                checks.append(lambda c, s=chars: c in s)
                wide = wide or any(not c.isascii() for c in chars)
            elif name == "RANGE":
                lo, hi = arg
                fold = bool(flags & _IGNORECASE)
                checks.append(lambda c, lo=lo, hi=hi, fold=fold: lo <= ord(c) <= hi or (
                    fold and any(lo <= ord(v) <= hi for v in _case_variants(c))))
                wide = wide or hi >= 0x80 or fold
            elif name == "CATEGORY":
                category = str(arg)
                _category_has(category, "a")  # raises for categories we do not know
                checks.append(lambda c, cat=category: _category_has(cat, c))
                wide = True  # Unicode digits, spaces, word characters; negations too
            else:
                raise Unsupported(f"class item {name}")
        codes = {code for code in range(128) if any(check(chr(code)) for check in checks)}
        if negate:
            codes = set(range(128)) - codes
            wide = True
        return codes, wide

    def one_char(self, op: Any, arg: Any, flags: int, repeated: bool) -> str:
        """One decoded character as bytes; `repeated` (inside an unbounded repeat) lets each
        byte >= 0x80 stand alone, since a run of them covers any run of characters."""
        name = str(op)
        if name == "LITERAL":
            return self.literal(arg, flags)
        if name == "ANY":
            codes = set(range(128)) if flags & _DOTALL else set(range(128)) - {10}
            wide = True
        elif name == "NOT_LITERAL":
            codes, wide = self.members([(_constants.NEGATE, None), (_constants.LITERAL, arg)], flags)
        else:
            codes, wide = self.members(arg, flags)
        if repeated:
            codes = codes | (set(range(0x80, 0x100)) if wide else set())
            return self.klass(codes)
        ascii_part = self.klass(codes) if codes else ""
        if not wide:
            return ascii_part or self.NEVER
        return f"{self.OPEN}{ascii_part}|{self.nonascii()})" if ascii_part else self.nonascii()

    # -- structure

    def item(self, op: Any, arg: Any, flags: int) -> str:
        name = str(op)
        if name in _SINGLE:
            return self.one_char(op, arg, flags, repeated=False)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            lo, hi, sub = arg
            lo, hi = int(lo), int(hi)
            unbounded = hi == MAXREPEAT
            sub_items = list(sub)
            if unbounded and len(sub_items) == 1 and str(sub_items[0][0]) in _SINGLE and str(sub_items[0][0]) != "LITERAL":
                body = self.one_char(sub_items[0][0], sub_items[0][1], flags, repeated=True)
            else:
                body = self.OPEN + self.seq(sub_items, flags) + ")"
            return self.repeat(body, lo, hi)
        if name == "SUBPATTERN":
            group, add_flags, del_flags, sub = arg
            inner = (flags | int(add_flags)) & ~int(del_flags)
            if inner & _VERBOSE:
                raise Unsupported("verbose flag")
            text = self.OPEN + self.seq(sub, inner) + ")"
            if group is not None:
                self.groups[int(group)] = text
            return text
        if name == "ATOMIC_GROUP":
            return self.OPEN + self.seq(arg, flags) + ")"
        if name == "BRANCH":
            return self.OPEN + "|".join(self.seq(branch, flags) for branch in arg[1]) + ")"
        if name == "AT":
            at = str(arg)
            if at in ("AT_BEGINNING", "AT_BEGINNING_STRING", "AT_BEGINNING_LINE"):
                return self.anchors.start
            if at in ("AT_END", "AT_END_STRING", "AT_END_LINE"):
                return self.anchors.end
            if at in ("AT_BOUNDARY", "AT_NON_BOUNDARY", "AT_LOC_BOUNDARY", "AT_LOC_NON_BOUNDARY",
                      "AT_UNI_BOUNDARY", "AT_UNI_NON_BOUNDARY"):
                return ""  # dropping a condition only widens the match
            raise Unsupported(f"anchor {at}")
        if name in ("ASSERT", "ASSERT_NOT"):
            return ""
        if name == "GROUPREF":
            return self.groups.get(int(arg), self.ANY_RUN)
        if name == "GROUPREF_EXISTS":
            _cond, yes, no = arg
            return self.OPEN + self.seq(yes, flags) + "|" + (self.seq(no, flags) if no is not None else "") + ")"
        raise Unsupported(f"construct {name}")


_NAMED_GROUP = re.compile(r"\(\?<(?![=!])")


def prefilter(pattern: str, anchors: Anchors) -> bytes:
    """A bytes pattern that matches wherever `pattern` matches a line (see the module doc).

    Raises Unsupported when Python's parser cannot read the pattern as `regex` does."""
    items, flags = prepared(pattern)
    text = _Writer(anchors).seq(items, flags)
    if not text:
        raise Unsupported("nothing left to search for")
    return text.encode("ascii")


def prepared(pattern: str) -> tuple[list[Any], int]:
    """The pattern parsed (Python's parser), with its flags, trimmed to the part between its
    first and last literal text where that part still holds a text worth finding: what every
    superset writer (this module's, the ERE one of ere.py) writes out.

    Raises Unsupported when Python's parser cannot read the pattern as `regex` does."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "possible nested set": a POSIX class in `regex`
            try:
                parsed = _parser.parse(pattern)
            except Exception:
                # `regex` also spells named groups (?<name>...); nothing else changes meaning.
                parsed = _parser.parse(_NAMED_GROUP.sub("(?P<", pattern))
    except Exception as exc:
        raise Unsupported(str(exc)) from None
    flags = int(parsed.state.flags)
    if flags & _VERBOSE:
        raise Unsupported("verbose flag")
    if flags & _ASCII:
        flags &= ~_ASCII  # ASCII-only classes are a subset of the Unicode ones we write
    items = list(parsed)
    for trim in (_trim_tail, _trim_head):
        trimmed = trim(items)
        found = _required(trimmed, flags) if trimmed is not items else None
        if found is not None and _score(found)[0] >= _MIN_TRIMMED:
            items = trimmed
    return items, flags


_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
_MIN_TRIMMED = 4  # a trimmed superset must still hold a text this long


def _trim_tail(items: list[Any]) -> list[Any]:
    """The pattern without what follows its last literal character (`loss [\\d.]+` -> `loss `).

    A match of the pattern starts with a match of this prefix, so the prefix is a superset;
    and it ends once per match instead of once per character a trailing repeat could stop
    at, which matters for hyperscan, which reports every end."""
    trimmed = list(items)
    while trimmed:
        op, arg = trimmed[-1]
        name = str(op)
        if name == "SUBPATTERN":
            group, add_flags, del_flags, sub = arg
            inner = _trim_tail(list(sub))
            if inner:
                trimmed[-1] = (op, (group, add_flags, del_flags, inner))
                break
        elif name == "LITERAL" or name in ("BRANCH", "ATOMIC_GROUP", "GROUPREF_EXISTS"):
            break
        trimmed.pop()  # a class, a repeat, an anchor, a lookaround, a backreference
    return trimmed if trimmed != items else items


def _trim_head(items: list[Any]) -> list[Any]:
    """The pattern from its first literal character on (`^\\s*Killed` -> `Killed`): a match of
    the pattern ends with a match of this suffix, in the same line; and an automaton that must
    start at every line (`^\\s*`) or every character (`[^\\s:]+`) is what costs hyperscan time."""
    trimmed = list(items)
    while trimmed:
        op, arg = trimmed[0]
        name = str(op)
        if name == "SUBPATTERN":
            group, add_flags, del_flags, sub = arg
            inner = _trim_head(list(sub))
            if inner:
                trimmed[0] = (op, (group, add_flags, del_flags, inner))
                break
        elif name == "LITERAL" or name in ("BRANCH", "ATOMIC_GROUP", "GROUPREF_EXISTS"):
            break
        trimmed.pop(0)
    return trimmed if trimmed != items else items


# ASCII letters whose case-insensitive matches include non-ASCII letters (the dotted and
# dotless I, the Kelvin sign, the long s); a test holds this to _case_variants.
_ODD_LETTERS = frozenset("iIkKsS")


def required_literals(pattern: str) -> list[tuple[bytes, bool]] | None:
    """Texts (as UTF-8) of which every match of `pattern` holds at least one, each with
    whether it is to be found case-insensitively (then it is ASCII, in lower case); None if
    the pattern guarantees none. `a(?:bcd|efg)h` gives [bcd, efg]: longer texts are rarer.

    A line can only match if its bytes hold one of them, so finding them with bytes.find is a
    fast superset search. Under (?i) a text stops at i, k and s, whose other cases include
    non-ASCII letters (a dotted I, the Kelvin sign, a long s) that lower() would not find.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            parsed = _parser.parse(_NAMED_GROUP.sub("(?P<", pattern) if "(?<" in pattern else pattern)
    except Exception:
        return None
    found = _required(list(parsed), int(parsed.state.flags))
    if found is None:
        return None
    return [(text.encode("utf-8"), fold) for text, fold in found]


def literals_are_whole(pattern: str) -> bool:
    """Whether finding `required_literals(pattern)` is as selective as the pattern's superset:
    what is left of it once trimmed (`prepared`) is one of those texts, whole.

    Then a finder may search the texts (hyperscan's fastest matcher). Otherwise the superset
    says more than the texts: `grad_norm\\s*[:=]\\s*nan` holds `grad_norm`, which every step line
    of a training log prints, but a line is a candidate only where `nan` follows it."""
    try:
        items, flags = prepared(pattern)
    except Unsupported:
        return False
    texts = _spelled(items, bool(flags & _IGNORECASE))
    required = required_literals(pattern)
    if not texts or required is None:
        return False
    return sorted(texts) == sorted((text.decode("utf-8"), fold) for text, fold in required)


_SPELLED_MAX = 16  # texts a literal-only pattern may spell before it counts as not whole


def _spelled(items: Any, fold: bool) -> list[tuple[str, bool]] | None:
    """The texts a pattern made of literals, groups and alternations alone matches (lower case
    under (?i)); None if it holds anything else, or more than _SPELLED_MAX texts."""
    texts = [""]
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            ch = chr(arg)
            texts = [text + (ch.lower() if fold else ch) for text in texts]
            continue
        if name == "SUBPATTERN":
            inner = _spelled(arg[3], fold)
            if inner is None or any(inner_fold != fold for _, inner_fold in inner):
                return None  # a group that changes the case flag: not one plain text
            options = [text for text, _ in inner]
        elif name == "BRANCH":
            options = []
            for branch in arg[1]:
                inner = _spelled(branch, fold)
                if inner is None:
                    return None
                options.extend(text for text, _ in inner)
        else:
            return None
        texts = [text + option for text in texts for option in options]
        if len(texts) > _SPELLED_MAX:
            return None
    return [(text, fold) for text in texts]


def _score(texts: list[tuple[str, bool]]) -> tuple[int, int]:
    return min(len(text.encode("utf-8")) for text, _ in texts), -len(texts)


def _required(items: Any, flags: int) -> list[tuple[str, bool]] | None:
    options: list[list[tuple[str, bool]]] = []
    run: list[str] = []
    fold = bool(flags & _IGNORECASE)

    def flush() -> None:
        if run:
            options.append([("".join(run), fold)])
            run.clear()

    def add(found: list[tuple[str, bool]] | None) -> None:
        flush()
        if found:
            options.append(found)

    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            ch = chr(arg)
            if ch != _REPLACEMENT and (not fold or (ch.isascii() and ch not in _ODD_LETTERS)):
                run.append(ch.lower() if fold else ch)  # non-ASCII: its UTF-8 bytes
                continue
            flush()
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue  # zero-width: the text around it stays contiguous
        elif name == "SUBPATTERN":
            _group, add_flags, del_flags, sub = arg
            add(_required(sub, (flags | int(add_flags)) & ~int(del_flags)))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and int(arg[0]) >= 1:
            add(_required(arg[2], flags))  # the repeated part appears at least once
        elif name == "ATOMIC_GROUP":
            add(_required(arg, flags))
        elif name == "BRANCH":
            branches = [_required(branch, flags) for branch in arg[1]]
            complete = all(found is not None for found in branches)
            add([text for found in branches if found is not None for text in found] if complete else None)
        else:
            flush()
    flush()
    return max(options, key=_score) if options else None
