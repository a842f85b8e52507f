"""Host-level events in the kernel log: OOM kills, GPU Xids, segfaults, each with the pid, the
process name, the memory cgroup and the time the kernel gave, so they can be tied to a run (or
not) before any of them is blamed. The kernel prints the victim's cgroup on the `oom-kill:` line
just before `Killed process`; the two are read as one event.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from diagnose.evidence import logview
from diagnose.evidence.lines import dmesg_seconds, kernel_time, xid_line
from diagnose.evidence.logview import KERNEL_TAIL_BYTES
from diagnose.evidence.model import Evidence, TextFile, TextKind

TAIL_BYTES = KERNEL_TAIL_BYTES  # a kernel log collected for a run's window is far smaller

_KILLED = re.compile(
    r"(?P<scope>Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): "
    r"Kill(?:ed)? process (?P<pid>\d{1,10}) \((?P<comm>[^)\n]{0,64})\)"
)
_REAPED = re.compile(r"oom_reaper: reaped process (?P<pid>\d{1,10}) \((?P<comm>[^)\n]{0,64})\)")
_OOM_INFO = re.compile(r"oom-kill:constraint=")
_FIELD = re.compile(r"(?P<key>oom_memcg|task_memcg|task|pid)=(?P<value>[^,\s]{0,512})")
_SEGV = re.compile(r"(?:^|[\s\]])(?P<comm>[^\s\[\]]{1,64})\[(?P<pid>\d{1,10})\]: (?:segfault at|general protection)")
_TRAPS = re.compile(r"traps: (?P<comm>[^\s\[\]]{1,64})\[(?P<pid>\d{1,10})\] (?:general protection|trap )")


@dataclass(frozen=True)
class KernelEvent:
    kind: str  # oom_kill | xid | segfault
    pid: int | None
    comm: str | None
    time: float | None
    source: str  # the kernel log as reports name it
    line: int
    text: str
    task_memcg: str | None = None  # the victim's memory cgroup (oom-kill: line)
    oom_memcg: str | None = None  # the cgroup whose limit was hit
    detail: str = ""  # "Memory cgroup out of memory", "Xid 43", ...

    def describe(self) -> str:
        who = f"{self.comm or '?'} pid {self.pid}" if self.pid is not None else (self.comm or "a process")
        what = {"oom_kill": "was OOM-killed", "xid": f"hit {self.detail}", "segfault": "segfaulted"}.get(self.kind, self.kind)
        return f"{who} {what}"


def kernel_events(evidence: Evidence) -> list[KernelEvent]:
    """Every event of every kernel log the evidence holds, in file order."""
    events: list[KernelEvent] = []
    for text in evidence.texts_of(TextKind.DMESG):
        try:
            events.extend(_events_of(text))
        except Exception:  # a kernel log we scanned but cannot re-read: the rules still saw it
            continue
    return events


def _lines(text: TextFile) -> Iterator[tuple[int, str]]:
    data, first = logview.tail(text, TAIL_BYTES)
    for offset, raw in enumerate(data.decode("utf-8", errors="replace").splitlines()):
        yield first + offset, raw


def _int(value: str | None) -> int | None:
    value = (value or "").strip("'")
    return int(value) if value.isascii() and value.isdigit() else None


def _events_of(text: TextFile) -> list[KernelEvent]:
    found: list[KernelEvent] = []
    info: dict[str, str] = {}  # the last oom-kill: line's fields, for the Killed process line after it
    seen_kill: set[int] = set()
    for line_no, line in _lines(text):
        if _OOM_INFO.search(line):
            info = {m.group("key"): m.group("value") for m in _FIELD.finditer(line)}
            continue
        when = text.on_clock(kernel_time(line, text.boot_time, text.year, text.mtime))
        match = _KILLED.search(line)
        if match:
            pid = _int(match.group("pid"))
            own_info = info if _int(info.get("pid")) == pid else {}
            found.append(KernelEvent("oom_kill", pid, match.group("comm"), when, text.display, line_no, line.strip(),
                                     own_info.get("task_memcg"), own_info.get("oom_memcg"), match.group("scope")))
            if pid is not None:
                seen_kill.add(pid)
            info = {}
            continue
        match = _REAPED.search(line)
        if match:
            pid = _int(match.group("pid"))
            if pid not in seen_kill:  # the report itself was cut off: the reaper line is the proof
                found.append(KernelEvent("oom_kill", pid, match.group("comm"), when, text.display, line_no, line.strip(),
                                         detail="oom_reaper"))
            continue
        xid = xid_line(line)
        if xid is not None:
            found.append(KernelEvent("xid", _int(xid.pid), (xid.name or "").strip() or None, when,
                                     text.display, line_no, line.strip(), detail=f"Xid {xid.xid}"))
            continue
        match = _SEGV.search(line) or _TRAPS.search(line)
        if match:
            found.append(KernelEvent("segfault", _int(match.group("pid")), match.group("comm"), when, text.display,
                                     line_no, line.strip(), detail="segfault"))
    return found


def kernel_log_span(text: TextFile) -> tuple[float | None, float | None, bool]:
    """When a kernel log's first and last lines were written (None where the clock is not
    known), and whether it starts at boot (the ring buffer had not wrapped)."""
    data, _first = logview.tail(text, TAIL_BYTES)
    lines = [line for line in data.decode("utf-8", errors="replace").splitlines() if line.strip()]
    if not lines:
        return None, None, False
    head, tail = lines[0], lines[-1]
    secs = dmesg_seconds(head)
    return (kernel_time(head, text.boot_time, text.year, text.mtime), kernel_time(tail, text.boot_time, text.year, text.mtime),
            secs is not None and secs < 5.0)
