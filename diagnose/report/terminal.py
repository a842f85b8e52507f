"""The terminal report: ranked causes, each with its evidence as file:line, the fix, and gaps.

Lines are built as (text, style) spans and handed to a writer: on a terminal, rich renders
the styles and wraps to the width; into a file or a pipe the spans are written as plain text
with whole lines (grep-able), which is what rich would print there anyway, without paying
for importing rich. Log text is never parsed as rich markup (`[rank0]:` is valid markup):
spans become rich Text objects, not markup strings.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import IO, Protocol

from diagnose.engine.findings import Cause, Diagnosis
from diagnose.vocab import Role, Severity, relaunch_advice

SEVERITY_STYLE: dict[str, str] = {Severity.CRITICAL: "bold white on red", Severity.ERROR: "bold red", Severity.WARNING: "yellow",
                  Severity.INFO: "cyan"}
MAX_TEXT = 300

Span = tuple[str, str]  # (text, rich style; "" for none)


class Writer(Protocol):
    def line(self, *spans: Span) -> None: ...


class PlainWriter:
    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def line(self, *spans: Span) -> None:
        self.out.write("".join(text for text, _ in spans) + "\n")


class RichWriter:
    def __init__(self, out: IO[str]) -> None:
        from rich.console import Console

        self.console = Console(file=out, highlight=False, emoji=False)

    def line(self, *spans: Span) -> None:
        from rich.text import Text

        text = Text()
        for part, style in spans:
            text.append(part, style=style or None)
        self.console.print(text, overflow="fold")


def _clock(moment: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment)) if moment is not None else ""


def _cause(w: Writer, number: int, cause: Cause, verbose: bool) -> None:
    w.line((f"{number}. ", "bold"), (cause.title, "bold"), ("  ", ""),
           (f" {cause.severity} ", SEVERITY_STYLE.get(cause.severity, "")),
           (f" {cause.role} · {cause.confidence:.0%}", "dim"))
    w.line((f"   {cause.id}", "dim cyan"))
    w.line(("   " + cause.explanation, ""))
    if cause.evidence:
        w.line(("   Evidence:", "bold"))
        shown = cause.evidence if verbose else cause.evidence[:6]
        for item in shown:
            extras = []
            if item.rank is not None:
                extras.append(f"rank {item.rank}")
            if item.time is not None:
                extras.append(_clock(item.time))
            if item.count > 1:
                extras.append(f"{item.count} lines like it")
            w.line(("     ", ""), (item.location(), "cyan"), (f" ({', '.join(extras)})" if extras else "", "dim"))
            body = item.text if len(item.text) <= MAX_TEXT else item.text[:MAX_TEXT] + "…"
            w.line(("       " + body, "dim" if item.line is None else ""))
        if len(cause.evidence) > len(shown):
            w.line((f"     … {len(cause.evidence) - len(shown)} more (-v)", "dim"))
    w.line(("   Fix:", "bold green"))
    for step in cause.fix:
        w.line(("     • " + step, ""))
    if cause.relaunch:
        w.line(("   Relaunch: " + relaunch_advice(cause.relaunch), "dim"))
    if cause.explains:
        w.line(("   Explains: " + ", ".join(cause.explains), "dim"))
    if cause.references and verbose:
        for ref in cause.references:
            w.line(("   See: " + ref, "dim"))
    w.line()


def _identity(w: Writer, diagnosis: Diagnosis) -> None:
    """Which run this is, and where each part of that came from."""
    if diagnosis.state:
        w.line(("  state: ", "dim"), (diagnosis.state, "bold"), (f" - {diagnosis.state_reason}" if diagnosis.state_reason else "", ""))
    identity = diagnosis.evidence.identity
    start, start_source, end, end_source = diagnosis.window
    if start is not None or end is not None:
        w.line((f"  window: {_clock(start) or '?'} ({start_source or '?'}) to {_clock(end) or '?'} ({end_source or '?'})", "dim"))
    if identity is None:
        return
    launcher = identity.launcher
    if launcher.kind:
        tmux = f", tmux {launcher.tmux_server} on {launcher.tmux_socket}" if launcher.tmux_server else ""
        w.line((f"  launcher: {launcher.kind} ({launcher.source or 'inferred'}){tmux}", "dim"))
    for log in identity.logs[:4]:
        basis = f": {log.basis}" if log.basis else ""
        w.line((f"  log: {log.path} ({'exists' if log.exists else 'missing'}; {log.source}{basis})", "dim"))
    alive = [p for p in identity.processes if p.alive]
    for proc in alive[:4]:
        w.line((f"  process: pid {proc.pid} {proc.cmdline[:80]} ({proc.source})", "dim"))


def _host_events(w: Writer, heading: str, causes: list[Cause]) -> None:
    if not causes:
        return
    w.line((heading, "bold"))
    for cause in causes:
        first = next((e for e in cause.evidence if e.line is not None), None)
        where = f" [{first.location()}]" if first else ""
        w.line((f"  {cause.title.removesuffix(' (nothing ties it to this run)')}{where}", ""))
        if cause.basis:
            w.line((f"    {cause.basis}", "dim"))
    w.line()


def _remote(w: Writer, remote: object) -> None:
    """`on root@10.1.2.6 (pct exec 200 --): 2.0 GB of logs searched there, 1.2 MB came over (0.06 %)`."""
    if not isinstance(remote, dict):
        return
    prefix = " ".join(str(word) for word in remote.get("exec") or [])
    where = f"{remote.get('host')}" + (f" ({prefix})" if prefix else "")
    read, sent = int(remote.get("bytes_read_remotely") or 0), int(remote.get("bytes_transferred") or 0)
    share = remote.get("percent_transferred")
    from diagnose.evidence.safetext import visible

    w.line((f"  on {visible(where)}: {_size(read)} of logs searched there, {_size(sent)} came over the connection"
            + (f" ({share} %)" if share is not None else ""), "dim"))


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def report(diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
           rules: Mapping[str, object] | None = None, fail_on: str = "error") -> None:
    is_tty = hasattr(out, "isatty") and out.isatty()
    w: Writer = RichWriter(out) if is_tty else PlainWriter(out)
    run = diagnosis.evidence.run
    inputs = f": {', '.join(run.inputs)}" if run.inputs and run.mode != "live" else ""
    w.line(("diagnose", "bold"), (f"  run {run.id} ({run.mode}{inputs})", ""))
    stats = diagnosis.stats
    w.line((f"  {stats.get('rules', '?')} rules over {stats.get('files_scanned', 0)} file(s), "
            f"{stats.get('lines_scanned', 0):,} lines in {stats.get('seconds', 0)} s", "dim"))
    _remote(w, stats.get("remote"))
    _identity(w, diagnosis)
    w.line()
    serious = [c for c in diagnosis.causes if Severity(c.severity).at_least(Severity.WARNING) and c.role != Role.CONTEXT]
    context = [c for c in diagnosis.causes if c.role == Role.CONTEXT and c.attribution == "unattributed"]
    minor = [c for c in diagnosis.causes if c not in serious and c not in context]
    if not serious:
        w.line(("No cause found at warning or above.", "bold green"))
        w.line()
    for number, cause in enumerate(serious, 1):
        _cause(w, number, cause, verbose)
    if minor:
        if verbose:
            for number, cause in enumerate(minor, len(serious) + 1):
                _cause(w, number, cause, verbose)
        else:
            w.line((f"{len(minor)} informational finding(s): " + ", ".join(c.id for c in minor) + " (-v to show)", "dim"))
    _host_events(w, "Context (host events nothing ties to this run):", context)
    _host_events(w, "Elsewhere on this host (not this run's):", diagnosis.elsewhere)
    if diagnosis.checked:
        w.line(("Checked and clean:", "bold green"))
        for check in diagnosis.checked:
            w.line(("  " + ("✓ " if check.result == "clean" else "· ") + check.detail, ""))
    if diagnosis.gaps:
        w.line(("Could not check:", "bold yellow"))
        for gap in diagnosis.gaps:
            w.line((f"  {gap.source}: {gap.reason}", "yellow"))
    for note in diagnosis.evidence.notes:
        w.line((f"  note: {note}", "dim"))
    if diagnosis.skipped:
        if verbose:
            w.line(("Skipped (evidence missing):", "dim bold"))
            for skipped in diagnosis.skipped:
                w.line((f"  {skipped.rule_id}: {skipped.reason}", "dim"))
        else:
            w.line((f"{len(diagnosis.skipped)} rule(s) skipped for missing evidence (-v to list).", "dim"))
