"""Turn findings into ranked causes.

Order: crash-level roots (role root, severity critical or error) first; then symptoms and
lesser roots; context last. A symptom therefore never outranks a root that explains it.
Within a tier the score (confidence x severity weight, plus a little for evidence from
several sources) decides; scores within one bucket of 0.05 are ties, and among ties the cause
seen earliest in the run's timeline wins.
When no crash-level root matched, the last error of each rank/thread, in whatever shape it was
printed, is reported as an unrecognised cause (naming the user's own frame when it is theirs),
so the tool is never silent about a crash. An error the run went on after (tracebacks.py:
survived) is a warning at most, whether a rule or the fallback reports it.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace

from diagnose.engine.attempts import every_attempt_said, with_every_attempt
from diagnose.engine.attribution import ELSEWHERE, NOT_HOST, OWN, UNATTRIBUTED, attribute
from diagnose.engine.causes import UNRECOGNISED
from diagnose.engine.errorlines import ErrorLine, log_error_line
from diagnose.engine.findings import Cause, Finding, reread_gap
from diagnose.engine.kernel_events import KernelEvent, kernel_events
from diagnose.engine.runview import RunView, run_view
from diagnose.engine.sameevent import fold_same_event
from diagnose.engine.state import FINISHED, RUNNING, RunState, derive_state, state_causes
from diagnose.engine.tracebacks import Crash, find_crashes, on_clock, read_crashes
from diagnose.evidence.lines import strip_prefix
from diagnose.evidence.model import Evidence, EvidenceItem, Gap, TextFile, TextKind
from diagnose.vocab import Role, Severity, is_crash_level

TIE_BUCKET = 0.05
UNRECOGNISED_ID = UNRECOGNISED.id


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
    gaps: list[Gap] = field(default_factory=list)  # logs the ranker could not read again


def rank(findings: Sequence[Finding], evidence: Evidence, min_severity: str | None = None) -> list[Cause]:
    return rank_all(findings, evidence, min_severity).causes


def rank_all(findings: Sequence[Finding], evidence: Evidence, min_severity: str | None = None,
             stall_after: float | None = None) -> Ranked:
    """Attribute host events to the run, derive its state, then rank: own causes and causes of the
    run's logs by tier and score; unattributed host events as context; other runs' apart."""
    view = run_view(evidence, stall_after)
    events = kernel_events(evidence)
    run_state = derive_state(evidence, view, events)
    located = {(e.source, e.line): e for e in events}
    logs = {t.display: t for t in evidence.texts_of(TextKind.LOG)}
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
        elif Severity(cause.severity).at_least(Severity.ERROR) and _went_on(attributed, logs):
            # Survived, in a run that then finished: a note, not a problem of the run.
            survived = Severity.INFO if run_state.state == FINISHED else Severity.WARNING
            cause = replace(cause, severity=survived, score=round(cause.confidence * survived.weight, 4),
                            title=f"{cause.title} (caught and survived: the run went on after it)",
                            explanation=f"The run went on after this error (its progress moved on, or it finished): it "
                                        f"was caught or retried, so it is not how the run ended. {cause.explanation}")
        pairs.append((cause, attributed.order))
    gaps: list[Gap] = []
    if not any(tier(c.role, c.severity) == 0 for c, _ in pairs):
        # Only lines a rule's own patterns matched: an analyzer may quote the unrecognised error itself.
        recognised = {location for f in findings for location in f.matched}
        rule_errors = any(Severity(c.severity).at_least(Severity.ERROR) for c, _ in pairs)
        pairs.extend((c, (0, c.evidence[-1].line or 0))
                     for c in unrecognised_causes(evidence, recognised, gaps, finished=run_state.state == FINISHED,
                                                  rule_errors=rule_errors))
    have_root = any(tier(c.role, c.severity) == 0 for c, _ in pairs)
    quoted = frozenset(item.source for c, _ in pairs for item in c.evidence)
    pairs.extend((c, (0, 0)) for c in state_causes(run_state, view, have_root, quoted))
    pairs.sort(key=lambda pair: _sort_key(*pair))
    causes = [with_every_attempt(cause, logs.values()) if cause.attribution == OWN else cause
              for cause in fold_same_event([cause for cause, _ in pairs])]
    roots = [c for c in causes if tier(c.role, c.severity) == 0]
    symptoms = tuple(c.id for c in causes if c.role == Role.SYMPTOM)
    if roots and symptoms:
        top = roots[0]
        causes[causes.index(top)] = _with_explains(top, symptoms)
    if min_severity:
        causes = [c for c in causes if Severity(c.severity).at_least(min_severity)]
    return Ranked(causes, elsewhere, run_state, view, events, gaps)


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


def _went_on(finding: Finding, logs: Mapping[str, TextFile]) -> bool:
    """Every line the finding rests on is part of an error the run caught and went on after
    (a retried read's traceback, a logged and skipped batch): then it is not how the run ended."""
    if not finding.evidence:
        return False
    for item in finding.evidence:
        source = logs.get(item.source)
        if source is None or item.line is None:
            return False  # an exit status, a kernel line, a fact: not something the run went on after
        try:
            crash = read_crashes(source).crash_at(item.line, item.rank)
        except Exception:  # a log we cannot re-read proves nothing either way
            return False
        if crash is None or not crash.survived:
            return False
    return True


def _as_context(cause: Cause) -> Cause:
    """A host event nothing ties to the run: shown, as context, never as its cause."""
    severity = cause.severity if Severity(cause.severity).at_least(Severity.WARNING) is False else Severity.WARNING
    return replace(cause, role=Role.CONTEXT, severity=severity, title=f"{cause.title} (nothing ties it to this run)",
                   explanation=f"{cause.basis[:1].upper()}{cause.basis[1:]}. {cause.explanation}")


def _with_explains(cause: Cause, symptoms: tuple[str, ...]) -> Cause:
    return replace(cause, explains=symptoms)


def unrecognised_causes(evidence: Evidence, recognised: Set[tuple[str, int]] = frozenset(),
                        gaps: list[Gap] | None = None, finished: bool = False, rule_errors: bool = False) -> list[Cause]:
    """The last error per rank/thread of every log, in whatever shape it was printed, as
    low-confidence causes; an exception raised in the user's own code is named as such, with
    its file, line and function (and the DataLoader worker or rank it came from).

    A crash whose lines a rule already matched (a symptom such as a peer's "Connection closed",
    the ChildFailedError summary) is recognised, not unrecognised: it is left out, so the one
    crash nothing explains (e.g. the first rank's own ValueError) is the one reported. A crash
    the run went on after (progress, the trainer's words for done) is a warning at most, and a
    note (info) where the run then `finished` (an earlier launch's error in an appended log). A
    log that cannot be read again is a gap (into `gaps`). A bare error line a log ends on (no
    crash shape: "ERROR: experiment failed!") is the fallback of a run nothing else explains: with
    `rule_errors` (a rule found an error of the run, in this log or another: a job script's summary
    in the .out, the NCCL timeout in the .err) it is that error's echo, not a cause of its own.
    """
    crashes: list[tuple[TextFile, Crash]] = []
    for source in evidence.texts_of(TextKind.LOG):
        try:
            found = find_crashes(source)
        except Exception as exc:  # a log we could scan but not re-read is not worth failing over
            if gaps is not None:
                gaps.append(reread_gap(source.display, exc, "its last exception was not looked for"))
            continue
        if not found:
            # No crash of any shape the crash finder knows: the error line the log ends on, if any.
            error = None if rule_errors else log_error_line(source)
            if error is not None and not any((source.display, line) in recognised for line, _text in error.context):
                crashes.append((source, _line_crash(source, error)))
            continue
        rule_matched_here = any(where == source.display for where, _line in recognised)
        crashes.extend((source, on_clock(crash, source)) for crash in found
                       if not any((source.display, line) in recognised for line, _text in crash.lines)
                       # A C++ abort that says nothing (its what() cut off or empty) in a log where a
                       # rule recognised an error is that error's own abort (the NCCL watchdog's).
                       and not (crash.shape == "cpp" and not crash.message.strip() and rule_matched_here))
    grouped: dict[tuple[str, str], list[tuple[TextFile, Crash]]] = {}
    # Several nodes: the earliest first on the one clock, so the crash that started it leads its group.
    if any(source.host for source, _crash in crashes):
        crashes.sort(key=lambda pair: (pair[1].time is None, pair[1].time or 0.0))
    for source, crash in crashes:
        grouped.setdefault((crash.exc_type, crash.message[:200]), []).append((source, crash))
    causes = []
    for (_exc_type, _message), members in grouped.items():
        _source, crash = members[0]
        items: list[EvidenceItem] = []
        for member_source, member in members[:4]:
            items.extend(
                EvidenceItem(member_source.display, text, line, member.time if line == member.line_no else None, member.rank,
                             member_source.host or evidence.run.host)
                for line, text in member.lines
            )
        survived = all(member.survived for _, member in members)
        after_end = all(member.after_end for _, member in members)
        title, said = _crash_words(crash)
        where = _where(members, ranks_said=f"on rank {crash.rank}" in title and len({m.rank for _, m in members}) == 1)
        severity = (Severity.INFO if after_end or (survived and finished) else
                    Severity.WARNING if survived else Severity.ERROR)
        went_on = (" Another thread printed it after the run's own words for done, while the interpreter shut down: "
                   "it is not how the run ended." if after_end else
                   " The run went on after it (its progress lines move on, or it finished): it caught or survived this "
                   "error, so it is not how the run ended." if survived else "")
        user = crash.user_frame
        went_on += every_attempt_said(*members[0])
        explanation = (f"No known signature matched, but {said}{where}.{went_on} "
                       + (f"The deepest frame of your own code (outside site-packages and the standard library) is "
                          f"{user.describe()}: start there. " if user and crash.shape not in ("rust", "glog") else "")
                       + "This is the last error of its rank/thread; read the lines above it for the cause.")
        causes.append(
            replace(UNRECOGNISED.cause(
                title=title + (" (printed after the run finished)" if after_end else
                               " (the run went on after it)" if survived else ""),
                explanation=explanation, evidence=tuple(items), score=UNRECOGNISED.confidence * severity.weight,
                time=crash.time), severity=severity, fix=(
                    (f"Open {user.describe()} in your code: the exception type and message name what failed there."
                     if user else "Read the traceback's last frames in your own code first; the exception type and message name what failed."),
                    "If this failure recurs, add a rule for it: diagnose rules new <category>.<name> --from-line '<the error line>'.",
                ))
        )
    return causes


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _line_crash(source: TextFile, error: ErrorLine) -> Crash:
    if error.cut_traceback:
        return Crash(source.rank, None, "Traceback cut short", "the log ends inside a traceback, before its exception "
                     "line", error.line_no, list(error.context), shape="line", end_line=error.line_no)
    return Crash(source.rank, None, "Error line", strip_prefix(error.text).strip()[:500], error.line_no,
                 list(error.context), shape="line", end_line=error.line_no)


def _crash_words(crash: Crash) -> tuple[str, str]:
    """The title of an unrecognised crash, and what the run did (for the explanation), by shape."""
    summary = _short(crash.summary)
    worker = (f", in {crash.worker}" if crash.worker else "") + (f" on rank {crash.rank}" if crash.rank is not None else "")
    user = crash.user_frame
    if crash.shape in ("python", "ipython", "bare") and user is not None:
        return (f"Your code raised {summary} at {user.describe()}{worker}",
                f"your code raised {summary} at {user.describe()}{worker}")
    if crash.shape == "bare":
        return (f"Unrecognised exception (only its last line is in the log): {summary}",
                f"the run raised {summary} (the log holds only that line, not the traceback)")
    if crash.shape == "cpp":
        what = _short(crash.message) or "(no what() message)"
        return (f"Uncaught C++ exception {crash.exc_type}: {what}",
                f"native code threw a C++ {crash.exc_type} that nothing caught ({what}); the process called std::terminate and aborted")
    if crash.shape == "glog":
        site = crash.frames[0].describe() if crash.frames else "?"
        return (f"Fatal check failed in native code at {site}: {_short(crash.message)}",
                f"a glog CHECK / LOG(FATAL) in native code at {site} failed ({_short(crash.message)}) and aborted the process")
    if crash.shape == "rust":
        site = crash.frames[0].describe() if crash.frames else "?"
        thread = f" in thread '{crash.thread}'" if crash.thread else ""
        return (f"Rust panic{thread} at {site}: {_short(crash.message)}",
                f"native Rust code (a tokenizer, a data loader) panicked{thread} at {site}: {_short(crash.message)}")
    if crash.shape == "line":
        return (f"The log ends on an error no rule knows: {_short(crash.message)}",
                f"the log ends on this error line ({_short(crash.message)}), printed by the program or a library, "
                "with no traceback a rule or the crash finder knows")
    if crash.shape == "go":
        return f"Go panic: {_short(crash.message)}", f"a Go program panicked ({_short(crash.message)})"
    if crash.fatal:
        here = f" (last frame of your code: {user.describe()})" if user is not None else ""
        return f"Unrecognised fatal error: {summary}{here}", f"the run died with {summary}{here}"
    return f"Unrecognised exception: {summary}{worker}", f"the run raised {summary}{worker}"


def _where(members: Sequence[tuple[TextFile, Crash]], ranks_said: bool = False) -> str:
    ranks = [] if ranks_said else sorted({c.rank for _, c in members if c.rank is not None})
    threads = sorted({c.thread for _, c in members if c.thread})
    # A line's own host prefix (pdsh, srun -l), else the node the file came from (several merged).
    hosts = sorted({str(c.host or s.host) for s, c in members if c.host or s.host})
    parts = ["host" + ("s " if len(hosts) > 1 else " ") + ", ".join(hosts[:6])] if hosts else []
    if ranks:
        parts.append("rank" + ("s " if len(ranks) > 1 else " ") + ", ".join(map(str, ranks)))
    if threads:
        parts.append("thread" + ("s " if len(threads) > 1 else " ") + ", ".join(threads[:6]))
    return " (in " + "; ".join(parts) + ")" if parts else ""
