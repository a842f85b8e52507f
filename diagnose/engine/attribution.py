"""Tie each host event to the run before it can be blamed.

An event is the run's *own* when its pid is one of the run's (identity, exit records, pids the
log prints), when its memory cgroup is one of the run's, or by name and time: a process of the
run's kind killed at or after the log's last write, while no process of the run lives on (the
kernel kills; the log stops). It is *elsewhere* when it cannot be the run's: another cgroup than
the run's known ones, outside the run's window, or an OOM kill of another pid than the one the
run's own logs say died of SIGKILL. Name and time never tie an OOM kill to a run whose every
log ends in an exception its program raised (a SIGKILLed process prints none), nor any kill or
fault to a run that said how it ended: the trainer's words for done, exit status 0, or the
shell's error for a launch that never started the program (runview.LogEnd). Name and time is
the weakest tie: it never outranks what the run said of itself. Anything else is
*unattributed*: context at most, never the root cause.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.engine.kernel_events import KernelEvent
from diagnose.engine.runview import LogEnd, RunView

# Endings the run told of itself that rule out a kill or fault tied by name and time alone. An
# exception rules out only an OOM kill (below: a GPU fault is often what raised it).
_SAID_HOW = (LogEnd.FINISHED, LogEnd.EXITED_0, LogEnd.LAUNCH_FAILED, LogEnd.SHELL_ERROR)

OWN = "own"
UNATTRIBUTED = "unattributed"
ELSEWHERE = "elsewhere"
NOT_HOST = "n/a"  # a cause that rests on the run's own logs, not on a host event

CLOCK_SLACK = 2.0  # seconds: dmesg's boot-relative clock against file times
KILL_AFTER_LAST_WRITE = 600.0  # the kernel kills within this long after a run's last line


@dataclass(frozen=True)
class Attribution:
    verdict: str  # own | unattributed | elsewhere
    basis: str


def attribute(event: KernelEvent, view: RunView) -> Attribution:
    if event.pid is not None and event.pid in view.pids:
        return Attribution(OWN, f"pid {event.pid} is the run's ({view.pids[event.pid]})")
    if event.task_memcg and view.cgroups:
        # The root cgroup holds everything not put elsewhere: a run there shares it with the
        # whole host, so only a victim *below* it (in a cgroup of its own) is told apart by it.
        specific = {c for c in view.cgroups if c and c != "/"}
        if event.task_memcg in specific or any(event.task_memcg.startswith(c.rstrip("/") + "/") for c in specific):
            start, _end = view.window()
            if event.time is not None and start is not None and event.time < start:
                # Cgroup names come back (a Slurm job id after the controller's state was reset,
                # a systemd scope): one that held something before the run began held another run.
                return Attribution(ELSEWHERE, f"its memory cgroup {event.task_memcg} has the run's name, but the kill "
                                              "came before the run started")
            return Attribution(OWN, f"its memory cgroup {event.task_memcg} is the run's")
        if specific or event.task_memcg != "/":
            return Attribution(ELSEWHERE, f"its memory cgroup {event.task_memcg} is not the run's "
                                          f"({', '.join(sorted(view.cgroups))})")
    start, end = view.window()
    if event.time is not None and ((start is not None and event.time < start) or (end is not None and event.time > end)):
        return Attribution(ELSEWHERE, "outside the run's time window")
    if event.pid is not None and event.pid in view.alive_pids:
        return Attribution(OWN, f"pid {event.pid} is the run's")
    if event.kind == "oom_kill" and event.pid is not None and view.killed_pids:
        # The run names the pid that died of SIGKILL; a kill of another pid at that moment is a
        # neighbour's on a shared host, however close in time.
        named = ", ".join(str(p) for p in sorted(view.killed_pids)[:4])
        return Attribution(ELSEWHERE, f"the run's own SIGKILLed process was pid {named}, not {event.pid}")
    if view.ended_by_itself in _SAID_HOW:
        # The run said how it ended (done, exit 0, a launch the shell could not start): a kill
        # or fault of a process of its kind nearby, tied by nothing but name and time, is not it.
        return Attribution(UNATTRIBUTED, f"{event.describe()}: {view.ended_by_itself.value}, and nothing ties "
                                         "that process to the run (pid, cgroup)")
    tie = _by_name_and_time(event, view)
    if tie:
        return Attribution(OWN, tie)
    if event.kind == "oom_kill" and view.ended_by_itself is LogEnd.EXCEPTION:
        return Attribution(UNATTRIBUTED, f"{event.describe()}: the run's logs end in its own exceptions, which a "
                                         "process the kernel kills never prints")
    if not view.known and (not view.has_logs or event.time is None):
        # Captured files handed in together: with only a kernel log, or one whose clock cannot be
        # put beside the log's, there is nothing to hold the event against but the user's word.
        why = "only a kernel log was given" if not view.has_logs else "given with the run's log; its clock cannot be compared"
        return Attribution(OWN, why)
    when = "" if event.time is None else " inside the run's window"
    return Attribution(UNATTRIBUTED, f"{event.describe()}{when}; nothing ties it to this run (pid, cgroup or timing)")


def _by_name_and_time(event: KernelEvent, view: RunView) -> str | None:
    if event.time is None or view.last_write is None or view.alive or not view.comm_fits(event.comm):
        return None
    after = event.time - view.last_write
    if event.kind == "oom_kill" and view.ended_by_itself is LogEnd.EXCEPTION:
        return None  # the run ended by its own exception: a kill after it is a neighbour's
    if event.kind == "oom_kill":
        # A SIGKILL ends the log: the run's own kill comes at or after its last line.
        if -CLOCK_SLACK <= after <= KILL_AFTER_LAST_WRITE:
            return (f"{event.comm} was killed {max(after, 0.0):.0f} s after the run's log last moved, "
                    "and no process of the run lives on")
        return None
    # A GPU fault or a segfault happens while the run works, and ends it soon after.
    started = view.start if view.start is not None else view.last_write
    if started - CLOCK_SLACK <= event.time <= view.last_write + KILL_AFTER_LAST_WRITE:
        return f"a {event.comm} process faulted while the run's log was being written, and the run ended"
    return None


def own_victim(events: list[KernelEvent], view: RunView) -> KernelEvent | None:
    """The run's own OOM victim, when several are: the first after the log's last write."""
    own = [e for e in events if e.kind == "oom_kill" and attribute(e, view).verdict == OWN]
    if not own:
        return None
    return min(own, key=lambda e: (e.time is None, e.time or 0.0, e.line))
