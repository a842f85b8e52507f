"""Find the last error of each rank and thread in a log, in every shape real logs print it,
for crashes no rule recognises.

Shapes: Python tracebacks (threads' included, chained, a DataLoader worker's "Original
Traceback"), IPython/Jupyter tracebacks, a bare final `SomeError: message` line (pasted ends,
launchers' reprints), C++ `terminate called after throwing ...` + `what():`, glog `F... Check
failed:` lines, faulthandler dumps, Rust panics, Go panics, and the shell's and the C library's
fatal lines. A message that goes on over several lines (pydantic, XLA, NCCL) stays one error.

Lines are read as the program wrote them: launcher prefixes (lines.split_prefix) name the rank
and host and are then dropped, and '\\r' progress updates are lines of their own (a traceback
glued to a tqdm bar still opens). Threads that die at once interleave their tracebacks line by
line, so tracebacks are paired with their final exception lines in order (first opened, first
closed), per rank, and with the `Exception in thread NAME:` headers the same way.

Each crash also says whether the run went on after it (progress whose counter moved, or the
trainer's words for done: lines.progress_of): a survived error is not how the run ended.
"""

from __future__ import annotations

import dataclasses
import os
import re
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from diagnose.evidence import logview
from diagnose.evidence.lines import (
    GLOG_HEADER,
    LinePrefix,
    LogClock,
    is_finish_line,
    log_clock,
    log_time,
    progress_of,
    split_prefix,
    strip_ansi,
)
from diagnose.evidence.logview import TAIL_BYTES as TAIL_BYTES
from diagnose.evidence.model import TextFile, TextKind

CONTINUATION_GAP = 3  # a message line this close (in lines) to the crash's last one goes on with it
MAX_CONTINUATION = 60  # lines a crash may go on for (a faulthandler dump of many threads)
EVIDENCE_CONTINUATION = 10  # of which this many are kept as evidence
RECENT_LINES = 400  # lines before the first crash read for the progress it interrupted
PLAIN_AFTER = 200  # a crash followed by this many more lines of the program's own output was not its end

_THREAD = re.compile(r"^Exception in thread (?P<name>.{1,200}?):$")  # on rstripped lines
_TB_HEADER = "Traceback (most recent call last):"
# IPython / Jupyter: "KeyError                                  Traceback (most recent call last)"
_IPYTHON_HEADER = re.compile(r"^(?P<type>[A-Za-z_][\w.]{0,200}?)\s{2,}Traceback \(most recent call last\)$")
_EXC_TYPE = (r"(?:[A-Za-z_][\w]{0,100}\.){0,12}(?:[A-Z][\w]{0,100}?(?:Error|Exception|Exit|Interrupt|Failure|Timeout|"
             r"Unsupported|Warning|Panic)|KeyboardInterrupt|StopIteration|SystemExit|OutOfMemoryError|ChildFailedError|"
             r"DistBackendError|CalledProcessError|PanicException|BdbQuit)")
_EXCEPTION = re.compile(rf"^(?P<type>{_EXC_TYPE})(?::\s?(?P<message>.*))?$")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
# torch's ExceptionWrapper: "Caught KeyError in DataLoader worker process 0."
_CAUGHT_IN = re.compile(r"^Caught \S{1,200} in (?P<where>.{1,200}?)\.?$")
_ORIGINAL = "Original Traceback (most recent call last):"
_BARE_BAR = re.compile(r"\s{0,3}\d{1,3}%\|")  # tqdm's bar with no description, its percentage padded
# Frames: Python, faulthandler ("line 12 in f", no comma), IPython 8+ ("File /x.py:5, in f(x)",
# "Cell In[3], line 5"), IPython < 8 ("<ipython-input-3-..> in <module>()", "/x.py in f(a)").
_PY_FRAME = re.compile(r'^\s*File "(?P<path>[^"]{1,1000})", line (?P<line>\d{1,9}),? in (?P<func>\S{1,300})')
_IPY_FILE = re.compile(r"^File (?P<path>\S{1,1000}?):(?P<line>\d{1,9})(?:, in (?P<func>[^\s(]{1,300}))?")
_IPY_CELL = re.compile(r"^(?P<path>Cell In\[\d{1,9}\]), line (?P<line>\d{1,9})(?:, in (?P<func>[^\s(]{1,300}))?")
_IPY_OLD = re.compile(r"^(?P<path><ipython-input-[\w-]{1,200}>|/\S{1,1000}\.py) in (?P<func><[^<>]{1,100}>|[^\s(<]{1,300})(?:\(|$)")
_IPY_ARROW = re.compile(r"^-{2,}> ?(?P<line>\d{1,9})\b")
# C++: "terminate called after throwing an instance of 'std::runtime_error'" then "  what():  msg"
_TERMINATE = re.compile(r"^terminate called after throwing an instance of '(?P<type>[^']{1,300})'")
_WHAT = re.compile(r"^\s*what\(\):\s+(?P<message>.*)$")
# glog fatal: "F1130 03:45:51.123456 1234 file.cc:12] Check failed: ..." (glog 0.6 writes the year too);
# torch's c10 logging writes "[F1130 05:09:14.657704777 ProcessGroupNCCL.cpp:2119] ..." (no pid, in brackets)
_GLOG_FATAL = re.compile(r"^\[?F(?:\d{4})?\d{4} \d\d:\d\d:\d\d(?:\.\d{1,9})?(?:\s{1,10}\d{1,10})? "
                         r"(?P<site>[^\]\s]{1,300})\] (?P<message>.*)$")
