"""What the engine knows of the run itself: its pids (and how each is known), cgroups, process
names, time window and liveness, gathered from the identity the live side collected, the
process and exit records, and what the logs print. Attribution and state read only this.

A scan of loose files has no identity: the view is then built from the logs alone (pids they
print, their first and last times), which is weaker, and says so (`known` is False).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from itertools import pairwise
from typing import Any

from diagnose.engine.rankstacks import ProcessStack
from diagnose.evidence import logview
from diagnose.evidence.facts import rank_heads
from diagnose.evidence.lines import (
    LogClock,
    is_finish_line,
    is_own_line,
    log_clock,
    log_time,
    progress_of,
    strip_ansi,
    strip_prefix,
)
from diagnose.evidence.model import Evidence, TextFile, TextKind

LOG_TAIL = 1024 * 1024
LOG_HEAD = 64 * 1024
STALL_AFTER = 600.0  # seconds of silence before a live run counts as stalled, when its cadence is unknown
# A run's own cadence sets the stall threshold when --stall-after is not given: CADENCE_TIMES x the
# median gap between its last CADENCE_LINES timestamped progress lines (or its last tqdm bar's
# time per iteration), kept between STALL_MIN and STALL_MAX (an eval or a checkpoint save may stay
# silent for minutes; a run that steps every 5 minutes is not stalled after 10).
CADENCE_TIMES = 10.0
CADENCE_LINES = 50
STALL_MIN = 120.0
STALL_MAX = 7200.0

# pids a training log prints about its own processes (torchelastic's summary, DataLoader,
# torchrun's teardown); a kernel event of one of these is the run's own.
_LOG_PIDS = (
    re.compile(r"\(pid: (\d{1,10})\)"),
    re.compile(r"DataLoader worker \(pid\(?s?\)? ([\d, ]{1,200})\)"),
    re.compile(r"Killing subprocess (\d{1,10})"),
    re.compile(r"Sending process (\d{1,10}) closing signal"),
    re.compile(r"\bexits? with return code\b.{0,60}?\bpid[= :]+(\d{1,10})", re.IGNORECASE),
    re.compile(r"\bworker (?:process )?(?:pid )?(\d{1,10}) (?:exited|died|was killed)", re.IGNORECASE),
)
# pids the log says died of SIGKILL (torchrun's failure line and summary, bash's job status): when
# the run names its own SIGKILLed pid, an OOM kill of another pid is not the run's.
_KILLED_PIDS = (
    re.compile(r"failed \(exitcode: -9\) local_rank: \d{1,9} \(pid: (\d{1,10})\)"),
    re.compile(r"Signal 9 \(SIGKILL\) received by PID (\d{1,10})"),
    re.compile(r"line \d{1,9}:\s{1,40}(\d{1,10}) Killed\s"),
)
# A text every match of the _LOG_PIDS pattern beside it holds, in lower case (None: it starts
# with a literal, which `re` finds fast). Free of i and s, whose case-insensitive matches
# include letters that lower() does not map to them (the dotless i, the long s); the Kelvin
# sign lowers to k.
_PID_GUARDS = (None, None, None, None, "return code", "worker ")
# A traceback that tells of a signal death (a child's or the process's own) is no proof the
# program ended by its own exception: torchrun's ChildFailedError, mp.spawn's "terminated with signal".
_SIGNAL_DEATH = re.compile(r"SIGKILL|[Ss]ignal 9\b|exitcode: -9|\bKilled\b|ChildFailedError|SignalException|ProcessExitedException")
ENDS_WITHIN = 5  # lines after a final traceback that still count as the log's end (a blank, a launcher's echo)
# The words a shell, a launcher or the interpreter print when the program could not be started
# (bash "bash: pythn: command not found", "bash: cd: /x: No such file or directory", dash
# "sh: 1: pythn: not found", "nohup: failed to run command", env, timeout, "python3: can't open
# file"): a line "NAME: ... PHRASE", NAME a word or path with no blank, not an exception's name
# (a Python exception is read as one: _ends_in_exception). A SIGKILLed process prints none.
_LAUNCH_FAILED = re.compile(
    r"^(?![\w.]*(?:Error|Exception|Warning):)[^\s:]{1,200}(?:: line [0-9]{1,9}| [0-9]{1,9}|: [0-9]{1,9})?: [^\n]{0,400}?"
    r"(?:command not found|: not found|No such file or directory|Permission denied|cannot execute|bad interpreter"
    r"|failed to run command|can't open file)")
END_LINES = 6  # a log's last non-blank lines read for how it ended (the state reads as many)
LAUNCH_LINES = 20  # non-blank lines at most of a log whose launch failed (a banner, an echo, the error)


class LogEnd(Enum):
    """How a log's last lines say the run ended, when they say it themselves."""

    NOT_SAID = ""
    EXCEPTION = "its logs end in its own exceptions"
    FINISHED = "its logs end with the trainer's own words for done"
    LAUNCH_FAILED = "its launch failed before the program started (its log holds only the shell's error)"
    SHELL_ERROR = "its log ends in the shell's own error for a command it could not run"
    EXITED_0 = "it exited with status 0"
