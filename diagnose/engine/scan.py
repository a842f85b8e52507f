"""The line scanner: every pattern of a kind searched in one pass over each file.

Lines are as users see them: ANSI escapes stripped, '\\r' (a progress bar's update) ends a
line as '\\n' does, invalid UTF-8 shows as U+FFFD, a line longer than 64 KiB is cut there as
it is read (textio.iter_blocks; counted). Line numbers count '\\n' only, as editors and grep
do, so they stay true to the file: a progress bar's updates share the number of the '\\n' line
holding them.

A plain file is cut into parts at newlines and its parts, and those of every other file of the
scan, are scanned on one thread per core (scan_files): each reads its part with pread into
buffers it reuses, counts the part's newlines (bytecount: off the GIL with numpy), has the
finder nominate candidate lines and `regex` confirm them, and the parts of a file are merged
in order, so the result is that of a single pass (line numbers, first and last hits, times). A
compressed file is one part, read as a stream with a read-ahead thread. Matching and reading
hold no lock, so the threads keep every core busy on a big log or on one log per rank, and at
most IN_FLIGHT bytes are held at once, however many and large the files. A scan of less than
PARALLEL_MIN bytes in all stays on the calling thread (no pool, no numpy: start-up stays small).
Year-less times take their year from the file's clock (lines.log_clock), read once per file
before its parts are scanned, so every part places them alike.
The confirmation runs under a time limit per line and a budget per pattern and file, shared
by the file's parts: confirmations that take over SLOW_CONFIRM (backtracking, not reading) are
charged to CONFIRM_BUDGET, and a pattern that spends it is stopped for the rest of the file and
reported (FileScan.stopped), so a catastrophic pattern that slipped past the rule checks costs
seconds, not hours.
Two finders give identical results:
- hyperscan (when importable): one block-mode database of, per pattern, the texts every match
  must hold (when they are long enough) or else a byte-level superset of the pattern
  (prefilter.py), cached on disk by content hash; each scanning thread has its own scratch.
- pure: the same texts found with bytes.find, else the superset searched with `regex`.
A pattern without a superset (`regex`-only syntax) is searched line by line by both.
Evidence is bounded: per pattern and rank the first and last few hits and a count; the last
hits are only turned into LineHits at the end, so a pattern that fires a million times costs
a count, not a million objects; candidates are packed integers, 8 bytes a line.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import merge
from typing import Any, Protocol, TypeAlias

import regex

from diagnose import diskcache
from diagnose.engine.bytecount import count_newlines, newlines_and_escape
from diagnose.evidence.lines import (
    ANSI_BYTES,
    LinePrefix,
    LogClock,
    kernel_time,
    log_clock,
    log_time,
    prefix_of,
    strip_prefix,
)
from diagnose.evidence.model import TextFile, TextKind
from diagnose.evidence.textio import (
    CHUNK_BYTES,
    LineCuts,
    file_size,
    is_compressed,
    iter_blocks,
    iter_range_blocks,
    not_regular,
    plan_ranges,
    prefetch,
    read_head,
    read_last,
    remember_newlines,
)
from diagnose.evidence.textio import MAX_LINE as MAX_LINE  # the line cap, applied as files are read

KEEP = 3  # hits kept at each end, per pattern and rank
LINE_TIMEOUT = 1.0  # seconds one pattern may spend confirming one line before we give up
CONFIRM_BUDGET = 2.0  # seconds of slow confirmations one pattern may spend on one file
# A confirmation slower than this is charged to the budget. A fast one never is: a pattern that
# fires on every line of a big log costs reading time, and is never stopped.
SLOW_CONFIRM = 0.001
PREFILTER_TIMEOUT = 5.0  # seconds one superset search may spend in a piece before we go line by line
_CONTEXT_BYTES = 16 * 1024  # how far back to look for a timestamp for a line that has none
_MIN_LITERAL = 2  # shortest required text worth a bytes.find loop
_HS_LITERAL = 4  # shortest required text hyperscan searches instead of the pattern's superset
_LITERAL_HITS = 2048  # lines holding it, per piece, before the regex search takes over
_CLOCK_BYTES = 64 * 1024  # read of a file's head and tail for the year of its year-less times
_FORMAT = 2  # bump when the cached database's meaning changes

Buffer = bytes | bytearray
# Candidates are kept compact, as a byte offset inside the candidate line and the pattern's
# index packed into one integer, `offset << _SHIFT | index`, in arrays sorted ascending (runs):
# a pattern that fires on every line of a 16 MiB piece costs 8 bytes a line, not a tuple.
_SHIFT = 20
_MASK = (1 << _SHIFT) - 1
Run: TypeAlias = "array[int]"  # array("Q") of packed candidates, ascending


@dataclass(frozen=True)
class LineHit:
    line_no: int
    text: str
    time: float | None
    rank: int | None
    captures: Mapping[str, str]
    span: tuple[int, int] | None = None  # where in text the pattern matched (reports highlight it)


@dataclass
class HitSummary:
    """Bounded record of one pattern's hits in one file for one rank."""

    count: int = 0
    first: list[LineHit] = field(default_factory=list)
    last: deque[LineHit] = field(default_factory=lambda: deque(maxlen=KEEP))
    # Hits past the first KEEP, kept raw (line number, text, match) until the file is done.
    pending: deque[tuple[int, str, Any, int]] = field(default_factory=lambda: deque(maxlen=KEEP), repr=False)

    def add(self, hit: LineHit) -> None:
        self.count += 1
        if len(self.first) < KEEP:
            self.first.append(hit)
        else:
            self.last.append(hit)

    def hits(self) -> list[LineHit]:
        return self.first + list(self.last)


