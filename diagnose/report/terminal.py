"""The terminal report, laid out to be read at a glance at any width from 80 columns up.

From the top: which run this is (state, host, launcher, window, logs); for a multi-rank or
multi-node run a table of the ranks (state, last line, first error); the ranked causes, each with
its evidence (file:line first, in file order, the matched part highlighted, a long line cut
around it), its fix, and what a relaunch would do; what was checked and found clean; gaps; and
at the very end a one-line verdict, so the top cause is on screen when the report is done.

Every line is fitted to the width before it is written (diagnose.report._layout): paragraphs
wrap with hanging indents. On a terminal rich only adds the colours; into a pipe or a file the
same characters are written without them (at $COLUMNS, else 80 columns), without importing
rich. Log text is never parsed as rich markup (`[rank0]:` is valid markup): spans become rich
Text objects, not markup strings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any, Protocol

from diagnose.engine.findings import Cause, Diagnosis, Lane, Mark, Timeline
from diagnose.evidence.model import EvidenceItem, TextKind
from diagnose.report._common import partition, state_words, verdict
from diagnose.report._layout import Line, Span, cut, table, wrap
from diagnose.vocab import Severity, relaunch_advice

SEVERITY_STYLE: dict[str, str] = {Severity.CRITICAL: "bold white on red", Severity.ERROR: "bold red",
                                  Severity.WARNING: "bold yellow", Severity.INFO: "cyan"}
STATE_STYLE = {"crashed": "bold red", "never-started": "bold red", "stalled": "bold yellow", "stopped": "bold yellow",
               "running": "bold green", "finished": "bold green"}
MATCH_STYLE = "bold underline"  # the part of an evidence line the rule matched
LABEL = 10  # width of the identity header's labels
EVIDENCE_SHOWN = 6  # evidence lines of a cause shown without -v
EVIDENCE_ROWS = 3  # screen rows one evidence line may take (cut around the match beyond); -v: more
EVIDENCE_ROWS_VERBOSE = 12
DEFAULT_WIDTH = 80
MAX_RANK_ROWS = 12  # ranks in the terminal's table; the ones with something to show come first


class Writer(Protocol):
    width: int

    def line(self, spans: Line) -> None: ...


class PlainWriter:
    """Lines as plain text: what the terminal shows, without colour."""

    def __init__(self, out: IO[str], width: int | None = None) -> None:
        self.out = out
        self.width = width or _columns()

    def line(self, spans: Line) -> None:
        self.out.write("".join(text for text, _ in spans) + "\n")


class RichWriter:
    """Lines coloured by rich; never wrapped again (they fit already)."""

    def __init__(self, out: IO[str] | None = None, console: Any = None, force: bool = False) -> None:
        from rich.console import Console

        # The caller decided on colour (--color, NO_COLOR, FORCE_COLOR): rich must not decide again
        # from the same variables. force: colour where the output is no terminal (a CI log), in
        # the 16 standard colours every log viewer shows (a CI's TERM is often "dumb").
        self.console = console or Console(file=out, highlight=False, emoji=False, no_color=False,
                                          force_terminal=True if force else None,
                                          color_system="standard" if force else "auto")
        self.width = max(int(self.console.width), 20)

    def line(self, spans: Line) -> None:
        from rich.text import Text

        text = Text(no_wrap=True, overflow="ignore")
        for part, style in spans:
            text.append(part, style=(MATCH_STYLE if style == "match" else style) or None)
        self.console.print(text, soft_wrap=True)


def _columns() -> int:
    try:
        value = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return DEFAULT_WIDTH
    return value if value >= 20 else DEFAULT_WIDTH


class _Page:
    """A writer plus the paragraph helpers every section uses."""

    def __init__(self, writer: Writer) -> None:
        self.w = writer
        self.width = writer.width
        self.hosts = 1  # several: evidence lines name their host
        self.day = ""  # the run's first day, as the header shows it

    def blank(self) -> None:
        self.w.line([])

    def para(self, spans: Sequence[Span], first: str = "", hang: str | None = None, fold: bool = False) -> None:
        """A paragraph wrapped under its indent; a word wider than the line (a path) is kept whole
        unless fold (log text, already cut to a few rows)."""
        for line in wrap(spans, self.width, first, hang, fold=fold):
            self.w.line(line)

    def field(self, label: str, spans: Sequence[Span], indent: str = "  ") -> None:
        """`  label     text that wraps under itself`."""
        self.para(spans, first=f"{indent}{label:<{LABEL - 1}} ", hang=" " * (len(indent) + LABEL))


def _clock(moment: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment)) if moment is not None else ""


def _hms(moment: float | None, approx: bool = False) -> str:
    if moment is None:
        return "--:--:--"
    return ("~" if approx else "") + time.strftime("%H:%M:%S", time.localtime(moment))


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


# ---------------------------------------------------------------- who, where, when

def _identity(page: _Page, diagnosis: Diagnosis) -> None:
    run = diagnosis.evidence.run
    identity = diagnosis.evidence.identity
    host = (identity.host if identity is not None else None) or run.host
    launcher = identity.launcher.kind if identity is not None and identity.launcher.kind != "unknown" else run.launcher
    nodes = diagnosis.evidence.hosts or ()
    if len(nodes) > 1:  # one node's identity is not the run's: the Nodes section tells each
        answered = sum(1 for n in nodes if n.status == "ok")
        host, identity = f"{answered} of {len(nodes)} nodes answered", None
    else:
        host = f"host {host}" if host else ""
    head: list[Span] = [(run.id, "bold")]
    if diagnosis.state:
        head += [("  ", ""), (state_words(diagnosis.state), STATE_STYLE.get(diagnosis.state, "bold"))]
    facts = [host, f"launcher {launcher}" if launcher else "",
             run.mode + (f" {', '.join(run.inputs)}" if run.inputs and run.mode != "live" else "")]
    for fact in filter(None, facts):
        head += [("  ·  ", "dim"), (fact, "")]
    page.para(head, hang="  ")
    if diagnosis.state_reason:
        page.field("why", [(diagnosis.state_reason, "")])
    start, start_source, end, end_source = diagnosis.window
    if start is not None or end is not None:
        span = f"{_clock(start) or '?'} → "
        if start is not None and end is not None and _clock(start)[:10] == _clock(end)[:10]:
            span += _hms(end)
        else:
            span += _clock(end) or "?"
        how = f" ({_duration(end - start)}; " if start is not None and end is not None else " ("
        page.field("window", [(span, ""), (f"{how}{start_source or '?'} → {end_source or '?'})", "dim")])
    if len(nodes) > 1:
        logs = diagnosis.evidence.texts_of(TextKind.LOG)
        for text in logs[:6]:
            page.field("log", [(text.display, "cyan")])
        if len(logs) > 6:
            page.field("", [(f"… {len(logs) - 6} more logs", "dim")])
    elif identity is None:
        _facts(page, diagnosis)
    else:
        for log in identity.logs[:4]:
            basis = f": {log.basis}" if log.basis else ""
            page.field("log", [(log.path, "cyan"), (" exists" if log.exists else " missing", "" if log.exists else "bold"),
                               (f" ({log.source}{basis})", "dim")])
        tmux = identity.launcher
        if tmux.tmux_server:
            socket = f" on {tmux.tmux_socket}" if tmux.tmux_socket else ""
            session = f", session {tmux.tmux_session}" if tmux.tmux_session else ""
            page.field("tmux", [(tmux.tmux_server.replace("_", " ") + socket + session, "")])
        alive = [p for p in identity.processes if p.alive or p.source.startswith("launch record")]
        for proc in alive[:4]:
            rank = f"rank {proc.rank}: " if proc.rank is not None else ""
            page.field("process", [(f"pid {proc.pid} {rank}{proc.cmdline[:120]}", ""), (f" ({proc.source})", "dim")])
        if len(alive) > 4:
            page.field("", [(f"… {len(alive) - 4} more processes", "dim")])
        last = identity.last_output
        if last is not None and last.line and diagnosis.state in ("running", "stalled"):
            age = f"{_duration(last.age_s)} ago: " if last.age_s is not None else ""
            page.field("last line", [(age, "dim"), (last.line, "")])
    stats = diagnosis.stats
    page.field("scanned", [(f"{stats.get('rules', '?')} rules · {stats.get('files_scanned', 0)} file(s) · "
                            f"{stats.get('lines_scanned', 0):,} lines in {stats.get('seconds', 0)} s", "dim")])
    remote = _remote(stats.get("remote")) if len(nodes) <= 1 else None
    if remote:
        page.field("remote", [(remote, "dim")])


def _facts(page: _Page, diagnosis: Diagnosis) -> None:
    """What an older bundle or a scan says of the run without an identity: expected logs, tmux."""
    evidence = diagnosis.evidence
    for expected in (evidence.files or ())[:4]:
        siblings = f" (beside it: {', '.join(expected.siblings[:3])})" if expected.siblings else ""
        page.field(expected.role, [(expected.path, "cyan"), (" exists" if expected.exists else " missing",
                                                              "" if expected.exists else "bold"), (siblings, "dim")])
    tmux = evidence.tmux
    if tmux is not None:
        session = f", session {tmux.expected_session} expected" if tmux.expected_session else ""
        page.field("tmux", [(f"{tmux.server.value.replace('_', ' ')} on {tmux.socket_path}{session}", "")])


# ---------------------------------------------------------------- ranks

def _ranks(page: _Page, timeline: Timeline) -> None:
    lanes = [lane for lane in timeline.lanes if lane.kind == "rank"]
    hidden = 0
    if len(lanes) > MAX_RANK_ROWS:
        # The ranks worth a row first: blamed, first failure, a state or an error of their own.
        def telling(lane: Lane) -> bool:
            return lane.key == timeline.blamed or bool(lane.state) or lane.first_error is not None
        keep = {lane.key for lane in sorted(lanes, key=lambda lane: not telling(lane))[:MAX_RANK_ROWS]}
        hidden = len(lanes) - len(keep)
        lanes = [lane for lane in lanes if lane.key in keep]
    nodes = len({lane.host for lane in lanes}) > 1
    header = (["node"] if nodes else []) + ["rank", "state", "last line", "first error"]
    first = timeline.first_failure
    rows = []
    for lane in lanes:
        blamed = lane.key == timeline.blamed
        rank: list[Span] = [(str(lane.rank), "bold red" if blamed else "bold")]
        if blamed:
            rank.append(("*", "bold red"))
        row: list[list[Span]] = [[(lane.host or "?", "")]] if nodes else []
        row += [rank, [(lane.state or "-", "")], _mark_cell(lane.last_line, False),
                _mark_cell(lane.first_error, first is not None and lane.first_error == first)]
        rows.append(row)
    page.w.line([("Ranks", "bold")])
    for line in table(header, rows, page.width, indent="  ", minimum=[4, 4, 12, 14, 14][-len(header):]):
        page.w.line(line)
    notes = [f"{hidden} more ranks with nothing of their own to show (the HTML report lists every rank)"] if hidden else []
    if timeline.blamed and any(lane.key == timeline.blamed for lane in lanes):
        notes.append("* the rank the top cause points at")
    if first is not None and any(lane.first_error == first for lane in lanes):
        notes.append("first: the earliest failure of the run")
    if any(m is not None and m.approx for lane in lanes for m in (lane.last_line, lane.first_error)):
        notes.append("~ time of the file's last write or of an earlier line")
    if notes:
        page.para([("; ".join(notes), "dim")], first="  ")
    page.blank()


def _offset(seconds: float | None, rtt: float | None) -> str:
    if seconds is None:
        return "clock offset not measured"
    return f"clock {seconds:+.3f} s" + (f" (±{rtt / 2:.3f})" if rtt is not None else "")


def _ms(moment: float | None) -> str:
    """To the millisecond: several nodes fail within a second of each other."""
    if moment is None:
        return "--:--:--"
    return time.strftime("%H:%M:%S", time.localtime(moment)) + f".{int((moment % 1) * 1000):03d}"


def _nodes(page: _Page, diagnosis: Diagnosis) -> None:
    """Several nodes: whether each answered, its clock offset (applied to all its times) and GPU
    state, its ranks' states; then the first failure across them, by node, rank and GPU."""
    page.w.line([("Nodes", "bold"), ("  times on this machine's clock, each node's measured offset applied", "dim")])
    for node in diagnosis.nodes:
        label = ("*" if node.first_failure else "") + node.name
        if node.status != "ok":
            page.field(label, [(f"{node.status}: {node.reason or ''}", "yellow")])
            continue
        ranks = ", ".join(f"rank {r.rank if r.rank is not None else '?'} {r.state}" for r in node.ranks) or "no log of the run"
        page.field(label, [(_offset(node.clock_offset, node.clock_rtt), "bold" if node.clock_offset else ""),
                           (f"; {ranks}; {node.gpu if len(node.gpu) <= 60 else node.gpu[:59] + '…'}", "dim")])
    first = diagnosis.first_failure
    if first is not None:
        gpu = f", GPU {first.gpu}" if first.gpu is not None else ""
        who = f"rank {first.rank}" if first.rank is not None else "a process"
        page.para([(f"first failure: {who} on {first.node or '?'}{gpu} at {_ms(first.time)}: ", "bold red"),
                   (first.error, "")], first="  ", hang="    ", fold=True)
    page.blank()


