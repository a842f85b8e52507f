"""`diagnose watch`: follow a run and say, one line per change, what happens to it: started,
first output, first step (a progress line), log silent for a while, process gone, exit status;
until it ends or stalls (the app layer then diagnoses it).

The run is followed through its launch record when `diagnose launch` started it (pid, exit
status, log), else as `diagnose RUN_ID` finds it (discovery: its logs; the process table: its
processes). Each poll reads only what changed: the logs' new bytes until the first step was
seen (then a stat), /proc for the pids."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.evidence.facts import LOW_CPU_PCT, busiest
from diagnose.live import records
from diagnose.live.hosts import Host, LocalHost

# A line that says training is under way: "step 10", "iter 3/100", "Epoch 2:", "[epoch 1]",
# tqdm's " 12%|", "loss=2.31" / "loss: 2.31".
PROGRESS = re.compile(r"\b(?:step|iter(?:ation)?|epoch|batch)\b\s*[:=#\[]?\s*\d+|\b\d{1,3}%\|"
                      r"|\bloss\b\s*[:=]?\s*-?\d", re.IGNORECASE)
READ_LIMIT = 1024 * 1024  # bytes read from a log per poll, while looking for its first lines
GONE_GRACE = 3.0  # seconds a supervised run's exit status may take to reach its record


@dataclass(frozen=True)
class Event:
    kind: str  # started | output | step | silent | busy | gone | exit | not-running | did-not-start | stalled | gap
    run: str
    time: float
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    node: str | None = None  # which node of a multi-node run (watch --hosts)

    def to_json(self) -> dict[str, Any]:
        where = {"node": self.node} if self.node is not None else {}
        return {"event": self.kind, "run": self.run, **where, "time": round(self.time, 3), "text": self.text, **self.data}

    def line(self) -> str:
        where = f" on {self.node}" if self.node is not None else ""
        return f"{time.strftime('%H:%M:%S', time.localtime(self.time))} {self.run}{where} {self.kind}: {self.text}"


def ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class _Log:
    path: str
    offset: int = 0
    partial: bytes = b""
    mtime: float | None = None
    size: int = 0


class Follower:
    """The run's state between polls, and the events a poll finds."""

    def __init__(self, run_id: str, stall_after: float, record_path: Path | None = None,
                 logs: Sequence[str] = (), find_pids: Any = None, host: Host | None = None) -> None:
        self.run_id = run_id
        self.stall_after = stall_after
        self.record_path = record_path
        self.host = host or LocalHost()
        self.find_pids = find_pids  # () -> {pid: command} of the run's live processes (no record)
        self.logs = [_Log(p) for p in logs]
        self.began = time.time()
        self.started_at: float | None = None
        self.seen_alive = False
        self.said: set[str] = set()
        self.silent_said = False
        self.busy_said = False
        self.gone_at: float | None = None
        self.finished = False
        self.outcome = ""  # exit | gone | stalled | not-running | did-not-start
        self.cpu_ticks: dict[int, tuple[float, int]] = {}
        self.record: records.Record | None = None
        self.polls = 0

    # ------------------------------------------------------------ one poll

    def poll(self) -> list[Event]:
        self.host.refresh()
        now = time.time()
        events: list[Event] = []
        self.polls += 1
        record = self._read_record()
        if record is not None and isinstance(record.get("log"), str) and not self.logs:
            self.logs = [_Log(record["log"])]
        alive = self._alive(record)
        if record is not None and isinstance(record.get("started_at"), (int, float)):
            self.started_at = float(record["started_at"])
        if alive and not self.seen_alive:
            self.seen_alive = True
            self.started_at = self.started_at or now
            events.append(self._started(record, alive, now))
        elif record is not None and record.get("pid") and "started" not in self.said and isinstance(record.get("exit"), dict):
            events.append(self._started(record, {}, now))
        events.extend(self.read_logs(now))
        ended = record.get("exit") if record is not None else None
        if isinstance(ended, dict):
            events.append(self._exit(ended, now))
            return events
        if record is not None and not alive and record.get("pid") is None and self._supervisor_gone(record):
            return [*events, self._end("did-not-start", now, "no supervisor and no process of the run: it never started")]
        if not alive:
            if not self.seen_alive and record is None:
                last = self._last_write()
                since = f" (last output {ago(now - last)} ago)" if last is not None else ""
                return [*events, self._end("not-running", now, f"no process of the run is alive{since}")]
            if self.seen_alive and self.gone_at is None:
                self.gone_at = now
                events.append(Event("gone", self.run_id, now, "no process of the run is alive any more"))
            if self.gone_at is not None and (record is None or now - self.gone_at >= GONE_GRACE):
                self.finished, self.outcome = True, "gone"
                if record is not None:
                    events.append(Event("exit", self.run_id, now, "no exit status was recorded (its supervisor is gone)",
                                        {"code": None, "signal": None}))
            return events
        events.extend(self._silence(alive, now))
        return events

    # ------------------------------------------------------------ parts

    def _read_record(self) -> records.Record | None:
        if self.record_path is None:
            return None
        with contextlib.suppress(records.RecordError):
            self.record = records.read(self.record_path) or self.record
        return self.record

    def _alive(self, record: records.Record | None) -> dict[int, str]:
        if record is not None:
            pid = record.get("pid")
            if isinstance(pid, int) and records.alive(pid, record.get("pid_start_ticks")):
                return {pid: " ".join(str(w) for w in record.get("command") or [])}
            return {}
        if self.find_pids is None:
            return {}
        found: dict[int, str] = self.find_pids()
        return found

    def _started(self, record: records.Record | None, alive: dict[int, str], now: float) -> Event:
        self.said.add("started")
        if record is not None and isinstance(record.get("pid"), int):
            pid = record["pid"]
            command = " ".join(str(w) for w in record.get("command") or [])
            when = record.get("started_at")
            since = f", since {time.strftime('%H:%M:%S', time.localtime(when))}" if isinstance(when, (int, float)) else ""
            return Event("started", self.run_id, now, f"pid {pid} ({command[:120]}){since}",
                         {"pid": pid, "via": record.get("via"), "started_at": when})
        pids = sorted(alive)
        shown = ", ".join(f"{pid} ({alive[pid][:60]})" for pid in pids[:3])
        return Event("started", self.run_id, now, f"pid {shown}", {"pid": pids[0] if pids else None, "pids": pids})

    def read_logs(self, now: float) -> list[Event]:
        """Events in what the logs gained since the last look: first output, first step."""
        events: list[Event] = []
        for log in self.logs:
            try:
                st = self.host.stat(log.path)
            except PermissionError:
                st = None
            if st is None:
                continue
            log.mtime, log.size = st.mtime, st.size
            if log.size < log.offset:
                log.offset, log.partial = 0, b""  # truncated (a --force relaunch): read it again
            if "step" in self.said or log.size == log.offset:
                continue
            try:
                chunk = self.host.read_bytes(log.path, READ_LIMIT, log.offset)
            except OSError:
                continue
            log.offset += len(chunk)
            *lines, log.partial = (log.partial + chunk).split(b"\n")
            for raw in lines:
                text = raw.decode("utf-8", "replace").rstrip("\r").strip()
                if not text:
                    continue
                if "output" not in self.said:
                    self.said.add("output")
                    base = self.started_at or self.began
                    when = (f"first output after {max(0.0, now - base):.1f} s" if self.polls > 1
                            else "output so far begins")  # written before watch began: when is not known
                    events.append(Event("output", self.run_id, now, f"{when}: {text[:200]}", {"line": text[:500]}))
                if "step" not in self.said and PROGRESS.search(text):
                    self.said.add("step")
                    events.append(Event("step", self.run_id, now, f"first step: {text[:200]}", {"line": text[:500]}))
                    break
        return events

    def _last_write(self) -> float | None:
        times = [log.mtime for log in self.logs if log.mtime is not None]
        return max(times) if times else None

    def _cpu(self, pids: Sequence[int], now: float) -> float | None:
        """% of one core used since the last poll by the busiest of these processes."""
        used: list[float] = []
        for pid in pids:
            stat = self.host.proc_stat(pid)
            if stat is None:
                continue
            before = self.cpu_ticks.get(pid)
            self.cpu_ticks[pid] = (now, stat.cpu_ticks)
            if before is not None and now > before[0]:
                used.append(100.0 * (stat.cpu_ticks - before[1]) / stat.ticks_per_s / (now - before[0]))
        most = busiest(used)
        return round(most, 1) if most is not None else None

    def _silence(self, alive: dict[int, str], now: float) -> list[Event]:
        cpu = self._cpu(self._tree(alive), now)
        last = self._last_write()
        if last is None:
            last = self.started_at or self.began
        silent = now - last
        if silent < self.stall_after / 2:
            self.silent_said = self.busy_said = False
            return []
        events: list[Event] = []
        if not self.silent_said:
            self.silent_said = True
            events.append(Event("silent", self.run_id, now, f"log silent for {ago(silent)}", {"silent_s": round(silent, 1)}))
        if silent >= self.stall_after and cpu is not None:
            if cpu < LOW_CPU_PCT:
                events.append(self._end("stalled", now, f"log silent for {ago(silent)} with {cpu:.1f} % CPU",
                                        {"silent_s": round(silent, 1), "cpu_pct": cpu}))
            elif not self.busy_said:
                self.busy_said = True
                events.append(Event("busy", self.run_id, now, f"log silent for {ago(silent)}, but busy ({cpu:.1f} % CPU)",
                                    {"silent_s": round(silent, 1), "cpu_pct": cpu}))
        return events

    def _tree(self, alive: dict[int, str]) -> list[int]:
        """The live pids and their descendants (the run's python under a launcher script)."""
        table = self.host.processes()
        children: dict[int, list[int]] = {}
        for proc in table:
            children.setdefault(proc.ppid, []).append(proc.pid)
        found, queue = set(alive), list(alive)
        while queue and len(found) < 500:
            for child in children.get(queue.pop(), ()):
                if child not in found:
                    found.add(child)
                    queue.append(child)
        return sorted(found)

    def _exit(self, ended: dict[str, Any], now: float) -> Event:
        self.finished, self.outcome = True, "exit"
        code, sig = ended.get("code"), ended.get("signal")
        seconds = ended.get("seconds")
        after = f" after {ago(float(seconds))}" if isinstance(seconds, (int, float)) else ""
        if isinstance(sig, int):
            text = f"killed by {records.signal_name(sig)}{after}"
        elif isinstance(code, int):
            text = f"exit status {code}{after}"
        else:
            self.outcome = "did-not-start"
            return Event("did-not-start", self.run_id, now, str(ended.get("how") or "it never ran"),
                         {"code": None, "signal": None})
        return Event("exit", self.run_id, now, text, {"code": code, "signal": sig, "time_ended": ended.get("time")})

    def _supervisor_gone(self, record: records.Record) -> bool:
        supervisor = record.get("supervisor")
        if isinstance(supervisor, dict):
            return not records.alive(supervisor.get("pid"), supervisor.get("start_ticks"))
        created = record.get("created_at")
        launching = records.alive(record.get("launch_pid"), record.get("launch_start_ticks"))
        return not launching and isinstance(created, (int, float)) and time.time() - created > 10

    def _end(self, kind: str, now: float, text: str, data: dict[str, Any] | None = None) -> Event:
        self.finished, self.outcome = True, kind
        return Event(kind, self.run_id, now, text, data or {})
