"""A remote log, searched where it lives: only the lines that may match cross the connection.

The rule patterns go to the remote side as ERE supersets (patterns/ere.py) and `LC_ALL=C grep
-a -n -b -E` runs beside the log, in the same command as a count of its lines, its head (the
start time) and its tail (the crash block, the last lines, what the tail readers read); the
answer is compressed when the remote side has gzip. Here the answer becomes an *excerpt*: a
local file with the same number of lines as the remote log, each line either the real one
(head, tail, every candidate line) or empty, so that line numbers, tails and every later step
are those of the real file; the scanner then confirms the candidates with the real patterns,
as for any local log (no pattern matches an empty line: the rule checks refuse those).

Lines without a timestamp of their own take the one of the nearest line above them (scan.py);
for the first hits of each pattern that is read too, in one more command (the bytes just above
each), so the hits' times are those of a local scan. The excerpt is what a bundle of the run
keeps: `diagnose BUNDLE` gives the answer the live diagnosis gave.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diagnose.live.ssh import nonce

if TYPE_CHECKING:
    from diagnose.live.remotehost import SshHost

WHOLE = 8 * 1024 * 1024  # a log this small is fetched whole
HEAD = 128 * 1024  # the excerpt's first 64 KiB are the file's (runview reads that much)
TAIL = 5 * 1024 * 1024  # and its last 4 MiB (tracebacks, runlog, runview read that much)
OUTPUT_LINE = 16 * 1024 * 1024  # a candidate line longer than this is cut there (counted)
CUT_FIRST = 1024 * 1024  # after grep ran out of memory on a huge line: lines cut to this before grep
GREP_MEMORY_KB = 1024 * 1024  # ulimit -v of the remote grep (DIAGNOSE_REMOTE_GREP_MEMORY_KB: a small box)
CONTEXT = 20 * 1024  # bytes above a hit for its timestamp (the scanner looks 16 KiB back)
MAX_CANDIDATE_BYTES = 512 * 1024 * 1024  # a prefilter letting through more than this is stopped

SCAN = r"""
pats=$(cat)
f=$1; hn=$2; tn=$3; cached=$4; cap=$5; mem=$6; z=$7; lc=$8
body() {
  if [ ! -e "$f" ]; then printf 'ERR ENOENT\n'; e; return; fi
  if [ ! -f "$f" ]; then printf 'ERR EINVAL\n'; e; return; fi
  if [ ! -r "$f" ]; then printf 'ERR EACCES\n'; e; return; fi
  st=$(stat -L -c '%s %.9Y' -- "$f") || { printf 'ERR stat\n'; e; return; }
  s=${st%% *}
  printf 'STAT %s\n' "$st"; e
  printf 'PATTERNS %s\n' "$(printf '%s\n' "$pats" | grep -c '')"; e
  # Its lines are counted beside the search (a second reader of the same pages, on another core).
  ( printf 'LINES %s\n' "$(head -c "$s" -- "$f" | wc -l)" >&2 ) &
  h=$hn; [ "$s" -lt "$h" ] && h=$s
  printf 'HEAD %s\n' "$h"; head -c "$h" -- "$f"; e
  if [ -n "$cached" ] && [ "$st" = "$cached" ]; then printf 'TAIL same\n'; e
  else
    t=$tn; [ "$s" -lt "$t" ] && t=$s
    printf 'TAIL %s\n' "$t"; tail -c +"$((s - t + 1))" -- "$f" | head -c "$t"; e
  fi
  printf 'GREP %s\n' "$lc"
  if [ "$lc" = 0 ]; then
    ( ulimit -v "$mem" 2>/dev/null; grep -a -n -b -E -f /dev/fd/3 -- "$f"; echo "GREPRC $?" >&2 ) 3<<DIAGNOSE_PATTERNS | cut -b "-$cap"
$pats
DIAGNOSE_PATTERNS
  else
    head -c "$s" -- "$f" | cut -b "-$lc" | ( grep -a -n -b -E -f /dev/fd/3; echo "GREPRC $?" >&2 ) 3<<DIAGNOSE_PATTERNS | cut -b "-$cap"
$pats
DIAGNOSE_PATTERNS
  fi
  e
  wait
  printf 'STAT2 %s\n' "$(stat -L -c '%s %.9Y' -- "$f")"; e
}
if [ "$z" = 1 ]; then body | gzip -1 -c; else body; fi
"""


def grep_memory_kb() -> int:
    import os

    raw = os.environ.get("DIAGNOSE_REMOTE_GREP_MEMORY_KB", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else GREP_MEMORY_KB


class RemoteScanError(Exception):
    """The remote search could not be done (the reason is a gap)."""


@dataclass
class Excerpt:
    path: Path
    stats: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class _Reader:
    """The scan's answer as it streams in: the marker line, then (maybe compressed) sections."""

    def __init__(self, chunks: Iterator[bytes], mark: str, compressed: bool) -> None:
        self.chunks = chunks
        self.token = mark.encode()
        self.end = b"\n" + self.token + b"\n"
        self.buf = bytearray()
        self.eof = False
        self.inflate = zlib.decompressobj(wbits=31) if compressed else None
        self.received = 0
        raw = bytearray()
        while True:  # what the login shell printed before our marker is not ours
            at = raw.find(self.token + b"\n")
            if at >= 0:
                self._add(bytes(raw[at + len(self.token) + 1 :]))
                break
            chunk = next(self.chunks, None)
            if chunk is None:
                self.eof = True
                raise RemoteScanError("the remote side did not answer")
            self.received += len(chunk)
            raw += chunk

    def _add(self, data: bytes) -> None:
        if self.inflate is not None:
            try:
                data = self.inflate.decompress(data)
            except zlib.error as exc:
                raise RemoteScanError(f"corrupt compressed answer ({exc})") from None
        self.buf += data

    def _fill(self) -> bool:
        if self.eof:
            return False
        chunk = next(self.chunks, None)
        if chunk is None:
            self.eof = True
            if self.inflate is not None:
                self.buf += self.inflate.flush()
            return False
        self.received += len(chunk)
        self._add(chunk)
        return True

    def header(self) -> str:
        while True:
            at = self.buf.find(b"\n")
            if at >= 0:
                line = bytes(self.buf[:at])
                del self.buf[: at + 1]
                return line.decode("utf-8", errors="replace")
            if not self._fill():
                raise RemoteScanError("the answer was cut short")

    def content(self, limit: int) -> bytes:
        """A section's content, up to its end marker."""
        searched = 0
        while True:
            at = self.buf.find(self.end, max(0, searched - len(self.end)))
            if at >= 0:
                data = bytes(self.buf[:at])
                del self.buf[: at + len(self.end)]
                return data
            searched = len(self.buf)
            if searched > limit + len(self.end):
                raise RemoteScanError("a section was longer than announced")
            if not self._fill():
                raise RemoteScanError("the answer was cut short")

    def lines(self) -> Iterator[bytes]:
        """The lines of the grep section (each starts with its line number), to its end marker:
        an empty line then the marker (grep never prints an empty line)."""
        while True:
            at = self.buf.find(b"\n")
            if at < 0:
                if not self._fill():
                    raise RemoteScanError("the answer was cut short")
                continue
            line = bytes(self.buf[:at])
            if not line:
                while len(self.buf) < len(self.end) and self._fill():
                    pass
                if bytes(self.buf[: len(self.end)]) == self.end:
                    del self.buf[: len(self.end)]
                    return
            del self.buf[: at + 1]
            yield line


