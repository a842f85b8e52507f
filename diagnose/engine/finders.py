"""Candidate finders: which lines of a buffer may match which pattern, found without Python
looking at every line.

Two finders give identical candidates for the scanner (engine/scan.py) to confirm:
- hyperscan (when importable): one block-mode database of, per pattern, the texts every match
  must hold when the pattern, trimmed, is nothing but those texts, or else a byte-level superset
  of the pattern (patterns/prefilter.py), cached on disk by content hash; each scanning thread
  has its own scratch.
- pure: the same texts found with bytes.find (a line holding one is nominated only where the
  superset matches it too), else the superset searched with `regex`.
A pattern without a superset (`regex`-only syntax) is searched line by line by both.

Why texts only when they are the whole pattern: a text the pattern merely holds may be one that
every line of a training log prints (`grad_norm` of `grad_norm: nan`), and each candidate costs
a confirmation in Python under the GIL (~10 us). Candidates are packed integers, 8 bytes a line:
`offset << SHIFT | pattern index`, in arrays sorted ascending (runs).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

import regex

from diagnose import diskcache
from diagnose.evidence.lines import strip_prefix
from diagnose.evidence.textio import MAX_LINE

LINE_TIMEOUT = 1.0  # seconds one pattern may spend confirming one line before we give up
CONFIRM_BUDGET = 2.0  # seconds of slow confirmations one pattern may spend on one file
# A confirmation slower than this is charged to the budget. A fast one never is: a pattern that
# fires on every line of a big log costs reading time, and is never stopped.
SLOW_CONFIRM = 0.001
PREFILTER_TIMEOUT = 5.0  # seconds one superset search may spend in a piece before we go line by line
_MIN_LITERAL = 2  # shortest required text worth a bytes.find loop
_HS_LITERAL = 4  # shortest required text hyperscan searches instead of the pattern's superset
_LITERAL_HITS = 2048  # lines holding it, per piece, before the regex search takes over
_FORMAT = 3  # bump when the cached database's meaning changes
# Confirmations of a pattern, in this process, before it is asked whether it can backtrack
# badly (hangcheck.static_problem, ~2 ms a pattern): only the patterns that fire often pay it.
TAME_AFTER = 256
# A tame pattern (no nested or adjacent repeats) is confirmed without a time limit on a line this
# short: its worst case there is a quadratic search of milliseconds, which the wall clock sees,
# and the limit costs as much as the search itself (regex reads a clock for it).
UNTIMED_CHARS = 2048

Buffer = bytes | bytearray
SHIFT = 20
MASK = (1 << SHIFT) - 1
Run: TypeAlias = "array[int]"  # array("Q") of packed candidates, ascending


class PatternSet:
    """The distinct line patterns of one text kind; each is compiled when first needed."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns: tuple[str, ...] = tuple(patterns)
        self.digest = hashlib.sha256("\x00".join(self.patterns).encode()).hexdigest()
        self._compiled: list[Any] = [None] * len(self.patterns)
        # Per pattern: whether it is tame (can be searched without a time limit on short lines);
        # None while it has been tried fewer than TAME_AFTER times.
        self.tame: list[bool | None] = [None] * len(self.patterns)
        self._tries = [0] * len(self.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def compiled(self, index: int) -> Any:
        found = self._compiled[index]
        if found is None:
            found = self._compiled[index] = regex.compile(self.patterns[index])
        return found

    def is_tame(self, index: int) -> bool:
        """Whether the pattern may be searched without a time limit on a short line: False
        until it has been tried TAME_AFTER times, then what the static hang check says."""
        known = self.tame[index]
        if known is not None:
            return known
        self._tries[index] += 1
        if self._tries[index] < TAME_AFTER:
            return False
        from diagnose.patterns.hangcheck import is_tame

        known = self.tame[index] = is_tame(self.patterns[index])
        return known


# ---------------------------------------------------------------- lines in a buffer


def line_bounds(buf: Buffer, pos: int, size: int) -> tuple[int, int]:
    """(start, end) of the line holding offset `pos`: it ends at the next '\\n' or '\\r' at or
    after `pos` (a line's terminator belongs to it), and starts after the one before."""
    newline = buf.rfind(b"\n", 0, pos)
    cr = buf.rfind(b"\r", newline + 1, pos)
    start = (cr if cr > newline else newline) + 1
    end = buf.find(b"\n", pos, size)
    if end < 0:
        end = size
    cr = buf.find(b"\r", pos, end)
    return start, (cr if cr >= 0 else end)


# ---------------------------------------------------------------- candidate finders


class Finder(Protocol):
    # skip: patterns stopped for this file (their budget is spent): nominate nothing for them
    def find(self, buf: Buffer, size: int, skip: frozenset[int] = frozenset()) -> list[Run]: ...


_SEPARATOR = rb"[\r\n]"  # searched with `regex`, which caches the compiled pattern


class PureFinder:
    """Candidates per pattern: the lines holding one of the texts its matches must hold (found
    with bytes.find), or, when it has none (or they are common), the matches of its superset
    searched with `regex` over the whole piece.

    After each superset match every line it touches is a candidate, and the search resumes at
    the line after the one the match started in, so no line holding a match is skipped (the
    superset matches where the pattern matches a line; its line anchors hold at '\\r' too).
    """

    def __init__(self, patterns: PatternSet, indexes: Sequence[int] | None = None) -> None:
        from diagnose.patterns import prefilter as pf
        if len(patterns) > MASK:
            raise ValueError(f"too many patterns ({len(patterns)})")
        self.patterns = patterns
        self.searches: list[tuple[int, Any, list[tuple[bytes, bool]] | None]] = []
        self.exact: list[int] = []  # no superset: searched line by line
        # Found by texts the superset says more than (`grad_norm` of `grad_norm: nan`): a line
        # holding the text is nominated only where the superset also matches it.
        self.checked: set[int] = set()
        for index in range(len(patterns)) if indexes is None else indexes:
            text = patterns.patterns[index]
            try:
                compiled = regex.compile(pf.prefilter(text, pf.FOR_REGEX), regex.MULTILINE)
            except (pf.Unsupported, regex.error):
                self.exact.append(index)
                continue
            literals = pf.required_literals(text)
            if literals is not None and min(len(literal) for literal, _ in literals) < _MIN_LITERAL:
                literals = None
            self.searches.append((index, compiled, literals))
            if literals is not None and not pf.literals_are_whole(text):
                self.checked.add(index)

    def find(self, buf: Buffer, size: int, skip: frozenset[int] = frozenset()) -> list[Run]:
        runs: list[Run] = []
        lowered: Buffer | None = None
        for index, compiled, literals in self.searches:
            if literals is not None:
                # Every match holds one of these texts, so a line with none cannot match:
                # bytes.find skips such lines at memory speed. Common texts hand over to the regex.
                run = array("Q")
                budget = _LITERAL_HITS
                check = compiled.search if index in self.checked else None
                for literal, fold in literals:
                    if fold and lowered is None:
                        lowered = buf.lower()
                    hay = lowered if fold and lowered is not None else buf
                    start = 0
                    while budget:
                        at = hay.find(literal, start, size)
                        if at < 0:
                            break
                        line_start, line_end = line_bounds(buf, at, size)
                        if check is None or check(buf, line_start, line_end) is not None:
                            run.append(line_start << SHIFT | index)
                        start = line_end + 1
                        budget -= 1
                if budget:
                    if run:
                        runs.append(run if len(literals) == 1 else array("Q", sorted(run)))
                    continue
            runs.append(self._search(index, compiled, buf, size))
        exact = [index for index in self.exact if index not in skip]
        if exact:
            runs.extend(self._exact(buf, size, exact))
        return [run for run in runs if run]

    @staticmethod
    def _search(index: int, compiled: Any, buf: Buffer, size: int) -> Run:
        run = array("Q")
        add = run.append
        pos = 0
        while pos < size:
            try:
                match = compiled.search(buf, pos, size, timeout=PREFILTER_TIMEOUT)
            except TimeoutError:
                # Let the confirmation judge every remaining line, each under its own limit.
                run.extend(_every_line(index, buf, pos, size))
                break
            if match is None:
                break
            start, end = match.span()
            line_start, line_end = line_bounds(buf, start, size)
            add(line_start << SHIFT | index)
            touched_end = line_end
            while touched_end < end - 1 and touched_end + 1 < size:
                add((touched_end + 1) << SHIFT | index)
                touched_end = line_bounds(buf, touched_end + 1, size)[1]
            pos = line_end + 1
        return run

    def _exact(self, buf: Buffer, size: int, exact: Sequence[int]) -> list[Run]:
        text = bytes(memoryview(buf)[:size]).decode("utf-8", errors="replace")
        hits: dict[int, list[int]] = {}  # pattern -> line ordinals in the piece
        left = dict.fromkeys(exact, CONFIRM_BUDGET)  # slow searches, as in the confirmation
        suspect = dict.fromkeys(exact, False)  # see _Stops: timed on the CPU clock once slow
        for ordinal, line in enumerate(regex.split(r"[\r\n]", text)):
            line = line[:MAX_LINE]
            for index in exact:
                budget = left[index]
                if budget <= 0.0:
                    # Spent in this piece: every line is a candidate, and the confirmation,
                    # under its own budget, stops the pattern for the file and reports it.
                    hits.setdefault(index, []).append(ordinal)
                    continue
                limit = min(LINE_TIMEOUT, budget)
                watch = suspect[index]
                tick = time.thread_time if watch else time.perf_counter
                started = tick()
                try:
                    pattern = self.patterns.compiled(index)
                    matched = pattern.search(line, timeout=limit) is not None
                    if not matched:
                        body = strip_prefix(line)
                        matched = body is not line and pattern.search(body, timeout=limit) is not None
                    took = tick() - started
                except TimeoutError:
                    matched = True  # the confirmation will time out again and report it
                    took = max(tick() - started, limit)
                    watch = suspect[index] = True  # a time-out always counts in full
                if took > SLOW_CONFIRM:
                    if watch:
                        left[index] = budget - took
                    else:
                        suspect[index] = True  # wall time, maybe waiting for the GIL or a core: not charged
                if matched:
                    hits.setdefault(index, []).append(ordinal)
        if not hits:
            return []
        # A '\r' or '\n' byte always decodes to itself, so line ordinals match between the two.
        starts = [0] + [m.end() for m in regex.compile(_SEPARATOR).finditer(buf, 0, size)]
        return [array("Q", (starts[ordinal] << SHIFT | index for ordinal in ordinals)) for index, ordinals in hits.items()]


def _every_line(index: int, buf: Buffer, pos: int, size: int) -> list[int]:
    separators = regex.compile(_SEPARATOR).finditer(buf, pos, size)
    return [pos << SHIFT | index] + [m.end() << SHIFT | index for m in separators if m.end() < size]


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401
    except Exception:
        return False
    return True


class HyperscanFinder:
    """All patterns in one block-mode database: each as the texts its matches must hold (found
    as literals, which hyperscan matches fastest) or as its byte-level superset (prefilter mode).

    A match's end is reported, so its last byte names the candidate line (a line's terminator
    belongs to it, which is where a superset's `$` written as a consumed '\\r' ends). Patterns
    hyperscan refuses are left to a PureFinder, so the result never depends on the engine.
    The database is cached on disk (diskcache), keyed by the hyperscan version, prefilter.py
    and the patterns.
    """

    def __init__(self, patterns: PatternSet) -> None:
        import hyperscan as hs

        self._hs = hs
        self.patterns = patterns
        flags = hs.HS_FLAG_MULTILINE | hs.HS_FLAG_PREFILTER
        version = getattr(hs, "__version__", "?")
        try:  # the supersets are written by prefilter.py: a changed one means new databases
            written_by = os.stat(os.path.join(os.path.dirname(os.path.dirname(__file__)), "patterns", "prefilter.py"))
            code = f"{written_by.st_size}:{written_by.st_mtime_ns}"
        except OSError:
            code = "?"
        self.key = hashlib.sha256(f"{_FORMAT}|{code}|{version}|{flags}|{patterns.digest}".encode()).hexdigest()
        self.db: Any = None
        self.leftover: list[int] = []
        self.loaded_from_cache = self._load()
        if not self.loaded_from_cache:
            self._compile(flags)
            self._store()
        self.leftover_finder = PureFinder(patterns, self.leftover) if self.leftover else None
        self.scratch: Any = hs.Scratch(self.db) if self.db is not None else None
        self._local = threading.local()  # each scanning thread gets a scratch of its own

    def _scratch(self) -> Any:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self.scratch.clone()
        return scratch

    def _compile(self, flags: int) -> None:
        from diagnose.patterns import prefilter as pf
        hs = self._hs
        accepted: list[tuple[bytes, int, int]] = []  # (expression, pattern index, flags)
        for index, text in enumerate(self.patterns.patterns):
            # A pattern that is, once trimmed, one of a few long texts is found by those texts:
            # hyperscan matches literals fastest. Any other is found by its superset, which
            # hyperscan anchors on its literals itself: a text the pattern merely holds may be
            # one that every step line prints (`grad_norm` of `grad_norm: nan`), and each line
            # holding it would then cost a confirmation in Python.
            literals = pf.required_literals(text)
            if literals is not None and min(len(literal) for literal, _ in literals) < _HS_LITERAL:
                literals = None
            as_texts = None if literals is None else [
                (pf.escape_bytes(literal), index, hs.HS_FLAG_CASELESS if fold else 0) for literal, fold in literals]
            if as_texts is not None and pf.literals_are_whole(text):
                accepted.extend(as_texts)
                continue
            try:
                superset = pf.prefilter(text, pf.FOR_HYPERSCAN)
                probe = hs.Database(mode=hs.HS_MODE_BLOCK)
                probe.compile(expressions=[superset], ids=[index], elements=1, flags=[flags])
            except Exception:  # Unsupported, or a construct/size hyperscan refuses
                if as_texts is not None:
                    accepted.extend(as_texts)  # its texts still beat reading every line
                else:
                    self.leftover.append(index)
                continue
            accepted.append((superset, index, flags))
        if accepted:
            self.db = hs.Database(mode=hs.HS_MODE_BLOCK)
            try:
                self.db.compile(
                    expressions=[expression for expression, _, _ in accepted],
                    ids=[index for _, index, _ in accepted],
                    elements=len(accepted),
                    flags=[flag for _, _, flag in accepted],
                )
            except Exception as exc:  # each one compiled alone, so only their sum can be refused
                from diagnose.errors import DiagnoseError

                raise DiagnoseError(f"hyperscan could not build the database of {len(accepted)} rule patterns "
                                    f"({exc}); --engine pure scans without it") from None

    def _load(self) -> bool:
        blob = diskcache.read(f"hs-{self.key}.db")
        if blob is None:
            return False
        try:
            header, _, payload = blob.partition(b"\n")
            leftover = [int(x) for x in header.decode().split(",") if x]
            if any(not 0 <= i < len(self.patterns) for i in leftover):
                return False
            self.db = self._hs.loadb(payload, self._hs.HS_MODE_BLOCK) if payload else None
        except Exception:  # corrupt: compile again
            self.db = None
            return False
        self.leftover = leftover
        return True

    def _store(self) -> None:
        try:
            payload = self._hs.dumpb(self.db) if self.db is not None else b""
        except Exception:
            return
        diskcache.write(f"hs-{self.key}.db", ",".join(map(str, self.leftover)).encode() + b"\n" + payload)

    def find(self, buf: Buffer, size: int, skip: frozenset[int] = frozenset()) -> list[Run]:
        runs: list[Run] = []
        if self.db is not None and size:
            run = array("Q")
            add = run.append
            # Hyperscan reports every end of every match; a line is nominated once per pattern:
            # a report in the line of the pattern's previous one (no '\r' or '\n' between) is dropped.
            previous = [-1] * len(self.patterns)
            order = [0, True]  # last packed value, still ascending
            find = buf.find

            def on_match(index: int, _start: int, end: int, _flags: int, _ctx: Any) -> None:
                last = end - 1  # the match's last byte: inside the line (its terminator belongs to it)
                before = previous[index]
                if 0 <= before <= last and find(b"\n", before, last) < 0 and find(b"\r", before, last) < 0:
                    return
                previous[index] = last
                packed = last << SHIFT | index
                if packed < order[0]:
                    order[1] = False
                order[0] = packed
                add(packed)

            with memoryview(buf) as view, view[:size] as piece:
                self.db.scan(piece, match_event_handler=on_match, scratch=self._scratch())
            runs.append(run if order[1] else array("Q", sorted(run)))
        if self.leftover_finder is not None:
            runs.extend(self.leftover_finder.find(buf, size, skip))
        return [run for run in runs if run]


class FinderCache:
    """The finders built in this process, by pattern set: a hyperscan database takes a while to
    load and ~300 supersets a while to compile, and a process (a test run, `diagnose watch`)
    scans with the same rules again and again. Holds compiled patterns, never log data."""

    def __init__(self) -> None:
        self.hyperscan: dict[str, HyperscanFinder] = {}
        self.pure: dict[str, PureFinder] = {}

    def clear(self) -> None:
        self.hyperscan.clear()
        self.pure.clear()


CACHE = FinderCache()


def make_finder(patterns: PatternSet, engine: str = "auto") -> tuple[str, Finder]:
    """The candidate finder for a pattern set: 'hyperscan', 'pure', or 'auto' (the best one)."""
    if engine not in ("auto", "hyperscan", "pure"):
        raise ValueError(f"unknown scan engine {engine!r}")
    if engine != "pure" and hyperscan_available():
        finder = CACHE.hyperscan.get(patterns.digest)
        if finder is None:
            finder = CACHE.hyperscan[patterns.digest] = HyperscanFinder(patterns)
        return "hyperscan", finder
    if engine == "hyperscan":
        raise RuntimeError("the hyperscan engine was asked for but the hyperscan package is not importable")
    pure = CACHE.pure.get(patterns.digest)
    if pure is None:
        pure = CACHE.pure[patterns.digest] = PureFinder(patterns)  # compiling ~300 supersets takes a while
    return "pure", pure


# ---------------------------------------------------------------- what the candidates cost


@dataclass
class Census:
    """What a finder nominated in a text: per pattern, the lines it made candidates and those of
    them the pattern does not match (each a confirmation in Python spent on nothing)."""

    lines: int = 0
    bytes: int = 0
    candidates: Counter[int] = field(default_factory=Counter)
    wasted: Counter[int] = field(default_factory=Counter)
    example: dict[int, str] = field(default_factory=dict)  # per pattern: its first wasted line

    def add(self, other: Census) -> None:
        self.lines += other.lines
        self.bytes += other.bytes
        self.candidates.update(other.candidates)
        self.wasted.update(other.wasted)
        for index, line in other.example.items():
            self.example.setdefault(index, line)


def census(finder: Finder, patterns: PatternSet, data: bytes) -> Census:
    """Run `finder` over `data` (ANSI escapes already stripped, as the scanner does) and confirm
    every candidate as the scanner would (the line, then the line past its launcher prefixes)."""
    found = Census(lines=data.count(b"\n"), bytes=len(data))
    for run in finder.find(data, len(data)):
        for packed in run:
            index = packed & MASK
            start, end = line_bounds(data, packed >> SHIFT, len(data))
            text = str(data[start : min(end, start + MAX_LINE)], "utf-8", "replace")
            found.candidates[index] += 1
            pattern = patterns.compiled(index)
            if pattern.search(text) is None and pattern.search(strip_prefix(text)) is None:
                found.wasted[index] += 1
                found.example.setdefault(index, text)
    return found
