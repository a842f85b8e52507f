"""torchrun's attempts in a log: with --max-restarts, the elastic agent restarts the whole worker
group after a failure and logs one line per failed attempt,
`failed (exitcode: 1) local_rank: 1 (pid: 25427) of binary: ...` (torch.distributed.elastic's
multiprocessing api; at ERROR level, so it is printed whatever the log level). A crash that
ended every attempt is not a transient: a restart will not get past it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from diagnose.engine.findings import Cause
from diagnose.engine.tracebacks import Crash, read_crashes
from diagnose.evidence import logview
from diagnose.evidence.logview import TAIL_BYTES
from diagnose.evidence.model import TextFile

_FAILED_ATTEMPT = re.compile(rb"failed \(exitcode: (-?\d{1,4})\) local_rank: (\d{1,6}) \(pid: (\d{1,10})\)")


@dataclass(frozen=True)
class Attempt:
    line: int  # the agent's line that says the attempt failed
    exit_code: int
    local_rank: int
    pid: int


def failed_attempts(source: TextFile) -> list[Attempt]:
    """The failed attempts the log's tail records, in order."""
    data, first_line = logview.tail(source, TAIL_BYTES)
    if b"failed (exitcode: " not in data:
        return []
    found: list[Attempt] = []
    line, at = first_line, 0
    for match in _FAILED_ATTEMPT.finditer(data):
        line += data.count(b"\n", at, match.start())
        at = match.start()
        found.append(Attempt(line, int(match.group(1)), int(match.group(2)), int(match.group(3))))
    return found


def attempts_ended_by(crash: Crash, same: Sequence[Crash], attempts: Sequence[Attempt]) -> tuple[int, int]:
    """(how many of the failed attempts this crash, or one just like it, ended; how many failed):
    an attempt counts when such a crash lies after the previous attempt's line and before its own."""
    ended, previous = 0, 0
    lines = sorted(c.line_no for c in [crash, *same])
    for attempt in attempts:
        if any(previous < line < attempt.line for line in lines):
            ended += 1
        previous = attempt.line
    return ended, len(attempts)


def every_attempt_said(source: TextFile, crash: Crash) -> str:
    """A sentence for an error's explanation when torchrun restarted the workers and this error
    (the same type, message, rank and host) ended several of the attempts; "" otherwise."""
    attempts = failed_attempts(source)
    if len(attempts) < 2:
        return ""
    same = [c for c in read_crashes(source).every if c is not crash and (c.exc_type, c.message, c.rank, c.host)
            == (crash.exc_type, crash.message, crash.rank, crash.host)]
    ended, failed = attempts_ended_by(crash, same, attempts)
    if ended < 2:
        return ""
    if ended == failed:
        return (f" torchrun restarted the workers, and all {failed} attempts ended with this same error: it is no "
                f"transient, another restart will not get past it.")
    return f" {ended} of torchrun's {failed} failed attempts ended with this same error."


_KILLED_PID = re.compile(r"Killed process (\d{1,10}) \(")
# The kernel's memory kills of the run, by whichever source told them (engine/sameevent.py folds them).
OOM_KILL_RULES = frozenset({"memory.host-oom-kill", "memory.slurm-oom-kill", "memory.slurm-job-out-of-memory",
                            "memory.k8s-oomkilled"})


def with_every_attempt(cause: Cause, logs: Iterable[TextFile]) -> Cause:
    """An OOM kill of the run that ended several of torchrun's attempts: its title names each
    attempt's victim, and says when every attempt died that way (a restart will not help)."""
    if cause.id not in OOM_KILL_RULES:
        return cause
    killed = {int(pid) for item in cause.evidence for pid in _KILLED_PID.findall(item.text)}
    attempts = [a for log in logs for a in failed_attempts(log)]
    if len(attempts) < 2 or not killed:
        return cause
    victims = [a.pid for a in attempts if a.exit_code == -9 and a.pid in killed]
    if len(victims) < 2:
        return cause
    pids = ", ".join(str(pid) for pid in victims)
    if len(victims) == len(attempts):
        said = (f"the same in every one of torchrun's {len(attempts)} attempts (pids {pids})",
                f"torchrun restarted the workers {len(attempts) - 1} times and the kernel killed one in every attempt "
                f"(pids {pids}): the run needs more memory than its limit every time, so a restart will not get past it.")
    else:
        said = (f"the same in {len(victims)} of torchrun's {len(attempts)} attempts (pids {pids})",
                f"The kernel killed a worker in {len(victims)} of torchrun's {len(attempts)} failed attempts (pids {pids}).")
    return replace(cause, title=f"{cause.title}; {said[0]}", explanation=f"{said[1]} {cause.explanation}")