# Rust: "thread '<unnamed>' (12) panicked at src/main.rs:7:63:" (message next line), older
# "thread 'main' panicked at 'msg', src/main.rs:7:63"
_RUST_PANIC = re.compile(r"^thread '(?P<thread>[^']{0,200})'(?: \(\d{1,12}\))? panicked at (?P<rest>.*)$")
_RUST_OLD = re.compile(r"^'(?P<message>.*)', (?P<site>\S{1,1000}:\d{1,9}:\d{1,9})$")
_GO_PANIC = re.compile(r"^panic: (?P<message>.+)$")
_GO_GOROUTINE = re.compile(r"^goroutine \d{1,12} \[")
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
_FAULTHANDLER_THREAD = re.compile(r"^(?P<current>Current thread|Thread) 0x[0-9a-f]{1,16} \(most recent call first\):")
# Paths of the interpreter's and the installed packages' code: not the user's.
_LIBRARY_PATH = re.compile(r"[/\\](?:site-packages|dist-packages)[/\\]|[/\\]lib[/\\]python\d(?:\.\d{1,3})?[/\\]|"
                           r"[/\\]Lib[/\\]|^<frozen |[/\\]\.cargo[/\\]registry[/\\]|^/rustc/|"
                           r"[/\\]s?bin[/\\][^/\\.]{1,200}$")  # an installed entry point: .../bin/torchrun


_FATAL_WORDS = ("Fatal Python error", "Segmentation fault", "terminate called", "Aborted (core dumped)", "Bus error",
                "free(): invalid pointer", "Killed", _DOUBLE_FREE)
# A line _Reader.line does more with than keep (a header, a chained traceback's words, an
# exception line, a native error, a fatal line) holds one of these: an exception type ends in
# one of _EXC_TYPE's words, and each other shape starts with or holds a fixed text.
_ASKS = re.compile("|".join(re.escape(word) for word in (
    "Error", "Exception", "Exit", "Interrupt", "Failure", "Timeout", "Unsupported", "Warning", "Panic",
    "StopIteration", "BdbQuit", "Traceback (most recent call last)", *_CHAIN, "terminate called", "panicked at ",
    "panic: ", *_FATAL_WORDS)) + r"|F\d{4,8} \d\d:\d\d:\d\d")  # glog's F1130 03:45:51


def fatal_message(line: str) -> str | None:
    """The fatal error a line reports, as the old single search found it (leftmost match; at
    one column, the alternatives in order, the double free after the first five)."""
    if not any(word in line for word in _FATAL_WORDS):
        return None  # every fatal line holds one of these: most lines are searched no further
    if _DOUBLE_FREE in line:
        head = _FATAL_AT_START.match(line)
        return head.group("message") if head else line
    match = _FATAL.search(line)
    return match.group("message") if match else None


_PY_SHAPES = ("python", "ipython", "bare")
# Where launchers raise when a worker failed: torchrun / torch.distributed.run, accelerate launch,
# the deepspeed launcher. The frames are the launcher's own (its entry point and package only).
_LAUNCHER_FRAME = re.compile(r"(?:^|/)(?:torch/distributed/(?:run|launch)\.py|torch/distributed/launcher/|"
                             r"torch/distributed/elastic/|accelerate/commands/|deepspeed/launcher/|"
                             r"bin/(?:torchrun|accelerate|deepspeed))")