def fetch_log(host: SshHost, path: str, size: int, patterns: Any, engine: str, display: str, rank: int | None,
              mtime: float | None, folder: Path, deadline: float) -> Excerpt:
    """The local stand-in of a remote log: the whole file when small, else an excerpt."""
    from diagnose.evidence.textio import is_compressed

    started = time.monotonic()
    local = folder / path.lstrip("/")
    local.parent.mkdir(parents=True, exist_ok=True)
    if size <= WHOLE or is_compressed(Path(path)) or patterns is None or not len(patterns):
        from diagnose.live.remotehost import FETCH_CAP

        if size > FETCH_CAP:
            raise RemoteScanError(f"{size:,} bytes{' compressed' if is_compressed(Path(path)) else ''}: too big to "
                                  "fetch, and a compressed log cannot be searched where it is")
        data = host.local_path(path).read_bytes()
        local.write_bytes(data)
        return Excerpt(local, {"size": size, "mode": "whole file", "received": len(data),
                               "seconds": round(time.monotonic() - started, 3)})
    return _search(host, path, patterns, engine, display, rank, mtime, local, deadline, started)


def _search(host: SshHost, path: str, patterns: Any, engine: str, display: str, rank: int | None,
            mtime: float | None, local: Path, deadline: float, started: float) -> Excerpt:
    from diagnose.patterns.ere import pattern_file

    pattern_bytes, refused = pattern_file(list(patterns.patterns))
    # The tail through the host's cache (the other collectors read it too): the search then
    # sends it again only if the file changed meanwhile.
    host.read_bytes(path, TAIL, -TAIL)
    cached = host.cached_tail(path)
    cached_info = cached[1] if cached is not None and len(cached[0]) >= TAIL else ""
    compressed = "gzip" in host.tools
    excerpt = Excerpt(local)
    answer: Answer | None = None
    stderr = bytearray()
    for cut_first in (0, CUT_FIRST):
        left = deadline - time.monotonic()
        if left <= 1:
            raise TimeoutError("no time left to search it remotely")
        stderr = bytearray()
        try:
            answer = _run_scan(host, path, pattern_bytes, cached_info, compressed, cut_first, left, stderr)
        except TimeoutError as exc:
            raise TimeoutError(f"the remote search did not end in time ({exc})") from None
        if answer is not None:
            break
        if cut_first:
            raise RemoteScanError(f"grep ran out of memory even with every line cut to {CUT_FIRST >> 10} KiB")
        excerpt.notes.append(f"{display}: grep ran out of memory on a very long line; searched again with every "
                             f"line cut to {CUT_FIRST >> 10} KiB first (the times of hits without a timestamp of "
                             "their own may then be missing)")
    assert answer is not None
    info, lines, head, tail, tail_info, candidates, grep_rc, stat2, received = answer
    if grep_rc not in (0, 1):
        raise RemoteScanError(f"grep failed (exit {grep_rc}): "
                              + next((x for x in stderr.decode(errors="replace").splitlines() if x.strip()
                                      and not x.startswith("GREPRC")), "")[:200])
    size = int(info.split()[0])
    if tail is None:  # the kept tail still holds (same size and mtime)
        assert cached is not None
        tail = cached[0][-min(TAIL, size):]
    else:
        host.keep_tail(path, tail, tail_info, size - len(tail))
    if stat2 and int(stat2.split()[0]) < size:
        raise RemoteScanError("the log shrank while it was searched (rotated or truncated?); diagnose again")
    excerpt.stats.update({"size": size, "lines": lines, "candidates": len(candidates), "received": received,
                          "mode": "grep" if not cut_first else f"grep, lines cut to {CUT_FIRST // 1024} KiB first",
                          "patterns": len(patterns), "patterns_digest": patterns.digest, "compressed": compressed})
    if refused:
        excerpt.stats["unsearchable_patterns"] = len(refused)
        excerpt.notes.append(f"{display}: {len(refused)} rule pattern(s) use syntax grep cannot be given "
                             "(regex-only); they were checked only on the lines fetched")
    long_lines = sum(1 for _l, _o, text in candidates if len(text) >= OUTPUT_LINE - 64)
    if long_lines:
        excerpt.notes.append(f"{display}: {long_lines} candidate line(s) longer than {OUTPUT_LINE >> 20} MiB were "
                             "fetched only up to there")
    layout = _write_excerpt(local, size, lines, head, tail, candidates)
    if not cut_first:  # (after lines were cut before grep, its byte offsets are not the file's)
        context, fetched = _context(host, path, local, layout, patterns, engine, display, rank, mtime)
        if context:
            known = {number for number, _o, _t in candidates}
            merged = sorted(candidates + [c for c in context if c[0] not in known])
            _write_excerpt(local, size, lines, head, tail, merged)
        excerpt.stats["context_lines"] = len(context)
        excerpt.stats["received"] = received + fetched
    excerpt.stats["seconds"] = round(time.monotonic() - started, 3)
    return excerpt


