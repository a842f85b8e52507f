"""One event that several sources report is one cause, the others' lines its evidence.

A Slurm job killed for memory is told by sacct's OUT_OF_MEMORY record, by slurmstepd's "Detected
N oom_kill events" line in the job's output and by the kernel's OOM line of the job's own
process: three rules, three critical roots, one event (issue 24). The one that says most is kept,
at the place of the first; the others' evidence lines are added to it and their rules named in
its explanation. Only the run's own roots are folded: context and other runs' events stay.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum

from diagnose.engine.findings import Cause
from diagnose.vocab import is_crash_level

FOLDED_LINES = 3  # evidence lines taken from each folded cause


class SameEvent(Enum):
    """Events that more than one source reports."""

    MEMORY_KILL = "the run's processes killed for memory"


# Rules reporting the same event. An OOM kill of the run seen by the scheduler's accounting, by
# its step daemon, by the kernel, by Kubernetes' container status or by the shell's "Killed".
# The order is the preference: which of them, when several fire, is the cause the others fold into.
_PREFERENCE = ("memory.slurm-job-out-of-memory", "memory.k8s-oomkilled", "memory.slurm-oom-kill",
               "memory.host-oom-kill", "memory.killed-line-only")
_REPORTERS: dict[str, SameEvent] = dict.fromkeys(_PREFERENCE, SameEvent.MEMORY_KILL)


def fold_same_event(causes: list[Cause]) -> list[Cause]:
    """`causes` in their order, each event's reporters made one: the one that says most (the
    first in _REPORTERS: the scheduler's record names the job and its request) at the place of
    the first of them, the others' lines added to it."""
    groups: dict[SameEvent, list[Cause]] = {}
    for cause in causes:
        event = _event_of(cause)
        if event is not None:
            groups.setdefault(event, []).append(cause)
    folded: list[Cause] = []
    for cause in causes:
        event = _event_of(cause)
        if event is None or len(groups[event]) == 1:
            folded.append(cause)
            continue
        reporters = groups[event]
        if cause is not reporters[0]:
            continue  # folded into the first
        kept = min(reporters, key=lambda c: _PREFERENCE.index(c.id))
        for other in reporters:
            if other is not kept:
                kept = _with_reporter(kept, other)
        folded.append(kept)
    return folded


def _event_of(cause: Cause) -> SameEvent | None:
    """The event a cause reports, if several sources may report it and the cause is the run's
    own root (context and other runs' events are not folded)."""
    event = _REPORTERS.get(cause.id)
    if event is None or not is_crash_level(cause.role, cause.severity) or cause.attribution not in ("own", "n/a"):
        return None
    return event


def _with_reporter(kept: Cause, other: Cause) -> Cause:
    seen = {(item.source, item.line, item.text) for item in kept.evidence}
    added = tuple(item for item in other.evidence if (item.source, item.line, item.text) not in seen)[:FOLDED_LINES]
    note = f" The same event is also reported by {other.id} ({other.title}); its lines are among the evidence."
    return replace(kept, evidence=kept.evidence + added, explanation=kept.explanation + note)