def _raised_by_launcher(crash: Crash) -> bool:
    """Raised by a launcher about its workers: ChildFailedError, or an exception whose frames
    are the launcher's (and the standard library's) only."""
    if crash.exc_type.rsplit(".", 1)[-1] == "ChildFailedError":
        return True
    frames = [f for f in crash.frames if f.user or _LAUNCHER_FRAME.search(f.path.replace("\\", "/"))]
    return bool(frames) and all(_LAUNCHER_FRAME.search(f.path.replace("\\", "/")) for f in frames)


@dataclass(frozen=True)
class Frame:
    path: str
    line: int | None
    func: str | None

    @property
    def user(self) -> bool:
        """Code of the user's own, not the interpreter's or an installed package's."""
        return not _LIBRARY_PATH.search(self.path)

    def describe(self) -> str:
        name = self.path.replace("\\", "/").rsplit("/", 1)[-1] if not self.path.startswith("Cell In") else self.path
        where = f"{name}:{self.line}" if self.line is not None else name
        return f"{where} (in {self.func})" if self.func and self.func != "<module>" else where


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
    host: str | None = None
    shape: str = "python"  # python | ipython | bare | cpp | glog | faulthandler | rust | go | fatal
    frames: list[Frame] = field(default_factory=list)  # most recent call last
    worker: str | None = None  # "DataLoader worker process 0": where torch caught it
    end_line: int = 0  # the crash's last line (its message may go on after line_no)
    survived: bool = False  # the run went on after it (progress, or the trainer's words for done)
    after_end: bool = False  # another thread's, printed after the trainer's words for done (shutdown noise)
    continued: int = 0  # lines its message went on for
    in_current: bool = field(default=False, repr=False)  # reading faulthandler's "Current thread" block

    @property
    def summary(self) -> str:
        return f"{self.exc_type}: {self.message}" if self.message else self.exc_type

    @property
    def first_line(self) -> int:
        return self.lines[0][0] if self.lines else self.line_no

    @property
    def user_frame(self) -> Frame | None:
        """The deepest frame of the user's own code (outside site-packages and the standard library)."""
        return next((f for f in reversed(self.frames) if f.user), None)


@dataclass
class _Open:
    start: tuple[int, str]
    thread: str | None
    frames: list[tuple[int, str]] = field(default_factory=list)
    parsed: list[Frame] = field(default_factory=list)
    ipython: str | None = None  # the exception type an IPython header names
    heads: list[tuple[int, str]] = field(default_factory=list)  # IPython's frame and arrow lines
    original_of: Crash | None = None  # a DataLoader worker's "Original Traceback" of this crash


@dataclass
class LogCrashes:
    """The crashes of one log (the last of each rank and thread), every crash's span, and the
    progress lines, per (host, rank)."""

    crashes: list[Crash]
    progress: dict[tuple[str | None, int | None], list[tuple[int, tuple[str, str]]]]
    every: list[Crash] = field(default_factory=list)  # all crashes in line order, the last ones included

    def crash_at(self, line_no: int, rank: int | None = None) -> Crash | None:
        """The crash whose lines hold this line (of that rank, when the line names one)."""
        at = bisect_right([c.first_line for c in self.every], line_no)
        for crash in reversed(self.every[max(0, at - 64):at]):
            if crash.first_line <= line_no <= crash.end_line and (rank is None or crash.rank in (rank, None)):
                return crash
        return None

    def went_on_after(self, line_no: int, rank: int | None, host: str | None = None) -> bool:
        """Did the run make progress after this line (its own rank's; any line's when it names none)?"""
        return _moved_after(_marks_for(self.progress, host, rank), line_no)


def _marks_for(progress: dict[tuple[str | None, int | None], list[tuple[int, tuple[str, str]]]],
               host: str | None, rank: int | None) -> list[tuple[int, tuple[str, str]]]:
    marks = progress.get((host, rank))
    if marks is not None:
        return marks
    same = [key for key in progress if key[1] == rank]
    if rank is not None and same:
        return sorted(mark for key in same for mark in progress[key])
    if rank is None:
        return sorted(mark for marks in progress.values() for mark in marks)
    return []


def _done_before(marks: list[tuple[int, tuple[str, str]]], line_no: int) -> bool:
    return any(kind == "done" for _no, (kind, _counter) in marks[: bisect_right(marks, (line_no, ("", "")))])


def _moved_after(marks: list[tuple[int, tuple[str, str]]], line_no: int) -> bool:
    at = bisect_right(marks, (line_no, ("\uffff", "")))
    if at >= len(marks):
        return False
    before: dict[str, str] = {}
    for _no, (kind, counter) in marks[max(0, at - 50):at]:
        before[kind] = counter
    return any(kind == "done" or before.get(kind) != counter for _no, (kind, counter) in marks[at:at + 200])


