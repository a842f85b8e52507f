"""What the engine and the ranker produce, and what reporters render."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from diagnose.evidence.model import EvidenceItem, Gap

if TYPE_CHECKING:
    from diagnose.evidence.model import Evidence
    from diagnose.rules.model import Rule


@dataclass(frozen=True)
class Finding:
    """A rule that matched, with what it matched."""

    rule: Rule
    evidence: tuple[EvidenceItem, ...]
    captures: Mapping[str, str]
    time: float | None  # earliest evidence time, if known
    order: tuple[int, int]  # (source order, line) of the earliest evidence, for ties without time
    # Every (source, line) the rule's text conditions kept, beyond the few shown as evidence: the
    # ranker leaves crashes on these lines out of the "unrecognised" fallback.
    matched: frozenset[tuple[str, int]] = frozenset()


def reread_gap(source: str, exc: BaseException, lost: str) -> Gap:
    """A file the scan read that a later pass (the unrecognised-crash fallback, an analyzer)
    could not read again: removed, rotated or unreadable since. Said as a gap, never dropped."""
    from diagnose.errors import DiagnoseError
    from diagnose.evidence.textio import why_unreadable

    if isinstance(exc, DiagnoseError) and isinstance(exc.__context__, OSError):
        exc = exc.__context__  # textio's InputError names the path again: say only why
    why = why_unreadable(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
    return Gap(source, f"could not read it again after the scan ({why}); {lost}")


@dataclass(frozen=True)
class Skipped:
    rule_id: str
    reason: str


@dataclass(frozen=True)
class Cause:
    id: str
    title: str
    category: str
    role: str
    severity: str
    confidence: float
    score: float
    evidence: tuple[EvidenceItem, ...]
    explanation: str
    fix: tuple[str, ...]
    references: tuple[str, ...]
    relaunch: str | None = None
    time: float | None = None
    explains: tuple[str, ...] = ()  # ids of symptoms this cause accounts for
    # own | unattributed | elsewhere for a cause resting on a host event (kernel log); n/a otherwise
    attribution: str = "n/a"
    basis: str = ""  # why it is (or is not) the run's


@dataclass(frozen=True)
class Check:
    """Something looked at and found fine (or telling in its emptiness), with the window it covers:
    what stops an engineer chasing the feared cause first."""

    what: str  # "oom", "gpu", "disk", "checkpoints", "tmux", "xid"
    result: str  # "clean" | "note"
    detail: str


@dataclass(frozen=True)
class RankSummary:
    rank: int | None
    state: str  # root | symptom | failed | exited | finished | stopped
    last_line: str | None = None
    last_time: float | None = None
    last_at: str | None = None  # source:line
    first_error: str | None = None
    error_time: float | None = None
    error_at: str | None = None
    exit_code: int | None = None
    gpu: int | None = None  # the GPU index it ran on, where the log says (torchrun's local rank)


@dataclass(frozen=True)
class NodeSummary:
    name: str
    status: str  # ok | gap | timeout | error: whether the node answered
    reason: str | None
    clock_offset: float | None
    clock_rtt: float | None
    gpu: str  # a few words: "2 GPU(s), NVIDIA H200", "no GPU state: ..."
    ranks: tuple[RankSummary, ...]
    first_failure: bool = False  # the node of the run's first failure

    @property
    def first_error_time(self) -> float | None:
        times = [r.error_time for r in self.ranks if r.error_time is not None]
        return min(times) if times else None


@dataclass(frozen=True)
class FirstFailure:
    node: str | None
    rank: int | None
    gpu: int | None
    time: float | None
    error: str
    cause: str  # the id of the cause it is evidence of
# ---------------------------------------------------------------- the run in time (engine/timeline.py builds it)

@dataclass(frozen=True)
class Mark:
    """Something that happened on a lane, at a time (None: not known)."""

    kind: str  # last-line | error | timeout | oom-kill | xid | segfault | exit
    lane: str
    time: float | None
    label: str  # a few words: "watchdog timeout (ALLREDUCE #11)", "python3 pid 6139 was OOM-killed"
    text: str = ""  # the line as printed
    source: str = ""
    line: int | None = None
    approx: bool = False  # the time is inferred: the file's last write, or an earlier line's time
    own: bool = True  # a kernel event of the run (False: nothing ties it to the run, or another run's)
    cause: str = ""  # the id of the cause whose evidence this is


@dataclass(frozen=True)
class Lane:
    key: str  # "rank 0", "node-a rank 0", "main", "launcher", "kernel", "kernel node-a"
    kind: str  # rank | main | launcher | kernel
    rank: int | None = None
    host: str | None = None
    state: str = ""  # a few words: "watchdog timeout; exit -6 (SIGABRT)", "behind (hung); SIGTERM"
    first: float | None = None  # the first and last time the lane's log shows activity
    last: float | None = None
    activity: tuple[tuple[float, int], ...] = ()  # (bucket start, lines) over the timeline's span
    untimed_before: bool = False  # it printed lines without a time before its first timed one
    last_line: Mark | None = None
    first_error: Mark | None = None


@dataclass(frozen=True)
class Timeline:
    lanes: tuple[Lane, ...] = ()
    marks: tuple[Mark, ...] = ()
    start: float | None = None
    end: float | None = None
    first_failure: Mark | None = None
    blamed: str = ""  # the lane of the top cause, when its evidence names one

    @property
    def rank_lanes(self) -> tuple[Lane, ...]:
        return tuple(lane for lane in self.lanes if lane.kind == "rank")

    def multi(self) -> bool:
        """Several ranks or several nodes: worth a table of their own."""
        hosts = {lane.host for lane in self.lanes if lane.kind != "kernel"}
        return len(self.rank_lanes) >= 2 or len(hosts) >= 2


@dataclass
class Diagnosis:
    evidence: Evidence
    causes: list[Cause]
    skipped: list[Skipped]
    gaps: list[Gap]
    stats: dict[str, object] = field(default_factory=dict)
    elsewhere: list[Cause] = field(default_factory=list)  # host events of other runs: never ranked
    checked: list[Check] = field(default_factory=list)
    state: str | None = None  # never-started | running | stalled | crashed | stopped | finished | unknown
    state_reason: str = ""
    # (start, where it comes from, end, where it comes from) of the run's time window
    window: tuple[float | None, str, float | None, str] = (None, "", None, "")
    # Several nodes: each node's ranks (last line, first error, state) and the first failure.
    nodes: list[NodeSummary] = field(default_factory=list)
    first_failure: FirstFailure | None = None
    # The run in time (lanes per rank and node, marks): for the reports that show it; None: not built.
    timeline: Timeline | None = None
