"""Helpers shared by the reporters: paths, thresholds, inputs (CI formats); the causes sorted into
serious, context and minor, and the one-line verdict (terminal, HTML)."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from diagnose.engine.findings import Cause, Diagnosis
from diagnose.evidence.lines import strip_ansi
from diagnose.evidence.model import EvidenceItem
from diagnose.vocab import SEVERITIES, Role, Severity


def at_or_above(severity: str, threshold: str) -> bool:
    """Whether a cause of this severity meets a --fail-on threshold ("never" meets nothing)."""
    if threshold not in SEVERITIES or severity not in SEVERITIES:
        return False
    return SEVERITIES.index(severity) <= SEVERITIES.index(threshold)


def scan_root() -> Path:
    return Path.cwd()


def relative_path(source: str, root: Path | None = None) -> str:
    """The source as a path relative to the scanned root (the working directory) with / separators,
    or as it is when it lies outside that root (CI tools then show it unlinked)."""
    base = root or scan_root()
    path = Path(source)
    if not path.is_absolute():
        return PurePosixPath(*path.parts).as_posix() if path.parts else source
    try:
        relative = os.path.relpath(path, base)
    except ValueError:
        return source
    if relative == ".." or relative.startswith(".." + os.sep):
        return source
    return PurePosixPath(*Path(relative).parts).as_posix()


def is_file_evidence(item: EvidenceItem) -> bool:
    """A line of a file (annotatable), as opposed to a collected fact (tmux state, GPU table)."""
    return item.line is not None and item.line > 0


def inputs(diagnosis: Diagnosis) -> list[str]:
    """Every scanned input, as reports name it: text files, package lists, GPU state, error files."""
    evidence = diagnosis.evidence
    names: list[str] = [t.display for t in evidence.texts]
    if evidence.packages is not None:
        names.extend(s.strip() for s in evidence.packages.source.split(",") if s.strip())
    if evidence.gpu is not None:
        names.append(evidence.gpu.source)
    names.extend(e.source for e in evidence.exits or ())
    seen: set[str] = set()
    unique: list[str] = []
    for name in names:
        if name and name not in seen:
            seen.add(name)
            unique.append(name)
    return unique


def one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(strip_ansi(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def evidence_summary(diagnosis: Diagnosis) -> str:
    stats = diagnosis.stats
    return (f"{stats.get('rules', '?')} rules over {stats.get('files_scanned', 0)} file(s), "
            f"{stats.get('lines_scanned', 0):,} lines")


def severity_counts(diagnosis: Diagnosis) -> dict[str, int]:
    """How many causes at each severity (every severity named, zeros included)."""
    counts: dict[str, int] = {str(severity): 0 for severity in SEVERITIES}
    for cause in diagnosis.causes:
        if cause.severity in counts:
            counts[cause.severity] += 1
    return counts


def summary_line(diagnosis: Diagnosis) -> str:
    """One line for -q: how many causes at which severity, and the top one."""
    run = diagnosis.evidence.run
    counts = severity_counts(diagnosis)
    if not diagnosis.causes:
        return f"diagnose: run {run.id}: no cause found ({evidence_summary(diagnosis)})"
    said = ", ".join(f"{n} {severity}" for severity, n in counts.items() if n)
    top = diagnosis.causes[0]
    return f"diagnose: run {run.id}: {len(diagnosis.causes)} cause(s) ({said}); top: {top.id}: {one_line(top.title, 160)}"


# ---------------------------------------------------------------- the verdict (terminal, HTML)

STATE_WORDS = {"never-started": "never started", "running": "running", "stalled": "stalled", "crashed": "crashed",
               "stopped": "stopped", "finished": "finished", "unknown": "state unknown"}
RELAUNCH_WORDS = {"no": "relaunch after the fix", "maybe": "fix first if you can, then relaunch",
                  "yes": "a plain relaunch may succeed"}


def state_words(state: str | None) -> str:
    return STATE_WORDS.get(state or "", state or "")


def partition(diagnosis: Diagnosis) -> tuple[list[Cause], list[Cause], list[Cause]]:
    """(serious, context, minor): the causes at warning or above that are not context; host events
    nothing ties to the run; the rest (informational findings)."""
    serious = [c for c in diagnosis.causes if Severity(c.severity).at_least(Severity.WARNING) and c.role != Role.CONTEXT]
    context = [c for c in diagnosis.causes if c.role == Role.CONTEXT and c.attribution == "unattributed"]
    minor = [c for c in diagnosis.causes if c not in serious and c not in context]
    return serious, context, minor


def headline(cause: Cause) -> str:
    """A cause's title as the middle of a sentence: its first clause, the capital dropped unless
    the first word is an acronym (NCCL, CUDA)."""
    title = cause.title.split(" - ", 1)[0].strip()
    first = title.split(" ", 1)[0]
    if first[:1].isupper() and not first.isupper() and not any(ch.isdigit() for ch in first):
        title = title[:1].lower() + title[1:]
    return title


def verdict(diagnosis: Diagnosis, where: str = "above") -> str:
    """One line: the run, its top cause with its id, what to do about relaunching, how many more.
    `flex7: the launch never started (launch.tmux-server-died) - relaunch after the fix; 2 more causes above`"""
    serious, _context, _minor = partition(diagnosis)
    run = diagnosis.evidence.run.id
    if not serious:
        state = f" (the run {state_words(diagnosis.state)})" if diagnosis.state and diagnosis.state != "unknown" else ""
        return f"{run}: no cause found at warning or above{state}"
    top = serious[0]
    text = f"{run}: {headline(top)} ({top.id})"
    advice = RELAUNCH_WORDS.get(top.relaunch or "")
    if advice:
        text += f" - {advice}"
    more = len(serious) - 1
    if more:
        text += f"; {more} more cause{'s' if more > 1 else ''} {where}"
    return text
