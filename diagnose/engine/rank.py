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

from diagnose.engine.findings import Cause, Finding
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


def rank(findings: Sequence[Finding], evidence: Evidence, min_severity: str | None = None) -> list[Cause]:
    pairs = [(to_cause(f), f.order) for f in findings]
    if not any(tier(c.role, c.severity) == 0 for c, _ in pairs):
        # Only lines a rule's own patterns matched: an analyzer may quote the unrecognised error itself.
        recognised = {location for f in findings for location in f.matched}
        pairs.extend((c, (0, c.evidence[-1].line or 0)) for c in unrecognised_causes(evidence, recognised))
    pairs.sort(key=lambda pair: _sort_key(*pair))
    causes = [cause for cause, _ in pairs]
    roots = [c for c in causes if tier(c.role, c.severity) == 0]
    symptoms = tuple(c.id for c in causes if c.role == Role.SYMPTOM)
    if roots and symptoms:
        top = roots[0]
        causes[causes.index(top)] = _with_explains(top, symptoms)
    if min_severity:
        causes = [c for c in causes if Severity(c.severity).at_least(min_severity)]
    return causes


def _with_explains(cause: Cause, symptoms: tuple[str, ...]) -> Cause:
    from dataclasses import replace

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
            found = find_crashes(source.path, source.rank)
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
