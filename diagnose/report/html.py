"""The HTML report: one self-contained file to open from a CI artifact or mail to a colleague.

The verdict first, then the run's identity, a timeline of the run (inline SVG: a lane per rank
and node, the first failure marked), the ranks, the causes with their evidence (the matched part
marked) and fixes, host events of other runs, what was checked and found clean, and gaps.
No script, no network: inline CSS only, and a Content-Security-Policy that forbids loading
anything, so a report can never call out. Every text is escaped (a log line is never HTML);
secrets are masked before it gets here (render.reporter()).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from html import escape
from typing import IO

from diagnose import __version__
from diagnose.engine.findings import Cause, Diagnosis, Lane, Mark, Timeline
from diagnose.evidence.model import EvidenceItem
from diagnose.report._common import partition, state_words, verdict
from diagnose.report._layout import cut
from diagnose.report._timeline_svg import KIND_WORDS, clock, timeline_svg
from diagnose.vocab import relaunch_advice

MAX_LINE = 4000  # characters of one evidence line shown (cut around the match beyond)
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

CSS = """
:root { --fg:#1d232b; --dim:#5d6670; --line:#dde2e8; --bg:#ffffff; --panel:#f6f8fa; --red:#c62828; --orange:#e06c00;
  --yellow:#b58900; --green:#2e7d32; --blue:#1f6feb; --purple:#7b3fbf; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
main { max-width: 1240px; margin: 0 auto; padding: 0 24px 48px; }
h1 { font-size: 22px; line-height: 1.35; margin: 0; }
h2 { font-size: 17px; margin: 32px 0 10px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
code, pre, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 13px; }
.verdict { padding: 20px 24px; border-left: 8px solid var(--dim); background: var(--panel); margin: 24px 0 8px; }
.verdict.sev-critical, .verdict.sev-error { border-color: var(--red); }
.verdict.sev-warning { border-color: var(--yellow); } .verdict.clean { border-color: var(--green); }
.verdict .sub { color: var(--dim); margin-top: 6px; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
  text-transform: uppercase; letter-spacing: .03em; vertical-align: 2px; }
.sev-critical .badge.sev, .badge.sev-critical { background: var(--red); color: #fff; }
.badge.sev-error { background: #fde7e7; color: var(--red); } .badge.sev-warning { background: #fff4d6; color: #7a5b00; }
.badge.sev-info { background: #e6f0ff; color: var(--blue); }
.badge.state-crashed, .badge.state-never-started { background: var(--red); color: #fff; }
.badge.state-stalled, .badge.state-stopped { background: #ffe9b3; color: #6b4e00; }
.badge.state-running, .badge.state-finished { background: #dff3e1; color: var(--green); }
.badge.state-unknown { background: var(--line); }
dl.identity { display: grid; grid-template-columns: 120px 1fr; gap: 4px 16px; margin: 0; }
dl.identity dt { color: var(--dim); } dl.identity dd { margin: 0; overflow-wrap: anywhere; }
.dim { color: var(--dim); }
svg.timeline { display: block; background: #fff; border: 1px solid var(--line); border-radius: 6px; }
svg .axis text { font: 11px system-ui, sans-serif; fill: var(--dim); }
svg .axis .grid { stroke: #eef1f4; stroke-width: 1; }
svg .lane-bg { fill: transparent; } svg .lane:nth-of-type(odd) .lane-bg { fill: #fafbfc; }
svg .lane.blamed .lane-bg { fill: #fff1f0; }
svg .lane-label { font: 600 13px system-ui, sans-serif; fill: var(--fg); }
svg .lane.blamed .lane-label { fill: var(--red); }
svg .active { fill: #d7e6fb; } svg .active.early { fill: #eaf1fb; } svg .tick { fill: #8fb3e8; }
svg .mark { stroke: #fff; stroke-width: 1.5; cursor: pointer; }
svg .kind-error { fill: var(--red); } svg .kind-timeout { fill: var(--orange); }
svg .kind-exit { fill: #37474f; } svg .kind-oom-kill, svg .kind-xid, svg .kind-segfault { fill: var(--purple); }
svg .kind-last-line { fill: #fff; stroke: var(--blue); stroke-width: 2; }
svg .mark.not-own { opacity: .4; }
svg .mark.first { stroke: var(--red); stroke-width: 3; }
svg .first-failure line { stroke: var(--red); stroke-width: 1.5; stroke-dasharray: 5 4; }
svg .first-failure text { font: 600 12px system-ui, sans-serif; fill: var(--red); }
ul.legend { list-style: none; padding: 0; margin: 8px 0 0; display: flex; flex-wrap: wrap; gap: 6px 18px; color: var(--dim); font-size: 13px; }
ul.legend i { display: inline-block; width: 11px; height: 11px; margin-right: 5px; vertical-align: -1px; border-radius: 50%; }
ul.legend .error i { background: var(--red); } ul.legend .timeout i { background: var(--orange); border-radius: 0; }
ul.legend .exit i { background: #37474f; border-radius: 0; } ul.legend .kernel i { background: var(--purple); transform: rotate(45deg); border-radius: 0; }
ul.legend .last-line i { border: 2px solid var(--blue); } ul.legend .first i { border: 2px dashed var(--red); border-radius: 0; width: 2px; }
table.ranks { border-collapse: collapse; width: 100%; font-size: 14px; }
table.ranks th, table.ranks td { text-align: left; vertical-align: top; padding: 6px 10px; border-bottom: 1px solid var(--line); }
table.ranks th { color: var(--dim); font-weight: 600; }
table.ranks tr.blamed td:first-child { color: var(--red); font-weight: 700; }
table.ranks td.line { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12.5px; overflow-wrap: anywhere; }
.first-tag { color: var(--red); font-weight: 700; }
article.cause { border: 1px solid var(--line); border-radius: 8px; padding: 14px 18px; margin: 14px 0; }
article.cause.top { border-color: #f3b4b4; box-shadow: 0 1px 6px rgba(198,40,40,.08); }
article.cause h3 { font-size: 16.5px; margin: 0 0 4px; } article.cause h3 .n { color: var(--dim); margin-right: 6px; }
.meta { color: var(--dim); font-size: 13px; } .meta code { color: var(--blue); }
ol.evidence { list-style: none; padding: 0; margin: 8px 0; }
ol.evidence li { margin: 6px 0; } ol.evidence li:target pre { outline: 2px solid var(--orange); }
.loc { font-size: 12.5px; color: var(--blue); font-family: ui-monospace, Menlo, Consolas, monospace; overflow-wrap: anywhere; }
.loc .dim { font-family: system-ui, sans-serif; }
pre.line { margin: 2px 0 0; padding: 6px 10px; background: var(--panel); border-radius: 4px; white-space: pre-wrap;
  overflow-wrap: anywhere; }
pre.line mark { background: #ffe58f; color: inherit; font-weight: 600; padding: 0 1px; }
pre.line .cut { color: var(--dim); }
.fix { margin: 6px 0; } .fix li { margin: 3px 0; }
ul.checked { list-style: none; padding: 0; } ul.checked li::before { content: "✓ "; color: var(--green); font-weight: 700; }
ul.checked li.note::before { content: "· "; color: var(--dim); }
ul.gaps li { color: #7a5b00; }
footer { margin-top: 40px; color: var(--dim); font-size: 12.5px; border-top: 1px solid var(--line); padding-top: 10px; }
.empty { color: var(--dim); font-style: italic; }
@media print { svg .mark { cursor: default; } article.cause { break-inside: avoid; } }
"""


def _q(text: object) -> str:
    return escape(str(text), quote=True)


def _when(moment: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment)) if moment is not None else "?"


def _lane_label(lane: Lane) -> str:
    return lane.key if lane.kind != "launcher" else "launcher / other"


# ---------------------------------------------------------------- sections

def _verdict(diagnosis: Diagnosis, serious: Sequence[Cause]) -> str:
    top = serious[0] if serious else None
    cls = f"sev-{top.severity}" if top is not None else "clean"
    run = diagnosis.evidence.run
    state = diagnosis.state or "unknown"
    sub = [f'<span class="badge state-{_q(state)}">{_q(state_words(state))}</span>']
    if diagnosis.state_reason:
        sub.append(_q(diagnosis.state_reason))
    return (f'<header id="verdict" class="verdict {cls}"><div class="dim mono">diagnose · run {_q(run.id)}</div>'
            f'<h1>{_q(verdict(diagnosis, where="below"))}</h1><div class="sub">{" ".join(sub)}</div></header>')


def _identity(diagnosis: Diagnosis) -> str:
    run = diagnosis.evidence.run
    identity = diagnosis.evidence.identity
    rows: list[tuple[str, str]] = []
    host = (identity.host if identity is not None else None) or run.host
    if host:
        rows.append(("host", _q(host)))
    launcher = identity.launcher if identity is not None else None
    if launcher is not None and launcher.kind != "unknown":
        extra = f" ({_q(launcher.source)})" if launcher.source else ""
        if launcher.tmux_server:
            extra += f"; tmux {_q(launcher.tmux_server.replace('_', ' '))}" + (
                f" on <code>{_q(launcher.tmux_socket)}</code>" if launcher.tmux_socket else "")
        rows.append(("launcher", _q(launcher.kind) + extra))
    elif run.launcher:
        rows.append(("launcher", _q(run.launcher)))
    start, start_source, end, end_source = diagnosis.window
    if start is not None or end is not None:
        rows.append(("window", f"{_q(_when(start))} → {_q(_when(end))} "
                               f'<span class="dim">({_q(start_source or "?")} → {_q(end_source or "?")})</span>'))
    if identity is not None:
        for log in identity.logs[:6]:
            basis = f": {_q(log.basis)}" if log.basis else ""
            rows.append(("log", f"<code>{_q(log.path)}</code> {'exists' if log.exists else '<b>missing</b>'} "
                                f'<span class="dim">({_q(log.source)}{basis})</span>'))
        for proc in [p for p in identity.processes if p.alive][:6]:
            rank = f"rank {proc.rank}: " if proc.rank is not None else ""
            rows.append(("process", f"pid {proc.pid} {rank}<code>{_q(proc.cmdline[:200])}</code> "
                                    f'<span class="dim">({_q(proc.source)})</span>'))
    else:
        for expected in (diagnosis.evidence.files or ())[:6]:
            siblings = f' <span class="dim">(beside it: {_q(", ".join(expected.siblings[:4]))})</span>' if expected.siblings else ""
            rows.append((expected.role, f"<code>{_q(expected.path)}</code> "
                                        f"{'exists' if expected.exists else '<b>missing</b>'}{siblings}"))
        tmux = diagnosis.evidence.tmux
        if tmux is not None:
            rows.append(("tmux", f"{_q(tmux.server.value.replace('_', ' '))} on <code>{_q(tmux.socket_path)}</code>"
                                 + (f", session {_q(tmux.expected_session)} expected" if tmux.expected_session else "")))
    inputs = ", ".join(run.inputs) if run.inputs else ""
    rows.append(("source", _q(run.mode) + (f": <code>{_q(inputs)}</code>" if inputs and run.mode != "live" else "")))
    stats = diagnosis.stats
    rows.append(("scanned", _q(f"{stats.get('rules', '?')} rules over {stats.get('files_scanned', 0)} file(s), "
                               f"{stats.get('lines_scanned', 0):,} lines in {stats.get('seconds', 0)} s")))
    body = "".join(f"<dt>{_q(k)}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<section id="identity"><h2>The run</h2><dl class="identity">{body}</dl></section>'


LEGEND = ('<ul class="legend"><li class="error"><i></i>error</li><li class="timeout"><i></i>watchdog timeout</li>'
          '<li class="kernel"><i></i>kernel event (OOM kill, Xid, segfault; faint: not tied to the run)</li>'
          '<li class="exit"><i></i>process exit</li><li class="last-line"><i></i>last line printed</li>'
          '<li class="first"><i></i>first failure</li><li><span class="dim">bar: log activity; hover a mark for its line, '
          'click it for its evidence</span></li></ul>')


def _timeline(diagnosis: Diagnosis, anchors: Mapping[tuple[str, int | None], str]) -> str:
    timeline = diagnosis.timeline
    offset = time.strftime("%z")
    note = f'<p class="dim">Times are local to the machine that wrote this report (UTC{offset[:3]}:{offset[3:]}).</p>'
    svg = timeline_svg(timeline, anchors, _lane_label) if timeline is not None else ""
    if not svg:
        why = " The run never started: none of its lines was written." if diagnosis.state == "never-started" else ""
        return (f'<section id="timeline"><h2>Timeline</h2><p class="empty">Nothing of this run carries a time, so there '
                f"is nothing to place on a timeline.{_q(why)}</p></section>")
    first = timeline.first_failure if timeline is not None else None
    lead = ""
    if first is not None:
        kind = KIND_WORDS.get(first.kind, first.kind)
        what = first.label if first.label.lower().startswith(kind.lower()) else f"{kind}: {first.label}"
        lead = (f'<p id="first-failure-text">First failure: <b>{_q(first.lane)}</b>, '
                f'{"about " if first.approx else ""}{_q(clock(first.time))} - {_q(what)}</p>')
    return f'<section id="timeline"><h2>Timeline</h2>{lead}{svg}{LEGEND}{note}</section>'


def _mark_cell(mark: Mark | None, first: Mark | None) -> str:
    if mark is None:
        return '<td class="dim">-</td>'
    text = mark.label
    tag = '<span class="first-tag">first failure · </span>' if mark == first else ""
    when = ("~" if mark.approx else "") + clock(mark.time) if mark.time is not None else "?"
    return f'<td class="line">{tag}<span class="dim">{_q(when)}</span> {_q(text)}</td>'


def _ranks(timeline: Timeline | None) -> str:
    if timeline is None:
        return ""
    lanes = [lane for lane in timeline.lanes if lane.kind != "kernel"]
    if not lanes or (len(lanes) == 1 and not lanes[0].state and lanes[0].first_error is None):
        return ""
    nodes = len({lane.host for lane in lanes}) > 1
    head = ("<th>node</th>" if nodes else "") + "<th>lane</th><th>state</th><th>last line</th><th>first error</th>"
    rows = []
    for lane in lanes:
        cls = ' class="blamed"' if lane.key == timeline.blamed else ""
        node = f"<td>{_q(lane.host or '?')}</td>" if nodes else ""
        rows.append(f'<tr{cls} data-lane="{_q(lane.key)}">{node}<td>{_q(_lane_label(lane))}</td><td>{_q(lane.state or "-")}</td>'
                    f"{_mark_cell(lane.last_line, timeline.first_failure)}{_mark_cell(lane.first_error, timeline.first_failure)}</tr>")
    heading = "Ranks" if any(lane.kind == "rank" for lane in lanes) else "The process"
    return (f'<section id="ranks"><h2>{heading}</h2><table class="ranks"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></section>')


def _in_file_order(items: Sequence[EvidenceItem]) -> list[EvidenceItem]:
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(item.source, len(first_seen))
    return sorted(items, key=lambda i: (first_seen[i.source], i.line is not None, i.line or 0))


def _line(item: EvidenceItem) -> str:
    parts = []
    for text, style in cut(item.text, item.match, MAX_LINE):
        if style == "match":
            parts.append(f"<mark>{_q(text)}</mark>")
        elif style == "dim":
            parts.append(f'<span class="cut">{_q(text)}</span>')
        else:
            parts.append(_q(text))
    return "".join(parts)


def _evidence(item: EvidenceItem, anchor: str, hosts: int) -> str:
    extras = []
    if item.rank is not None:
        extras.append(f"rank {item.rank}")
    if item.host and hosts > 1:
        extras.append(item.host)
    if item.time is not None:
        extras.append(_when(item.time))
    if item.count > 1:
        extras.append(f"{item.count} lines like it")
    meta = f' <span class="dim">{_q(" · ".join(extras))}</span>' if extras else ""
    return f'<li id="{_q(anchor)}"><div class="loc">{_q(item.location())}{meta}</div><pre class="line">{_line(item)}</pre></li>'


def _link(ref: str) -> str:
    if ref.startswith(("https://", "http://")):
        return f'<a href="{_q(ref)}" rel="noreferrer noopener">{_q(ref)}</a>'
    return _q(ref)


def _cause(number: int, cause: Cause, anchors: dict[tuple[str, int | None], str], hosts: int = 1) -> str:
    items = []
    for k, item in enumerate(_in_file_order(cause.evidence)):
        anchor = f"ev-{number}-{k}"
        anchors.setdefault((item.source, item.line), anchor)
        items.append(_evidence(item, anchor, hosts))
    evidence = f'<h4>Evidence</h4><ol class="evidence">{"".join(items)}</ol>' if items else ""
    fix = "".join(f"<li>{_q(step)}</li>" for step in cause.fix)
    fix_html = f'<h4>Fix</h4><ul class="fix">{fix}</ul>' if fix else ""
    extra = []
    if cause.relaunch:
        extra.append(f"<p><b>Relaunch:</b> {_q(relaunch_advice(cause.relaunch))}</p>")
    if cause.explains:
        extra.append(f'<p class="dim">Explains: {_q(", ".join(cause.explains))}</p>')
    if cause.basis:
        extra.append(f'<p class="dim">{_q(cause.basis)}</p>')
    if cause.references:
        extra.append('<p class="dim">See: ' + ", ".join(_link(r) for r in cause.references) + "</p>")
    top = " top" if number == 1 else ""
    return (f'<article class="cause{top}" id="cause-{number}" data-cause="{_q(cause.id)}">'
            f'<h3><span class="n">{number}.</span>{_q(cause.title)}</h3>'
            f'<div class="meta"><span class="badge sev-{_q(cause.severity)}">{_q(cause.severity)}</span> '
            f"{_q(cause.role)} · {cause.confidence:.0%} · <code>{_q(cause.id)}</code></div>"
            f"<p>{_q(cause.explanation)}</p>{evidence}{fix_html}{''.join(extra)}</article>")


def _causes(diagnosis: Diagnosis, serious: Sequence[Cause], minor: Sequence[Cause],
            anchors: dict[tuple[str, int | None], str]) -> str:
    hosts = len({i.host for c in diagnosis.causes for i in c.evidence if i.host})
    if not serious:
        body = '<p class="empty">No cause found at warning or above.</p>'
    else:
        body = "".join(_cause(n, c, anchors, hosts) for n, c in enumerate(serious, 1))
    if minor:
        body += "<details><summary>Informational findings</summary>" + "".join(
            _cause(n, c, anchors, hosts) for n, c in enumerate(minor, len(serious) + 1)) + "</details>"
    return f'<section id="causes"><h2>Causes</h2>{body}</section>'


def _host_events(section: str, heading: str, causes: Sequence[Cause]) -> str:
    if not causes:
        return ""
    rows = []
    for cause in causes:
        first = next((e for e in cause.evidence if e.line is not None), None)
        where = f' <span class="loc">{_q(first.location())}</span>' if first else ""
        basis = f'<br><span class="dim">{_q(cause.basis)}</span>' if cause.basis else ""
        rows.append(f"<li>{_q(cause.title)}{where} <code>{_q(cause.id)}</code>{basis}</li>")
    return f'<section id="{section}"><h2>{_q(heading)}</h2><ul>{"".join(rows)}</ul></section>'


def _rest(diagnosis: Diagnosis) -> str:
    out = []
    if diagnosis.checked:
        items = "".join(f'<li class="{"clean" if c.result == "clean" else "note"}">{_q(c.detail)}</li>'
                        for c in diagnosis.checked)
        out.append(f'<section id="checked"><h2>Checked and clean</h2><ul class="checked">{items}</ul></section>')
    if diagnosis.gaps:
        items = "".join(f"<li><code>{_q(g.source)}</code>: {_q(g.reason)}</li>" for g in diagnosis.gaps)
        out.append(f'<section id="gaps"><h2>Could not check</h2><ul class="gaps">{items}</ul></section>')
    if diagnosis.evidence.notes:
        items = "".join(f"<li>{_q(n)}</li>" for n in diagnosis.evidence.notes)
        out.append(f'<section id="notes"><h2>Notes</h2><ul>{items}</ul></section>')
    if diagnosis.skipped:
        items = "".join(f"<li><code>{_q(s.rule_id)}</code>: {_q(s.reason)}</li>" for s in diagnosis.skipped)
        out.append(f'<section id="skipped"><details><summary>{len(diagnosis.skipped)} rule(s) skipped for missing '
                   f"evidence</summary><ul>{items}</ul></details></section>")
    return "".join(out)


def render_html(diagnosis: Diagnosis) -> str:
    serious, context, minor = partition(diagnosis)
    anchors: dict[tuple[str, int | None], str] = {}
    causes = _causes(diagnosis, serious, minor, anchors)  # first: the timeline links to their evidence
    run = diagnosis.evidence.run
    title = f"diagnose: {run.id} - {state_words(diagnosis.state) or 'report'}"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta name="generator" content="diagnose {_q(__version__)}">',
        f"<title>{_q(title)}</title><style>{CSS}</style></head><body><main>",
        _verdict(diagnosis, serious), _identity(diagnosis), _timeline(diagnosis, anchors), _ranks(diagnosis.timeline),
        causes,
        _host_events("context", "Context (host events nothing ties to this run)", context),
        _host_events("elsewhere", "Elsewhere on this host (not this run's)", diagnosis.elsewhere),
        _rest(diagnosis),
        f"<footer>diagnose {_q(__version__)}" + (f" · evidence collected {_q(_when(run.collected_at))}"
                                                  if run.collected_at is not None else "") + "</footer>",
        "</main></body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def report(diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
           rules: Mapping[str, object] | None = None, fail_on: str = "error") -> None:
    out.write(render_html(diagnosis))
