"""The last error line of a log that holds no crash the crash finder knows (engine/tracebacks.py).

Real logs end in errors of many shapes besides a Python traceback at column 0: a logging line
at ERROR level (`... - finetune - ERROR - load failed: ...`), a glog `E1130 ...]` line, an
exception line indented or pasted without its traceback, a traceback cut before its exception
line, a CLI's `Error: No such option`, an absl status (`DEADLINE_EXCEEDED: ...`), Slurm's
`slurmstepd: error:`, a pydantic validation error, libc++'s `terminating due to uncaught
exception`, an exception's repr in a message (`Exception in training loop: ZeroDivisionError(...)`),
the shell failing to run a command, a script's `sys.exit("Training aborted: ...")`. A run whose
log ends in one of them did not end well, and the report must say so and show the line, even when
no rule knows its words. Only a log's last lines count: an error line followed by more of the
run's output (a retry, an epoch after) is not how the run ended.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from diagnose.evidence import logview
from diagnose.evidence.lines import is_finish_line, is_own_line, progress_of, strip_ansi, strip_prefix
from diagnose.evidence.model import TextFile

ERROR_TAIL = 64 * 1024  # bytes of a log's end read for it
LAST_LINES = 12  # an error line must stand among a log's last this many non-blank lines
CUT_TRACEBACK_LINES = 60  # a traceback header this close to the end, never closed, is a cut traceback

_ERROR_LINE = re.compile(
    # a logging level word standing as a field: " - ERROR - ", "[ERROR]", "ERROR:", "| ERROR |"
    r"(?:^|[\s\[|(:-])(?:ERROR|CRITICAL|FATAL)(?:[\s\]|):-]|$)"
    # glog / absl error lines: "E1130 03:45:51.123 1234 file.cc:12] ..." (also bracketed)
    r"|^\[?E\d{4} \d\d:\d\d:\d\d"
    # an exception line, indented or not, with a message ("ResourceExhaustedError (see above for traceback): ...")
    r"|^\s*(?:[A-Za-z_]\w*\.){0,12}[A-Z]\w*(?:Error|Exception)(?: \(see above for traceback\))?:\s*\S"
    # a CLI's or compiler's error: "Error: No such option", "error: unrecognized arguments"
    r"|^\s*(?:Error|error|fatal error|Fatal error)\s*:\s*\S"
    # absl / gRPC / XLA status codes opening a line
    r"|^\s*(?:DEADLINE_EXCEEDED|RESOURCE_EXHAUSTED|INTERNAL|UNAVAILABLE|FAILED_PRECONDITION|INVALID_ARGUMENT|"
    r"ABORTED|UNKNOWN|NOT_FOUND|PERMISSION_DENIED|UNIMPLEMENTED|DATA_LOSS|OUT_OF_RANGE|CANCELLED):\s"
    r"|\bslurmstepd: error:|\bsrun: error:|\bvalidation errors? for [A-Z]\w*"
    r"|libc\+\+abi: terminating|\bpanicked at\b"
    # an exception's repr inside a message: "Exception in training loop: ZeroDivisionError('division by zero')"
    r"|\b[A-Z]\w*(?:Error|Exception)\((?:'|\"|\))"
    # the shell could not run a command: "bash: line 1: ./train: No such file or directory", "sh: 1: x: not found"
    r"|^(?:-?(?:ba|z|da)?sh|/bin/\w*sh|\S+\.sh)(?:: line \d+|: \d+)?: .+: (?:command not found|not found|"
    r"No such file or directory|Permission denied)$"
    # a program's own last words: "Training aborted: no batches", "Aborting."
    r"|\b(?:[Aa]borted|[Aa]borting|ABORTED)\b",
)
_TB_HEADER = "Traceback (most recent call last):"
# Lines that say an error was handled or is only reported, not that the run ended on it.
_BENIGN = re.compile(r"(?i)\b(?:no error|errors?: 0\b|0 errors?\b|error rate|error_rate|retrying|will retry|ignored|"
                     r"ignoring|warning)\b")


@dataclass(frozen=True)
class ErrorLine:
    line_no: int
    text: str
    context: tuple[tuple[int, str], ...]  # the line and a few before it, as evidence
    cut_traceback: bool = False  # a traceback cut before its exception line


def last_error_line(lines: Sequence[tuple[int, str]]) -> ErrorLine | None:
    """The error a log ends on, from its numbered lines (the end of its tail), or None.

    The last non-blank lines are read backwards: the first error line met wins, unless a line
    after it says the run went on or finished (progress, the trainer's words for done)."""
    # wandb's footer (run history and summary) comes after whatever ended the run.
    numbered = [(no, text) for no, text in lines if is_own_line(text)]
    if not numbered:
        return None
    end = numbered[-LAST_LINES:]
    for index in range(len(end) - 1, -1, -1):
        no, text = end[index]
        body = strip_prefix(text).rstrip()
        after = [strip_prefix(t) for _n, t in end[index + 1 :]]
        if any(is_finish_line(line) or progress_of(line) is not None for line in after):
            break  # the run went on past anything earlier
        if _ERROR_LINE.search(body) and not _BENIGN.search(body):
            at = len(numbered) - len(end) + index
            return ErrorLine(no, text.rstrip(), tuple(numbered[max(0, at - 3) : at + 1]))
    return _cut_traceback(numbered)


def _cut_traceback(numbered: Sequence[tuple[int, str]]) -> ErrorLine | None:
    """A traceback header near the end with frames after it and no exception line: the log
    was cut (or the process killed) while the traceback was being printed."""
    window = numbered[-CUT_TRACEBACK_LINES:]
    for index in range(len(window) - 1, -1, -1):
        no, text = window[index]
        if strip_prefix(text).rstrip().endswith(_TB_HEADER):
            rest = [strip_prefix(t) for _n, t in window[index + 1 :]]
            if rest and all(line[:1].isspace() for line in rest):  # frames and code lines only
                last_no, last_text = window[-1]
                return ErrorLine(last_no, last_text.rstrip(), ((no, text.rstrip()), *window[-3:]), cut_traceback=True)
            return None
    return None


def log_error_line(source: TextFile) -> ErrorLine | None:
    """The error line a log ends on, from the end of its tail (None: none, or unreadable now).
    The run's state and the ranking both ask: the answer is kept on the log's view."""
    key = "error_line"
    if key in source.view.derived:
        return cast(ErrorLine | None, source.view.derived[key])
    try:
        data, first = logview.tail(source, ERROR_TAIL)
    except Exception:  # unreadable now: the scan already said what it could
        return None
    lines = strip_ansi(data).decode("utf-8", errors="replace").split("\n")
    found = source.view.derived[key] = last_error_line([(first + n, segment) for n, line in enumerate(lines)
                                                        for segment in line.split("\r") if segment.strip()])
    return found