@dataclass
class FileScan:
    source: TextFile
    hits: dict[int, dict[int | None, HitSummary]] = field(default_factory=dict)
    lines: int = 0
    bytes: int = 0
    cut_lines: int = 0
    seconds: float = 0.0
    engine: str = ""
    timeouts: dict[int, int] = field(default_factory=dict)  # pattern -> lines it gave up on
    # pattern -> (slow lines, line number): it spent CONFIRM_BUDGET there and was stopped
    stopped: dict[int, tuple[int, int]] = field(default_factory=dict)
    budget: list[float] = field(default_factory=list, repr=False)  # per pattern: seconds left
    slow: dict[int, int] = field(default_factory=dict, repr=False)  # per pattern: slow lines so far

    def summaries(self, pattern: int) -> dict[int | None, HitSummary]:
        return self.hits.get(pattern, {})

    def count(self, pattern: int) -> int:
        return sum(s.count for s in self.hits.get(pattern, {}).values())


class PatternSet:
    """The distinct line patterns of one text kind; each is compiled when first needed."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns: tuple[str, ...] = tuple(patterns)
        self.digest = hashlib.sha256("\x00".join(self.patterns).encode()).hexdigest()
        self._compiled: list[Any] = [None] * len(self.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def compiled(self, index: int) -> Any:
        found = self._compiled[index]
        if found is None:
            found = self._compiled[index] = regex.compile(self.patterns[index])
        return found


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
        if len(patterns) > _MASK:
            raise ValueError(f"too many patterns ({len(patterns)})")
        self.patterns = patterns
        self.searches: list[tuple[int, Any, list[tuple[bytes, bool]] | None]] = []
        self.exact: list[int] = []  # no superset: searched line by line
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

    def find(self, buf: Buffer, size: int, skip: frozenset[int] = frozenset()) -> list[Run]:
        runs: list[Run] = []
        lowered: Buffer | None = None
        for index, compiled, literals in self.searches:
            if literals is not None:
                # Every match holds one of these texts, so a line with none cannot match:
                # bytes.find skips such lines at memory speed. Common texts hand over to the regex.
                run = array("Q")
                budget = _LITERAL_HITS
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
                        run.append(line_start << _SHIFT | index)
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
            add(line_start << _SHIFT | index)
            touched_end = line_end
            while touched_end < end - 1 and touched_end + 1 < size:
                add((touched_end + 1) << _SHIFT | index)
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
        return [array("Q", (starts[ordinal] << _SHIFT | index for ordinal in ordinals)) for index, ordinals in hits.items()]


def _every_line(index: int, buf: Buffer, pos: int, size: int) -> list[int]:
    separators = regex.compile(_SEPARATOR).finditer(buf, pos, size)
    return [pos << _SHIFT | index] + [m.end() << _SHIFT | index for m in separators if m.end() < size]


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
            # A pattern whose every match holds one of a few long texts is found by those texts:
            # hyperscan matches literals far faster than automata, and the confirmation sorts
            # out the few lines that hold a text but do not match.
            literals = pf.required_literals(text)
            if literals is not None and min(len(literal) for literal, _ in literals) >= _HS_LITERAL:
                accepted.extend((pf.escape_bytes(literal), index, hs.HS_FLAG_CASELESS if fold else 0)
                                for literal, fold in literals)
                continue
            try:
                superset = pf.prefilter(text, pf.FOR_HYPERSCAN)
                probe = hs.Database(mode=hs.HS_MODE_BLOCK)
                probe.compile(expressions=[superset], ids=[index], elements=1, flags=[flags])
            except Exception:  # Unsupported, or a construct/size hyperscan refuses
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
                packed = last << _SHIFT | index
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


_DATABASES: dict[str, HyperscanFinder] = {}
_PURE: dict[str, PureFinder] = {}


def make_finder(patterns: PatternSet, engine: str = "auto") -> tuple[str, Finder]:
    """The candidate finder for a pattern set: 'hyperscan', 'pure', or 'auto' (the best one)."""
    if engine not in ("auto", "hyperscan", "pure"):
        raise ValueError(f"unknown scan engine {engine!r}")
    if engine != "pure" and hyperscan_available():
        finder = _DATABASES.get(patterns.digest)
        if finder is None:
            finder = _DATABASES[patterns.digest] = HyperscanFinder(patterns)
        return "hyperscan", finder
    if engine == "hyperscan":
        raise RuntimeError("the hyperscan engine was asked for but the hyperscan package is not importable")
    pure = _PURE.get(patterns.digest)
    if pure is None:
        pure = _PURE[patterns.digest] = PureFinder(patterns)  # compiling ~300 supersets takes a while
    return "pure", pure


# ---------------------------------------------------------------- scanning, a part of a file at a time
#
# A plain file is cut into parts at newlines (textio.plan_ranges); each part is read with pread
# and scanned on its own, on any thread, with line numbers and offsets counted from its start;
# the parts of a file are then merged in order (Scanner.merge), which adds the lines before each
# part, keeps the first and last KEEP hits, and finishes the times of the few first hits whose
# look-back for a timestamp reaches into the part before. So a file scanned in one part or in a
# hundred, on one thread or sixteen, gives the same FileScan.


@dataclass
class _First:
    """One of a part's first KEEP hits of a pattern and rank."""

    line: int  # newlines before it in its part
    text: str
    time: float | None
    rank: int | None
    match: Any
    shift: int  # where in the line the searched text starts (past the launcher prefixes)
    window_at: int = -1  # >= 0: no time yet; its look-back ends this many bytes into the part


