"""The causes the engine makes itself, with no rule file behind them: the unrecognised crash
(rank.py) and the causes a run's state makes (state.py).

Declared here as data, with the fields a rule has, so there is one text for each: the engine
builds its causes from these entries (a cause of a run words its own title and explanation,
with the crash's message or the stall's silence in it), SARIF describes each entry in
tool.driver.rules, and `diagnose rules list` / `rules show` list and show them beside the rules
of the pack.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.engine.findings import Cause
from diagnose.evidence.model import EvidenceItem
from diagnose.vocab import Relaunch, Role, Severity


@dataclass(frozen=True)
class EngineCause:
    id: str
    title: str  # in general; each cause of a run words its own
    category: str
    role: Role
    severity: Severity
    confidence: float
    explanation: str  # what the cause means, in general
    fix: tuple[str, ...]
    relaunch: Relaunch
    made_when: str  # when the engine makes it, in words (`rules show`)
    source: str  # the module that makes it

    def cause(self, explanation: str, evidence: tuple[EvidenceItem, ...], score: float, title: str | None = None,
              time: float | None = None) -> Cause:
        """A cause of this kind for one run."""
        return Cause(
            id=self.id, title=title or self.title, category=self.category, role=self.role, severity=self.severity,
            confidence=self.confidence, score=score, evidence=evidence, explanation=explanation, fix=self.fix,
            references=(), relaunch=self.relaunch, time=time,
        )


UNRECOGNISED = EngineCause(
    id="unrecognised.crash",
    title="Unrecognised crash: no known signature matched the last exception",
    category="unrecognised", role=Role.ROOT, severity=Severity.ERROR, confidence=0.3,
    explanation=("No rule matched, but a log ends in an exception or fatal error. diagnose reports the last "
                 "exception of each rank/thread so that it is never silent about a crash."),
    fix=("Read the traceback's last frames in your own code first; the exception type and message name what failed.",
         "If this failure recurs, add a rule for it: diagnose rules new <category>.<name> --from-line '<the error line>'."),
    relaunch=Relaunch.MAYBE,
    made_when="no crash-level root matched: one per distinct last exception or fatal error of the logs' ranks and threads",
    source="diagnose/engine/rank.py",
)

STALLED = EngineCause(
    id="run.stalled",
    title="The run is alive but stalled: no output for a long time, little CPU",
    category="run", role=Role.ROOT, severity=Severity.ERROR, confidence=0.8,
    explanation=("The run is alive, but its log has been silent for longer than --stall-after, with little CPU. A "
                 "training loop prints steadily; a process that lives on without output and without CPU waits on "
                 "something: a collective whose peer is gone, a DataLoader worker, a lock, a network call. Its "
                 "threads' stacks (py-spy) show where it waits."),
    fix=("Read the main thread's stack: the frame it waits in names the collective, queue or call.",
         "For a collective: find the rank that is not there (its own log, its exit), and set "
         "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 with a timeout so the next hang fails fast."),
    relaunch=Relaunch.MAYBE,
    made_when="the run's state is stalled (alive, its log silent past --stall-after, every process of it under 5 % CPU), whatever else matched",
    source="diagnose/engine/state.py",
)

NEVER_STARTED = EngineCause(
    id="run.never-started",
    title="The launch never started: the run's log was never written and nothing of it runs",
    category="run", role=Role.ROOT, severity=Severity.ERROR, confidence=0.5,
    explanation=("The expected log was never written and no process of the run is alive. Nothing the run would "
                 "print exists, so nothing can say why it failed: the launcher itself did (a missing script or "
                 "interpreter, a tmux server or exec session that died, a scheduler that never ran it)."),
    fix=("Start it again in the foreground (or with `diagnose launch`) and read its first lines.",
         "Check the launcher: `tmux ls`, the exec session, the scheduler's record of the job."),
    relaunch=Relaunch.MAYBE,
    made_when="the run's state is never-started and no crash-level root explains it",
    source="diagnose/engine/state.py",
)

KILLED_FROM_OUTSIDE = EngineCause(
    id="run.killed-from-outside",
    title="The run stopped mid-run with no error and no OOM kill: killed from outside",
    category="run", role=Role.ROOT, severity=Severity.ERROR, confidence=0.6,
    explanation=("The log stops mid-run with no error, no process of the run is left, and the kernel log of "
                 "its time holds no OOM kill of its processes: it was killed from outside, by SIGKILL or "
                 "SIGTERM (a scheduler's time limit or preemption, a user's kill, an exec or ssh session "
                 "that ended and took its children). From here those cannot be told apart."),
    fix=("Ask the scheduler (sacct, kubectl describe pod) and the shell history who ended it.",
         "Launch detached from the session (`diagnose launch`, tmux, setsid) so it outlives it."),
    relaunch=Relaunch.MAYBE,
    made_when=("the run's state is stopped, no process of it is left, and a kernel log covering its time holds no OOM "
               "kill of it; no crash-level root explains it"),
    source="diagnose/engine/state.py",
)

STOPPED_WITHOUT_ERROR = EngineCause(
    id="run.stopped-without-error",
    title="The log stops without an error: killed from outside, or hung",
    category="run", role=Role.ROOT, severity=Severity.WARNING, confidence=0.4,
    explanation=("The log just stops: no traceback, no error line, no sign of finishing. Either the process was "
                 "killed from outside (SIGKILL leaves no trace in its own log) or it hangs. These are its last lines."),
    fix=("If it still runs, look at its stacks: `py-spy dump --pid PID`.",
         "Otherwise check the kernel log (OOM killer) and the scheduler's record for who ended it."),
    relaunch=Relaunch.MAYBE,
    made_when="the run's state is stopped and neither a crash-level root nor run.killed-from-outside explains it",
    source="diagnose/engine/state.py",
)

EXITED_WITH_ERROR = EngineCause(
    id="run.exited-with-error",
    title="The run ended with a failing exit status, and its log does not say why",
    category="run", role=Role.ROOT, severity=Severity.ERROR, confidence=0.5,
    explanation=("A process of the run exited with a non-zero status or was killed by a signal, and neither a rule "
                 "nor a traceback in its log says why: the program chose that status itself (sys.exit(N), a shell "
                 "script's last command, a launcher passing on a child's failure), or a signal ended it from outside."),
    fix=("Read the end of the log and the code paths that exit with this status (sys.exit, exit N in a script); run it "
         "once in the foreground to see what it prints on stderr.",
         "For a signal: who sent it (a scheduler's limit, a user's kill, the OOM killer: see the kernel log)."),
    relaunch=Relaunch.MAYBE,
    made_when="the run crashed with a failing exit status or a signal (exit records, launch record) and no cause quotes it",
    source="diagnose/engine/state.py",
)

ENGINE_CAUSES: dict[str, EngineCause] = {c.id: c for c in (
    UNRECOGNISED, STALLED, NEVER_STARTED, KILLED_FROM_OUTSIDE, STOPPED_WITHOUT_ERROR, EXITED_WITH_ERROR,
)}
