"""torchelastic (torchrun) failure reports: error files (TORCHELASTIC_ERROR_FILE / @record) and the
ChildFailedError summary the agent prints.

The summary (torch/distributed/elastic/multiprocessing/errors/__init__.py) looks like:

    ============================================================
    train.py FAILED
    ------------------------------------------------------------
    Failures:
    [1]:
      time      : 2026-11-30_04:50:43
      host      : localhost
      rank      : 0 (local_rank: 0)
      exitcode  : -15 (pid: 17991)  (SIGTERM)     <- the signal name is new in torch 2.13
      error_file: /tmp/torchelastic_.../attempt_0/0/error.json
      traceback : Traceback (most recent call last):
        File "...", line 39, in main
      RuntimeError: ...
    ------------------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      ...
      traceback : Signal 9 (SIGKILL) received by PID 18642
    ============================================================

"Failures" (other ranks, often torn down with SIGTERM) is printed BEFORE the root cause, so the
first traceback of the block is not the first failure. With a single failure, Failures holds
`<NO_OTHER_FAILURES>`.
"""

from __future__ import annotations

import json
import re
import signal as signal_module
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from diagnose.evidence.model import ExitRecord


def _exception_line(message: str) -> str:
    """The line that names the error: @record writes "<Type>: <message>" first, and CUDA errors
    add hint lines after it ("Search for `cudaErrorAssert' ...", "Compile with `TORCH_USE_CUDA_DSA` ...")."""
    for line in message.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def parse_elastic_error(text: str, source: str, rank: int | None = None) -> tuple[ExitRecord, str, float | None]:
    """(exit record, the error message, its timestamp) from one error file."""
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the interpreter's stack
        return ExitRecord(source, rank=rank, message="unreadable error file"), "", None
    message: Any = data.get("message", data) if isinstance(data, dict) else data
    text_message = ""
    timestamp: float | None = None
    if isinstance(message, dict):
        text_message = str(message.get("message", ""))
        extra = message.get("extraInfo") or {}
        if isinstance(extra, dict):
            try:
                stamp = extra.get("timestamp")
                timestamp = float(stamp) if stamp and not isinstance(stamp, bool) else None
            except (TypeError, ValueError, OverflowError):
                timestamp = None
            # A time a clock can show: "inf", "nan" or year 300000 would break every report's clock.
            if timestamp is not None and not (0 < timestamp < 1e11):
                timestamp = None
    else:
        try:
            text_message = str(message)
        except RecursionError:
            text_message = ""
    # An error file exists because @record caught a Python exception, which exits 1; a signal
    # that came later (an NCCL abort) is only in the agent's summary.
    record = ExitRecord(source, code=1, rank=rank, message=_exception_line(text_message)[:300], time=timestamp)
    return record, text_message, timestamp


# ---------------------------------------------------------------- the ChildFailedError summary

# Numbers of at most 18 digits: int() refuses over 4300, and no pid, rank or exit code is longer.
_ENTRY = re.compile(r"^\[(?P<idx>[0-9]{1,18})\]:\s*$")
_FIELD = re.compile(r"^  (?P<name>time|host|rank|exitcode|error_file|traceback|msg)\s*:\s?(?P<value>.*)$")
_RANK = re.compile(r"^(?P<rank>-?[0-9]{1,18}) \(local_rank: (?P<local>-?[0-9]{1,18})\)")
_EXITCODE = re.compile(r"^(?P<code>-?[0-9]{1,18}) \(pid: (?P<pid>[0-9]{1,18})\)(?:\s+\((?P<sig>SIG\w+)\))?")
_SIGNAL_MSG = re.compile(r"Signal (?P<num>[0-9]{1,18}) \((?P<name>SIG\w+)\) received by PID (?P<pid>[0-9]{1,18})")
_BORDER = re.compile(r"^(?:=+|-+)\s*$")
ROOT_HEADER = "Root Cause (first observed failure):"
FAILURES_HEADER = "Failures:"