def _mark_cell(mark: Mark | None, first: bool) -> list[Span]:
    if mark is None:
        return [("-", "dim")]
    text = mark.label
    spans: list[Span] = [(_hms(mark.time, mark.approx) + " ", "bold red" if first else "dim")]
    if first:
        spans.append(("first: ", "bold red"))
    return [*spans, (text, "")]


# ---------------------------------------------------------------- causes

def _in_file_order(items: Sequence[EvidenceItem]) -> list[EvidenceItem]:
    """Grouped by file (in the order the files first appear), each file's lines ascending; facts
    (no line) first within their source."""
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(item.source, len(first_seen))
    return sorted(items, key=lambda i: (first_seen[i.source], i.line is not None, i.line or 0))


def _evidence(page: _Page, item: EvidenceItem, verbose: bool) -> None:
    extras = []
    if item.rank is not None:
        extras.append(f"rank {item.rank}")
    if item.host and page.hosts > 1:
        extras.append(item.host)
    if item.time is not None:
        # The day is in the header's window; a line of another day says its own.
        extras.append(_hms(item.time) if _clock(item.time)[:10] == page.day else _clock(item.time))
    if item.count > 1:
        extras.append(f"{item.count} lines like it")
    page.para([(item.location(), "cyan"), (("  " + " · ".join(extras)) if extras else "", "dim")], first="     ",
              hang="       ")
    room = page.width - 7
    budget = max(room, 20) * (EVIDENCE_ROWS_VERBOSE if verbose else EVIDENCE_ROWS)
    page.para(cut(item.text, item.match, budget), first="       ", fold=True)