Answer = tuple[str, int, bytes, bytes | None, str, list[tuple[int, int, bytes]], int, str, int]


def _run_scan(host: SshHost, path: str, pattern_bytes: bytes, cached_info: str, compressed: bool, cut_first: int,
              timeout: float, stderr: bytearray) -> Answer | None:
    """One run of SCAN; None when grep ran out of memory (try again with lines cut first)."""
    import errno

    from diagnose.live.remotehost import PRELUDE

    mark = nonce()
    args = [path, str(HEAD), str(TAIL), cached_info, str(OUTPUT_LINE), str(grep_memory_kb()), "1" if compressed else "0",
            str(cut_first)]
    argv = [*host._deadline_words(timeout), "sh", "-c", PRELUDE + SCAN, "diagnose", mark, *args]
    chunks = host.conn.stream(argv, timeout + 3.0, stdin=pattern_bytes, stderr=stderr)
    try:
        reader = _Reader(chunks, mark, compressed)
        first = reader.header()
        if first.startswith("ERR"):
            why = first.split()[1] if len(first.split()) > 1 else "?"
            if why == "ENOENT":
                raise FileNotFoundError(errno.ENOENT, "no such file or directory", path)
            if why == "EACCES":
                raise PermissionError(errno.EACCES, "permission denied", path)
            raise RemoteScanError("not a regular file" if why == "EINVAL" else f"cannot read it ({why})")
        info = first.partition(" ")[2]
        reader.content(0)
        count = reader.header().partition(" ")[2].strip()
        reader.content(0)
        sent = pattern_bytes.count(b"\n")
        if count != str(sent):
            raise RemoteScanError(f"the patterns did not arrive ({count or 0} of {sent} lines: does the exec prefix "
                                  "pass stdin through? docker and kubectl need exec -i)")
        reader.header()
        head = reader.content(HEAD)
        tail_header = reader.header()
        tail_data = reader.content(TAIL)
        tail = None if tail_header == "TAIL same" else tail_data
        reader.header()  # GREP
        candidates: list[tuple[int, int, bytes]] = []
        total = 0
        for line in reader.lines():
            number, _, rest = line.partition(b":")
            offset, _, text = rest.partition(b":")
            if not number.isdigit() or not offset.isdigit():
                continue
            candidates.append((int(number), int(offset), text))
            total += len(text)
            if total > MAX_CANDIDATE_BYTES:
                raise RemoteScanError(f"the prefilter let more than {MAX_CANDIDATE_BYTES >> 20} MiB of lines through "
                                      "(every line holds an escape sequence?)")
        stat2 = reader.header().partition(" ")[2]
        reader.content(0)
        for _rest in chunks:  # the end of the stream: ssh's exit status (a dropped connection raises)
            pass
    except RemoteScanError:
        if b"memory exhausted" in bytes(stderr):
            return None
        raise
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    if b"memory exhausted" in bytes(stderr):
        return None
    grep_rc, lines = 0, -1
    for said in bytes(stderr).decode(errors="replace").splitlines():
        words = said.split()
        if len(words) == 2 and words[0] == "GREPRC":
            grep_rc = int(words[1]) if words[1].isdigit() else 2
        elif len(words) == 2 and words[0] == "LINES" and words[1].isdigit():
            lines = int(words[1])
    if lines < 0:
        raise RemoteScanError("the log's lines were not counted there")
    info_size = int(info.split()[0])
    # Lines written after the size was taken are not part of this snapshot.
    candidates = [(n, o, t[: info_size - o]) for n, o, t in candidates if o < info_size]
    return info, lines, head, tail, info, candidates, grep_rc, stat2, reader.received


