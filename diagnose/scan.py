"""The line scanner: every pattern of a kind searched in one pass over each file.

Two engines give identical results:
- hyperscan (when importable): all patterns in one database, compiled in prefilter mode so it
  may report a few extra candidate lines but never misses one; cached on disk by content hash.
- pure: each pattern searched over the whole chunk with `regex` (C speed per pattern).
Both only nominate candidate lines; `regex` then confirms each candidate on the line as users
see it (ANSI escapes stripped, '\\r' progress updates as separate lines, cut at 64 KiB) and
extracts the named captures. Evidence is bounded: per pattern and rank the first and last few
hits and a count.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from diagnose.evidence import TextFile, TextKind
from diagnose.lineinfo import kernel_time, log_time, rank_of, strip_ansi
from diagnose.textio import iter_chunks

MAX_LINE = 64 * 1024
KEEP = 3  # hits kept at each end, per pattern and rank
LINE_TIMEOUT = 1.0  # seconds one pattern may spend confirming one line before we give up
_CONTEXT_BYTES = 16 * 1024  # how far back to look for a timestamp for a line that has none


@dataclass(frozen=True)
class LineHit:
    line_no: int
    text: str
    time: float | None
    rank: int | None
    captures: Mapping[str, str]


@dataclass
class HitSummary:
    """Bounded record of one pattern's hits in one file for one rank."""

    count: int = 0
    first: list[LineHit] = field(default_factory=list)
    last: deque[LineHit] = field(default_factory=lambda: deque(maxlen=KEEP))

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

    def summaries(self, pattern: int) -> dict[int | None, HitSummary]:
        return self.hits.get(pattern, {})

    def count(self, pattern: int) -> int:
        return sum(s.count for s in self.hits.get(pattern, {}).values())


