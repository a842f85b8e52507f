"""Guards against rule patterns that would hang the scan (catastrophic backtracking).

`regex` is a backtracking matcher: a pattern hangs when it can match the same text in many
ways and something after it fails, so every way is tried. Two checks:

- a static one, over the pattern's syntax tree (alternations kept as written, see sre.py),
  refusing a repeat (`*`, `+`, `{n,}`, `{n,m}` with m > 1) whose body can match one text in
  more than one way: a body that can match empty text (`(a?)*`), alternatives that can start
  with the same character (`(a|ab)+`, `(\\w|\\d)+`), or an inner variable repeat that can
  run across the boundary between two rounds (`(a+)+`, `(\\w+\\s?)+`, `(.*a){10}`); and, outside
  repeats, two long repeats over overlapping characters with only shared characters between
  them and something after that can fail (`\\s+\\s+$`, `.*x.*y`): polynomial, but a 64 KiB line
  is long enough for n^3 to hang. Characters are compared on a probe alphabet: every
  character the pattern names, every range end, and one of each common class.
- a torture run on adversarial 16 KiB lines under a time limit, for what the tree cannot
  show (`regex`-only syntax sre cannot parse, back-references).

At scan time every confirmation also runs under a per-line time limit and a per-file budget
(scan.py), so a pattern that slips through costs a reported gap, never a hang.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import regex

from diagnose.patterns.sre import raw_parse

TORTURE_TIMEOUT = 0.5
_UNBOUNDED = 65535  # sre's MAXREPEAT shows as a large number
_LONG = 32  # a repeat allowed this many rounds or more is "long" for the polynomial check
_IGNORECASE = 2  # re.IGNORECASE as sre stores it in flags
# One character of each class a rule pattern is likely to name; the pattern's own characters
# and range ends are added per pattern (two ranges that overlap share an end of one of them).
_PROBES = "aAzZ0_9 \t\n.,:;-/\\'\"()[]{}=+*#@!?|<>$%^&~`\x01\x7f\xe9\xc9\xa0\u0660\u2028\U0001f600"
_CATEGORY = {
    "CATEGORY_DIGIT": re.compile(r"\d"), "CATEGORY_NOT_DIGIT": re.compile(r"\D"),
    "CATEGORY_SPACE": re.compile(r"\s"), "CATEGORY_NOT_SPACE": re.compile(r"\S"),
    "CATEGORY_WORD": re.compile(r"\w"), "CATEGORY_NOT_WORD": re.compile(r"\W"),
}

NULLABLE_BODY = "a repeated group that can match empty text, like (a?)*, can split one text in many ways"
OVERLAPPING_BRANCHES = "a repeat over alternatives that can start with the same character, like (a|ab)+ or (\\w|\\d)+, can match one text in many ways"
NESTED = "nested repeats, like (a+)+ or (\\w+\\s?)+, can match one text in many ways"
ADJACENT = "two long repeats over the same characters, like \\s+\\s*$ or .*x.*y, try every split of a long run when what follows fails"
_SUFFIX = " (catastrophic backtracking: it would hang on long log lines)"


@dataclass
class _Info:
    """What a piece of pattern can match, as masks over the probe alphabet."""

    nullable: bool = True
    first: int = 0  # characters a non-empty match can start with
    last: int = 0  # ... and end with
    alpha: int = 0  # every character it can consume
    run: int = 0  # characters c it can match a run of (c, cc, ...): what a repeat of it can eat
    repeats: list[int] = field(default_factory=list)  # alphabets of the variable repeats inside
    overlap: bool = False  # holds an alternation whose branches can start alike
    can_fail: bool = False  # can fail without consuming: an anchor or lookaround
    flat: list[tuple[_Info, bool]] = field(default_factory=list)  # a group's items, for the polynomial check


class _Checker:
    def __init__(self, probes: str) -> None:
        self.probes = probes
        self.all = (1 << len(probes)) - 1
        self.problem: str | None = None

    def flag(self, reason: str) -> None:
        if self.problem is None:
            self.problem = reason

    # -- characters

    def mask(self, test: Any, flags: int) -> int:
        out = 0
        for bit, char in enumerate(self.probes):
            variants = {char, char.lower(), char.upper()} if flags & _IGNORECASE else (char,)
            if any(test(c) for c in variants):
                out |= 1 << bit
        return out

    def class_mask(self, items: Any, flags: int) -> int:
        items = list(items)
        negate = bool(items) and str(items[0][0]) == "NEGATE"
        tests = [_member(op, arg) for op, arg in (items[1:] if negate else items)]
        hit = self.mask(lambda c: any(t(c) for t in tests), flags)
        return self.all & ~hit if negate else hit

    # -- the tree

    def seq(self, items: Any, flags: int, top: bool = False) -> _Info:
        parts = [self.item(op, arg, flags) for op, arg in items]
        flat = _flatten(items, parts)
        self.polynomial(flat, top)
        out = _Info(flat=flat)
        for part in parts:
            if out.nullable:
                out.first |= part.first
            out.nullable = out.nullable and part.nullable
            out.alpha |= part.alpha
            out.repeats += part.repeats
            out.overlap = out.overlap or part.overlap
            out.can_fail = out.can_fail or part.can_fail
        for part in reversed(parts):
            out.last |= part.last
            if not part.nullable:
                break
        needed = [part.run for part in parts if not part.nullable]
        out.run = _all_of(needed) if needed else _any_of(part.run for part in parts)
        return out

    def item(self, op: Any, arg: Any, flags: int) -> _Info:
        name = str(op)
        if name == "LITERAL":
            return self.char(self.mask(lambda c: c == chr(arg), flags))
        if name == "NOT_LITERAL":
            return self.char(self.all & ~self.mask(lambda c: c == chr(arg), flags))
        if name == "IN":
            return self.char(self.class_mask(arg, flags))
        if name == "ANY":
            return self.char(self.all)
        if name in ("SUBPATTERN", "ATOMIC_GROUP"):
            if name == "ATOMIC_GROUP":
                return self.seq(arg, flags)
            _group, add, remove, sub = arg
            return self.seq(sub, (flags | add) & ~remove)
        if name == "BRANCH":
            branches = [self.seq(branch, flags) for branch in arg[1]]
            out = _Info(nullable=any(b.nullable for b in branches))
            seen = 0
            for branch in branches:
                # Two branches that can start alike (or one that can match nothing beside
                # another) are two ways into the same text.
                if branch.first & seen or (branch.nullable and len(branches) > 1):
                    out.overlap = True
                seen |= branch.first
                out.first |= branch.first
                out.last |= branch.last
                out.alpha |= branch.alpha
                out.run |= branch.run
                out.repeats += branch.repeats
                out.overlap = out.overlap or branch.overlap
                out.can_fail = out.can_fail or branch.can_fail
            return out
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            body = self.seq(sub, flags)
            if int(high) >= 2 and body.alpha:
                self.repeat(body)
            out = _Info(nullable=int(low) == 0 or body.nullable, first=body.first, last=body.last,
                        alpha=body.alpha, run=body.run, repeats=list(body.repeats), overlap=body.overlap, can_fail=body.can_fail)
            if int(high) != int(low) and body.alpha:
                out.repeats.append(body.alpha)
            return out
        if name in ("ASSERT", "ASSERT_NOT"):
            self.seq(arg[1], flags)  # a lookaround runs at every position: it must be safe too
            return _Info(can_fail=True)
        if name == "AT":
            return _Info(can_fail=True)
        if name == "GROUPREF_EXISTS":
            _group, yes, no = arg
            branches = [self.seq(yes, flags)] + ([self.seq(no, flags)] if no is not None else [_Info()])
            return _Info(nullable=any(b.nullable for b in branches), first=self.all, last=self.all,
                         alpha=self.all, run=self.all, can_fail=True)
        # A back-reference, or anything new: it can be anything.
        return _Info(nullable=True, first=self.all, last=self.all, alpha=self.all, run=self.all, can_fail=True)

    @staticmethod
    def char(mask: int) -> _Info:
        return _Info(nullable=False, first=mask, last=mask, alpha=mask, run=mask)

    def repeat(self, body: _Info) -> None:
        """A body repeated more than once must match each text in one way only."""
        if body.nullable:
            self.flag(NULLABLE_BODY)
        elif body.overlap:
            self.flag(OVERLAPPING_BRANCHES)
        elif any(alpha & body.first and alpha & body.last for alpha in body.repeats):
            # An inner repeat that can eat a round's last character and the next round's
            # first can move the boundary between rounds: (a+)+, (\w+\s?)+, (.*a){10}.
            self.flag(NESTED)

    def polynomial(self, flat: list[tuple[_Info, bool]], top: bool) -> None:
        """Long repeats in a row that share a character (with only such characters between
        them) can split one run in many ways: n^2 per start for two, which rules in the pack
        have (after a literal that fixes the start) and the scan budget bounds, but n^3 for
        three, or for two where the match can start anywhere in the run. It only costs when
        something after them can fail."""
        for i, (first, long_first) in enumerate(flat):
            if not long_first:
                continue
            # Where the run can also hold what comes before (nothing, or `x` in x\S+\S+y), a
            # match can start at each of its n characters: one more power of n.
            before = _all_of([info.alpha for info, _ in flat[:i] if not info.nullable]) if top else 0
            common, chain = first.run, 1
            for j in range(i + 1, len(flat)):
                other, long_other = flat[j]
                if long_other and common & other.run:
                    common &= other.run
                    chain += 1
                    rest = flat[j + 1:]
                    fails = not top or any(info.can_fail or not info.nullable for info, _ in rest)
                    if fails and (chain >= 3 or before & common):
                        self.flag(ADJACENT)
                        return
                elif not other.nullable:
                    common &= other.alpha  # a character the run must hold at that point
                if not common:
                    break


def _flatten(items: Any, parts: list[_Info]) -> list[tuple[_Info, bool]]:
    """Each item of a sequence with a mark: is it a long repeat? Plain groups are opened:
    `(?P<a>\\S+)(?P<b>\\S+)` is two repeats in a row."""
    out: list[tuple[_Info, bool]] = []
    for (op, arg), info in zip(items, parts, strict=True):
        if str(op) in ("SUBPATTERN", "ATOMIC_GROUP"):
            out.extend(info.flat)
        elif str(op) in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, _sub = arg
            out.append((info, int(high) >= _LONG and int(high) != int(low)))
        else:
            out.append((info, False))
    return out


def _all_of(masks: list[int]) -> int:
    out = -1
    for mask in masks:
        out &= mask
    return out


def _any_of(masks: Any) -> int:
    out = 0
    for mask in masks:
        out |= mask
    return out


def _member(op: Any, arg: Any) -> Any:
    name = str(op)
    if name == "LITERAL":
        return lambda c: c == chr(arg)
    if name == "RANGE":
        low, high = arg
        return lambda c: low <= ord(c) <= high
    if name == "CATEGORY":
        compiled = _CATEGORY.get(str(arg))
        if compiled is not None:
            return lambda c: compiled.fullmatch(c) is not None
    return lambda c: True  # unknown: assume it can match anything


def _probes(parsed: Any) -> str:
    chars = dict.fromkeys(_PROBES)
    stack = [list(parsed)]
    while stack:
        for op, arg in stack.pop():
            name = str(op)
            if name in ("LITERAL", "NOT_LITERAL"):
                chars.setdefault(chr(arg))
            elif name == "RANGE":
                chars.setdefault(chr(arg[0]))
                chars.setdefault(chr(arg[1]))
            elif name == "IN":
                stack.append(list(arg))
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                stack.append(list(arg[2]))
            elif name == "SUBPATTERN":
                stack.append(list(arg[3]))
            elif name in ("ATOMIC_GROUP",):
                stack.append(list(arg))
            elif name in ("ASSERT", "ASSERT_NOT"):
                stack.append(list(arg[1]))
            elif name == "BRANCH":
                stack.extend(list(b) for b in arg[1])
            elif name == "GROUPREF_EXISTS":
                stack.extend(list(b) for b in arg[1:] if b is not None)
    for char in list(chars):  # both cases, for (?i) and classes that name one case only
        chars.setdefault(char.lower())
        chars.setdefault(char.upper())
    return "".join(c for c in chars if len(c) == 1)


def static_problem(pattern: str) -> str | None:
    """A reason the pattern can backtrack catastrophically, or None."""
    try:
        problem = _tree_problem(pattern)
    except Exception:
        return None  # `regex`-only syntax: the torture run and the scan-time budget still apply
    return problem + _SUFFIX if problem else None


def is_tame(pattern: str) -> bool:
    """Whether the static check can read the pattern and finds no way for it to backtrack
    catastrophically (`regex`-only syntax is not known to be tame)."""
    try:
        return not _tree_problem(pattern)
    except Exception:
        return False


def _tree_problem(pattern: str) -> str | None:
    """What the syntax tree shows (None: nothing); raises where sre cannot read the pattern."""
    parsed = raw_parse(pattern)
    checker = _Checker(_probes(parsed))
    checker.seq(parsed, int(parsed.state.flags), top=True)
    return checker.problem


def _torture_lines(pattern: str) -> list[str]:
    words = [w for w in re.findall(r"[A-Za-z]{3,}", pattern)][:4]
    lines = [" " * 16384 + "\x01", "a" * 16384 + "!", "0" * 16384 + "!", "a " * 8192, "1." * 8192 + "!"]
    lines += [(w + " ") * (16384 // (len(w) + 1)) for w in words]
    # A pattern's own words followed by a long run that almost fits is where backtracking bites.
    lines += [w + " " * 16384 + "\x01" for w in words]
    lines += [w + ": " + "a " * 8192 + "\x01" for w in words]
    # Runs of the pattern's own characters, pumped: what its repeats would fight over.
    own = [c for c in dict.fromkeys(pattern) if c.isalnum() or c in " ,;:./-_=@"][:6]
    lines += [c * 16384 + "\x01" for c in own if c not in "a0 "]
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


# Bounds on what one rule may ask of the scanner: a 7.8 MB alternation takes minutes to
# compile. The pack's longest pattern is ~520 characters and its busiest rule has 12.
MAX_PATTERN_CHARS = 4096
MAX_PATTERNS_PER_RULE = 64


def check_pattern(pattern: str, check_hang: bool = True) -> str | None:
    """Why a line pattern is unusable, or None."""
    if len(pattern) > MAX_PATTERN_CHARS:
        # Checked before compiling: compiling is what takes the time.
        return (f"regex {pattern[:40]!r}... is {len(pattern):,} characters long; the limit is "
                f"{MAX_PATTERN_CHARS:,} (split a long list of alternatives into several conditions)")
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