def _cause(page: _Page, number: int, cause: Cause, verbose: bool) -> None:
    lead = f"{number}. "
    page.para([(cause.title, "bold")], first=lead, hang=" " * len(lead))
    page.para([(f" {cause.severity} ", SEVERITY_STYLE.get(cause.severity, "")),
               (f"  {cause.role} · {cause.confidence:.0%} · ", "dim"), (cause.id, "cyan")], first="   ")
    page.para([(cause.explanation, "")], first="   ")
    if cause.evidence:
        page.w.line([("   Evidence", "bold")])
        shown = list(cause.evidence if verbose else cause.evidence[:EVIDENCE_SHOWN])
        for item in _in_file_order(shown):
            _evidence(page, item, verbose)
        if len(cause.evidence) > len(shown):
            page.w.line([(f"     … {len(cause.evidence) - len(shown)} more (-v)", "dim")])
    if cause.fix:
        page.w.line([("   Fix", "bold green")])
        for step in cause.fix:
            page.para([(step, "")], first="     • ")
    if cause.relaunch:
        page.field("Relaunch", [(relaunch_advice(cause.relaunch), "")], indent="   ")
    if cause.explains:
        page.field("Explains", [(", ".join(cause.explains), "dim")], indent="   ")
    if cause.references and verbose:
        for ref in cause.references:
            page.field("See", [(ref, "dim")], indent="   ")
    page.blank()


