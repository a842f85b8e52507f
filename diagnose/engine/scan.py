"""The line scanner: every pattern of a kind searched in one pass over each file.

Lines are as users see them: ANSI escapes stripped, '\\r' (a progress bar's update) ends a
line as '\\n' does, invalid UTF-8 shows as U+FFFD, a line longer than 64 KiB is cut there as
it is read (textio.iter_blocks; counted). Line numbers count '\\n' only, as editors and grep
do, so they stay true to the file: a progress bar's updates share the number of the '\\n' line
holding them.

A file is read once, in 16 MiB pieces into reused buffers (textio.iter_blocks); a thread
reads ahead, counting each piece's newlines as it comes. In each piece a finder nominates
candidate lines, and `regex` confirms each candidate on the line's text and extracts the
named captures, under a time limit per line and a budget per pattern and file: confirmations
that take over SLOW_CONFIRM (backtracking, not reading) are charged to CONFIRM_BUDGET, and a
pattern that spends it is stopped for the rest of the file and reported (FileScan.stopped),
so a catastrophic pattern that slipped past the rule checks costs seconds, not hours.
Two finders give identical results:
- hyperscan (when importable): one block-mode database of, per pattern, the texts every match
  must hold (when they are long enough) or else a byte-level superset of the pattern
  (prefilter.py), cached on disk by content hash. It scans in a worker thread (it holds no
  lock), beside the read-ahead thread: a 2-core machine keeps both cores busy.
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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import merge
from typing import Any, Protocol, TypeAlias

import regex

from diagnose import diskcache
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
    prefetch,
    read_tail,
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
_THREAD_MIN = 1024 * 1024  # below this a piece is scanned without a worker thread
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
        clock = time.thread_time  # CPU time of this thread: a busy machine must not stop a pattern
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
                started = clock()
                try:
                    pattern = self.patterns.compiled(index)
                    matched = pattern.search(line, timeout=limit) is not None
                    if not matched:
                        body = strip_prefix(line)
                        matched = body is not line and pattern.search(body, timeout=limit) is not None
                    took = clock() - started
                except TimeoutError:
                    matched = True  # the confirmation will time out again and report it
                    took = max(clock() - started, limit)
                if took > SLOW_CONFIRM:
                    left[index] = budget - took
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
                self.db.scan(piece, match_event_handler=on_match, scratch=self.scratch)
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


class _Job:
    """A finder run on one piece, in a worker thread when the finder releases the GIL."""

    def __init__(self, finder: Finder, buf: Buffer, size: int, threaded: bool, skip: frozenset[int]) -> None:
        self.result: list[Run] = []
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        if threaded:
            self.thread = threading.Thread(target=self._run, args=(finder, buf, size, skip), daemon=True)
            self.thread.start()
        else:
            self._run(finder, buf, size, skip)

    def _run(self, finder: Finder, buf: Buffer, size: int, skip: frozenset[int]) -> None:
        try:
            self.result = finder.find(buf, size, skip)
        except BaseException as exc:  # handed to the scanning thread
            self.error = exc

    def wait(self) -> list[Run]:
        if self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error
        return self.result


# ---------------------------------------------------------------- scanning


class Scanner:
    """Scans text files of one kind with one pattern set."""

    def __init__(self, kind: TextKind, patterns: PatternSet, engine: str = "auto") -> None:
        self.kind = kind
        self.patterns = patterns
        self._finder: Finder | None = None
        self.engine_name = "none"
        if len(patterns):
            self.engine_name, self._finder = make_finder(patterns, engine)
        self._threaded = isinstance(self._finder, HyperscanFinder)

    def scan(self, source: TextFile, chunk_bytes: int | None = None) -> FileScan:
        started = time.perf_counter()
        result = FileScan(source=source, engine=self.engine_name)
        result.budget = [CONFIRM_BUDGET] * len(self.patterns)
        clock: LogClock | None = None  # where year-less times take their year: read with the first piece
        base_line = 1
        context = b""  # the bytes before the piece, for timestamps of lines that have none
        chunk_bytes = chunk_bytes or CHUNK_BYTES
        cuts = LineCuts()  # lines longer than MAX_LINE, cut as they are read
        pieces = _counted(iter_blocks(source.path, chunk_bytes, ring=3, cuts=cuts))
        if is_compressed(source.path) or file_size(source.path) > chunk_bytes:
            # Reading, counting lines and looking for escapes happen a piece ahead, in a thread
            # (while this one waits for hyperscan, which holds no lock): two cores both busy.
            pieces = prefetch(pieces)
        for raw, raw_size, newlines, escapes in pieces:
            if clock is None:
                clock = _clock(source, raw, raw_size, chunk_bytes)
            result.bytes += raw_size
            buf: Buffer = raw
            size = raw_size
            if escapes:
                # Escape sequences hold no '\r' or '\n', so lines and their numbers stay put.
                with memoryview(raw) as view, view[:raw_size] as part:
                    buf = ANSI_BYTES.sub(b"", part)
                size = len(buf)
            job = None
            if self._finder is not None:
                job = _Job(self._finder, buf, size, self._threaded and size >= _THREAD_MIN, frozenset(result.stopped))
            if job is not None:
                runs = job.wait()
                if runs:
                    self._confirm(result, buf, size, base_line, runs, clock, context)
            result.lines += newlines
            base_line += newlines
            with memoryview(buf) as view, view[max(0, size - _CONTEXT_BYTES) : size] as tail:
                context = bytes(tail) if size >= _CONTEXT_BYTES else (context + bytes(tail))[-_CONTEXT_BYTES:]
        result.cut_lines = cuts.lines
        self._finish(result, clock or _clock(source, b"", 0, chunk_bytes))
        remember_newlines(source.path, result.bytes, result.lines)  # the crash finder reads the tail next
        result.seconds = time.perf_counter() - started
        return result

    def _confirm(self, result: FileScan, buf: Buffer, size: int, base_line: int, runs: list[Run],
                 dates: LogClock, context: bytes) -> None:
        # The hot loop of a pattern that fires on most lines: locals only, no calls it can skip.
        compiled = self.patterns.compiled
        is_log = self.kind is TextKind.LOG
        hits = result.hits
        count = buf.count
        timeout = LINE_TIMEOUT
        budget = result.budget
        clock = time.thread_time  # CPU time of this thread: a busy machine must not stop a pattern
        slow = SLOW_CONFIRM
        done = [-1] * len(self.patterns)  # per pattern: start of the last line it was tried on
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
            if done[index] == line_start:
                continue
            done[index] = line_start
            if not text:
                text = str(buf[line_start : min(line_end, line_start + MAX_LINE)], "utf-8", "replace")
                prefix = None
            left = budget[index]
            if left <= 0.0:
                continue  # stopped for this file
            limit = timeout if left > timeout else left
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
                result.timeouts[index] = result.timeouts.get(index, 0) + 1
                match = None
                took = max(clock() - started, limit)  # a time-out always counts in full, however short
            if took > slow:
                self._charge(result, index, took, base_line + newlines + count(b"\n", counted_to, line_start))
            if match is None:
                continue
            if prefix is None:
                prefix = prefix_of(text)
            rank = prefix.global_rank if is_log else None
            # Newlines before the line: candidates come in order, so counting goes forward only.
            newlines += count(b"\n", counted_to, line_start)
            counted_to = line_start
            by_rank = hits.get(index)
            if by_rank is None:
                by_rank = hits[index] = {}
            summary = by_rank.get(rank)
            if summary is None:
                summary = by_rank[rank] = HitSummary()
            if summary.count >= KEEP:
                summary.count += 1
                summary.pending.append((base_line + newlines, text, match, shift))
                continue
            moment = self._time(text, result.source, dates)
            if moment is None and is_log:
                moment = result.source.on_clock(_time_before(buf, line_start, dates, context))
            summary.add(LineHit(base_line + newlines, text, moment, rank, _captures(match), _span(match, shift)))

    @staticmethod
    def _charge(result: FileScan, index: int, took: float, line_no: int) -> None:
        """A slow confirmation: charge it to the pattern's budget, and stop the pattern for
        this file when the budget is spent."""
        result.slow[index] = result.slow.get(index, 0) + 1
        result.budget[index] -= took
        if result.budget[index] <= 0.0:
            result.budget[index] = 0.0
            result.stopped[index] = (result.slow[index], line_no)

    def _time(self, text: str, source: TextFile, clock: LogClock) -> float | None:
        """The line's time on the report's clock (its host's clock, less that host's offset)."""
        if self.kind is TextKind.DMESG:
            return source.on_clock(kernel_time(text, source.boot_time, clock.year or source.year, clock.not_after))
        return source.on_clock(log_time(text, clock.year, clock.not_after))

    def _finish(self, result: FileScan, clock: LogClock) -> None:
        for by_rank in result.hits.values():
            for rank, summary in by_rank.items():
                while summary.pending:
                    line_no, text, match, shift = summary.pending.popleft()
                    moment = self._time(text, result.source, clock)
                    summary.last.append(LineHit(line_no, text, moment, rank, _captures(match), _span(match, shift)))


def _counted(blocks: Iterator[tuple[bytearray, int]]) -> Iterator[tuple[bytearray, int, int, bool]]:
    """Pieces with their newline count and whether they hold an escape character."""
    for buf, size in blocks:
        yield buf, size, buf.count(b"\n", 0, size), buf.find(b"\x1b", 0, size) >= 0


def _span(match: Any, shift: int) -> tuple[int, int]:
    """Where in the whole line the match lies (it may have been found past the line's prefixes)."""
    start, end = match.span()
    return start + shift, end + shift


def _captures(match: Any) -> dict[str, str]:
    return {k: v for k, v in match.groupdict().items() if v is not None}


def _clock(source: TextFile, first: Buffer, size: int, piece: int) -> LogClock:
    """The year of the file's year-less times: from its own dates (its first piece, and its tail
    where that is a cheap seek), else its mtime (lines.log_clock)."""
    with memoryview(first) as view, view[: min(size, _CLOCK_BYTES)] as part:
        head = bytes(part).decode("utf-8", errors="replace")
    tail = ""
    whole = size < piece  # a first piece shorter than a piece is the whole file
    if whole or not is_compressed(source.path):
        try:
            if whole:
                with memoryview(first) as view, view[max(0, size - _CLOCK_BYTES) : size] as part:
                    tail = bytes(part).decode("utf-8", errors="replace")
            else:
                tail = read_tail(source.path, _CLOCK_BYTES)[0].decode("utf-8", errors="replace")
        except Exception:  # unreadable now: the head and the mtime still tell
            tail = ""
    return log_clock(head, tail, source.mtime)


def _time_before(buf: Buffer, start: int, clock: LogClock, context: bytes) -> float | None:
    """The timestamp of the nearest earlier line that has one (tracebacks carry none)."""
    with memoryview(buf) as view, view[max(0, start - _CONTEXT_BYTES) : start] as part:
        data = bytes(part)
    if len(data) < _CONTEXT_BYTES and context:
        data = context[len(data) - _CONTEXT_BYTES :] + data
    window = data.decode("utf-8", errors="replace")
    for line in reversed(window.splitlines()[-200:]):
        moment = log_time(line, clock.year, clock.not_after)
        if moment is not None:
            return moment
    return None


def scan_texts(sources: Iterable[TextFile], patterns: Mapping[TextKind, PatternSet], engine: str = "auto") -> list[FileScan]:
    scanners = {kind: Scanner(kind, pats, engine) for kind, pats in patterns.items()}
    results = []
    for source in sources:
        scanner = scanners.get(source.kind)
        if scanner is not None:
            results.append(scanner.scan(source))
    return results
