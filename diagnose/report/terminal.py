"""The terminal report: ranked causes, each with its evidence as file:line, the fix, and gaps.

Log text is never parsed as rich markup (`[rank0]:` is valid markup): everything is built
as rich Text objects.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import IO

from rich.console import Console
from rich.text import Text

from diagnose.findings import Cause, Diagnosis

SEVERITY_STYLE = {"critical": "bold white on red", "error": "bold red", "warning": "yellow", "info": "cyan"}
RELAUNCH_TEXT = {
    "yes": "a plain relaunch may succeed",
    "no": "a plain relaunch will fail the same way; fix first",
    "maybe": "a relaunch may or may not help; fix the cause first if you can",
}
MAX_TEXT = 300


def _clock(moment: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment)) if moment is not None else ""


def _cause(console: Console, number: int, cause: Cause, verbose: bool) -> None:
    head = Text()
    head.append(f"{number}. ", style="bold")
    head.append(cause.title, style="bold")
    head.append("  ")
    head.append(f" {cause.severity} ", style=SEVERITY_STYLE.get(cause.severity, ""))
    head.append(f" {cause.role} · {cause.confidence:.0%}", style="dim")
    console.print(head)
    console.print(Text(f"   {cause.id}", style="dim cyan"))
    console.print(Text("   " + cause.explanation))
    if cause.evidence:
        console.print(Text("   Evidence:", style="bold"))
        shown = cause.evidence if verbose else cause.evidence[:6]
        for item in shown:
            line = Text("     ")
            line.append(item.location(), style="cyan")
            extras = []
            if item.rank is not None:
                extras.append(f"rank {item.rank}")
            if item.time is not None:
                extras.append(_clock(item.time))
            if item.count > 1:
                extras.append(f"{item.count} lines like it")
            if extras:
                line.append(f" ({', '.join(extras)})", style="dim")
            console.print(line)
            body = item.text if len(item.text) <= MAX_TEXT else item.text[:MAX_TEXT] + "…"
            console.print(Text("       " + body, style="dim" if item.line is None else ""), overflow="fold")
        if len(cause.evidence) > len(shown):
            console.print(Text(f"     … {len(cause.evidence) - len(shown)} more (-v)", style="dim"))
    console.print(Text("   Fix:", style="bold green"))
    for step in cause.fix:
        console.print(Text("     • " + step))
    if cause.relaunch:
        console.print(Text("   Relaunch: " + RELAUNCH_TEXT.get(cause.relaunch, cause.relaunch), style="dim"))
    if cause.explains:
        console.print(Text("   Explains: " + ", ".join(cause.explains), style="dim"))
    if cause.references and verbose:
        for ref in cause.references:
            console.print(Text("   See: " + ref, style="dim"))
    console.print()


def report(diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
           rules: Mapping[str, object] | None = None, fail_on: str = "error") -> None:
    # On a terminal rich wraps to its width; into a file or pipe, lines stay whole (grep-able).
    is_tty = hasattr(out, "isatty") and out.isatty()
    console = Console(file=out, highlight=False, soft_wrap=not is_tty, emoji=False, width=None if is_tty else 4096)
    run = diagnosis.evidence.run
    header = Text()
    header.append("diagnose", style="bold")
    header.append(f"  run {run.id} ({run.mode}{': ' + ', '.join(run.inputs) if run.inputs and run.mode != 'live' else ''})")
    console.print(header)
    stats = diagnosis.stats
    console.print(Text(
        f"  {stats.get('rules', '?')} rules over {stats.get('files_scanned', 0)} file(s), "
        f"{stats.get('lines_scanned', 0):,} lines in {stats.get('seconds', 0)} s", style="dim"))
    console.print()
    serious = [c for c in diagnosis.causes if c.severity in ("critical", "error", "warning")]
    minor = [c for c in diagnosis.causes if c not in serious]
    if not serious:
        console.print(Text("No cause found at warning or above.", style="bold green"))
        console.print()
    for number, cause in enumerate(serious, 1):
        _cause(console, number, cause, verbose)
    if minor:
        if verbose:
            for number, cause in enumerate(minor, len(serious) + 1):
                _cause(console, number, cause, verbose)
        else:
            console.print(Text(f"{len(minor)} informational finding(s): " + ", ".join(c.id for c in minor) + " (-v to show)", style="dim"))
    if diagnosis.gaps:
        console.print(Text("Could not check:", style="bold yellow"))
        for gap in diagnosis.gaps:
            console.print(Text(f"  {gap.source}: {gap.reason}", style="yellow"))
    for note in diagnosis.evidence.notes:
        console.print(Text(f"  note: {note}", style="dim"))
    if diagnosis.skipped:
        if verbose:
            console.print(Text("Skipped (evidence missing):", style="dim bold"))
            for skipped in diagnosis.skipped:
                console.print(Text(f"  {skipped.rule_id}: {skipped.reason}", style="dim"))
        else:
            console.print(Text(f"{len(diagnosis.skipped)} rule(s) skipped for missing evidence (-v to list).", style="dim"))