@dataclass
class _PartHits:
    count: int = 0
    first: list[_First] = field(default_factory=list)
    # The part's last KEEP hits past its first, raw (line in part, text, match, shift).
    pending: deque[tuple[int, str, Any, int]] = field(default_factory=lambda: deque(maxlen=KEEP))


@dataclass
class _Part:
    """What one part of a file gave; lines are counted from the part's start (0 for its first)."""

    hits: dict[int, dict[int | None, _PartHits]] = field(default_factory=dict)
    newlines: int = 0
    size: int = 0  # bytes read
    cut_lines: int = 0
    timeouts: dict[int, int] = field(default_factory=dict)
    skipped: dict[int, int] = field(default_factory=dict)  # pattern -> first line not checked (it was stopped)
    head: bytes = b""  # its first _CONTEXT_BYTES bytes as scanned, while a first hit needs them
    tail: bytes = b""  # its last _CONTEXT_BYTES bytes as scanned: the look-back of the part after it
    clock: LogClock | None = None  # a streamed file's, read with its first piece


class _Stops:
    """The confirmation budget of one file, shared by its parts (threads).

    The budget is charged in CPU time (time.thread_time): wall time also counts waiting for the
    GIL (another scanning thread) or for a core (a busy machine), and charging that would stop
    a fast pattern that fires on every line. Reading the thread's CPU clock is a system call
    (~0.2 us, as long as a short confirmation), so a confirmation is first timed with the cheap
    wall clock; a pattern's first slow wall time is not charged but makes it a suspect, timed
    from then on with the CPU clock and charged each slow confirmation. A time-out is always
    charged in full."""

    def __init__(self, patterns: int) -> None:
        self.lock = threading.Lock()
        self.budget = [CONFIRM_BUDGET] * patterns
        self.suspect = [False] * patterns
        self.slow: dict[int, int] = {}
        self.at: dict[int, tuple[int, int, int]] = {}  # pattern -> (slow lines, part, line in part)
        self.stopped: frozenset[int] = frozenset()

    def charge(self, index: int, took: float, part: int, line: int) -> None:
        with self.lock:
            self.slow[index] = self.slow.get(index, 0) + 1
            self.budget[index] -= took
            if self.budget[index] <= 0.0 and index not in self.at:
                self.budget[index] = 0.0
                self.at[index] = (self.slow[index], part, line)
                self.stopped = self.stopped | {index}