@dataclass
class _Layout:
    head_lines: int  # lines 1..head_lines are real
    head_end: int  # byte offset where the kept head ends
    tail_first: int  # first line of the kept tail
    tail_start: int  # its byte offset
    offsets: dict[int, int]  # line -> byte offset, of the candidate lines written
    tail: bytes = b""

    def tail_line_offset(self, line: int) -> int | None:
        """The byte offset in the remote file of a line of the kept tail."""
        position = 0
        for _ in range(line - self.tail_first):
            position = self.tail.find(b"\n", position)
            if position < 0:
                return None
            position += 1
        return self.tail_start + position


def _write_excerpt(local: Path, size: int, lines: int, head: bytes, tail: bytes,
                   candidates: list[tuple[int, int, bytes]]) -> _Layout:
    """Head, candidates and tail at their own line numbers, empty lines between (see the module doc)."""
    keep = head.rfind(b"\n") + 1 if len(head) < size else len(head)
    head = head[:keep]
    tail_offset = size - len(tail)
    if tail_offset > 0:
        cut = tail.find(b"\n") + 1  # the first line of the tail is partial
        tail, tail_offset = tail[cut:], tail_offset + cut
    tail_first = lines - tail.count(b"\n") + 1
    head_lines = head.count(b"\n")
    offsets: dict[int, int] = {}
    with open(local, "wb") as out:
        out.write(head)
        line, offset = head_lines + 1, len(head)
        for number, at, text in candidates:
            if at < offset or number < line:
                continue  # in the head already
            if at >= tail_offset or number >= tail_first:
                break  # the tail holds it
            _blank(out, number - line)
            out.write(text)
            out.write(b"\n")
            offsets[number] = at
            line, offset = number + 1, at + len(text) + 1
        _blank(out, tail_first - line)
        out.write(tail)
    return _Layout(head_lines, len(head), tail_first, tail_offset, offsets, tail)