def on_clock(crash: Crash, source: TextFile) -> Crash:
    """The crash with its time on the report's clock (its file's host may run ahead or behind)."""
    if not source.clock_offset or crash.time is None:
        return crash
    return dataclasses.replace(crash, time=source.on_clock(crash.time))


def read_crashes(source: TextFile | Path, file_rank: int | None = None) -> LogCrashes:
    """Crashes (and progress) in the log's tail (its view: evidence/logview.py). The analyzers,
    the run state and the fallback all ask for the same log in one diagnosis: the answer is kept
    on its view. A path alone is read as a log of its own (`file_rank`: the rank it is of)."""
    if not isinstance(source, TextFile):
        source = TextFile(TextKind.LOG, Path(source), str(source), rank=file_rank)
    key = ("crashes", source.rank)
    found = source.view.derived.get(key)
    if found is None:
        data, first_line = logview.tail(source, TAIL_BYTES)
        found = source.view.derived[key] = crashes_of_tail(data, first_line, source.rank, log_mtime(source))
    return cast(LogCrashes, found)


def log_mtime(source: TextFile) -> float | None:
    """The log's mtime as given, else as the file has it now (None: gone)."""
    if source.mtime is not None:
        return source.mtime
    try:
        return os.stat(source.path).st_mtime
    except OSError:
        return None


def crashes_of_tail(data: bytes, first_line: int, file_rank: int | None, mtime: float | None) -> LogCrashes:
    """What read_crashes finds in a log's tail (`first_line`: the number of its first line)."""
    text = strip_ansi(data).decode("utf-8", errors="replace")
    return read_text(text, first_line, file_rank, log_clock("", text[-64 * 1024:], mtime))


def shifted(found: LogCrashes, lines: int) -> LogCrashes:
    """The same crashes and progress with every line number `lines` further on: a tail read
    by the scan numbered from its own start, once the lines ahead of it are counted."""
    if not lines:
        return found
    moved = {id(crash): dataclasses.replace(crash, line_no=crash.line_no + lines, end_line=crash.end_line + lines,
                                            lines=[(no + lines, text) for no, text in crash.lines],
                                            frames=list(crash.frames))
             for crash in found.every}  # `crashes` are the last ones of `every`, the same objects
    progress = {key: [(no + lines, mark) for no, mark in marks] for key, marks in found.progress.items()}
    return LogCrashes([moved[id(c)] for c in found.crashes], progress, [moved[id(c)] for c in found.every])


def keep_tail_crashes(source: TextFile, found: LogCrashes) -> None:
    """What read_crashes would find in the log's tail, found already (by the scan, engine/scan.py)."""
    source.view.derived[("crashes", source.rank)] = found


def find_crashes(source: TextFile | Path, file_rank: int | None = None) -> list[Crash]:
    return list(read_crashes(source, file_rank).crashes)


def crashes_in_text(text: str, first_line: int = 1, file_rank: int | None = None) -> list[Crash]:
    return read_text(text, first_line, file_rank).crashes


Key = tuple[str | None, int | None]