class PatternSet:
    """The distinct line patterns of one text kind, compiled once."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns: tuple[str, ...] = tuple(patterns)
        self.compiled = [regex.compile(p) for p in self.patterns]
        self.digest = hashlib.sha256("\x00".join(self.patterns).encode()).hexdigest()
        self._bytes_compiled: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.patterns)

    def bytes_patterns(self) -> list[Any]:
        """Per-pattern byte regexes for the pure engine (None: search decoded text instead)."""
        if self._bytes_compiled is None:
            compiled: list[Any] = []
            for text in self.patterns:
                try:
                    compiled.append(regex.compile(text.encode("utf-8"), regex.MULTILINE) if text.isascii() else None)
                except regex.error:
                    compiled.append(None)
            self._bytes_compiled = compiled
        return self._bytes_compiled


# ---------------------------------------------------------------- candidate engines

CandidateFinder = Callable[[bytes], Iterable[tuple[int, int]]]  # buffer -> (pattern, offset)


def _line_bounds(buf: bytes, offset: int) -> tuple[int, int]:
    start = buf.rfind(b"\n", 0, offset) + 1
    end = buf.find(b"\n", offset)
    return start, len(buf) if end < 0 else end


def pure_finder(patterns: PatternSet) -> CandidateFinder:
    """Candidates from `regex` searched per pattern over the whole buffer.

    After each match every line it touches is a candidate, and the search resumes on the
    line after the one the match started in, so no line holding a match is skipped.
    """
    byte_patterns = patterns.bytes_patterns()

    def find(buf: bytes) -> Iterator[tuple[int, int]]:
        text_buf: str | None = None
        for index, compiled in enumerate(byte_patterns):
            if compiled is None:  # non-ASCII pattern: search the decoded text, then map back
                if text_buf is None:
                    text_buf = buf.decode("utf-8", errors="replace")
                yield from _text_candidates(index, patterns.compiled[index], buf, text_buf)
                continue
            pos = 0
            size = len(buf)
            while pos < size:
                match = compiled.search(buf, pos)
                if match is None:
                    break
                first_start, _ = _line_bounds(buf, match.start())
                line_start = first_start
                while True:
                    yield index, line_start
                    line_end = buf.find(b"\n", line_start)
                    if line_end < 0 or line_end >= match.end() or line_end + 1 >= size:
                        break
                    line_start = line_end + 1
                next_line = buf.find(b"\n", match.start())
                pos = size if next_line < 0 else next_line + 1

    return find


def _text_candidates(index: int, compiled: Any, buf: bytes, text: str) -> Iterator[tuple[int, int]]:
    # Decoding replaced invalid bytes, so offsets differ: find lines by counting newlines.
    line_starts: list[int] | None = None
    for match in compiled.finditer(text):
        if line_starts is None:
            line_starts = [0]
            pos = buf.find(b"\n")
            while pos >= 0:
                line_starts.append(pos + 1)
                pos = buf.find(b"\n", pos + 1)
        first = text.count("\n", 0, match.start())
        last = first + text.count("\n", match.start(), match.end())
        for line in range(first, min(last, len(line_starts) - 1) + 1):
            yield index, line_starts[line]


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401
    except Exception:
        return False
    return True


def _cache_dir() -> Path:
    base = os.environ.get("DIAGNOSE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "diagnose"
    )
    return Path(base)


class HyperscanDatabase:
    """All hyperscan-compatible patterns of a set in one block-mode database.

    Patterns hyperscan cannot take even in prefilter mode (or non-ASCII ones, since we scan
    bytes) are left to the pure finder, so the result never depends on the engine.
    """

    def __init__(self, patterns: PatternSet) -> None:
        import hyperscan as hs

        self._hs = hs
        self.patterns = patterns
        flags = hs.HS_FLAG_MULTILINE | hs.HS_FLAG_PREFILTER
        key = hashlib.sha256(f"{getattr(hs, '__version__', '?')}|{flags}|{patterns.digest}".encode()).hexdigest()
        self.db: Any = None
        self.leftover: list[int] = []
        cached = self._load(key)
        if cached is None:
            accepted: list[int] = []
            for index, text in enumerate(patterns.patterns):
                if not text.isascii() or not self._compiles(text, flags):
                    self.leftover.append(index)
                else:
                    accepted.append(index)
            if accepted:
                self.db = hs.Database(mode=hs.HS_MODE_BLOCK)
                self.db.compile(
                    expressions=[patterns.patterns[i].encode() for i in accepted],
                    ids=accepted,
                    elements=len(accepted),
                    flags=[flags] * len(accepted),
                )
            self._store(key)
        self.scratch: Any = None

    def _compiles(self, text: str, flags: int) -> bool:
        hs = self._hs
        probe = hs.Database(mode=hs.HS_MODE_BLOCK)
        try:
            probe.compile(expressions=[text.encode()], ids=[0], elements=1, flags=[flags])
        except Exception:
            return False
        return True

    def _load(self, key: str) -> Any:
        path = _cache_dir() / f"hs-{key}.db"
        try:
            blob = path.read_bytes()
        except OSError:
            return None
        try:
            header, _, payload = blob.partition(b"\n")
            self.leftover = [int(x) for x in header.decode().split(",") if x]
            self.db = self._hs.loadb(payload, self._hs.HS_MODE_BLOCK) if payload else None
        except Exception:
            self.leftover = []
            return None
        return True

    def _store(self, key: str) -> None:
        directory = _cache_dir()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            payload = self._hs.dumpb(self.db) if self.db is not None else b""
            tmp = directory / f".hs-{key}.{os.getpid()}.tmp"
            tmp.write_bytes(",".join(map(str, self.leftover)).encode() + b"\n" + payload)
            tmp.replace(directory / f"hs-{key}.db")
        except Exception:
            pass  # a cache that cannot be written only costs compile time next run

    def finder(self) -> CandidateFinder:
        leftover_finder = _subset_finder(self.patterns, self.leftover) if self.leftover else None

        def find(buf: bytes) -> list[tuple[int, int]]:
            found: list[tuple[int, int]] = []
            if self.db is not None:
                if self.scratch is None:
                    self.scratch = self._hs.Scratch(self.db)
                last_line_end: dict[int, int] = {}

                def on_match(index: int, _from: int, to: int, _flags: int, _ctx: Any) -> None:
                    # One candidate per pattern and line: skip further ends inside a line seen.
                    if to <= last_line_end.get(index, -1):
                        return
                    end = buf.find(b"\n", to)
                    last_line_end[index] = len(buf) if end < 0 else end
                    found.append((index, to))

                self.db.scan(buf, match_event_handler=on_match, scratch=self.scratch)
            if leftover_finder is not None:
                found.extend(leftover_finder(buf))
            return found

        return find


def _subset_finder(patterns: PatternSet, indexes: list[int]) -> CandidateFinder:
    subset = PatternSet([patterns.patterns[i] for i in indexes])
    inner = pure_finder(subset)

    def find(buf: bytes) -> Iterator[tuple[int, int]]:
        for local, offset in inner(buf):
            yield indexes[local], offset

    return find


_DATABASES: dict[str, HyperscanDatabase] = {}


def make_finder(patterns: PatternSet, engine: str = "auto") -> tuple[str, CandidateFinder]:
    """The candidate finder for a pattern set: 'hyperscan', 'pure', or 'auto' (the best one)."""
    if engine not in ("auto", "hyperscan", "pure"):
        raise ValueError(f"unknown scan engine {engine!r}")
    if engine != "pure" and hyperscan_available():
        database = _DATABASES.get(patterns.digest)
        if database is None:
            database = _DATABASES[patterns.digest] = HyperscanDatabase(patterns)
        return "hyperscan", database.finder()
    if engine == "hyperscan":
        raise RuntimeError("the hyperscan engine was asked for but the hyperscan package is not importable")
    return "pure", pure_finder(patterns)


# ---------------------------------------------------------------- scanning


def count_long_lines(buf: bytes, limit: int = MAX_LINE) -> int:
    """Lines longer than `limit` bytes, found by jumping ~limit bytes per step (cheap)."""
    count = 0
    pos = 0
    size = len(buf)
    while pos + limit < size:
        newline = buf.rfind(b"\n", pos, pos + limit + 1)
        if newline >= 0:
            pos = newline + 1
            continue
        count += 1
        newline = buf.find(b"\n", pos + limit)
        if newline < 0:
            break
        pos = newline + 1
    return count


class Scanner:
    """Scans text files of one kind with one pattern set."""

    def __init__(self, kind: TextKind, patterns: PatternSet, engine: str = "auto") -> None:
        self.kind = kind
        self.patterns = patterns
        self._find: CandidateFinder | None = None
        self.engine_name = "none"
        if len(patterns):
            self.engine_name, self._find = make_finder(patterns, engine)

    def scan(self, source: TextFile) -> FileScan:
        started = time.perf_counter()
        result = FileScan(source=source, engine=self.engine_name)
        year = time.localtime(source.mtime).tm_year if source.mtime else None
        for base_line, raw in iter_chunks(source.path):
            self.scan_chunk(result, raw, base_line, year)
        result.seconds = time.perf_counter() - started
        return result

    def scan_chunk(self, result: FileScan, raw: bytes, base_line: int, year: int | None) -> None:
        chunk = strip_ansi(raw)  # escape sequences never contain '\n', so line numbers hold
        result.bytes += len(raw)
        result.lines += chunk.count(b"\n")
        # '\r' ends a line as users see it (progress bars); scan a copy where it is '\n'.
        buf = chunk.replace(b"\r", b"\n") if b"\r" in chunk else chunk
        result.cut_lines += count_long_lines(buf)
        if self._find is None:
            return
        candidates = sorted(set(self._find(buf)), key=lambda c: c[1])
        counted_to, newlines = 0, 0
        seen: set[tuple[int, int]] = set()
        for index, offset in candidates:
            start, end = _line_bounds(buf, offset)
            if (index, start) in seen:
                continue
            seen.add((index, start))
            cut_end = min(end, start + MAX_LINE)
            text = buf[start:cut_end].decode("utf-8", errors="replace")
            try:
                match = self.patterns.compiled[index].search(text, timeout=LINE_TIMEOUT)
            except TimeoutError:
                result.timeouts[index] = result.timeouts.get(index, 0) + 1
                continue
            if match is None:
                continue
            newlines += chunk.count(b"\n", counted_to, start)
            counted_to = start
            line_no = base_line + newlines
            hit = LineHit(
                line_no=line_no,
                text=text,
                time=None,
                rank=rank_of(text) if self.kind is TextKind.LOG else None,
                captures={k: v for k, v in match.groupdict().items() if v is not None},
            )
            by_rank = result.hits.setdefault(index, {})
            summary = by_rank.get(hit.rank)
            if summary is None:
                summary = by_rank[hit.rank] = HitSummary()
            # Looking back for a timestamp costs a decode; only the kept first hits need it.
            hit = _with_time(hit, self.kind, result.source, buf, start, year, summary.count < KEEP)
            summary.add(hit)


def _with_time(hit: LineHit, kind: TextKind, source: TextFile, buf: bytes, start: int, year: int | None,
               look_back: bool) -> LineHit:
    if kind is TextKind.DMESG:
        moment = kernel_time(hit.text, source.boot_time, year or source.year)
    else:
        moment = log_time(hit.text, year)
        if moment is None and look_back:
            moment = _time_before(buf, start, year)
    if moment is None:
        return hit
    return LineHit(hit.line_no, hit.text, moment, hit.rank, hit.captures)


def _time_before(buf: bytes, start: int, year: int | None) -> float | None:
    """The timestamp of the nearest earlier line that has one (tracebacks carry none)."""
    window = buf[max(0, start - _CONTEXT_BYTES) : start].decode("utf-8", errors="replace")
    for line in reversed(window.splitlines()[-200:]):
        moment = log_time(line, year)
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
