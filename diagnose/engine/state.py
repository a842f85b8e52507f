"""The run's state, derived the same way live and from a bundle: never-started, running,
stalled, crashed, stopped, finished (docs/run-identity.md), and the causes a state alone makes
when no rule explains it: a stalled run, a launch that never started, a log that just stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from diagnose.engine import causes
from diagnose.engine.attribution import OWN, attribute
from diagnose.engine.causes import EngineCause
from diagnose.engine.errorlines import log_error_line
from diagnose.engine.findings import Cause
from diagnose.engine.kernel_events import KernelEvent
from diagnose.engine.rankstacks import ProcessStack, read_hang
from diagnose.engine.runview import LogEnd, RunView, own_logs
from diagnose.engine.tracebacks import find_crashes
from diagnose.evidence import logview
from diagnose.evidence.facts import LOW_CPU_PCT, busiest
from diagnose.evidence.lines import is_finish_line, is_own_line, strip_ansi, strip_prefix
from diagnose.evidence.model import Evidence, EvidenceItem, ExitRecord, TextKind

NEVER_STARTED = "never-started"
RUNNING = "running"
STALLED = "stalled"
CRASHED = "crashed"
STOPPED = "stopped"
FINISHED = "finished"
UNKNOWN = "unknown"

LAST_LINES = 6  # lines of a log's end shown as evidence of where it stopped

@dataclass(frozen=True)
class RunState:
    state: str
    reason: str
    last_lines: tuple[EvidenceItem, ...] = ()
    dmesg_checked: bool = False  # a kernel log was collected for the run's time
    own_oom: KernelEvent | None = None
    bad_exit: ExitRecord | None = None  # the non-zero exit or signal a crash rests on, when it does


def derive_state(evidence: Evidence, view: RunView, events: Sequence[KernelEvent]) -> RunState:
    last = _last_lines(evidence)
    dmesg = bool(evidence.texts_of(TextKind.DMESG)) and not any(g.source == "dmesg" for g in evidence.gaps)
    own_oom = next((e for e in events if e.kind == "oom_kill" and attribute(e, view).verdict == OWN), None)

    def state(name: str, reason: str, bad: ExitRecord | None = None) -> RunState:
        return RunState(name, reason, last, dmesg, own_oom, bad)

    if view.alive:
        silent = view.silent_for()
        cpu = _cpu(evidence)
        if silent is not None and silent > view.stall_after and (cpu is None or cpu < LOW_CPU_PCT):
            use = f", its busiest process at {cpu:.1f} % CPU" if cpu is not None else ""
            return state(STALLED, f"alive (pid {_pids(view)}), but its log has been silent for {_ago(silent)}{use} "
                                  f"(stalled after {_ago(view.stall_after)}: {view.stall_basis})")
        age = f"; last output {_ago(silent)} ago" if silent is not None else ""
        return state(RUNNING, f"alive (pid {_pids(view)}){age}")
    if view.missing_logs and not any(_has_content(t.path) for t in own_logs(evidence)):
        return state(NEVER_STARTED, f"the expected log {view.missing_logs[0]} was never written and no process of "
                                    "the run is alive")
    codes = [e for e in evidence.exits or () if e.code is not None or e.signal is not None]
    if view.ended_by_itself is LogEnd.LAUNCH_FAILED and own_oom is None:
        return state(NEVER_STARTED, "the shell could not start the program: its log holds only the shell's error")
    if own_oom is not None:
        return state(CRASHED, f"the kernel OOM-killed {own_oom.comm} (pid {own_oom.pid})")
    if any(e.code not in (0, None) or e.signal is not None for e in codes):
        bad = next(e for e in codes if e.code not in (0, None) or e.signal is not None)
        how = f"signal {bad.signal}" if bad.signal is not None else f"exit status {bad.code}"
        return state(CRASHED, f"a process of the run ended with {how} ({bad.source})", bad)
    if _ends_in_error(evidence):
        return state(CRASHED, "its log ends in an error")
    if codes and all(e.code == 0 for e in codes):
        return state(FINISHED, "it exited with status 0")
    if any(is_finish_line(strip_prefix(item.text)) for item in last):
        return state(FINISHED, "its log ends with the trainer's own words for done")
    if last and not view.known:
        return state(STOPPED, "its log ends without an error (no exit record, no process to ask: nothing says it "
                              "was killed)")
    if last:
        return state(STOPPED, "its log stops with no error and no exit record")
    return state(UNKNOWN, "no log of the run to read")


def _pids(view: RunView) -> str:
    return ", ".join(str(p) for p in view.alive_pids[:6]) or "?"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _cpu(evidence: Evidence) -> float | None:
    identity = getattr(evidence, "identity", None)
    return busiest(p.cpu_pct for p in getattr(identity, "processes", ()) or () if getattr(p, "alive", False)
                   and isinstance(getattr(p, "cpu_pct", None), (int, float)))


def _has_content(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _last_lines(evidence: Evidence) -> tuple[EvidenceItem, ...]:
    items: list[EvidenceItem] = []
    for text in own_logs(evidence):
        try:
            data, first = logview.tail(text, 64 * 1024)
        except Exception:  # a log we cannot re-read shows no last lines; the scan already had it
            continue
        lines = strip_ansi(data).decode("utf-8", errors="replace").splitlines()
        # The run's own last lines: wandb's footer, printed at every exit, is not where it stopped.
        numbered = [(first + i, line) for i, line in enumerate(lines) if is_own_line(line)]
        items.extend(EvidenceItem(text.display, line.rstrip()[:2000], no, None, text.rank, text.host or evidence.run.host)
                     for no, line in numbered[-LAST_LINES:])
    return tuple(items)


def _ends_in_error(evidence: Evidence) -> bool:
    """A log ends in an error when it holds a crash the run did not go on after: the same
    crashes, and the same test of going on, as the unrecognised fallback (tracebacks.py), so
    the two never disagree about one crash."""
    for text in own_logs(evidence):
        try:
            crashes = find_crashes(text)
        except Exception:  # unreadable now: the rules saw what the scan read
            continue
        if any(not c.survived for c in crashes):
            return True
        if not crashes and log_error_line(text) is not None:
            return True  # an error of another shape (engine/errorlines.py) ends it
    return False


# ---------------------------------------------------------------- causes a state makes

def state_causes(run: RunState, view: RunView, have_root: bool, quoted: frozenset[str] = frozenset()) -> list[Cause]:
    """The cause a state makes on its own (their entries: engine/causes.py); never when a
    crash-level root already explains it, except a stall (a live hang is what the engineer must
    see first). A crash only an exit status shows is a cause only when no other cause quotes that
    exit record (`quoted`: the sources the causes' evidence comes from)."""
    if run.state == STALLED:
        return [_stalled(run, view)]
    if have_root:
        return []
    if run.state == NEVER_STARTED:
        return [_cause(causes.NEVER_STARTED, run.last_lines,
                       f"{run.reason.capitalize()}. Nothing the run would print exists, so nothing can say why it "
                       "failed: the launcher itself did (a missing script or interpreter, a tmux server or exec "
                       "session that died, a scheduler that never ran it).")]
    if run.state == CRASHED and run.bad_exit is not None:
        return [] if run.bad_exit.source in quoted else [_exited(run)]
    if run.state != STOPPED:
        return []
    if run.dmesg_checked and view.known and view.alive is False and run.own_oom is None:
        return [_cause(causes.KILLED_FROM_OUTSIDE, run.last_lines, causes.KILLED_FROM_OUTSIDE.explanation)]
    if not view.known:
        # Captured logs alone (`diagnose scan`): a log that ends without an error is what most
        # finished runs leave (their last words are an eval, a save, a summary, not "done"), and
        # what a run still going when the log was copied leaves. Nothing here suggests a kill:
        # the state says how it ended; a warning would be wrong more often than right.
        return []
    return [_cause(causes.STOPPED_WITHOUT_ERROR, run.last_lines, causes.STOPPED_WITHOUT_ERROR.explanation)]


def _exited(run: RunState) -> Cause:
    """A crash only the exit status shows: no rule and no traceback explains it."""
    from diagnose.rules.conditions import signal_name

    bad = run.bad_exit
    assert bad is not None
    how = f"was killed by {signal_name(bad.signal)}" if bad.signal is not None else f"exited with status {bad.code}"
    who = f"pid {bad.pid}" if bad.pid is not None else "the run"
    record = EvidenceItem(bad.source, f"{who} {how}" + (f": {bad.message}" if bad.message else ""),
                          None, bad.time, bad.rank, None)
    return _cause(causes.EXITED_WITH_ERROR, (record, *run.last_lines),
                  f"A process of the run {how} ({bad.source}), and neither a rule nor a traceback in its log says "
                  "why: the program chose that status itself (sys.exit(N), a shell script's last command, a "
                  "launcher passing on a child's failure), or a signal ended it from outside. Its last lines are "
                  "below.", title=f"The run {how}, and its log does not say why")


def _stalled(run: RunState, view: RunView) -> Cause:
    silence = run.reason.split(", but ", 1)[-1].split(" (stalled after ", 1)[0]
    hang = read_hang(view.stacks)
    if hang is None:
        items = list(run.last_lines)
        for stack in view.stacks:
            items.extend(_stack_lines(stack))
        where = ("Its threads' stacks (py-spy) show where it waits." if view.stacks
                 else "No stack could be taken (see the gaps); `py-spy dump --pid PID` shows where it waits.")
        return _cause(causes.STALLED, tuple(items),
                      f"The run is {run.reason}. A training loop prints steadily; a process that lives on without "
                      f"output and without CPU waits on something: a collective whose peer is gone, a DataLoader "
                      f"worker, a lock, a network call. {where}",
                      title=f"The run is alive but stalled: {silence}")
    # The ranks outside the collective first: their stacks are the evidence that names them.
    order = {place.pid: n for n, place in enumerate((*hang.outside, *hang.waiting))}
    items = []
    for stack in sorted(view.stacks, key=lambda s: order.get(s.pid, len(order))):
        items.extend(_stack_lines(stack))
    items.extend(run.last_lines)
    outside = [place.rank for place in hang.outside]
    who, does = (f"rank {outside[0]} is the one", "it does") if len(outside) == 1 else (
        f"ranks {', '.join(map(str, outside))} are the ones", "they do")
    return _cause(causes.STALLED, tuple(items),
                  f"The run is {run.reason}. Its ranks' stacks (py-spy) say where each waits: {hang.summary()}. A "
                  f"collective returns only when every rank has entered it, so {who} the others wait for: look at "
                  f"what {does} there (a data loader or a read that never returns, a branch only some ranks take, "
                  f"a lock), not at the network or the collective. When the process group's timeout fires (30 "
                  f"min by default for gloo, 10 min for NCCL), it is the waiting ranks that report it, naming "
                  f"the collective, not the rank.",
                  title=f"The run is alive but stalled: {hang.summary()}")


def _stack_lines(stack: ProcessStack) -> list[EvidenceItem]:
    """The dump's threads and frames (its "Process N: ..." and "Python v..." header lines say
    nothing the source does not)."""
    lines = [line for line in stack.dump.splitlines()[:42] if line.strip() and not line.startswith(("Process ", "Python v"))]
    return [EvidenceItem(f"py-spy dump --pid {stack.pid}", line, None, None, stack.rank, None) for line in lines]


def _cause(kind: EngineCause, evidence: tuple[EvidenceItem, ...], explanation: str, title: str | None = None) -> Cause:
    return kind.cause(explanation, evidence, round(kind.confidence * kind.severity.weight, 4), title=title)