@dataclass
class ElasticFailure:
    """One entry of the summary: a worker process that failed."""

    root: bool  # listed under "Root Cause (first observed failure)"
    line_no: int  # the "[idx]:" line
    time: str | None = None  # as printed: 2026-11-30_04:50:42
    host: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    exitcode: int | None = None
    pid: int | None = None
    signal: str | None = None  # SIGKILL, SIGTERM ... (from the exit code when torch did not name it)
    error_file: str | None = None  # None for <N/A>
    error: str = ""  # the exception line of its traceback, or "Signal 9 (SIGKILL) received by PID 18642"
    lines: list[tuple[int, str]] = field(default_factory=list)  # evidence: rank, exitcode, error lines
    error_raw: str = ""  # the error line as printed

    @property
    def torn_down(self) -> bool:
        """Killed with SIGTERM/SIGINT without an error of its own: the agent's teardown (or a scheduler)."""
        return self.signal in ("SIGTERM", "SIGINT", "SIGHUP") and not self.has_own_error

    @property
    def has_own_error(self) -> bool:
        return bool(self.error) and _SIGNAL_MSG.search(self.error) is None and not self.error.startswith("To enable traceback")

    def describe(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "a worker"
        if self.local_rank is not None and self.local_rank != self.rank:
            who += f" (local_rank {self.local_rank})"
        if self.host:
            who += f" on {self.host}"
        how = f"exit code {self.exitcode}" if self.exitcode is not None else "exit code ?"
        if self.signal:
            how += f" ({self.signal})"
        return f"{who}, {how}"


@dataclass
class ElasticSummary:
    line_no: int  # where the summary starts (the ChildFailedError line or its first border)
    failures: list[ElasticFailure] = field(default_factory=list)
    title: str = ""  # "train.py FAILED"

    @property
    def root(self) -> ElasticFailure | None:
        return next((f for f in self.failures if f.root), None)

    @property
    def others(self) -> list[ElasticFailure]:
        return [f for f in self.failures if not f.root]


def signal_from_exitcode(code: int | None) -> str | None:
    """torchelastic reports a worker killed by a signal as a negative exit code."""
    if code is None or code >= 0:
        return None
    try:
        return signal_module.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def parse_failure_summary(lines: Sequence[tuple[int, str]], prefix: re.Pattern[str] | None = None) -> ElasticSummary | None:
    """Parse the summary block from `lines` ((line number, text) pairs starting at or just before
    it). `prefix`, when given, is stripped from each line first (a launcher's own prefix)."""
    summary: ElasticSummary | None = None
    section: str | None = None
    current: ElasticFailure | None = None
    in_traceback = after_frames = False
    borders = 0
    for line_no, raw in lines:
        text = prefix.sub("", raw, count=1) if prefix is not None else raw
        text = text.rstrip("\r\n")
        stripped = text.strip()
        if summary is None:
            if stripped.endswith("FAILED") or _BORDER.match(stripped) or "ChildFailedError" in stripped or stripped in (ROOT_HEADER, FAILURES_HEADER):
                summary = ElasticSummary(line_no)
            else:
                continue
        if stripped.endswith(" FAILED") and not summary.title:
            summary.title = stripped
            continue
        if stripped == FAILURES_HEADER:
            section, current, in_traceback = "failures", None, False
            continue
        if stripped == ROOT_HEADER:
            section, current, in_traceback = "root", None, False
            continue
        if _BORDER.match(stripped) and stripped:
            if stripped.startswith("=") and section == "root":
                break  # the closing border
            borders += 1
            current, in_traceback = None, False
            continue
        if section is None:
            if len(summary.failures) == 0 and borders > 2:
                return None  # a border-like block that is not a torchelastic summary
            continue
        entry = _ENTRY.match(stripped)
        if entry and not text.startswith(" "):
            current = ElasticFailure(root=section == "root", line_no=line_no)
            summary.failures.append(current)
            in_traceback = False
            continue
        if current is None:
            continue
        fld = _FIELD.match(text)
        if fld:
            _set_field(current, fld.group("name"), fld.group("value").strip(), line_no, raw)
            in_traceback = fld.group("name") in ("traceback", "msg") and fld.group("value").strip().startswith("Traceback")
            after_frames = in_traceback
            continue
        if not in_traceback or not stripped:
            continue
        if text.startswith("    ") or stripped.startswith("Traceback (most recent call last)"):
            after_frames = True  # a frame (four spaces) or a chained traceback's header
        elif after_frames:
            # "  ValueError: ..." - the exception line sits at two spaces, after the frames; the
            # lines after it (CUDA hints) are not. A chained traceback's last exception wins.
            if current.error:
                current.lines = [item for item in current.lines if item[1] != current.error_raw]
            current.error, current.error_raw = stripped, raw
            current.lines.append((line_no, raw))
            after_frames = False
    if summary is None or not summary.failures:
        return None
    for failure in summary.failures:
        if failure.signal is None:
            failure.signal = signal_from_exitcode(failure.exitcode)
    return summary


def _set_field(failure: ElasticFailure, name: str, value: str, line_no: int, raw: str) -> None:
    if name == "time":
        failure.time = value or None
    elif name == "host":
        failure.host = value or None
    elif name == "rank":
        match = _RANK.match(value)
        if match:
            failure.rank, failure.local_rank = int(match.group("rank")), int(match.group("local"))
        failure.lines.append((line_no, raw))
    elif name == "exitcode":
        match = _EXITCODE.match(value)
        if match:
            failure.exitcode, failure.pid = int(match.group("code")), int(match.group("pid"))
            failure.signal = match.group("sig")
        failure.lines.append((line_no, raw))
    elif name == "error_file":
        failure.error_file = None if value in ("<N/A>", "") else value
    elif name in ("traceback", "msg"):
        if not value.startswith("Traceback"):
            failure.error = value.strip('"')
            failure.lines.append((line_no, raw))
        signal = _SIGNAL_MSG.search(value)
        if signal and failure.signal is None:
            failure.signal = signal.group("name")
