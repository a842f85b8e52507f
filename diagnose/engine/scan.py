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
Candidate lines come from a finder (engine/finders.py: hyperscan, or a pure-Python one with
identical results).
Evidence is bounded: per pattern and rank the first and last few hits and a count; the last
hits are only turned into LineHits at the end, so a pattern that fires a million times costs
a count, not a million objects.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import merge
from typing import Any, TypeAlias

from diagnose.engine.bytecount import count_newlines, newlines_and_escape
from diagnose.engine.escapes import strip_escapes
from diagnose.engine.finders import CONFIRM_BUDGET as CONFIRM_BUDGET  # the scanner's callers read it here
from diagnose.engine.finders import (
    LINE_TIMEOUT,
    MASK,
    SHIFT,
    SLOW_CONFIRM,
    UNTIMED_CHARS,
    Buffer,
    Finder,
    Run,
    line_bounds,
    make_finder,
)
from diagnose.engine.finders import PatternSet as PatternSet
from diagnose.engine.finders import hyperscan_available as hyperscan_available
from diagnose.engine.heap import keep_freed_buffers
from diagnose.engine.tracebacks import LogCrashes, crashes_of_tail, keep_tail_crashes, log_mtime, shifted
from diagnose.evidence.lines import (
    LinePrefix,
    LogClock,
    kernel_time,
    log_clock,
    log_time,
    prefix_of,
)
from diagnose.evidence.model import TextFile, TextKind
from diagnose.evidence.textio import (
    CHUNK_BYTES,
    HEAD_BYTES,
    LineCuts,
    file_size,
    is_streamed,
    iter_blocks,
    iter_range_blocks,
    not_regular,
    plan_ranges,
    prefetch,
    read_head,
    read_last,
)
from diagnose.evidence.textio import MAX_LINE as MAX_LINE  # the line cap, applied as files are read

KEEP = 3  # hits kept at each end, per pattern and rank
_CONTEXT_BYTES = 16 * 1024  # how far back to look for a timestamp for a line that has none
_CLOCK_BYTES = 64 * 1024  # read of a file's head and tail for the year of its year-less times



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
    # The file's first part: its first HEAD_BYTES; its last part: its last `window` bytes and the
    # newlines before them in the part. What the readers after the scan take (evidence/logview.py).
    file_head: bytes = b""
    file_tail: bytes = b""
    tail_after: int = 0
    crashes: LogCrashes | None = None  # the crash finder's reading of file_tail, numbered from 1