def _host_events(page: _Page, heading: str, causes: list[Cause]) -> None:
    if not causes:
        return
    page.w.line([(heading, "bold")])
    for cause in causes:
        first = next((e for e in cause.evidence if e.line is not None), None)
        where = f" [{first.location()}]" if first else ""
        page.para([(cause.title.removesuffix(" (nothing ties it to this run)") + where, ""), (f"  {cause.id}", "dim cyan")],
                  first="  ", hang="    ")
        if cause.basis:
            page.para([(cause.basis, "dim")], first="    ")
    page.blank()


def _remote(remote: object) -> str | None:
    """`root@10.1.2.6 (pct exec 200 --): 2.0 GB of logs searched there, 1.2 MB came over (0.06 %)`."""
    if not isinstance(remote, dict):
        return None
    prefix = " ".join(str(word) for word in remote.get("exec") or [])
    where = f"{remote.get('host')}" + (f" ({prefix})" if prefix else "")
    read, sent = int(remote.get("bytes_read_remotely") or 0), int(remote.get("bytes_transferred") or 0)
    share = remote.get("percent_transferred")
    return (f"{where}: {_size(read)} of logs searched there, {_size(sent)} came over the connection"
            # the share only says something when the logs outweigh the rest (process table, kernel log)
            + (f" ({share} %)" if isinstance(share, (int, float)) and share <= 100 else ""))


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _verdict(page: _Page, diagnosis: Diagnosis, serious: list[Cause]) -> None:
    style = SEVERITY_STYLE.get(serious[0].severity, "bold") if serious else "bold green"
    if style.endswith("on red"):
        style = "bold red"
    page.para([(verdict(diagnosis), style)], hang="  ")


