"""SIGKILL without an OOM record: out of memory, or killed from outside?

A process killed with SIGKILL leaves no traceback; the usual sender is the kernel's OOM killer,
which writes its kill to the kernel log. So where a kernel log was read that covers the moment
of the kill (it reaches back before it and was read after it) and holds no OOM kill of the
run's own processes (another process's kill on a shared host does not count: attribution.py),
the kernel did not do it: something outside did. Where no such kernel log is at hand, memory
stays the likely cause, and the verdict says the proof is missing.
"""

from __future__ import annotations

from diagnose.engine.analyzers.base import AnalyzerInput, AnalyzerOutput, register
from diagnose.engine.attribution import CLOCK_SLACK, OWN, attribute
from diagnose.engine.kernel_events import kernel_events, kernel_log_span
from diagnose.engine.runview import run_view
from diagnose.evidence.model import Evidence, TextKind

_KILL_CODES = (137, -9)


def _kill_moment(evidence: Evidence, last_write: float | None) -> float | None:
    """When the SIGKILL came: an exit record's time, else when the run's log last moved."""
    times = [e.time for e in evidence.exits or () if e.time is not None and (e.signal == 9 or e.code in _KILL_CODES)]
    return min(times) if times else last_write


def _covering_logs(evidence: Evidence, moment: float | None) -> list[str]:
    if moment is None or any(g.source == "dmesg" for g in evidence.gaps):
        return []
    covering = []
    for text in evidence.texts_of(TextKind.DMESG):
        try:
            start, end, from_boot = kernel_log_span(text)
        except Exception:  # unreadable now: it proves nothing
            continue
        reaches_back = from_boot or (start is not None and start <= moment + CLOCK_SLACK)
        read_after = (end is not None and end >= moment - CLOCK_SLACK) or (
            text.mtime is not None and text.mtime >= moment - CLOCK_SLACK)
        if reaches_back and read_after:
            covering.append(text.display)
    return covering


@register("sigkill")
def sigkill(inp: AnalyzerInput) -> AnalyzerOutput:
    out = AnalyzerOutput()
    view = run_view(inp.evidence)
    events = kernel_events(inp.evidence)
    if any(e.kind == "oom_kill" and attribute(e, view).verdict == OWN for e in events):
        out.discard = True  # the kernel's own record of the kill: memory.host-oom-kill is the cause
        return out
    moment = _kill_moment(inp.evidence, view.last_write)
    covering = _covering_logs(inp.evidence, moment)
    if covering:
        others = sum(1 for e in events if e.kind == "oom_kill")
        besides = (f" (it holds {others} OOM kill(s) of other processes, none of them the run's)" if others else "")
        out.captures["sigkill_verdict"] = "killed from outside (the kernel log of that moment holds no OOM kill of it)"
        out.captures["sigkill_detail"] = (
            f"The kernel log read after the kill ({', '.join(covering)}) covers its moment and holds no OOM kill of the "
            f"run's processes{besides}: the kernel's OOM killer did not send this SIGKILL. Something outside the run "
            "did: a scheduler enforcing a time or memory limit, a container runtime or exec session that ended, a "
            "watchdog, or someone's `kill -9`.")
        out.confidence_delta = 0.1
    else:
        out.captures["sigkill_verdict"] = "probably out of memory, but no kernel OOM record was found"
        out.captures["sigkill_detail"] = (
            "By far the most common sender is the kernel OOM killer (host RAM, or a container/cgroup/Slurm memory "
            "limit); others are a scheduler enforcing limits, an exec session or container ending, or someone's "
            "`kill -9`. No kernel OOM record was found in the evidence - either the kernel log was not collected "
            "for the moment of the kill (or has rotated), or something else killed it. Treat \"out of host memory\" "
            "as the likely cause until dmesg or the scheduler says otherwise.")
    return out
