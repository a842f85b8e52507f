"""Turn findings into ranked causes.

Order: crash-level roots (role root, severity critical or error) first; then symptoms and
lesser roots; context last. A symptom therefore never outranks a root that explains it.
Within a tier the score (confidence x severity weight, plus a little for evidence from
several sources) decides; scores within one bucket of 0.05 are ties, and among ties the cause
seen earliest in the run's timeline wins.
When no crash-level root matched, the last exception of each rank/thread is reported as an
unrecognised cause so the tool is never silent about a crash.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace

from diagnose.engine.attribution import ELSEWHERE, NOT_HOST, OWN, UNATTRIBUTED, attribute
from diagnose.engine.findings import Cause, Finding
from diagnose.engine.kernel_events import KernelEvent, kernel_events
from diagnose.engine.runview import STALL_AFTER, RunView, run_view
from diagnose.engine.state import FINISHED, RUNNING, RunState, derive_state, state_causes
from diagnose.engine.tracebacks import Crash, find_crashes
from diagnose.evidence.model import Evidence, EvidenceItem, TextKind
from diagnose.vocab import Relaunch, Role, Severity, is_crash_level

TIE_BUCKET = 0.05
UNRECOGNISED_ID = "unrecognised.crash"


class _Captures(string.Formatter):
    """Fills {name} from captures; an unknown name shows as '?' rather than failing."""

    def __init__(self, captures: Mapping[str, str]) -> None:
        self.captures = captures

    def get_value(self, key: int | str, args: Sequence[object], kwargs: Mapping[str, object]) -> object:
        value = self.captures.get(str(key))
        return "?" if value in (None, "") else value


def render(template: str, captures: Mapping[str, str]) -> str:
    try:
        return _Captures(captures).format(template)
    except (ValueError, IndexError, KeyError):
        return template


def score(finding: Finding) -> float:
    rule = finding.rule
    sources = {item.source for item in finding.evidence}
    return round(rule.confidence * Severity(rule.severity).weight + 0.02 * min(max(len(sources) - 1, 0), 3), 4)


def tier(role: str, severity: str) -> int:
    if is_crash_level(role, severity):
        return 0
    if role == Role.CONTEXT:
        return 2
    return 1


def to_cause(finding: Finding) -> Cause:
    rule = finding.rule
    return Cause(
        id=rule.id, title=render(rule.title, finding.captures), category=rule.category, role=rule.role,
        severity=rule.severity, confidence=rule.confidence, score=score(finding), evidence=finding.evidence,
        explanation=render(rule.explanation, finding.captures), fix=tuple(render(f, finding.captures) for f in rule.fix),
        references=rule.references, relaunch=rule.relaunch, time=finding.time,
    )


def _sort_key(cause: Cause, order: tuple[int, int]) -> tuple[int, int, bool, float, tuple[int, int], str]:
    bucket = int(cause.score / TIE_BUCKET + 1e-9)
    return (tier(cause.role, cause.severity), -bucket, cause.time is None, cause.time or 0.0, order, cause.id)


@dataclass
class Ranked:
    causes: list[Cause]
    elsewhere: list[Cause]  # host events of other runs, never ranked with the run's own
    state: RunState
    view: RunView
    events: list[KernelEvent]


def rank(findings: Sequence[Finding], evidence: Evidence, min_severity: str | None = None) -> list[Cause]:
    return rank_all(findings, evidence, min_severity).causes


def rank_all(findings: Sequence[Finding], evidence: Evidence, min_severity: str | None = None,
             stall_after: float = STALL_AFTER) -> Ranked:
    """Attribute host events to the run, derive its state, then rank: own causes and causes of the
    run's logs by tier and score; unattributed host events as context; other runs' apart."""
    view = run_view(evidence, stall_after)
    events = kernel_events(evidence)
    run_state = derive_state(evidence, view, events)
    located = {(e.source, e.line): e for e in events}
    pairs: list[tuple[Cause, tuple[int, int]]] = []
    elsewhere: list[Cause] = []
    for finding in findings:
        attributed, verdict, basis = _attribute(finding, located, view)
        cause = replace(to_cause(attributed), attribution=verdict, basis=basis)
        if verdict == UNATTRIBUTED and run_state.state in (FINISHED, RUNNING):
            # A run that finished or runs on was not ended by it: it is another process's story.
            verdict = ELSEWHERE
            cause = replace(cause, attribution=ELSEWHERE, basis=f"the run {'finished' if run_state.state == FINISHED else 'runs on'}, "
                                                                    f"so this did not end it; {basis}")
        if verdict == ELSEWHERE:
            elsewhere.append(cause)
            continue
        if verdict == UNATTRIBUTED:
            cause = _as_context(cause)
        pairs.append((cause, attributed.order))
    if not any(tier(c.role, c.severity) == 0 for c, _ in pairs):
        # Only lines a rule's own patterns matched: an analyzer may quote the unrecognised error itself.
        recognised = {location for f in findings for location in f.matched}
        pairs.extend((c, (0, c.evidence[-1].line or 0)) for c in unrecognised_causes(evidence, recognised))
    have_root = any(tier(c.role, c.severity) == 0 for c, _ in pairs)
    quoted = frozenset(item.source for c, _ in pairs for item in c.evidence)
    pairs.extend((c, (0, 0)) for c in state_causes(run_state, view, have_root, quoted))
    pairs.sort(key=lambda pair: _sort_key(*pair))
    causes = [cause for cause, _ in pairs]
    roots = [c for c in causes if tier(c.role, c.severity) == 0]
    symptoms = tuple(c.id for c in causes if c.role == Role.SYMPTOM)
    if roots and symptoms:
        top = roots[0]
        causes[causes.index(top)] = _with_explains(top, symptoms)
    if min_severity:
        causes = [c for c in causes if Severity(c.severity).at_least(min_severity)]
    return Ranked(causes, elsewhere, run_state, view, events)


def _attribute(finding: Finding, located: Mapping[tuple[str, int], KernelEvent],
               view: RunView) -> tuple[Finding, str, str]:
    """A finding that rests on kernel events, tied to the run: its own events kept (an OOM title
    names the run's own victim), or the verdict that it is not the run's."""
    mine = [located[(i.source, i.line)] for i in finding.evidence if i.line is not None and (i.source, i.line) in located]
    if not mine:
        return finding, NOT_HOST, ""
    verdicts = [(event, attribute(event, view)) for event in mine]
    own = [event for event, verdict in verdicts if verdict.verdict == OWN]
    if not own:
        first = verdicts[0][1]
        if all(verdict.verdict == ELSEWHERE for _, verdict in verdicts):
            return finding, ELSEWHERE, first.basis
        return finding, UNATTRIBUTED, next(v.basis for _, v in verdicts if v.verdict == UNATTRIBUTED)
    victim = min(own, key=lambda e: (e.time is None, e.time or 0.0, e.line))
    others = {(e.source, e.line) for e in mine if e not in own}
    evidence = tuple(i for i in finding.evidence if (i.source, i.line) not in others)
    captures = dict(finding.captures)
    if "pid" in captures and victim.pid is not None:
        captures["pid"] = str(victim.pid)
        if victim.comm:
            captures["comm"] = victim.comm
    times = [i.time for i in evidence if i.time is not None]
    basis = next(v.basis for e, v in verdicts if e is victim)
    return replace(finding, evidence=evidence, captures=captures, time=min(times) if times else finding.time), OWN, basis


def _as_context(cause: Cause) -> Cause:
    """A host event nothing ties to the run: shown, as context, never as its cause."""
    severity = cause.severity if Severity(cause.severity).at_least(Severity.WARNING) is False else Severity.WARNING
    return replace(cause, role=Role.CONTEXT, severity=severity, title=f"{cause.title} (nothing ties it to this run)",
                   explanation=f"{cause.basis[:1].upper()}{cause.basis[1:]}. {cause.explanation}")


def _with_explains(cause: Cause, symptoms: tuple[str, ...]) -> Cause:
    return replace(cause, explains=symptoms)


def unrecognised_causes(evidence: Evidence, recognised: Set[tuple[str, int]] = frozenset()) -> list[Cause]:
    """The last exception per rank/thread of every log, as low-confidence causes.

    A crash whose lines a rule already matched (a symptom such as a peer's "Connection closed",
    the ChildFailedError summary) is recognised, not unrecognised: it is left out, so the one
    crash nothing explains (e.g. the first rank's own ValueError) is the one reported.
    """
    crashes: list[tuple[str, Crash]] = []
    for source in evidence.texts_of(TextKind.LOG):
        try:
            found = find_crashes(source.path, source.rank, pdsh=source.host_prefixed)
        except Exception:  # a log we could scan but not re-read is not worth failing over
            continue
        crashes.extend((source.display, crash) for crash in found
                       if not any((source.display, line) in recognised for line, _text in crash.lines))
    grouped: dict[tuple[str, str], list[tuple[str, Crash]]] = {}
    for display, crash in crashes:
        grouped.setdefault((crash.exc_type, crash.message[:200]), []).append((display, crash))
    causes = []
    for (_exc_type, _message), members in grouped.items():
        display, crash = members[0]
        items: list[EvidenceItem] = []
        for member_display, member in members[:4]:
            items.extend(
                EvidenceItem(member_display, text, line, member.time if line == member.line_no else None, member.rank, evidence.run.host)
                for line, text in member.lines
            )
        where = _where(members)
        summary = crash.summary if len(crash.summary) <= 160 else crash.summary[:157] + "..."
        fatal = crash.fatal
        causes.append(
            Cause(
                id=UNRECOGNISED_ID,
                title=("Unrecognised fatal error: " if fatal else "Unrecognised exception: ") + summary,
                category="unrecognised", role=Role.ROOT, severity=Severity.ERROR, confidence=0.3, score=0.3 * Severity.ERROR.weight,
                evidence=tuple(items),
                explanation=(
                    f"No known signature matched, but the run {'died with' if fatal else 'raised'} {summary}{where}. "
                    "This is the last error of its rank/thread; read the lines above it for the cause."
                ),
                fix=(
                    "Read the traceback's last frames in your own code first; the exception type and message name what failed.",
                    "If this failure recurs, add a rule for it: diagnose rules new <category>.<name> --from-line '<the error line>'.",
                ),
                references=(), relaunch=Relaunch.MAYBE, time=crash.time,
            )
        )
    return causes


def _where(members: Sequence[tuple[str, Crash]]) -> str:
    ranks = sorted({c.rank for _, c in members if c.rank is not None})
    threads = sorted({c.thread for _, c in members if c.thread})
    parts = []
    if ranks:
        parts.append("rank" + ("s " if len(ranks) > 1 else " ") + ", ".join(map(str, ranks)))
    if threads:
        parts.append("thread" + ("s " if len(threads) > 1 else " ") + ", ".join(threads[:6]))
    return " (in " + "; ".join(parts) + ")" if parts else ""