Pieces: TypeAlias = Iterator[tuple[bytearray, int]]


@dataclass
class _Task:
    """One part of one file: how to read it, and where its result goes."""

    file: int
    part: int
    read: Any  # Callable[[LineCuts, list[bytearray]], Pieces]
    prefetch: bool = False
    clock: LogClock | None = None  # the file's (see _file_clock); None: read with the first piece


_local = threading.local()  # per scanning thread: its read buffers


class Scanner:
    """Scans text files of one kind with one pattern set."""

    def __init__(self, kind: TextKind, patterns: PatternSet, engine: str = "auto") -> None:
        self.kind = kind
        self.patterns = patterns
        self._finder: Finder | None = None
        self.engine_name = "none"
        if len(patterns):
            self.engine_name, self._finder = make_finder(patterns, engine)

    def scan(self, source: TextFile, chunk_bytes: int | None = None, workers: int | None = None) -> FileScan:
        return scan_files([(source, self)], workers, chunk_bytes)[0]

    # -- planning

    def plan(self, source: TextFile, file: int, piece: int, chunk_bytes: int) -> list[_Task]:
        path = source.path
        size = file_size(path)
        stream = is_compressed(path) or not_regular(path) is not None
        # The year of year-less times: of a plain file from its head and tail, read now (before
        # any part is scanned, each needs it); of a stream from its first piece (scan_part).
        clock = None if stream else _file_clock(source)
        if stream or size <= piece:
            # One part, read as a stream (decompressed as it comes; a refused file fails here).
            def whole(cuts: LineCuts, _buffers: list[bytearray]) -> Pieces:
                return iter_blocks(path, chunk_bytes, ring=3, cuts=cuts)

            return [_Task(file, 0, whole, prefetch=is_compressed(path) or size > chunk_bytes, clock=clock)]
        tasks = []
        for number, (start, end) in enumerate(plan_ranges(path, size, piece)):
            def ranged(cuts: LineCuts, buffers: list[bytearray], start: int = start, end: int = end) -> Pieces:
                return iter_range_blocks(path, start, end, buffers, chunk_bytes, cuts)

            tasks.append(_Task(file, number, ranged, clock=clock))
        return tasks

    # -- one part

    def scan_part(self, source: TextFile, stops: _Stops, task: _Task) -> _Part:
        buffers = getattr(_local, "buffers", None)
        if buffers is None:
            buffers = _local.buffers = []
        cuts = LineCuts()
        blocks = _counted(task.read(cuts, buffers))
        clock = task.clock
        if clock is None:
            blocks, clock = _stream_clock(source, blocks, task.prefetch)
        elif task.prefetch:
            # Reading (decompressing), counting lines and looking for escapes happen a piece
            # ahead, in a thread, while this one scans: two cores busy on one compressed file.
            blocks = prefetch(blocks)
        part = _Part(clock=clock)
        context = b""  # the part's last _CONTEXT_BYTES bytes (as scanned) before the piece
        done = 0  # bytes of the part (as scanned) before the piece
        for raw, raw_size, newlines, escapes in blocks:
            part.size += raw_size
            buf: Buffer = raw
            size = raw_size
            if escapes:
                # Escape sequences hold no '\r' or '\n', so lines and their numbers stay put.
                with memoryview(raw) as view, view[:raw_size] as piece:
                    buf = ANSI_BYTES.sub(b"", piece)
                size = len(buf)
            if self._finder is not None:
                runs = self._finder.find(buf, size, stops.stopped)
                if runs:
                    self._confirm(source, stops, task, part, buf, size, runs, clock, context, done)
            part.newlines += newlines
            with memoryview(buf) as view:
                if len(part.head) < _CONTEXT_BYTES:
                    with view[: min(size, _CONTEXT_BYTES - len(part.head))] as head:
                        part.head += bytes(head)
                with view[max(0, size - _CONTEXT_BYTES) : size] as tail:
                    context = bytes(tail) if size >= _CONTEXT_BYTES else (context + bytes(tail))[-_CONTEXT_BYTES:]
            done += size
        part.tail = context
        part.cut_lines = cuts.lines
        if not any(first.window_at >= 0 for by_rank in part.hits.values() for hits in by_rank.values()
                   for first in hits.first):
            part.head = b""
        return part

    def _confirm(self, source: TextFile, stops: _Stops, task: _Task, part: _Part, buf: Buffer, size: int,
                 runs: list[Run], dates: LogClock, context: bytes, done: int) -> None:
        # The hot loop of a pattern that fires on most lines: locals only, no calls it can skip.
        compiled = self.patterns.compiled
        is_log = self.kind is TextKind.LOG
        hits = part.hits
        count = count_newlines
        timeout = LINE_TIMEOUT
        budget = stops.budget
        suspect = stops.suspect
        wall, cpu = time.perf_counter, time.thread_time
        slow = SLOW_CONFIRM
        base = part.newlines
        look_back = task.part == 0  # the look-back of the first part never needs another part
        checked = [-1] * len(self.patterns)  # per pattern: start of the last line it was tried on
        line_start = line_end = -1
        text = ""
        prefix: LinePrefix | None = None  # read when first needed: most lines never need it
        rank: int | None = None
        counted_to = newlines = 0
        for packed in merge(*runs) if len(runs) > 1 else runs[0]:
            pos = packed >> _SHIFT
            index = packed & _MASK
            if pos > line_end or pos < line_start:
                line_start, line_end = line_bounds(buf, pos, size)
                text = ""
            if checked[index] == line_start:
                continue
            checked[index] = line_start
            left = budget[index]
            if left <= 0.0:  # stopped for this file
                if index not in part.skipped:
                    part.skipped[index] = base + newlines + count(buf, counted_to, line_start)
                continue
            if not text:
                text = str(buf[line_start : min(line_end, line_start + MAX_LINE)], "utf-8", "replace")
                prefix = None
            limit = timeout if left > timeout else left
            # A suspect pattern is timed on this thread's CPU clock (a syscall), any other on
            # the cheap wall clock, whose first slow reading only makes it a suspect (_Stops).
            watch = suspect[index]
            clock = cpu if watch else wall
            started = clock()
            try:
                # Launcher prefixes are see-through: a pattern that does not match the whole line
                # is tried on the line as the program wrote it (`^Traceback` after "[rank1]: ").
                match = compiled(index).search(text, timeout=limit)
                shift = 0  # where in the line the searched text starts
                if match is None:
                    if prefix is None:
                        prefix = prefix_of(text)
                    if prefix.width:
                        match = compiled(index).search(text[prefix.width:], timeout=max(limit - (clock() - started), 0.001))
                        shift = prefix.width
                took = clock() - started
            except TimeoutError:
                part.timeouts[index] = part.timeouts.get(index, 0) + 1
                match = None
                took = max(clock() - started, limit)  # a time-out always counts in full, however short
                watch = suspect[index] = True
            if took > slow:
                if watch:
                    stops.charge(index, took, task.part, base + newlines + count(buf, counted_to, line_start))
                else:
                    suspect[index] = True  # not charged: it may have waited for the GIL or a core
            if match is None:
                continue
            if prefix is None:
                prefix = prefix_of(text)
            rank = prefix.global_rank if is_log else None
            # Newlines before the line: candidates come in order, so counting goes forward only.
            newlines += count(buf, counted_to, line_start)
            counted_to = line_start
            by_rank = hits.get(index)
            if by_rank is None:
                by_rank = hits[index] = {}
            summary = by_rank.get(rank)
            if summary is None:
                summary = by_rank[rank] = _PartHits()
            summary.count += 1
            if len(summary.first) >= KEEP:
                summary.pending.append((base + newlines, text, match, shift))
                continue
            moment = self._time(text, source, dates)
            window_at = -1
            if moment is None and is_log:
                if look_back or done + line_start >= _CONTEXT_BYTES:
                    moment = source.on_clock(_time_in(_window(buf, line_start, context), dates))
                else:  # the look-back reaches into the part before: the merge finishes it
                    window_at = done + line_start
            summary.first.append(_First(base + newlines, text, moment, rank, match, shift, window_at))

    def _time(self, text: str, source: TextFile, clock: LogClock) -> float | None:
        """The line's time on the report's clock (its host's clock, less that host's offset)."""
        if self.kind is TextKind.DMESG:
            return source.on_clock(kernel_time(text, source.boot_time, clock.year or source.year, clock.not_after))
        return source.on_clock(log_time(text, clock.year, clock.not_after))

    # -- the parts of a file, in order

    def merge(self, source: TextFile, stops: _Stops, parts: Sequence[_Part], started: float) -> FileScan:
        result = FileScan(source=source, engine=self.engine_name)
        clock = parts[0].clock if parts and parts[0].clock is not None else log_clock("", "", source.mtime)
        line = 1  # the number of each part's first line
        context = b""  # the last _CONTEXT_BYTES bytes (as scanned) before the part
        skipped: dict[int, int] = {}
        firsts: list[int] = []  # the number of each part's first line
        for part in parts:
            firsts.append(line)
            for index, by_rank in part.hits.items():
                into = result.hits.setdefault(index, {})
                for rank, found in by_rank.items():
                    summary = into.get(rank)
                    if summary is None:
                        summary = into[rank] = HitSummary()
                    for first in found.first:
                        if summary.count < KEEP:
                            moment = first.time
                            if first.window_at >= 0:
                                moment = source.on_clock(
                                    _time_in((context + part.head[: first.window_at])[-_CONTEXT_BYTES:], clock))
                            summary.add(LineHit(line + first.line, first.text, moment, rank, _captures(first.match),
                                                _span(first.match, first.shift)))
                        else:
                            summary.count += 1
                            summary.pending.append((line + first.line, first.text, first.match, first.shift))
                    summary.count += found.count - len(found.first) - len(found.pending)  # seen, not kept
                    for number, text, match, shift in found.pending:
                        summary.count += 1
                        summary.pending.append((line + number, text, match, shift))
            for index, n in part.timeouts.items():
                result.timeouts[index] = result.timeouts.get(index, 0) + n
            for index, number in part.skipped.items():
                skipped[index] = min(skipped.get(index, line + number), line + number)
            result.lines += part.newlines
            result.bytes += part.size
            result.cut_lines += part.cut_lines
            line += part.newlines
            context = (context + part.tail)[-_CONTEXT_BYTES:]
        for index, (slow, number, at) in stops.at.items():
            # Not checked from here on: where the budget ran out, or an earlier line that a part
            # running beside that one skipped once the pattern was stopped.
            where = firsts[number] + at if number < len(firsts) else line
            result.stopped[index] = (slow, min(where, skipped.get(index, where)))
        result.budget = stops.budget
        result.slow = stops.slow
        self._finish(result, clock)
        remember_newlines(source.path, result.bytes, result.lines)  # the crash finder reads the tail next
        result.seconds = time.perf_counter() - started
        return result

    def _finish(self, result: FileScan, clock: LogClock) -> None:
        for by_rank in result.hits.values():
            for rank, summary in by_rank.items():
                while summary.pending:
                    line_no, text, match, shift = summary.pending.popleft()
                    moment = self._time(text, result.source, clock)
                    summary.last.append(LineHit(line_no, text, moment, rank, _captures(match), _span(match, shift)))