class _Reader:
    """One pass over a log's lines; the state is per (host, rank)."""

    def __init__(self, file_rank: int | None, clock: LogClock) -> None:
        self.file_rank = file_rank
        self.clock = clock
        self.open_tbs: dict[Key, deque[_Open]] = {}
        self.thread_headers: dict[Key, deque[str]] = {}
        self.last: dict[tuple[Key, str | None], Crash] = {}
        self.pending: dict[Key, Crash] = {}  # the crash whose message may go on, per key
        self.progress: dict[Key, list[tuple[int, tuple[str, str]]]] = {}
        self.plain: dict[Key, list[int]] = {}  # other lines of the program's own, after which a crash may lie
        self.every: dict[int, Crash] = {}
        # The latest time of the lines read so far, read only when a crash asks for it: a 4 MiB
        # tail of a healthy log has ~50,000 lines and one or two crashes, and reading every
        # line's time was ~40 % of reading the tail.
        self._unread: list[str | _Quiet] = []  # lines since the last time asked for, oldest first
        self._last_time: float | None = None
        # Progress matters only around crashes: until the first one, the last lines are kept
        # and read for progress then (the counters before it), not every line of a healthy log.
        # An entry holds one line or a run of quiet lines (which may hold none the reader keeps).
        self.armed = False
        self.recent: deque[tuple[Key, int, str] | _Quiet] = deque()

    # -- bookkeeping

    @property
    def last_time(self) -> float | None:
        """The time of the newest line read so far that has one."""
        for entry in reversed(self._unread):
            for segment in (s for _no, s in entry.newest_first()) if isinstance(entry, _Quiet) else (entry,):
                moment = log_time(segment, self.clock.year, self.clock.not_after)
                if moment is not None:
                    self._unread.clear()
                    self._last_time = moment
                    return moment
        self._unread.clear()
        return self._last_time

    @property
    def quiet(self) -> bool:
        """Would a line that holds none of _ASKS's words only be kept for later? So it is
        before the first crash while no traceback is open: nothing reads it but the progress
        before that crash and the last time."""
        return not self.armed and not any(self.open_tbs.values())

    def keep_quiet(self, lines: _Quiet) -> None:
        """A run of lines that hold none of _ASKS's words, read while the reader is quiet."""
        self._unread.append(lines)
        self._keep_recent(lines)

    def _keep_recent(self, entry: tuple[Key, int, str] | _Quiet) -> None:
        self.recent.append(entry)
        if len(self.recent) > 4 * RECENT_LINES:
            self.recent = deque(self._recent_lines())

    def _recent_lines(self) -> list[tuple[Key, int, str]]:
        """The newest RECENT_LINES lines of `recent`, runs of quiet lines read now."""
        newest: list[tuple[Key, int, str]] = []
        for entry in reversed(self.recent):
            if isinstance(entry, _Quiet):
                for line_no, segment in entry.newest_first():
                    prefix, body = split_prefix(segment)
                    if body[:1].isspace():
                        continue  # message and frame lines: the reader keeps only the unindented
                    rank = prefix.global_rank
                    newest.append(((prefix.host, rank if rank is not None else self.file_rank), line_no, body.rstrip()))
                    if len(newest) >= RECENT_LINES:
                        break
            else:
                newest.append(entry)
            if len(newest) >= RECENT_LINES:
                break
        newest.reverse()
        return newest

    def _record(self, key: Key, slot: str | None, crash: Crash) -> Crash:
        crash.end_line = max(crash.end_line, crash.line_no)
        if not self.armed:
            self.armed = True
            for key_r, line_r, body_r in self._recent_lines():
                self._progress(key_r, line_r, body_r)
            self.recent.clear()
        self.every.setdefault(id(crash), crash)
        self.last[(key, slot)] = crash
        self.pending[key] = crash
        return crash

    def _continues(self, key: Key, line_no: int) -> Crash | None:
        crash = self.pending.get(key)
        if crash is None:
            return None
        if line_no - crash.end_line <= CONTINUATION_GAP and crash.continued < MAX_CONTINUATION:
            return crash
        self.pending.pop(key, None)
        return None

    @staticmethod
    def _extend(crash: Crash, line_no: int, segment: str) -> None:
        crash.continued += 1
        crash.end_line = line_no
        # faulthandler's dump of the crashing thread comes after the other threads': keep it.
        if crash.continued <= EVIDENCE_CONTINUATION or (crash.in_current and len(crash.lines) < 4 * EVIDENCE_CONTINUATION):
            crash.lines.append((line_no, segment))

    # -- one line

    def line(self, line_no: int, segment: str) -> None:
        self._unread.append(segment)
        prefix, body = split_prefix(segment)
        rank = prefix.global_rank
        key: Key = (prefix.host, rank if rank is not None else self.file_rank)
        stripped = body.rstrip()
        # A bar with no description starts with spaces ("  0%|   | 0/500 [00:00<?, ?image/s]"): a traceback
        # glued to it opens, it is not a frame line.
        indented = body[:1].isspace() and not (stripped.endswith(_TB_HEADER) and _BARE_BAR.match(body))
        queue = self.open_tbs.get(key)
        if queue and indented:
            # Frames and code lines go to the newest traceback still open: good enough for
            # evidence. Caret lines (^^^^ ~~~~) add nothing.
            tb = queue[-1]
            frame = _PY_FRAME.match(body)
            if frame:
                tb.parsed.append(Frame(frame.group("path"), int(frame.group("line")), frame.group("func")))
            if stripped.strip("^~ "):
                tb.frames.append((line_no, segment))
            return
        if not indented:
            if self._header(key, line_no, segment, stripped):
                return
            if stripped.startswith(_CHAIN):
                return
            exc = _EXCEPTION.match(stripped)
            if exc and queue:
                self._close(key, queue.popleft(), exc, line_no, segment)
                return
            if queue and queue[-1].ipython is not None and self._ipython_frame(queue[-1], line_no, segment, stripped):
                return
        pending = self._continues(key, line_no)
        if pending is not None and not indented and pending.shape in _PY_SHAPES and _another_record(pending, prefix, stripped):
            self.pending.pop(key, None)
            pending = None
        if not indented:
            if self._native(key, line_no, segment, stripped, pending):
                return
            exc = _EXCEPTION.match(stripped)
            if exc and pending is None and not queue and not exc.group("type").endswith("Warning"):
                # A bare final line: the end of a traceback someone pasted, or a launcher's reprint.
                self._record(key, None, Crash(key[1], None, exc.group("type"), (exc.group("message") or "").strip(),
                                              line_no, [(line_no, segment)], self.last_time, host=key[0], shape="bare"))
                return
            if exc is None:
                if not self.armed:
                    self._keep_recent((key, line_no, stripped))
                elif self._progress(key, line_no, stripped):
                    # Progress ends a message: the run went on ("retrying step 7", the next tqdm update).
                    self.pending.pop(key, None)
                    return
        if pending is not None:
            self._more(pending, line_no, segment, body)
        elif not indented and self.armed:
            self.plain.setdefault(key, []).append(line_no)

    def _header(self, key: Key, line_no: int, segment: str, stripped: str) -> bool:
        header = _THREAD.match(stripped)
        if header:
            self.thread_headers.setdefault(key, deque()).append(header.group("name"))
            return True
        if stripped.endswith(_TB_HEADER) and not _EXCEPTION.match(stripped):
            # Also glued to a progress bar that had no newline: "...| 0/12 [00:00<?, ?it/s]Traceback ..."
            original = stripped == _ORIGINAL
            pending = self.pending.get(key)
            if original and pending is not None and line_no - pending.end_line <= CONTINUATION_GAP:
                tb = _Open((line_no, segment), pending.thread, original_of=pending)
                self._extend(pending, line_no, segment)
            else:
                queue_h = self.thread_headers.get(key)
                tb = _Open((line_no, segment), queue_h.popleft() if queue_h else None)
                self.pending.pop(key, None)
            self.open_tbs.setdefault(key, deque()).append(tb)
            return True
        ipy = _IPYTHON_HEADER.match(stripped)
        if ipy:
            self.open_tbs.setdefault(key, deque()).append(_Open((line_no, segment), None, ipython=ipy.group("type")))
            self.pending.pop(key, None)
            return True
        return False

    @staticmethod
    def _ipython_frame(tb: _Open, line_no: int, segment: str, stripped: str) -> bool:
        """IPython writes its frame lines unindented; they belong to the open traceback."""
        match = _IPY_FILE.match(stripped) or _IPY_CELL.match(stripped) or _IPY_OLD.match(stripped)
        if match:
            groups = match.groupdict()
            tb.parsed.append(Frame(groups["path"], int(groups["line"]) if groups.get("line") else None, groups.get("func")))
            tb.frames.append((line_no, segment))
            tb.heads.append((line_no, segment))
            return True
        arrow = _IPY_ARROW.match(stripped)
        if arrow:
            if tb.parsed and tb.parsed[-1].line is None:
                last = tb.parsed[-1]
                tb.parsed[-1] = Frame(last.path, int(arrow.group("line")), last.func)
            tb.frames.append((line_no, segment))
            tb.heads.append((line_no, segment))
            return True
        return False

    def _close(self, key: Key, tb: _Open, exc: re.Match[str], line_no: int, segment: str) -> None:
        exc_type, message = exc.group("type"), (exc.group("message") or "").strip()
        if tb.original_of is not None:
            # The worker's own exception: the crash is what the worker raised, where it raised it.
            crash = tb.original_of
            crash.exc_type, crash.message, crash.line_no = exc_type, message, line_no
            crash.frames.extend(tb.parsed)
            crash.lines.extend([*tb.frames[-2:], (line_no, segment)])
            self._record(key, crash.thread, crash)
            return
        caught = _CAUGHT_IN.match(message)
        shown = tb.heads[-2:] if tb.heads else tb.frames[-2:]  # IPython: the last frame's own line and its arrow
        crash = Crash(key[1], tb.thread, exc_type, message, line_no, [tb.start, *shown, (line_no, segment)],
                      self.last_time, host=key[0], shape="ipython" if tb.ipython is not None else "python",
                      frames=list(tb.parsed), worker=caught.group("where") if caught else None)
        # A launcher's own exception (torchrun's ChildFailedError, accelerate's CalledProcessError)
        # says a worker failed; in a log the workers share with it (no rank prefixes), it must not
        # take the place of the worker's own last exception, printed above it.
        self._record(key, f"launcher:{tb.thread}" if _raised_by_launcher(crash) else tb.thread, crash)

    def _native(self, key: Key, line_no: int, segment: str, stripped: str, pending: Crash | None) -> bool:
        """Errors of native code and of the interpreter itself (no Python traceback)."""
        if pending is not None and pending.shape in ("cpp", "rust") and not pending.message:
            return False  # its message line comes next
        match = _TERMINATE.match(stripped)
        if match:
            self._record(key, "<fatal>", Crash(key[1], None, match.group("type"), "", line_no, [(line_no, segment)],
                                               self.last_time, True, key[0], "cpp"))
            return True
        match = _GLOG_FATAL.match(stripped)
        if match:
            self._record(key, "<fatal>", Crash(key[1], None, "glog FATAL", match.group("message").strip(), line_no,
                                               [(line_no, segment)], self.last_time, True, key[0], "glog",
                                               frames=[_site_frame(match.group("site"))]))
            return True
        match = _RUST_PANIC.match(stripped)
        if match:
            rest = match.group("rest")[:4000].strip()
            old = _RUST_OLD.match(rest)
            site = old.group("site") if old else rest.rstrip(":")
            crash = Crash(key[1], match.group("thread"), "Rust panic", old.group("message") if old else "", line_no,
                          [(line_no, segment)], self.last_time, True, key[0], "rust", frames=[_site_frame(site)])
            self._record(key, "<panic>" + match.group("thread"), crash)
            return True
        match = _GO_PANIC.match(stripped)
        if match:
            self._record(key, "<fatal>", Crash(key[1], None, "Go panic", match.group("message").strip(), line_no,
                                               [(line_no, segment)], self.last_time, True, key[0], "go"))
            return True
        fatal = fatal_message(stripped)
        if fatal is None:
            return False
        if pending is not None and pending.fatal:
            self._extend(pending, line_no, segment)  # the shell's "Aborted" after C++'s own words
            return True
        shape = "faulthandler" if fatal.startswith("Fatal Python error") else "fatal"
        self._record(key, "<fatal>", Crash(key[1], None, "Fatal", fatal.strip(), line_no, [(line_no, segment)],
                                           self.last_time, True, key[0], shape))
        return True

    def _more(self, crash: Crash, line_no: int, segment: str, body: str) -> None:
        """A line that goes on with the crash: its message, its native stack, its what()."""
        stripped = body.strip()
        if crash.shape == "cpp" and not crash.message:
            what = _WHAT.match(stripped)
            if what:
                crash.message = what.group("message").strip()
        elif crash.shape == "rust" and not crash.message:
            crash.message = stripped
        elif crash.shape == "faulthandler":
            thread = _FAULTHANDLER_THREAD.match(stripped)
            if thread:
                crash.in_current = thread.group("current") == "Current thread"
                if crash.in_current:
                    crash.frames = []
            frame = _PY_FRAME.match(body)
            if frame and crash.in_current:
                # faulthandler lists the most recent call first
                crash.frames.insert(0, Frame(frame.group("path"), int(frame.group("line")), frame.group("func")))
        elif crash.shape == "go" and _GO_GOROUTINE.match(stripped):
            crash.thread = stripped.split(" [", 1)[0]
        elif crash.shape in ("python", "ipython", "bare"):
            # A message that carries a traceback of its own (JAX's host callbacks, a subprocess's
            # error): its frames are deeper than the ones that re-raised it.
            frame = _PY_FRAME.match(body)
            if frame:
                crash.frames.append(Frame(frame.group("path"), int(frame.group("line")), frame.group("func")))
        self._extend(crash, line_no, segment)

    def _progress(self, key: Key, line_no: int, body: str) -> bool:
        """Record a progress line (an unindented one: message and frame lines are indented)."""
        mark = progress_of(body)
        if mark is None and is_finish_line(body):
            mark = ("done", "")
        if mark is None:
            return False
        self.progress.setdefault(key, []).append((line_no, mark))
        return True

    def finish(self) -> LogCrashes:
        crashes = sorted(self.last.values(), key=lambda c: c.line_no)
        every = sorted(self.every.values(), key=lambda c: c.first_line)
        plain = {key: lines for key, lines in self.plain.items()}
        for crash in every:
            # The progress that follows a crash counts once the crash (its message too) is over;
            # so does a long run of the program's own output (a loop whose prints no pattern knows).
            marks = _marks_for(self.progress, crash.host, crash.rank)
            # Another thread's exception after the trainer's words for done: printed while the
            # interpreter shut down (a loader or logger thread), not how the run ended.
            crash.after_end = crash.thread not in (None, "MainThread") and _done_before(marks, crash.first_line)
            crash.survived = crash.after_end or _moved_after(marks, crash.end_line) or _plain_after(plain, crash) > PLAIN_AFTER
        return LogCrashes(crashes, self.progress, every)