# ---------------------------------------------------------------- the report

def write(diagnosis: Diagnosis, writer: Writer, verbose: bool = False) -> None:
    page = _Page(writer)
    page.hosts = len({i.host for c in diagnosis.causes for i in c.evidence if i.host})
    page.day = _clock(diagnosis.window[0] if diagnosis.window[0] is not None else diagnosis.window[2])[:10]
    _identity(page, diagnosis)
    page.blank()
    timeline = diagnosis.timeline
    if timeline is not None and timeline.multi():
        _ranks(page, timeline)
    if diagnosis.nodes:
        _nodes(page, diagnosis)
    serious, context, minor = partition(diagnosis)
    if not serious:
        page.w.line([("No cause found at warning or above.", "bold green")])
        page.blank()
    for number, cause in enumerate(serious, 1):
        _cause(page, number, cause, verbose)
    if minor:
        if verbose:
            for number, cause in enumerate(minor, len(serious) + 1):
                _cause(page, number, cause, verbose)
        else:
            page.para([(f"{len(minor)} informational finding(s): " + ", ".join(c.id for c in minor) + " (-v to show)",
                        "dim")])
    _host_events(page, "Context (host events nothing ties to this run):", context)
    _host_events(page, "Elsewhere on this host (not this run's):", diagnosis.elsewhere)
    if diagnosis.checked:
        page.w.line([("Checked and clean", "bold green")])
        for check in diagnosis.checked:
            page.para([(check.detail, "")], first="  " + ("✓ " if check.result == "clean" else "· "))
    if diagnosis.gaps:
        page.w.line([("Could not check", "bold yellow")])
        for gap in diagnosis.gaps:
            page.para([(f"{gap.source}: {gap.reason}", "yellow")], first="  ", hang="    ")
    notes = list(diagnosis.evidence.notes)
    passed_over = [n for n in notes if n.startswith("passed over ")]  # evidence/inputs.py PASSED_OVER
    for note in notes if verbose else [n for n in notes if n not in passed_over]:
        page.para([(f"note: {note}", "dim")], first="  ", hang="    ")
    if passed_over and not verbose:
        page.para([(f"{len(passed_over)} file(s) in the scanned folders passed over as no evidence "
                    "(-v lists them and why)", "dim")], first="  ", hang="    ")
    if diagnosis.skipped:
        if verbose:
            page.w.line([("Skipped (evidence missing)", "dim bold")])
            for skipped in diagnosis.skipped:
                page.para([(f"{skipped.rule_id}: {skipped.reason}", "dim")], first="  ", hang="    ")
        else:
            page.para([(f"{len(diagnosis.skipped)} rule(s) skipped for missing evidence (-v to list).", "dim")])
    page.blank()
    _verdict(page, diagnosis, serious)


def report(diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
           rules: Mapping[str, object] | None = None, fail_on: str = "error", color: bool | None = None,
           quiet: bool = False) -> None:
    """color: None follows the output (a terminal gets colour), True forces it, False turns it off.
    quiet (-q): only the verdict line."""
    if quiet:
        out.write(verdict(diagnosis, where="(without -q)") + "\n")
        return
    is_tty = hasattr(out, "isatty") and out.isatty()
    use_color = is_tty if color is None else color
    writer: Writer = RichWriter(out, force=not is_tty) if use_color else PlainWriter(out)
    write(diagnosis, writer, verbose)