Counted: TypeAlias = tuple[bytearray, int, int, bool]  # a piece, its size, its '\n' count, whether it holds an ESC


def _counted(blocks: Iterator[tuple[bytearray, int]]) -> Iterator[Counted]:
    """Pieces with their newline count and whether they hold an escape character."""
    for buf, size in blocks:
        newlines, escape = newlines_and_escape(buf, size)
        yield buf, size, newlines, escape


def _span(match: Any, shift: int) -> tuple[int, int]:
    """Where in the whole line the match lies (it may have been found past the line's prefixes)."""
    start, end = match.span()
    return start + shift, end + shift


def _captures(match: Any) -> dict[str, str]:
    return {k: v for k, v in match.groupdict().items() if v is not None}


def _file_clock(source: TextFile) -> LogClock:
    """Where a plain file's year-less times take their year (lines.log_clock): its own dates,
    in its first and last _CLOCK_BYTES (two small reads), else its mtime. The same whatever
    the parts the file is cut into."""
    try:
        head = read_head(source.path, _CLOCK_BYTES)  # no line of it is long enough to be cut
        tail = read_last(source.path, _CLOCK_BYTES)
    except Exception:  # unreadable: the scan says so when it reads the file; the mtime still tells
        head = tail = b""
    return log_clock(head.decode("utf-8", errors="replace"), tail.decode("utf-8", errors="replace"), source.mtime)