_PYTHONISH = re.compile(r"^(?:python[0-9.]*|pt_[a-z_]+|torchrun|accelerate|deepspeed|pt_main_thread|pt_data_worker)$")


@dataclass(frozen=True)
class RunView:
    known: bool  # an identity was collected (live or from a bundle), not a scan of loose files
    pids: Mapping[int, str] = field(default_factory=dict)  # pid -> how it is known to be the run's
    cgroups: frozenset[str] = frozenset()
    comms: frozenset[str] = frozenset()
    alive: bool | None = None  # None: not known
    alive_pids: tuple[int, ...] = ()
    start: float | None = None
    start_source: str = ""
    last_write: float | None = None
    end_source: str = ""
    collected_at: float | None = None
    has_logs: bool = False
    missing_logs: tuple[str, ...] = ()  # expected logs that do not exist (or are empty)
    killed_pids: frozenset[int] = frozenset()  # pids the logs or exit records say died of SIGKILL
    # How the run ended by its own account, when every log (or its exit records) says it did:
    # no kill by the kernel is tied to it by name and time then (EXCEPTION: every log ends in an
    # exception its program raised, which a process the kernel SIGKILLs never prints).
    ended_by_itself: LogEnd = LogEnd.NOT_SAID
    stacks: tuple[ProcessStack, ...] = ()  # py-spy dumps of the run's live processes, ranks' first
    stall_after: float = STALL_AFTER
    stall_basis: str = "the default"  # where stall_after comes from, as the report says it

    def silent_for(self) -> float | None:
        if self.last_write is None or self.collected_at is None:
            return None
        return max(0.0, self.collected_at - self.last_write)

    def window(self) -> tuple[float | None, float | None]:
        """From a little before the start (dmesg's clock drifts) to a while after the last write
        (the OOM killer strikes after the last line); None = open."""
        start = self.start - 120 if self.start is not None else None
        end = self.last_write + 3600 if self.last_write is not None else None
        return start, end

    def comm_fits(self, comm: str | None) -> bool:
        """A process name that could be one of the run's (its own names, else an interpreter's)."""
        if not comm:
            return False
        if self.comms:
            return comm in self.comms or any(comm[:15] == c[:15] for c in self.comms)
        return bool(_PYTHONISH.match(comm))


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """A field of an identity part, whether a dataclass or (in an older bundle) a mapping."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _rank_stacks(dumps: list[tuple[int, int, int | None, str]]) -> tuple[ProcessStack, ...]:
    """The dumps with the rank each is, for a rank's own process only (a DataLoader worker that
    inherited RANK from its parent rank is no rank of its own); ranks first, in rank order."""
    own = rank_heads((pid, ppid, rank) for pid, ppid, rank, _dump in dumps)
    stacks = [ProcessStack(pid, own.get(pid), dump) for pid, _ppid, _rank, dump in dumps]
    return tuple(sorted(stacks, key=lambda s: (s.rank is None, s.rank or 0, s.pid)))


def run_view(evidence: Evidence, stall_after: float | None = None) -> RunView:
    """The run as the engine sees it. `stall_after`: --stall-after's seconds, if given; else the
    run's own cadence sets it (stall_threshold)."""
    identity: Any = getattr(evidence, "identity", None)
    pids: dict[int, str] = {}
    cgroups: set[str] = set()
    comms: set[str] = set()
    alive_pids: list[int] = []
    dumps: list[tuple[int, int, int | None, str]] = []  # pid, ppid, RANK, dump
    alive: bool | None = None
    start: float | None = None
    start_source = ""
    collected_at: float | None = evidence.run.collected_at
    missing: list[str] = []
    if identity is not None:
        for proc in _get(identity, "processes", ()) or ():
            pid = _get(proc, "pid")
            if isinstance(pid, int):
                pids.setdefault(pid, str(_get(proc, "source", "") or "a process of the run"))
                if _get(proc, "alive"):
                    alive_pids.append(pid)
                if _get(proc, "stack"):
                    rank = _get(proc, "rank")
                    dumps.append((pid, int(_get(proc, "ppid") or 0), rank if isinstance(rank, int) else None,
                                  str(_get(proc, "stack"))))
            if _get(proc, "comm"):
                comms.add(str(_get(proc, "comm")))
            if _get(proc, "cgroup"):
                cgroups.add(str(_get(proc, "cgroup")))
        cgroups.update(str(c) for c in _get(identity, "cgroups", ()) or ())
        window = _get(identity, "window")
        if window is not None and isinstance(_get(window, "start"), (int, float)):
            start, start_source = float(_get(window, "start")), str(_get(window, "start_source", "") or "")
        if isinstance(_get(identity, "collected_at"), (int, float)):
            collected_at = float(_get(identity, "collected_at"))
        for log in _get(identity, "logs", ()) or ():
            if not _get(log, "exists") or _get(log, "size") == 0:
                missing.append(str(_get(log, "path")))
        alive = bool(alive_pids)
    if evidence.process is not None:
        alive = evidence.process.alive if alive is None else (alive or evidence.process.alive)
        for pid in evidence.process.pids:
            pids.setdefault(pid, evidence.process.source)
            if evidence.process.alive and pid not in alive_pids:
                alive_pids.append(pid)
    killed: set[int] = set()
    for record in evidence.exits or ():
        if record.pid is not None:
            pids.setdefault(record.pid, f"exit record ({record.source})")
            if record.signal == 9 or record.code in (137, -9):
                killed.add(record.pid)
    if evidence.files is not None and not missing:
        missing = [f.path for f in evidence.files if f.role == "log" and (not f.exists or f.size == 0)]
    logs = own_logs(evidence)
    # A scan's files may be copies (a checkout, a CI artifact): their mtimes say nothing of the run.
    trust_mtime = evidence.run.mode != "scan"
    last_write = max((t.on_clock(t.mtime) or 0.0 for t in logs if t.mtime is not None), default=None) if trust_mtime else None
    end_source = "the log's last write" if last_write is not None else ""
    first_time: float | None = None
    ends: set[LogEnd] = set()
    gaps: list[float] = []
    for text in logs:
        # A scan of loose logs is never alive, so never stalled: its cadence is not read.
        printed, first, last, sigkilled, last_line, end, gap = _read_log(text, with_cadence=trust_mtime)
        if gap is not None:
            gaps.append(gap)
        ends.add(LogEnd.EXCEPTION if _ends_in_exception(text, last_line) else end)
        first, last = text.on_clock(first), text.on_clock(last)
        for pid in printed | sigkilled:
            pids.setdefault(pid, f"printed in {text.display}")
        killed.update(sigkilled)
        if first is not None and (first_time is None or first < first_time):
            first_time = first
        if last_write is None and last is not None:
            last_write, end_source = last, "the log's last timestamp"
    if start is None and first_time is not None:
        start, start_source = first_time, "the first timestamped log line"
    by_itself = _ended_by_itself(ends, evidence, killed)
    threshold, basis = stall_threshold(stall_after, max(gaps) if gaps else None)
    return RunView(
        known=identity is not None or evidence.run.mode == "live", pids=pids, cgroups=frozenset(cgroups),
        comms=frozenset(comms), alive=alive, alive_pids=tuple(sorted(alive_pids)), start=start,
        start_source=start_source, last_write=last_write, end_source=end_source, collected_at=collected_at,
        has_logs=bool(logs), missing_logs=tuple(missing), stacks=_rank_stacks(dumps), stall_after=threshold,
        stall_basis=basis,
        killed_pids=frozenset(killed), ended_by_itself=by_itself,
    )