class _Stops:
    """The confirmation budget of one file, shared by its parts (threads).

    The budget is charged in CPU time (time.thread_time): wall time also counts waiting for the
    GIL (another scanning thread) or for a core (a busy machine), and charging that would stop
    a fast pattern that fires on every line. Reading the thread's CPU clock is a system call
    (~0.6 us here, as long as a short confirmation), so a confirmation is timed with the cheap
    wall clock; one that looks slow there is done again on the CPU clock, and only if it is slow
    there too is it charged and the pattern made a suspect, timed from then on with the CPU
    clock and charged each slow confirmation (a wait for the GIL on a busy scan used to make the
    pattern of the commonest true hit a suspect for good). A time-out is always charged in full."""

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

    def stop(self, stopped: frozenset[int]) -> None:
        """In a worker process: the patterns the parent has stopped since the fork."""
        for index in stopped - self.stopped:
            self.budget[index] = 0.0
        self.stopped = self.stopped | stopped

    def spent(self) -> dict[int, tuple[int, float]]:
        """What was charged so far, per pattern: (slow lines, seconds)."""
        return {index: (slow, CONFIRM_BUDGET - self.budget[index]) for index, slow in self.slow.items()}

    def absorb(self, before: dict[int, tuple[int, float]], after: dict[int, tuple[int, float]],
               part: int, at: dict[int, tuple[int, int, int]], lines: int) -> None:
        """Charge what a worker process charged for one part of `lines` lines (`after` less
        `before`), and stop a pattern it stopped there (`at`: its record of where) or whose
        budget the parts together have now spent (from the part's end: it checked it all)."""
        with self.lock:
            for index, (slow, took) in after.items():
                was_slow, was_took = before.get(index, (0, 0.0))
                if slow == was_slow:
                    continue
                self.slow[index] = self.slow.get(index, 0) + slow - was_slow
                self.budget[index] -= took - was_took
                if index not in self.at and (self.budget[index] <= 0.0 or index in at):
                    self.budget[index] = 0.0
                    line = at[index][2] if index in at and at[index][1] == part else lines
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
    window: int = 0  # the file's last part: keep this many of its last bytes (its tail), else 0
    crashes: bool = False  # and read that tail with the crash finder on the scan's thread
    vector_escapes: bool = False  # strip escapes with numpy (other scanning threads run meanwhile)


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
        stream = is_streamed(path) or not_regular(path) is not None
        # The year of year-less times: of a plain file from its head and tail, read now (before
        # any part is scanned, each needs it); of a stream from its first piece (scan_part).
        clock = None if stream else _file_clock(source)
        if stream or size <= piece:
            # One part, read as a stream (decompressed as it comes; a refused file fails here).
            def whole(cuts: LineCuts, _buffers: list[bytearray]) -> Pieces:
                return iter_blocks(path, chunk_bytes, ring=3, cuts=cuts)

            return [_Task(file, 0, whole, prefetch=is_streamed(path) or size > chunk_bytes, clock=clock,
                          window=source.view.window)]
        ranges = plan_ranges(path, size, piece)
        while len(ranges) > 1 and ranges[-1][1] - ranges[-1][0] < source.view.window:
            # The tail is kept by the part that reads it: the last part holds it whole.
            ranges[-2:] = [(ranges[-2][0], ranges[-1][1])]
        tasks = []
        for number, (start, end) in enumerate(ranges):
            def ranged(cuts: LineCuts, buffers: list[bytearray], start: int = start, end: int = end) -> Pieces:
                return iter_range_blocks(path, start, end, buffers, chunk_bytes, cuts)

            tasks.append(_Task(file, number, ranged, clock=clock,
                               window=source.view.window if number == len(ranges) - 1 else 0))
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
        is_log = self.kind is TextKind.LOG
        context = b""  # the part's last _CONTEXT_BYTES bytes (as scanned) before the piece
        done = 0  # bytes of the part (as scanned) before the piece
        read_bytes = 0  # bytes of the part (as read: escapes kept) before the piece
        for raw, raw_size, newlines, escapes in blocks:
            part.size += raw_size
            buf: Buffer = raw
            size = raw_size
            if escapes:
                # Escape sequences hold no '\r' or '\n', so lines and their numbers stay put.
                with memoryview(raw) as view, view[:raw_size] as piece:
                    buf = strip_escapes(piece, task.vector_escapes)
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
            if (task.part == 0 and len(part.file_head) < HEAD_BYTES) or task.window:
                _keep_ends(part, task, raw, raw_size)
            done += size
            read_bytes += raw_size
        part.tail = context
        part.cut_lines = cuts.lines
        if task.window:
            _cut_tail(part, task, read_bytes)
            if is_log and task.crashes:
                # The crash finder reads the tail here, numbered from its start (renumbered when the
                # parts merge): on a thread of the scan, beside the other parts' matching.
                part.crashes = crashes_of_tail(part.file_tail, 1, source.rank, log_mtime(source))
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
        is_tame = self.patterns.is_tame
        tames = self.patterns.tame
        untimed = UNTIMED_CHARS
        base = part.newlines
        look_back = task.part == 0  # the look-back of the first part never needs another part
        checked = [-1] * len(self.patterns)  # per pattern: start of the last line it was tried on
        line_start = line_end = -1
        text = ""
        prefix: LinePrefix | None = None  # read when first needed: most lines never need it
        rank: int | None = None
        for packed in merge(*runs) if len(runs) > 1 else runs[0]:
            pos = packed >> SHIFT
            index = packed & MASK
            if pos > line_end or pos < line_start:
                line_start, line_end = line_bounds(buf, pos, size)
                text = ""
            if checked[index] == line_start:
                continue
            checked[index] = line_start
            left = budget[index]
            if left <= 0.0:  # stopped for this file
                if index not in part.skipped:
                    part.skipped[index] = base + count(buf, 0, line_start)
                continue
            if not text:
                text = str(buf[line_start : min(line_end, line_start + MAX_LINE)], "utf-8", "replace")
                prefix = None
            limit = timeout if left > timeout else left
            pattern = compiled(index)  # compiled on first use: not a slow confirmation
            # A suspect pattern is timed on this thread's CPU clock (a syscall), any other on the
            # cheap wall clock. A tame one on a short line is searched without a time limit, which
            # costs as much as the search (regex reads a clock for it).
            watch = suspect[index]
            known = tames[index]  # None until the pattern has fired TAME_AFTER times
            quick = not watch and line_end - line_start <= untimed and (is_tame(index) if known is None else known)
            clock = cpu if watch else wall
            started = clock()
            try:
                # Launcher prefixes are see-through: a pattern that does not match the whole line
                # is tried on the line as the program wrote it (`^Traceback` after "[rank1]: ").
                shift = 0  # where in the line the searched text starts
                match = pattern.search(text) if quick else pattern.search(text, timeout=limit)
                if match is None:
                    if prefix is None:
                        prefix = prefix_of(text)
                    if prefix.width:
                        rest = text[prefix.width:]
                        match = (pattern.search(rest) if quick else
                                 pattern.search(rest, timeout=max(limit - (clock() - started), 0.001)))
                        shift = prefix.width
                took = clock() - started
            except TimeoutError:
                part.timeouts[index] = part.timeouts.get(index, 0) + 1
                match = None
                took = max(clock() - started, limit)  # a time-out always counts in full, however short
                watch = suspect[index] = True
            if took > slow:
                if not watch:
                    # The wall clock also counts a wait for the GIL or a core: the CPU clock decides.
                    took = _cpu_time(pattern, text, prefix, limit)
                    watch = suspect[index] = took > slow
                if watch:
                    stops.charge(index, took, task.part, base + count(buf, 0, line_start))
            if match is None:
                continue
            if prefix is None:
                prefix = prefix_of(text)
            rank = prefix.global_rank if is_log else None
            # Numbered once the piece is done (_number): only the hits kept need a number, and
            # a pattern that fires on many lines would otherwise count its piece again hit by hit.
            unnumbered = -1 - line_start
            by_rank = hits.get(index)
            if by_rank is None:
                by_rank = hits[index] = {}
            summary = by_rank.get(rank)
            if summary is None:
                summary = by_rank[rank] = _PartHits()
            summary.count += 1
            if len(summary.first) >= KEEP:
                summary.pending.append((unnumbered, text, match, shift))
                continue
            moment = self._time(text, source, dates)
            window_at = -1
            if moment is None and is_log:
                if look_back or done + line_start >= _CONTEXT_BYTES:
                    moment = source.on_clock(_time_in(_window(buf, line_start, context), dates))
                else:  # the look-back reaches into the part before: the merge finishes it
                    window_at = done + line_start
            summary.first.append(_First(unnumbered, text, moment, rank, match, shift, window_at))
        _number(hits, buf, base)

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
                            summary.add(LineHit(line + first.line, first.text, moment, rank, captures_of(first.match),
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
        if parts and parts[-1].file_tail is not None:
            # What every reader after the scan takes (evidence/logview.py): nothing is read again.
            first_line = firsts[-1] + parts[-1].tail_after
            source.view.keep(parts[-1].file_tail, first_line, parts[0].file_head, result.lines, result.bytes)
            if parts[-1].crashes is not None:
                keep_tail_crashes(source, shifted(parts[-1].crashes, first_line - 1))
        result.seconds = time.perf_counter() - started
        return result

    def _finish(self, result: FileScan, clock: LogClock) -> None:
        for by_rank in result.hits.values():
            for rank, summary in by_rank.items():
                while summary.pending:
                    line_no, text, match, shift = summary.pending.popleft()
                    moment = self._time(text, result.source, clock)
                    summary.last.append(LineHit(line_no, text, moment, rank, captures_of(match), _span(match, shift)))


def _keep_ends(part: _Part, task: _Task, raw: bytearray, size: int) -> None:
    """Keep the file's head (its first part's first HEAD_BYTES) and, in its last part, the last
    `window` bytes read so far: as read (escapes kept, long lines cut), as read_head and
    read_tail give them, so the readers after the scan see what they would have read."""
    with memoryview(raw) as view:
        if task.part == 0 and len(part.file_head) < HEAD_BYTES:
            with view[: min(size, HEAD_BYTES - len(part.file_head))] as head:
                part.file_head += bytes(head)
        if task.window:
            with view[max(0, size - task.window) : size] as tail:
                part.file_tail = bytes(tail) if size >= task.window else (part.file_tail + bytes(tail))[-task.window:]


def _cut_tail(part: _Part, task: _Task, scanned: int) -> None:
    """The file's tail as read_tail gives it: the last `window` bytes, less the line the window
    cuts into (the whole part when it is the whole file and fits); and the newlines before it."""
    kept = part.file_tail
    if not (task.part == 0 and scanned <= task.window):
        newline = kept.find(b"\n")
        if newline >= 0:
            kept = kept[newline + 1 :]
    part.file_tail = kept
    part.tail_after = part.newlines - kept.count(b"\n")


def _cpu_time(pattern: Any, text: str, prefix: LinePrefix | None, limit: float) -> float:
    """The CPU time of a confirmation that looked slow on the wall clock, which also counts a wait
    for the GIL or a core: done again, timed on this thread's CPU clock (a time-out counts in full)."""
    started = time.thread_time()
    try:
        if pattern.search(text, timeout=limit) is None and prefix is not None and prefix.width:
            pattern.search(text[prefix.width:], timeout=limit)
    except TimeoutError:
        return max(time.thread_time() - started, limit)
    return time.thread_time() - started


def _number(hits: dict[int, dict[int | None, _PartHits]], buf: Buffer, base: int) -> None:
    """Give the hits a piece kept (each written as -1 - its line's offset in the piece) their
    line numbers in the part: `base` newlines before the piece, then those ahead of each. A few
    counts over long ranges, in offset order (numpy's count releases the GIL), whatever the
    number of hits the piece had."""
    wanted: list[int] = []
    for by_rank in hits.values():
        for found in by_rank.values():
            wanted.extend(-1 - first.line for first in found.first if first.line < 0)
            wanted.extend(-1 - entry[0] for entry in found.pending if entry[0] < 0)
    if not wanted:
        return
    numbers: dict[int, int] = {}
    at = newlines = 0
    for offset in sorted(set(wanted)):
        newlines += count_newlines(buf, at, offset)
        at = offset
        numbers[offset] = base + newlines
    for by_rank in hits.values():
        for found in by_rank.values():
            for first in found.first:
                if first.line < 0:
                    first.line = numbers[-1 - first.line]
            if any(entry[0] < 0 for entry in found.pending):
                found.pending = deque(((numbers[-1 - line] if line < 0 else line, text, match, shift)
                                       for line, text, match, shift in found.pending), maxlen=KEEP)


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


def captures_of(match: Any) -> dict[str, str]:
    """A match's named captures that took part in it."""
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
# Scanning threads by default. Confirmations, hyperscan's callbacks and line numbering hold the
# GIL, so past a few threads they queue for it: on the 16-core machine (bench/threads_probe.py)
# the real 1 GiB log took 2.35 s on 2 threads, 2.15 s on 4, 2.90 s on 8 and 3.23 s on 16, and a log
# of true hits (plain) 5.0, 6.6, 22.9 and 23.7 s; each thread also holds its own buffers.
DEFAULT_WORKERS = 4
IN_FLIGHT = 64 * 1024 * 1024  # bytes being read and scanned at once, over all threads
PARALLEL_MIN = 8 * 1024 * 1024  # bytes to scan (all files) from which threads are used
_THREADS_ENV = "DIAGNOSE_SCAN_THREADS"


def default_workers() -> int:
    """Scanning threads: one per core this process may use, DEFAULT_WORKERS at most
    (DIAGNOSE_SCAN_THREADS overrides, up to MAX_WORKERS, for tests and benchmarks)."""
    return _asked_workers() or max(1, min(usable_cores(), DEFAULT_WORKERS))


def _asked_workers() -> int | None:
    """DIAGNOSE_SCAN_THREADS, up to MAX_WORKERS; None when it is not set to a positive number."""
    wanted = os.environ.get(_THREADS_ENV, "")
    return min(int(wanted), MAX_WORKERS) if wanted.isdigit() and int(wanted) > 0 else None


# From this many bytes in all a scan may use worker processes (engine/forkmap.py) instead of
# threads: a fork per core costs a few milliseconds each, repaid on a big log.
FORK_MIN = 128 * 1024 * 1024
_FORK_FAILURES: tuple[type[BaseException], ...] = (OSError, RuntimeError, ImportError)


def _fork_wanted() -> bool:
    from diagnose.engine import forkmap

    return forkmap.wanted(usable_cores())


def _fork_possible() -> bool:
    from diagnose.engine import forkmap

    return forkmap.available()


def default_processes() -> int:
    """Worker processes for a big scan: one per core this process may use (they share no GIL),
    MAX_WORKERS at most; DIAGNOSE_SCAN_THREADS sets them too, for tests and benchmarks."""
    return _asked_workers() or max(1, min(usable_cores(), MAX_WORKERS))


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


PART_MAX = 8 * 1024 * 1024  # a part's bytes at most: each thread holds a few parts' worth of buffers


def part_bytes(workers: int) -> int:
    """Part size: every thread busy on a part of its own, IN_FLIGHT bytes in all, at most
    PART_MAX (on 2 cores 16 MiB parts peaked at 176 MB scanning a 1 GiB real log, 8 MiB ones at
    119 MB; from 8 threads up the parts are smaller anyway)."""
    return max(2 * 1024 * 1024, min(PART_MAX, CHUNK_BYTES, IN_FLIGHT // max(workers, 1)))


def scan_files(jobs: Sequence[tuple[TextFile, Scanner]], workers: int | None = None,
               chunk_bytes: int | None = None, processes: bool | None = None) -> list[FileScan]:
    """Scan each (file, scanner), the parts of all files on `workers` threads (one core each;
    matching holds no lock) or, for a big scan, in as many forked processes (engine/forkmap.py;
    `processes` True/False forces the choice where forking is possible), merged per file in
    order. Results are those of one thread."""
    started = time.perf_counter()
    total = sum(file_size(source.path) for source, _ in jobs)
    forked = bool(processes) and _fork_possible()
    explicit = bool(workers)
    if not workers:
        # A small scan stays on this thread: starting a pool (and importing it) costs more than
        # it saves, and numpy is not imported (bytecount.NUMPY_WORTH).
        workers = default_workers() if total >= PARALLEL_MIN or _THREADS_ENV in os.environ else 1
        forked = forked or (processes is None and total >= FORK_MIN and _fork_wanted())
    threads = workers  # if the workers cannot be forked after all
    if forked and not explicit:
        workers = default_processes()
    wanted = os.environ.get("DIAGNOSE_SCAN_PART", "")  # for tests and benchmarks: parts of this size
    chunk_bytes = chunk_bytes or (int(wanted) if wanted.isdigit() and int(wanted) > 0 else None)
    piece = chunk_bytes or part_bytes(workers)
    read = chunk_bytes or piece + 2 * _PLAN_SLACK  # a part's bytes fit one read
    tasks: list[_Task] = []
    stops: list[_Stops] = []
    for number, (source, scanner) in enumerate(jobs):
        tasks.extend(scanner.plan(source, number, piece, read))
        stops.append(_Stops(len(scanner.patterns)))
    vector = workers > 1
    if not forked:
        prepare_counts(total)  # numpy counts newlines and strips escapes off the GIL, for threads
    else:
        # A worker process has the GIL to itself; numpy still counts 2-4 x faster than bytes.count,
        # which repays its import (0.1-0.4 s, before the fork) only where each worker has much to read.
        vector = total // workers >= NUMPY_SHARE and _numpy_now()
    if total >= PARALLEL_MIN:
        keep_freed_buffers(workers)
    for task in tasks:
        task.vector_escapes = vector
    left = [0] * len(jobs)  # parts of each file still to come
    for task in tasks:
        left[task.file] += 1
    parts: list[list[tuple[int, _Part]]] = [[] for _ in jobs]
    results: list[FileScan | None] = [None] * len(jobs)

    def collect(task: _Task, part: _Part) -> None:
        # A file is merged as soon as its last part is in, and its parts let go: what waits in
        # memory is one file's parts (their 16 KiB tails, and the file's tail), whatever the
        # number of files.
        parts[task.file].append((task.part, part))
        left[task.file] -= 1
        if not left[task.file]:
            source, scanner = jobs[task.file]
            in_order = [found for _n, found in sorted(parts[task.file], key=lambda pair: pair[0])]
            results[task.file] = scanner.merge(source, stops[task.file], in_order, started)
            parts[task.file] = []

    if workers <= 1 or len(tasks) <= 1:
        try:
            for task in tasks:
                source, scanner = jobs[task.file]
                collect(task, scanner.scan_part(source, stops[task.file], task))
        finally:
            _local.__dict__.pop("buffers", None)  # this thread goes on: do not keep 16 MiB for the next scan
    else:
        # Each file's last part first: the crash finder reads its tail on that thread while the
        # other parts are matched on the others (it holds the GIL, matching does not). Where
        # cores are few that only adds to the memory held at once (the tail's text beside every
        # thread's buffers), and the tail is read after the scan instead; worker processes
        # share no GIL, so there it is always read beside the matching.
        if workers >= BESIDE_CORES or forked:
            for task in tasks:
                task.crashes = task.window > 0
            tasks.sort(key=lambda task: task.window == 0)
        if forked:
            try:
                _run_forked(jobs, tasks, stops, collect, workers)
            except _FORK_FAILURES:
                # No worker processes here after all (a sandbox, a worker killed): the threads
                # scan everything again, from the start.
                stops[:] = [_Stops(len(scanner.patterns)) for _source, scanner in jobs]
                left[:] = [sum(1 for task in tasks if task.file == n) for n in range(len(jobs))]
                parts[:] = [[] for _ in jobs]
                results[:] = [None] * len(jobs)
                forked = False
                prepare_counts(total)
                for task in tasks:
                    task.vector_escapes = threads > 1  # as a scan on threads from the start sets it
        if not forked:
            _run_parallel(jobs, tasks, stops, collect, threads)
    return [result if result is not None else jobs[n][1].merge(jobs[n][0], stops[n], [], started)
            for n, result in enumerate(results)]


_PLAN_SLACK = 64 * 1024  # how far past its nominal end a part may reach to end at a newline
BESIDE_CORES = 4  # scanning threads from which the crash finder reads each tail on one of them


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


@dataclass(frozen=True)
class _Matched:
    """A match as it leaves a worker process (regex's Match cannot be pickled): what the merge
    reads of it."""

    groups: dict[str, str | Any]
    where: tuple[int, int]

    def groupdict(self) -> dict[str, str | Any]:
        return self.groups

    def span(self) -> tuple[int, int]:
        return self.where


def _portable(part: _Part) -> _Part:
    """A part's hits with their matches made plain, to be pickled back from a worker."""
    for by_rank in part.hits.values():
        for found in by_rank.values():
            for first in found.first:
                first.match = _Matched(first.match.groupdict(), first.match.span())
            found.pending = deque(((line, text, _Matched(match.groupdict(), match.span()), shift)
                                   for line, text, match, shift in found.pending), maxlen=KEEP)
    return part


Charged: TypeAlias = tuple[dict[int, tuple[int, float]], dict[int, tuple[int, float]], dict[int, tuple[int, int, int]]]


def _forked_scan(jobs: Sequence[tuple[TextFile, Scanner]], tasks: Sequence[_Task], stops: Sequence[_Stops],
                 number: int, stopped: frozenset[int]) -> tuple[_Part, Charged]:
    """In a worker process: one part scanned, with the plan and the compiled patterns it
    inherited at the fork; its file's confirmation budget is this worker's copy, told which
    patterns the parent has stopped since, and what it charged goes back with the part."""
    task = tasks[number]
    source, scanner = jobs[task.file]
    file_stops = stops[task.file]
    file_stops.stop(stopped)
    before = file_stops.spent()
    known = set(file_stops.at)
    part = scanner.scan_part(source, file_stops, task)
    at = {index: where for index, where in file_stops.at.items() if index not in known}
    return _portable(part), (before, file_stops.spent(), at)


def _run_forked(jobs: Sequence[tuple[TextFile, Scanner]], tasks: list[_Task], stops: list[_Stops],
                collect: Callable[[_Task, _Part], None], workers: int) -> None:
    from functools import partial

    from diagnose.engine.forkmap import fork_map

    work = partial(_forked_scan, jobs, tasks, stops)
    orders = ((number, stops[task.file].stopped) for number, task in enumerate(tasks))
    for number, (part, (before, after, at)) in enumerate(fork_map(work, orders, workers, workers * 3)):
        task = tasks[number]
        stops[task.file].absorb(before, after, task.part, at, part.newlines)
        collect(task, part)


NUMPY_SHARE = 256 * 1024 * 1024  # bytes per worker process from which numpy is imported before the fork


def _numpy_now() -> bool:
    from diagnose.engine import bytecount

    return bytecount.load_now()


def prepare_counts(total_bytes: int) -> None:
    from diagnose.engine import bytecount

    bytecount.prepare(total_bytes)


def scan_texts(sources: Iterable[TextFile], patterns: Mapping[TextKind, PatternSet], engine: str = "auto",
               workers: int | None = None) -> list[FileScan]:
    scanners = {kind: Scanner(kind, pats, engine) for kind, pats in patterns.items()}
    jobs = [(source, scanners[source.kind]) for source in sources if source.kind in scanners]
    return scan_files(jobs, workers) if jobs else []