_LOGGING_RECORD = re.compile(r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL):[\w.<>-]*:")
_DATED = re.compile(r"\[?[0-9]{4}-[01][0-9]-[0-3][0-9][T ][0-2][0-9]:[0-5][0-9]:[0-6][0-9]")


def _another_record(crash: Crash, prefix: LinePrefix, body: str) -> bool:
    """A line that starts another logger's record, so it ends a Python exception's message:
    a glog header (torchrun's "W1207 20:17:16.500000 25422 api.py:1028] Sending process ... SIGTERM"),
    logging's default "WARNING:root:" form, or a date and time in front of it where the exception's
    own line had none (torchrun 2.2's "[2025-06-19 22:14:15,083] torch.distributed.elastic...: [WARNING]")."""
    if GLOG_HEADER.match(body) or _LOGGING_RECORD.match(body):
        return True
    if prefix.stamp is None and not _DATED.match(body):
        return False
    own = next((text for no, text in crash.lines if no == crash.line_no), "")
    own_prefix, own_body = split_prefix(own)
    return own_prefix.stamp is None and not _DATED.match(own_body)


def _plain_after(plain: dict[Key, list[int]], crash: Crash) -> int:
    keys = [(crash.host, crash.rank)] if crash.rank is not None else list(plain)
    return sum(len(plain.get(key, ())) - bisect_right(plain.get(key, []), crash.end_line) for key in keys)