def _blank(out: Any, count: int) -> None:
    block = b"\n" * (1 << 20)
    while count > 0:
        step = min(count, len(block))
        out.write(block[:step])
        count -= step


def _context(host: SshHost, path: str, local: Path, layout: _Layout, patterns: Any, engine: str, display: str,
             rank: int | None, mtime: float | None) -> tuple[list[tuple[int, int, bytes]], int]:
    """The lines just above each first hit that has no timestamp of its own (the scanner takes
    the nearest one above), as (line, offset, text); and the bytes fetched for them."""
    from diagnose.engine.scan import Scanner
    from diagnose.evidence.lines import log_time
    from diagnose.evidence.model import TextFile, TextKind

    scan = Scanner(TextKind.LOG, patterns, engine).scan(TextFile(TextKind.LOG, local, display, rank, mtime))
    year = time.localtime(mtime).tm_year if mtime else None
    wanted: dict[int, int] = {}  # line -> its byte offset
    for by_rank in scan.hits.values():
        for summary in by_rank.values():
            for hit in summary.first:
                if hit.line_no <= layout.head_lines or log_time(hit.text, year) is not None:
                    continue
                offset = layout.offsets.get(hit.line_no)
                if offset is None and hit.line_no >= layout.tail_first:
                    offset = layout.tail_line_offset(hit.line_no)
                    if offset is not None and offset - CONTEXT >= layout.tail_start:
                        continue  # the lines above it are the tail's own
                if offset is not None and offset > 0:
                    wanted[hit.line_no] = offset
    if not wanted:
        return [], 0
    ranges = [(max(0, offset - CONTEXT), min(offset, CONTEXT)) for offset in wanted.values()]
    chunks = host.read_ranges(path, ranges)
    found: dict[int, tuple[int, int, bytes]] = {}
    for (line, offset), (start, _length), chunk in zip(wanted.items(), ranges, chunks, strict=False):
        if len(chunk) != offset - start:
            continue  # the file changed under us: leave that hit's context out
        parts = chunk.split(b"\n")
        whole = parts[:-1] if start == 0 else parts[1:-1]  # the first one starts before the range
        position = offset
        for index in range(len(whole) - 1, -1, -1):
            text = whole[index]
            position -= len(text) + 1
            number = line - len(whole) + index
            found.setdefault(number, (number, position, text))
    return sorted(found.values()), sum(len(c) for c in chunks)