def stall_threshold(asked: float | None, gap: float | None) -> tuple[float, str]:
    """Seconds of silence after which the live run is stalled, and why that many: --stall-after
    when given, else CADENCE_TIMES x the run's usual gap between progress lines (`gap`; the
    slowest log's, of several), bounded, else STALL_AFTER."""
    if asked is not None:
        return asked, "--stall-after"
    if gap is None:
        return STALL_AFTER, "the default (its log shows no cadence to go by)"
    threshold = min(max(CADENCE_TIMES * gap, STALL_MIN), STALL_MAX)
    return threshold, f"{CADENCE_TIMES:.0f} x its usual {_seconds(gap)} between progress lines, within {_seconds(STALL_MIN)}-{_seconds(STALL_MAX)}"


def _seconds(value: float) -> str:
    """rules.conditions.human_seconds, with a tenth of a second below 10 s (a step a second)."""
    from diagnose.rules.conditions import human_seconds

    return f"{value:.1f} s" if value < 10 else human_seconds(value)


def cadence(lines: list[str], year: int | None, not_after: float | None) -> float | None:
    """The run's usual gap, in seconds, between its progress lines: the median gap between the
    times of its last CADENCE_LINES progress lines that carry one; else its last tqdm bar's time
    per iteration (tqdm prints a bar at least that often); None when the log shows neither."""
    times: list[float] = []
    bar: str | None = None
    for line in reversed(lines[-20 * CADENCE_LINES:]):
        body = strip_prefix(line)
        if progress_of(body) is None:
            continue
        if bar is None and ("it/s" in body or "s/it" in body):
            bar = body
        moment = log_time(line, year, not_after)
        if moment is not None:
            times.append(moment)
            if len(times) > CADENCE_LINES:
                break
    gaps = sorted(abs(a - b) for a, b in pairwise(times) if a != b)
    if len(gaps) >= 4:
        return gaps[len(gaps) // 2]
    if bar is not None:
        rate = _TQDM_RATE.search(bar.rsplit("\r", 1)[-1])
        if rate is not None:
            value = float(rate.group("value"))
            per_iteration = value if rate.group("unit") == "s/it" else (1.0 / value if value > 0 else None)
            if per_iteration is not None:
                return max(per_iteration, 0.1)  # tqdm's own refresh: at most every 0.1 s
    return None


# tqdm's rate at a bar's end: "[00:50<07:30,  2.00it/s]" or "[01:40<1:23:20,  5.00s/it]".
_TQDM_RATE = re.compile(r"<[0-9:?]{1,12}, {0,4}(?P<value>[0-9]{1,9}(?:\.[0-9]{1,6})?)(?P<unit>it/s|s/it)")


def _ended_by_itself(ends: set[LogEnd], evidence: Evidence, killed: set[int]) -> LogEnd:
    """How the run ended by its own account: every exit record says status 0, or every log's
    end says the same (an exception, the trainer's words for done, a failed launch). Nothing
    when a pid is known to have died of SIGKILL."""
    if killed:
        return LogEnd.NOT_SAID
    codes = [e for e in evidence.exits or () if e.code is not None or e.signal is not None]
    if codes and all(e.code == 0 and e.signal is None for e in codes):
        return LogEnd.EXITED_0
    if len(ends) == 1:
        return next(iter(ends))
    return LogEnd.NOT_SAID


def own_logs(evidence: Evidence) -> tuple[TextFile, ...]:
    """The run's own logs: not the older siblings kept beside a missing log to show that earlier
    launches of the same command worked (their times and pids are another run's)."""
    siblings = {name.rsplit("/", 1)[-1] for f in evidence.files or () if not f.exists for name in f.siblings}
    return tuple(t for t in evidence.texts_of(TextKind.LOG) if t.display.rsplit("/", 1)[-1] not in siblings)


def _ends_in_exception(text: TextFile, last_line: int) -> bool:
    """Does the log end in an exception its own program raised (a Python traceback, not one
    telling of a signal death)?"""
    from diagnose.engine.tracebacks import read_crashes

    if last_line <= 0:
        return False
    try:
        found = read_crashes(text)
    except Exception:  # unreadable now: no claim
        return False
    final = max((c for c in found.every if not c.survived), key=lambda c: max(c.end_line, c.line_no), default=None)
    if final is None or max(final.end_line, final.line_no) < last_line - ENDS_WITHIN or final.shape != "python":
        return False
    if final.thread not in (None, "MainThread"):  # another thread's exception ends no process
        return False
    return not _SIGNAL_DEATH.search(" ".join([final.summary, *(line for _n, line in final.lines[-20:])]))


def _read_log(source: TextFile, with_cadence: bool = True
              ) -> tuple[set[int], float | None, float | None, set[int], int, LogEnd, float | None]:
    """pids the log prints, its first and its last timestamp, the pids it says were SIGKILLed,
    the number of its last line, what its last lines say of how it ended (not of an exception:
    _ends_in_exception reads that), and its cadence (the usual gap between progress lines; None
    unless `with_cadence`)."""
    mtime = source.mtime
    try:
        head = logview.head(source, LOG_HEAD)
        tail, first_line = logview.tail(source, LOG_TAIL)
    except Exception:  # a log the scanner read but we cannot re-read: nothing more to learn here
        return set(), None, None, set(), 0, LogEnd.NOT_SAID, None
    text = strip_ansi(tail).decode("utf-8", errors="replace")
    # year-less times (glog, ts) take their year from the log's own dates, else its mtime
    clock = log_clock(strip_ansi(head).decode("utf-8", errors="replace"), text[-64 * 1024:], mtime)
    first = _first_time(head, clock)
    printed: set[int] = set()
    lowered = text.lower()
    for pattern, guard in zip(_LOG_PIDS, _PID_GUARDS, strict=True):
        for match in _pid_matches(pattern, guard, text, lowered):
            printed.update(int(p) for p in re.findall(r"\d{1,10}", match.group(1)))
    sigkilled = {int(match.group(1)) for pattern in _KILLED_PIDS for match in pattern.finditer(text)}
    last: float | None = None
    lines = text.splitlines()
    for line in reversed(lines[-200:]):
        last = log_time(line, clock.year, clock.not_after)
        if last is not None:
            break
    last_line = first_line + tail.rstrip(b"\n").count(b"\n") if tail.strip() else 0
    gap = cadence(lines, clock.year, clock.not_after) if with_cadence else None
    return printed, first, last, sigkilled, last_line, _log_end(text, whole=first_line <= 1), gap


def _log_end(text: str, whole: bool) -> LogEnd:
    """What a log's last non-blank lines say of how it ended: the trainer's words for done, or
    the shell's for a command it could not run (a launch that failed, when that is nearly all
    the log holds: `whole`, the text is the whole log)."""
    # wandb's footer comes after whatever ended the run: the run's own last lines are above it.
    raw = [line.strip() for line in text[-64 * 1024:].splitlines() if is_own_line(line)]
    lines = [strip_prefix(line) for line in raw]
    ending = lines[-END_LINES:]
    # The shell's own line as it wrote it ("python3: can't open file" reads like a pdsh prefix).
    if any(_LAUNCH_FAILED.search(line[:2000]) for line in raw[-3:]):
        if whole and len(lines) <= LAUNCH_LINES and not any(progress_of(line) for line in lines):
            return LogEnd.LAUNCH_FAILED
        return LogEnd.SHELL_ERROR
    if any(is_finish_line(line) for line in ending):
        return LogEnd.FINISHED
    return LogEnd.NOT_SAID


def _pid_matches(pattern: re.Pattern[str], guard: str | None, text: str, lowered: str) -> Iterator[re.Match[str]]:
    """pattern.finditer(text), quickly. A case-insensitive search with no literal to look for
    first tries every column of a 4 MiB tail (~0.1 s); its matches never cross a newline, so
    only the lines holding its guard text (found at memchr speed) are searched."""
    if guard is None:
        yield from pattern.finditer(text)
        return
    if guard not in lowered:
        return
    if len(lowered) != len(text):  # lower() changed some lengths: offsets do not carry over
        yield from pattern.finditer(text)
        return
    at = lowered.find(guard)
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        yield from pattern.finditer(text, start, end)
        at = lowered.find(guard, end)


def _first_time(head: bytes, clock: LogClock) -> float | None:
    for line in strip_ansi(head).decode("utf-8", errors="replace").splitlines()[:400]:
        when = log_time(line, clock.year, clock.not_after)
        if when is not None:
            return when
    return None
