"""Find the last exception of each rank and thread in a log, for crashes no rule recognises.

Threads that die at once interleave their tracebacks line by line, so tracebacks are paired
with their final exception lines in order (first opened, first closed), per rank, and with
the `Exception in thread NAME:` headers the same way.
"""

from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from diagnose.evidence.lines import log_time, rank_of, split_host, strip_ansi
from diagnose.evidence.textio import read_tail

TAIL_BYTES = 4 * 1024 * 1024

_PREFIX = re.compile(r"^\s*(?:\[[A-Za-z_]\w*?\d+\]:)?\[(?:rank|default|Rank |RANK )\d+\]:?\s?|^\s*rank\d+:\s")
_THREAD = re.compile(r"^Exception in thread (?P<name>.+?):\s*$")
_TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):\s*$")
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]*\.)*(?:[A-Z][\w]*(?:Error|Exception|Exit|Interrupt|Failure|Timeout|Unsupported|Warning)|"
    r"KeyboardInterrupt|StopIteration|SystemExit|OutOfMemoryError|ChildFailedError|DistBackendError|CalledProcessError))"
    r"(?::\s?(?P<message>.*))?$"
)
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
# A fatal line; glibc's "double free detected" names the whole line, at whatever column it
# stands. Written as `.*double free detected.*` inside the search it was tried from every
# column to the line's end: quadratic (a 400 KB line took minutes). It is found by `in` instead.
_FATAL_HEAD = (
    r"Fatal Python error: .*|Segmentation fault.*|terminate called after throwing an instance of .*|"
    r"Aborted \(core dumped\)|Bus error.*"
)
_FATAL_TAIL = r"free\(\): invalid pointer|(?:^|\s)Killed(?:\s+\S.*)?$"
_FATAL = re.compile(f"(?P<message>{_FATAL_HEAD}|{_FATAL_TAIL})")
_FATAL_AT_START = re.compile(f"(?P<message>{_FATAL_HEAD})")
_DOUBLE_FREE = "double free detected"


def fatal_message(line: str) -> str | None:
    """The fatal error a line reports, as the old single search found it (leftmost match; at
    one column, the alternatives in order, the double free after the first five)."""
    if _DOUBLE_FREE in line:
        head = _FATAL_AT_START.match(line)
        return head.group("message") if head else line
    match = _FATAL.search(line)
    return match.group("message") if match else None


@dataclass
class Crash:
    rank: int | None
    thread: str | None
    exc_type: str
    message: str
    line_no: int
    lines: list[tuple[int, str]] = field(default_factory=list)  # evidence: (line, text)
    time: float | None = None
    fatal: bool = False

    @property
    def summary(self) -> str:
        return f"{self.exc_type}: {self.message}" if self.message else self.exc_type


@dataclass
class _Open:
    start: tuple[int, str]
    thread: str | None
    frames: list[tuple[int, str]] = field(default_factory=list)


_CACHE: dict[tuple[str, int | None, int, int, int, bool], list[Crash]] = {}
_CACHE_SIZE = 16


def find_crashes(path: Path, file_rank: int | None = None, tail_bytes: int = TAIL_BYTES, pdsh: bool = False) -> list[Crash]:
    """Crashes in the log's tail. The analyzers and the unrecognised-crash fallback both ask for
    the same files in one run: the answer is kept while the file's size and mtime stay the same.
    pdsh: every line starts with "<host>: " (TextFile.host_prefixed)."""
    st = os.stat(path)
    key = (str(path), file_rank, tail_bytes, st.st_size, st.st_mtime_ns, pdsh)
    cached = _CACHE.get(key)
    if cached is not None:
        return list(cached)
    data, first_line = read_tail(path, tail_bytes)
    found = crashes_in_text(strip_ansi(data).decode("utf-8", errors="replace"), first_line, file_rank, pdsh)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = found
    return list(found)


def crashes_in_text(text: str, first_line: int = 1, file_rank: int | None = None, pdsh: bool = False) -> list[Crash]:
    open_tbs: dict[int | None, deque[_Open]] = {}
    thread_headers: dict[int | None, deque[str]] = {}
    last: dict[tuple[int | None, str | None], Crash] = {}
    last_time: float | None = None
    pending_message: dict[int | None, Crash] = {}
    for offset, raw in enumerate(text.split("\n")):
        line_no = first_line + offset
        for segment in raw.split("\r"):
            if pdsh:  # pdsh output: "worker-1: [rank1]: Traceback ..."; the host goes, the rank stays
                segment = split_host(segment)[1]
            if not segment.strip():
                continue
            moment = log_time(segment)
            if moment is not None:
                last_time = moment
            rank = rank_of(segment)
            if rank is None:
                rank = file_rank
            body = _PREFIX.sub("", segment, count=1)
            stripped = body.rstrip()
            header = _THREAD.match(stripped)
            if header:
                thread_headers.setdefault(rank, deque()).append(header.group("name"))
                continue
            if _TRACEBACK.match(stripped):
                queue = thread_headers.get(rank)
                thread = queue.popleft() if queue else None
                open_tbs.setdefault(rank, deque()).append(_Open((line_no, segment), thread))
                continue
            queue_tb = open_tbs.get(rank)
            if queue_tb and body[:1].isspace():
                # Frames and code lines go to the newest traceback still open: good enough for
                # evidence. Caret lines (^^^^ ~~~~) add nothing.
                if stripped.strip("^~ "):
                    queue_tb[-1].frames.append((line_no, segment))
                continue
            if stripped.startswith(_CHAIN):
                continue
            exc = _EXCEPTION.match(stripped) if not body[:1].isspace() else None
            if exc and queue_tb:
                tb = queue_tb.popleft()
                evidence = [tb.start, *tb.frames[-2:], (line_no, segment)]
                crash = Crash(rank, tb.thread, exc.group("type"), (exc.group("message") or "").strip(), line_no,
                              evidence, last_time)
                last[(rank, tb.thread)] = crash
                pending_message[rank] = crash
                continue
            fatal = fatal_message(stripped)
            if fatal is not None and not body[:1].isspace():
                crash = Crash(rank, None, "Fatal", fatal.strip(), line_no, [(line_no, segment)], last_time, True)
                key = (rank, "<fatal>")
                last[key] = crash
                continue
            # A multi-line exception message (state_dict errors, NCCL errors) continues the crash.
            pending = pending_message.get(rank)
            if pending is not None and line_no - pending.line_no <= 6 and len(pending.lines) < 10:
                pending.lines.append((line_no, segment))
            else:
                pending_message.pop(rank, None)
    return sorted(last.values(), key=lambda c: c.line_no)