def _stream_clock(source: TextFile, blocks: Iterator[Counted], ahead: bool) -> tuple[Iterator[Counted], LogClock]:
    """The clock of a file read as a stream (compressed): its first piece's head, and its tail
    when that piece is the whole file (a tail elsewhere would cost a whole decompression).
    Returns the pieces to scan (the first two read here; the rest read ahead if `ahead`)."""
    first = next(blocks, None)
    if first is None:
        return iter(()), log_clock("", "", source.mtime)
    # The second piece is read into the next buffer of the ring: the first stays as it is.
    second = next(blocks, None)
    buf, size = first[0], first[1]
    with memoryview(buf) as view:
        with view[: min(size, _CLOCK_BYTES)] as part:
            head = bytes(part).decode("utf-8", errors="replace")
        with view[max(0, size - _CLOCK_BYTES) : size] as part:
            tail = bytes(part).decode("utf-8", errors="replace") if second is None else ""

    def pieces() -> Iterator[Counted]:
        yield first
        if second is not None:
            yield second
            # Read-ahead starts once both are scanned: the ring's buffers are theirs till then.
            yield from prefetch(blocks) if ahead else blocks

    return pieces(), log_clock(head, tail, source.mtime)


def _window(buf: Buffer, start: int, context: bytes) -> bytes:
    """The _CONTEXT_BYTES bytes (as scanned) before the line at `start`, reaching back into
    `context` (the ones before the piece)."""
    with memoryview(buf) as view, view[max(0, start - _CONTEXT_BYTES) : start] as part:
        data = bytes(part)
    if len(data) < _CONTEXT_BYTES and context:
        data = context[len(data) - _CONTEXT_BYTES :] + data
    return data


