"""Markdown for an issue, a PR comment or a CI job summary: ranked causes, evidence in fenced
blocks, fixes.

Log text is never trusted as Markdown: inside a fenced block it cannot close the fence (the fence
is always longer than any backtick run in the text), and outside one every character Markdown
would act on is escaped, so `<module>` or `*args` show as written, and an `@mention` notifies no one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import groupby
from typing import IO

from diagnose.engine.findings import Cause, Diagnosis
from diagnose.evidence.lines import strip_ansi
from diagnose.evidence.model import EvidenceItem
from diagnose.report._common import at_or_above, evidence_summary, inputs
from diagnose.vocab import RELAUNCHES, relaunch_advice

MAX_EVIDENCE = 12  # lines per cause unless -v
# Parentheses and "!" act only next to brackets, "#", "+", "-" only at a line start: no need to escape them inline.
_INLINE_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")
_LINE_START = re.compile(r"^(\s*)([-+=>#]|\d+)")
# "@user" / "@org/team" in an issue or PR comment notifies them: a log line quoting a mention (a
# git author, a decorator, a CODEOWNERS line) must not. A zero-width space after "@" keeps the
# text as it reads and breaks the link (code spans and fences never link, so only inline text).
_MENTION = re.compile(r"@(?=[A-Za-z0-9_-])")


def escape_inline(text: str) -> str:
    """Text shown as itself in Markdown (one paragraph; newlines become spaces)."""
    flat = " ".join(strip_ansi(text).split())
    escaped = _MENTION.sub("@\u200b", _INLINE_SPECIAL.sub(r"\\\1", flat.replace("&", "&amp;")))
    # A leading "-", "+", "=", ">", "#" or "1." would make a list, heading, underline or quote.
    return _LINE_START.sub(_escape_start, escaped)


def _escape_start(match: re.Match[str]) -> str:
    indent, mark = match.group(1), match.group(2)
    if mark.isdigit():  # "1." / "1)" starts a list; the backslash goes before the punctuation
        rest = match.string[match.end():match.end() + 1]
        return indent + mark + ("\\" if rest in (".", ")") else "")
    return indent + "\\" + mark


def code_span(text: str) -> str:
    """Inline code that holds any text, backticks included."""
    flat = " ".join(text.split())
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def fenced(lines: list[str], info: str = "text") -> str:
    """A fenced code block that no line of the content can close: the fence is longer than the
    longest backtick run anywhere in it (CommonMark closes a fence only with one as long)."""
    body = "\n".join(lines)
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{body}\n{fence}"


def _evidence_lines(items: list[EvidenceItem]) -> list[str]:
    width = max((len(str(i.line)) for i in items if i.line is not None), default=1)
    out = []
    for item in items:
        text = strip_ansi(item.text).replace("\r", "")
        prefix = f"{item.line:>{width}}  " if item.line is not None else ""
        extra = f"   ({item.count} lines like it)" if item.count > 1 else ""
        out.append(prefix + text + extra)
    return out


def _cause(number: int, cause: Cause, cap: int | None, heading: str) -> list[str]:
    parts = [f"{heading} {number}. {escape_inline(cause.title)}", ""]
    parts.append(f"**{cause.severity}** · {cause.role} · confidence {cause.confidence:.0%} · {code_span(cause.id)}")
    parts += ["", escape_inline(cause.explanation), ""]
    shown = list(cause.evidence if cap is None else cause.evidence[:cap])
    if shown:
        parts += ["**Evidence**", ""]
        for source, group in groupby(shown, key=lambda item: item.source):
            items = list(group)
            parts.append(code_span(source) + ":")
            parts.append(fenced(_evidence_lines(items)))
            parts.append("")
        if len(cause.evidence) > len(shown):
            parts += [f"… {len(cause.evidence) - len(shown)} more evidence line(s) (-v shows all)", ""]
    if cause.fix:
        parts += ["**Fix**", ""] + [f"- {escape_inline(step)}" for step in cause.fix] + [""]
    if cause.relaunch:
        parts += [f"Relaunch: {(relaunch_advice(cause.relaunch) if cause.relaunch in RELAUNCHES else escape_inline(cause.relaunch))}.", ""]
    if cause.explains:
        parts += ["Explains: " + ", ".join(code_span(s) for s in cause.explains), ""]
    if cause.references:
        parts += ["References: " + ", ".join(f"<{ref}>" for ref in cause.references), ""]
    return parts


def render_markdown(diagnosis: Diagnosis, verbose: bool = False, fail_on: str = "error", level: int = 2,
                    max_evidence: int | None = None) -> str:
    """The whole report; level is the heading depth of its title (causes are one deeper).
    max_evidence caps the evidence lines per cause (default: MAX_EVIDENCE, all with verbose)."""
    cap = max_evidence if max_evidence is not None else (None if verbose else MAX_EVIDENCE)
    h1, h2 = "#" * level, "#" * (level + 1)
    causes = diagnosis.causes
    serious = [c for c in causes if at_or_above(c.severity, "warning")]
    minor = [c for c in causes if c not in serious]
    threshold = fail_on if fail_on != "never" else "error"
    failing = [c for c in causes if at_or_above(c.severity, threshold)]
    if failing:
        verdict = f"{len(failing)} cause(s) at or above {threshold}"
    elif serious:
        verdict = f"{len(serious)} cause(s) below {threshold}"
    else:
        verdict = "no cause found at warning or above"
    run = diagnosis.evidence.run
    parts = [f"{h1} diagnose: {verdict}", ""]
    scanned = inputs(diagnosis)
    summary = f"Run {code_span(run.id)} ({escape_inline(run.mode)}) · {escape_inline(evidence_summary(diagnosis))}"
    parts += [summary, ""]
    if scanned:
        shown_inputs = scanned if verbose or len(scanned) <= 20 else scanned[:20]
        parts += ["Inputs: " + ", ".join(code_span(s) for s in shown_inputs)
                  + (f" and {len(scanned) - len(shown_inputs)} more" if len(shown_inputs) < len(scanned) else ""), ""]
    if serious:
        parts += ["| # | Cause | Severity | Confidence | Rule |", "|---|---|---|---|---|"]
        for number, cause in enumerate(serious, 1):
            parts.append(f"| {number} | {escape_inline(cause.title)} | {cause.severity} | {cause.confidence:.0%} | "
                         f"{code_span(cause.id)} |")
        parts.append("")
    listed = serious + (minor if verbose else [])
    for number, cause in enumerate(listed, 1):
        parts += _cause(number, cause, cap, h2)
    if minor and not verbose:
        parts += [f"{len(minor)} informational finding(s): " + ", ".join(code_span(c.id) for c in minor), ""]
    if diagnosis.gaps:
        parts += ["**Could not check**", ""] + [f"- {code_span(g.source)}: {escape_inline(g.reason)}" for g in diagnosis.gaps]
        parts.append("")
    for note in diagnosis.evidence.notes:
        parts += [f"Note: {escape_inline(note)}", ""]
    if diagnosis.skipped:
        if verbose:
            parts += ["**Skipped for missing evidence**", ""]
            parts += [f"- {code_span(s.rule_id)}: {escape_inline(s.reason)}" for s in diagnosis.skipped]
            parts.append("")
        else:
            parts += [f"{len(diagnosis.skipped)} rule(s) skipped for missing evidence.", ""]
    return "\n".join(parts).rstrip("\n") + "\n"


def report(diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
           rules: Mapping[str, object] | None = None, fail_on: str = "error") -> None:
    out.write(render_markdown(diagnosis, verbose, fail_on))
