"""GitHub Actions: workflow commands that annotate the evidence lines, and a job summary.

Each evidence line of a cause becomes `::error file=F,line=N,title=T::MESSAGE` (warning or
notice by severity), escaped as the Actions toolkit escapes them: in the message %, CR and LF;
in properties also ":" and ",". Log text therefore can never start a workflow command of its
own (no raw newline reaches stdout). GitHub shows 10 annotations of each kind per step, so every
cause first gets one (its first line), then the remaining lines fill what is left.

When GITHUB_STEP_SUMMARY is set, the Markdown report is appended to that file (GitHub caps a
step summary at 1 MiB; a larger report loses evidence lines first). When GITHUB_OUTPUT is set,
the step's outputs are appended to it: top-cause (the id of the first-ranked cause, empty when
none), causes, failing (how many at or above --fail-on) and one count per severity (critical,
error, warning, info), so a workflow can branch on them.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import IO

from diagnose.engine.findings import Cause, Diagnosis
from diagnose.evidence.lines import strip_ansi
from diagnose.evidence.model import EvidenceItem
from diagnose.report._common import at_or_above, is_file_evidence, relative_path, scan_root, severity_counts
from diagnose.report.markdown import render_markdown
from diagnose.vocab import Severity

LEVEL: dict[str, str] = {Severity.CRITICAL: "error", Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}
PER_KIND = 10  # annotations GitHub shows per kind (error/warning/notice) per step
SUMMARY_BUDGET = 1_000_000  # bytes; GitHub refuses a step summary over 1 MiB
SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
OUTPUT_ENV = "GITHUB_OUTPUT"
_OUTPUT_VALUE = re.compile(r"[^A-Za-z0-9._:+@=-]")  # a rule id; anything else cannot end the line or start a key


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, properties: Mapping[str, str | int | None] | None = None) -> str:
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in (properties or {}).items()
                     if value is not None and value != "")
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def _annotation(cause: Cause, item: EvidenceItem | None) -> str:
    parts: list[str] = []
    if item is not None:
        parts.append(strip_ansi(item.text).strip() if is_file_evidence(item) else f"{item.source}: {strip_ansi(item.text)}")
        parts.append("")
    parts.append(cause.explanation)
    if cause.fix:
        parts.append("Fix: " + cause.fix[0] + (f" (+{len(cause.fix) - 1} more step(s) in the job summary)" if len(cause.fix) > 1 else ""))
    parts.append(f"[{cause.id} · {cause.severity} · {cause.role} · confidence {cause.confidence:.0%}]")
    properties: dict[str, str | int | None] = {"title": cause.title}
    if item is not None and is_file_evidence(item):
        properties = {"file": relative_path(item.source, scan_root()), "line": item.line, "title": cause.title}
    return command(LEVEL.get(cause.severity, "warning"), "\n".join(parts), properties)


def annotation_lines(diagnosis: Diagnosis) -> tuple[list[str], int]:
    """The workflow commands to print, and how many were held back by GitHub's per-step limit."""
    planned: list[tuple[Cause, EvidenceItem | None]] = []
    rest: list[tuple[Cause, EvidenceItem | None]] = []
    for cause in diagnosis.causes:
        items = [e for e in cause.evidence if is_file_evidence(e)] or list(cause.evidence[:1])
        if not items:
            planned.append((cause, None))
            continue
        planned.append((cause, items[0]))
        rest.extend((cause, item) for item in items[1:])
    used: dict[str, int] = {}
    lines: list[str] = []
    held = 0
    for cause, item in planned + rest:
        level = LEVEL.get(cause.severity, "warning")
        if used.get(level, 0) >= PER_KIND:
            held += 1
            continue
        used[level] = used.get(level, 0) + 1
        lines.append(_annotation(cause, item))
    return lines, held


def summary_markdown(diagnosis: Diagnosis, verbose: bool, fail_on: str) -> str:
    text = render_markdown(diagnosis, verbose, fail_on)
    for cap in (3, 0):
        if len(text.encode("utf-8")) <= SUMMARY_BUDGET:
            break
        text = render_markdown(diagnosis, False, fail_on, max_evidence=cap)
    encoded = text.encode("utf-8")
    if len(encoded) > SUMMARY_BUDGET:
        text = encoded[: SUMMARY_BUDGET - 200].decode("utf-8", "ignore") + "\n\n… cut to fit GitHub's 1 MiB step summary.\n"
    return text


def write_summary(diagnosis: Diagnosis, verbose: bool, fail_on: str) -> None:
    path = os.environ.get(SUMMARY_ENV)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(summary_markdown(diagnosis, verbose, fail_on))
            handle.write("\n")
    except OSError as exc:
        # The annotations and the exit code still stand; a lost summary must not turn findings into a tool error.
        sys.stderr.write(f"diagnose: warning: cannot append the job summary to {path} ({exc.strerror or exc})\n")


def step_outputs(diagnosis: Diagnosis, fail_on: str) -> dict[str, str]:
    """The step outputs: top-cause, causes, failing, and the count at each severity."""
    threshold = fail_on if fail_on != "never" else None
    outputs = {
        "top-cause": _OUTPUT_VALUE.sub("_", diagnosis.causes[0].id) if diagnosis.causes else "",
        "causes": str(len(diagnosis.causes)),
        "failing": str(sum(1 for c in diagnosis.causes if threshold and at_or_above(c.severity, threshold))),
    }
    outputs.update({severity: str(n) for severity, n in severity_counts(diagnosis).items()})
    return outputs


def write_outputs(diagnosis: Diagnosis, fail_on: str) -> None:
    path = os.environ.get(OUTPUT_ENV)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.writelines(f"{key}={value}\n" for key, value in step_outputs(diagnosis, fail_on).items())
    except OSError as exc:
        sys.stderr.write(f"diagnose: warning: cannot append the step outputs to {path} ({exc.strerror or exc})\n")


def report(diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
           rules: Mapping[str, object] | None = None, fail_on: str = "error") -> None:
    lines, held = annotation_lines(diagnosis)
    for line in lines:
        out.write(line + "\n")
    threshold = fail_on if fail_on != "never" else "error"
    failing = [c for c in diagnosis.causes if at_or_above(c.severity, threshold)]
    # Plain lines name only rule ids and counts: nothing from a log, so nothing that could be read as a command.
    if failing:
        out.write(f"diagnose: {len(failing)} cause(s) at or above {threshold}: {', '.join(c.id for c in failing)}\n")
    else:
        out.write(f"diagnose: no cause at or above {threshold} ({len(diagnosis.causes)} finding(s) below it)\n")
    if held:
        out.write(f"diagnose: {held} more annotation(s) held back (GitHub shows {PER_KIND} per kind per step); "
                  "the job summary lists every cause\n")
    write_summary(diagnosis, verbose, fail_on)
    write_outputs(diagnosis, fail_on)
