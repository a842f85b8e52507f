"""One log as every reader after the scan sees it: read once (issue 23).

The scan reads every byte of a log; it leaves here what the readers after it need, so that none
reads the file again: the line count, the head, and the tail window (its last TAIL_BYTES, from a
line's start, numbered by the scan's count), as the scan saw them (escapes stripped, long lines
cut). The crash finder, the run-log reader, the run view, the state, the timeline, the nodes
table and the kernel events take their windows from it, each a part of the same bytes; what they
derive from it (the crashes, the run log's summary of the file) is kept on it too.

A view belongs to one TextFile object, lives as long as it does, and holds nothing of any other
log: no module keeps logs or answers of its own. A log the scan did not read (a reader asked for
a file given by path only) has its tail read here once, when first asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from diagnose.evidence.textio import HEAD_BYTES, is_streamed, read_head, read_tail, read_tail_window

TAIL_BYTES = 4 * 1024 * 1024  # a training log's tail: the window of every reader after the scan
KERNEL_TAIL_BYTES = 8 * 1024 * 1024  # a kernel log's (dmesg of a long-running box)


@dataclass(eq=False)
class LogView:
    """What is known of one log's bytes after the scan (see the module's doc)."""

    window: int = TAIL_BYTES
    lines: int | None = None  # '\n' in the whole file, as the scan counted them
    size: int | None = None  # bytes the scan read (after decompression)
    tail_data: bytes | None = None  # the last `window` bytes, from a line's start
    tail_first: int = 1  # the number of the tail's first line
    head_data: bytes | None = None  # the first HEAD_BYTES
    reads: int = 0  # times its bytes were read after the scan (0 when the scan left them here)
    derived: dict[Any, Any] = field(default_factory=dict)  # readers' answers, by reader and arguments

    def __getstate__(self) -> dict[str, Any]:
        # Sent to a worker process with its TextFile: the path travels, not the bytes or answers.
        return {"window": self.window, "lines": self.lines, "size": self.size, "tail_data": None, "tail_first": 1,
                "head_data": None, "reads": 0, "derived": {}}

    def keep(self, tail: bytes, first_line: int, head: bytes, lines: int, size: int) -> None:
        """What the scan read: the tail window, its first line's number, the head, the counts."""
        self.tail_data, self.tail_first, self.head_data, self.lines, self.size = tail, first_line, head, lines, size


class Viewed(Protocol):
    """A log with a view: evidence/model.TextFile (named here by its shape: model imports this)."""

    @property
    def path(self) -> Path: ...

    @property
    def view(self) -> LogView: ...


def tail(source: Viewed, limit: int | None = None) -> tuple[bytes, int]:
    """The log's last `limit` bytes (its whole window if None), from a line's start, and the
    number of their first line: read_tail's answer, taken from what the scan kept."""
    found = source.view
    if found.tail_data is None:
        found.tail_data, found.tail_first = _read_tail(source, found)
        found.reads += 1
    return last(found.tail_data, found.tail_first, limit)


def _read_tail(source: Viewed, found: LogView) -> tuple[bytes, int]:
    """The tail read from the file: numbered by the scan's count where the view brought one (a
    worker process), so the head is not counted again; else as read_tail numbers it."""
    path = Path(source.path)
    if found.lines is not None and not is_streamed(path):
        window = read_tail_window(path, found.window)
        if window is not None and window.newlines is not None and window.size == found.size:
            return window.data, window.first_line + found.lines - window.newlines
    return read_tail(path, found.window)


def head(source: Viewed, limit: int = HEAD_BYTES) -> bytes:
    """The log's first `limit` bytes (at most HEAD_BYTES)."""
    found = source.view
    if found.head_data is None:
        found.head_data = read_head(Path(source.path), HEAD_BYTES)
        found.reads += 1
    return found.head_data[:limit]


def last(data: bytes, first_line: int, limit: int | None) -> tuple[bytes, int]:
    """The last `limit` bytes of a window that starts at line `first_line`, less the line the
    limit cuts into (up to its newline), numbered: what read_tail gives for `limit`."""
    if limit is None or len(data) <= limit:
        return data, first_line
    cut = len(data) - limit
    before = data.count(b"\n", 0, cut)
    newline = data.find(b"\n", cut)
    if newline < 0:  # one line longer than the limit: read_tail keeps its end
        return data[cut:], first_line + before
    return data[newline + 1 :], first_line + before + 1