def _time_in(window: bytes, clock: LogClock) -> float | None:
    """The timestamp of the nearest line that has one, going back from the end of `window`
    (tracebacks carry none)."""
    text = window.decode("utf-8", errors="replace")
    for line in reversed(text.splitlines()[-200:]):
        moment = log_time(line, clock.year, clock.not_after)
        if moment is not None:
            return moment
    return None


# ---------------------------------------------------------------- many files, many threads

MAX_WORKERS = 32  # scanning threads at most, whatever the machine
IN_FLIGHT = 64 * 1024 * 1024  # bytes being read and scanned at once, over all threads
PARALLEL_MIN = 8 * 1024 * 1024  # bytes to scan (all files) from which threads are used
_THREADS_ENV = "DIAGNOSE_SCAN_THREADS"


def default_workers() -> int:
    """Scanning threads: one per core this process may use (DIAGNOSE_SCAN_THREADS overrides,
    for tests and benchmarks)."""
    wanted = os.environ.get(_THREADS_ENV, "")
    if wanted.isdigit() and int(wanted) > 0:
        return min(int(wanted), MAX_WORKERS)
    return max(1, min(usable_cores(), MAX_WORKERS))


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def part_bytes(workers: int) -> int:
    """Part size: every thread busy on a part of its own, IN_FLIGHT bytes in all."""
    return max(2 * 1024 * 1024, min(CHUNK_BYTES, IN_FLIGHT // max(workers, 1)))


def scan_files(jobs: Sequence[tuple[TextFile, Scanner]], workers: int | None = None,
               chunk_bytes: int | None = None) -> list[FileScan]:
    """Scan each (file, scanner), the parts of all files on `workers` threads (one core each;
    matching holds no lock), merged per file in order. Results are those of one thread."""
    started = time.perf_counter()
    total = sum(file_size(source.path) for source, _ in jobs)
    if not workers:
        # A small scan stays on this thread: starting a pool (and importing it) costs more than
        # it saves, and numpy is not imported (bytecount.NUMPY_WORTH).
        workers = default_workers() if total >= PARALLEL_MIN or _THREADS_ENV in os.environ else 1
    wanted = os.environ.get("DIAGNOSE_SCAN_PART", "")  # for tests and benchmarks: parts of this size
    chunk_bytes = chunk_bytes or (int(wanted) if wanted.isdigit() and int(wanted) > 0 else None)
    piece = chunk_bytes or part_bytes(workers)
    read = chunk_bytes or piece + 2 * _PLAN_SLACK  # a part's bytes fit one read
    tasks: list[_Task] = []
    stops: list[_Stops] = []
    for number, (source, scanner) in enumerate(jobs):
        tasks.extend(scanner.plan(source, number, piece, read))
        stops.append(_Stops(len(scanner.patterns)))
    prepare_counts(total)
    left = [0] * len(jobs)  # parts of each file still to come
    for task in tasks:
        left[task.file] += 1
    parts: list[list[_Part]] = [[] for _ in jobs]
    results: list[FileScan | None] = [None] * len(jobs)

    def collect(task: _Task, part: _Part) -> None:
        # A file is merged as soon as its last part is in, and its parts let go: what waits in
        # memory is one file's parts (their 16 KiB tails), whatever the number of files.
        parts[task.file].append(part)
        left[task.file] -= 1
        if not left[task.file]:
            source, scanner = jobs[task.file]
            results[task.file] = scanner.merge(source, stops[task.file], parts[task.file], started)
            parts[task.file] = []

    if workers <= 1 or len(tasks) <= 1:
        try:
            for task in tasks:
                source, scanner = jobs[task.file]
                collect(task, scanner.scan_part(source, stops[task.file], task))
        finally:
            _local.__dict__.pop("buffers", None)  # this thread goes on: do not keep 16 MiB for the next scan
    else:
        _run_parallel(jobs, tasks, stops, collect, workers)
    return [result if result is not None else jobs[n][1].merge(jobs[n][0], stops[n], [], started)
            for n, result in enumerate(results)]


_PLAN_SLACK = 64 * 1024  # how far past its nominal end a part may reach to end at a newline


def _run_parallel(jobs: Sequence[tuple[TextFile, Scanner]], tasks: list[_Task], stops: list[_Stops],
                  collect: Callable[[_Task, _Part], None], workers: int) -> None:
    from concurrent.futures import Future, ThreadPoolExecutor

    ahead = workers * 3  # parts started and not yet collected, at most: bounds what waits in memory
    queue: deque[tuple[_Task, Future[_Part]]] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="diagnose-scan") as pool:
        def submit(task: _Task) -> None:
            source, scanner = jobs[task.file]
            queue.append((task, pool.submit(scanner.scan_part, source, stops[task.file], task)))

        upcoming = iter(tasks)
        try:
            for task in upcoming:
                submit(task)
                if len(queue) >= ahead:
                    break
            while queue:
                task, future = queue.popleft()
                collect(task, future.result())
                following = next(upcoming, None)
                if following is not None:
                    submit(following)
        except BaseException:
            for _task, future in queue:
                future.cancel()
            raise


def prepare_counts(total_bytes: int) -> None:
    from diagnose.engine import bytecount

    bytecount.prepare(total_bytes)


def scan_texts(sources: Iterable[TextFile], patterns: Mapping[TextKind, PatternSet], engine: str = "auto",
               workers: int | None = None) -> list[FileScan]:
    scanners = {kind: Scanner(kind, pats, engine) for kind, pats in patterns.items()}
    jobs = [(source, scanners[source.kind]) for source in sources if source.kind in scanners]
    return scan_files(jobs, workers) if jobs else []