def _site_frame(site: str) -> Frame:
    path, _, rest = site.partition(":")
    line = rest.split(":", 1)[0]
    return Frame(path, int(line) if line.isdigit() else None, None)


def read_text(text: str, first_line: int = 1, file_rank: int | None = None, clock: LogClock | None = None) -> LogCrashes:
    """The crashes and progress of a log's text. Every line is read as _Reader.line reads it;
    before the first crash, the lines between two that hold one of _ASKS's words are kept as
    one run and read only if asked for (a 4 MiB tail of a healthy log is ~40,000 lines and
    reading each was most of a big log's diagnosis after the scan)."""
    reader = _Reader(file_rank, clock or LogClock(None, None, ""))
    pos, line_no = 0, first_line
    for match in _ASKS.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        if start < pos:
            continue  # a second word on a line already read
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        line_no = _read_between(reader, text, pos, start, line_no)
        _read_lines(reader, text[start:end], line_no)
        pos, line_no = end + 1, line_no + text.count("\n", start, end) + 1
    if pos < len(text):
        _read_between(reader, text, pos, len(text), line_no)
    return reader.finish()


def _read_between(reader: _Reader, text: str, start: int, end: int, line_no: int) -> int:
    """Lines text[start:end] (whole lines, none holding a word of _ASKS): kept as one run
    while the reader is quiet, else read one by one. The number of the line after them."""
    if start >= end:
        return line_no
    chunk = text[start:end]
    if reader.quiet:
        reader.keep_quiet(_Quiet(chunk, line_no))
    else:
        _read_lines(reader, chunk, line_no)
    return line_no + chunk.count("\n")


def _read_lines(reader: _Reader, chunk: str, first_line: int) -> None:
    for offset, raw in enumerate(chunk.split("\n")):
        for segment in raw.split("\r"):
            if segment.strip():
                reader.line(first_line + offset, segment)


@dataclass(frozen=True)
class _Quiet:
    """Lines that hold none of _ASKS's words, as the log wrote them (read only if asked for)."""

    text: str
    first_line: int

    def newest_first(self) -> Iterator[tuple[int, str]]:
        """(line number, segment) of its non-blank segments, as _Reader.line would have been
        given them, newest first (read lazily: the askers stop early)."""
        lines = self.text.split("\n")
        for offset in range(len(lines) - 1, -1, -1):
            for segment in reversed(lines[offset].split("\r")):
                if segment.strip():
                    yield self.first_line + offset, segment
