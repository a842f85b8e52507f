"""The run's timeline as inline SVG: one lane per rank (and node), one per host's kernel log;
on each the log's activity, its last line, errors, watchdog timeouts, kernel events and exits
placed in time, the first failure marked across every lane. Every text is escaped here; the
shapes carry data- attributes and classes a test (or a reader's devtools) can find.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from html import escape

from diagnose.engine.findings import Lane, Mark, Timeline

WIDTH = 1200
LABEL_W = 190  # the lane labels' column
RIGHT = 24
AXIS_H = 34
LANE_H = 40
MARK_R = 6
# Steps of the time axis, in seconds: the first giving at most MAX_TICKS ticks is used.
STEPS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)
MAX_TICKS = 9
KIND_WORDS = {"last-line": "last line", "error": "error", "timeout": "watchdog timeout", "oom-kill": "OOM kill",
              "xid": "GPU Xid", "segfault": "segfault", "exit": "exit"}


def _q(text: object) -> str:
    return escape(str(text), quote=True)


def clock(moment: float | None, seconds: bool = True) -> str:
    if moment is None:
        return "?"
    return time.strftime("%H:%M:%S" if seconds else "%H:%M", time.localtime(moment))


class _Scale:
    def __init__(self, start: float, end: float) -> None:
        if end - start < 1.0:  # one moment: give it a little room either side
            start, end = start - 0.5, end + 0.5
        pad = (end - start) * 0.03
        self.start, self.end = start - pad, end + pad
        self.left, self.right = LABEL_W, WIDTH - RIGHT

    def x(self, moment: float) -> float:
        return round(self.left + (moment - self.start) / (self.end - self.start) * (self.right - self.left), 2)

    def step(self) -> float:
        return next((s for s in STEPS if (self.end - self.start) / s <= MAX_TICKS), STEPS[-1])

    def ticks(self) -> list[float]:
        step = self.step()
        offset = time.localtime(self.start).tm_gmtoff  # ticks on round local times
        first = (int((self.start + offset) // step) + 1) * step - offset
        count = int((self.end - self.start) // step) + 1
        return [first + n * step for n in range(count) if first + n * step <= self.end]

    def label(self, moment: float) -> str:
        if self.step() >= 1:
            return clock(moment)
        tenths = round(moment * 10)  # 32.99 is 33.0, not 32.10
        return clock(tenths / 10) + f".{tenths % 10}"


def _shape(mark: Mark, x: float, y: float) -> str:
    r = MARK_R
    if mark.kind == "timeout":
        return f'<path d="M{x} {y - r - 1} L{x + r + 1} {y + r} L{x - r - 1} {y + r} Z"/>'
    if mark.kind == "exit":
        return f'<rect x="{x - r + 1}" y="{y - r + 1}" width="{2 * r - 2}" height="{2 * r - 2}"/>'
    if mark.kind in ("oom-kill", "xid", "segfault"):
        return f'<path d="M{x} {y - r - 2} L{x + r + 2} {y} L{x} {y + r + 2} L{x - r - 2} {y} Z"/>'
    if mark.kind == "last-line":
        return f'<circle cx="{x}" cy="{y}" r="{r - 1}"/>'
    return f'<circle cx="{x}" cy="{y}" r="{r}"/>'


def _tip(mark: Mark) -> str:
    where = f"{mark.source}:{mark.line}" if mark.line is not None else mark.source
    when = ("about " if mark.approx else "") + clock(mark.time)
    lines = [f"{when}  {KIND_WORDS.get(mark.kind, mark.kind)}: {mark.label}", where]
    if mark.text and mark.text != mark.label:
        lines.append(mark.text if len(mark.text) <= 400 else mark.text[:399] + "…")
    if not mark.own:
        lines.append("nothing ties this host event to the run")
    return "\n".join(lines)


def timeline_svg(timeline: Timeline, anchors: Mapping[tuple[str, int | None], str],
                 lane_label: Callable[[Lane], str]) -> str:
    """The SVG, or "" when nothing of the run has a time. anchors: (source, line) -> the id of
    that evidence line in the page, so a mark links to its proof."""
    if timeline.start is None or timeline.end is None or not timeline.lanes:
        return ""
    scale = _Scale(timeline.start, timeline.end)
    height = AXIS_H + LANE_H * len(timeline.lanes) + 10
    out = [f'<svg id="timeline-svg" class="timeline" viewBox="0 0 {WIDTH} {height}" width="100%" data-plot-left="{LABEL_W}" '
           f'role="img" aria-labelledby="timeline-title" xmlns="http://www.w3.org/2000/svg">',
           f'<title id="timeline-title">Timeline of the run, {clock(timeline.start)} to {clock(timeline.end)}</title>']
    out.append('<g class="axis">')
    for tick in scale.ticks():
        x = scale.x(tick)
        out.append(f'<line x1="{x}" y1="{AXIS_H - 6}" x2="{x}" y2="{height - 8}" class="grid"/>'
                   f'<text x="{x}" y="{AXIS_H - 12}" text-anchor="middle">{_q(scale.label(tick))}</text>')
    out.append("</g>")
    first = timeline.first_failure
    for index, lane in enumerate(timeline.lanes):
        top = AXIS_H + index * LANE_H
        mid = top + LANE_H / 2
        classes = ["lane", f"lane-{lane.kind}"] + (["blamed"] if lane.key == timeline.blamed else [])
        out.append(f'<g class="{" ".join(classes)}" data-lane="{_q(lane.key)}" data-kind="{_q(lane.kind)}">')
        out.append(f'<rect class="lane-bg" x="0" y="{top}" width="{WIDTH}" height="{LANE_H}"/>')
        out.append(f'<text class="lane-label" x="10" y="{mid + 4}">{_q(lane_label(lane))}</text>')
        if lane.untimed_before and lane.first is not None and lane.first > timeline.start:
            x0, x1 = scale.x(timeline.start), scale.x(lane.first)
            out.append(f'<rect class="active early" x="{x0}" y="{mid - 3}" width="{max(x1 - x0, 2)}" height="6" rx="3">'
                       f'<title>{_q(f"lines without a time before {clock(lane.first)}")}</title></rect>')
        if lane.first is not None and lane.last is not None:
            x1, x2 = scale.x(lane.first), scale.x(lane.last)
            out.append(f'<rect class="active" x="{x1}" y="{mid - 3}" width="{max(x2 - x1, 2)}" height="6" rx="3">'
                       f'<title>{_q(f"log activity {clock(lane.first)} to {clock(lane.last)}")}</title></rect>')
        peak = max((count for _t, count in lane.activity), default=1)
        for moment, count in lane.activity:
            h = 4 + 12 * count / peak
            out.append(f'<rect class="tick" x="{scale.x(moment)}" y="{mid - h / 2}" width="2" height="{round(h, 1)}"/>')
        if lane.last_line is not None and lane.last_line.time is not None:  # first: failures are drawn over it
            out.append(_mark(lane.last_line, scale.x(lane.last_line.time), mid, False, anchors))
        for mark in timeline.marks:
            if mark.lane != lane.key or mark.time is None:
                continue
            out.append(_mark(mark, scale.x(mark.time), mid, mark == first, anchors))
        out.append("</g>")
    if first is not None and first.time is not None:
        x = scale.x(first.time)
        right = x > WIDTH - RIGHT - 110  # near the right edge the label goes to the left of the line
        anchor = ' text-anchor="end"' if right else ""
        label = f'<text x="{x - 5 if right else x + 5}" y="{AXIS_H + 11}"{anchor}>first failure</text>'
        out.append(f'<g id="first-failure" class="first-failure" data-lane="{_q(first.lane)}" data-kind="{_q(first.kind)}" '
                   f'data-time="{first.time}"><line x1="{x}" y1="{AXIS_H - 4}" x2="{x}" y2="{height - 8}"/>{label}</g>')
    out.append("</svg>")
    return "".join(out)


def _mark(mark: Mark, x: float, y: float, first: bool, anchors: Mapping[tuple[str, int | None], str]) -> str:
    classes = ["mark", f"kind-{mark.kind}"] + (["first"] if first else []) + ([] if mark.own else ["not-own"])
    body = (f'<g class="{" ".join(classes)}" data-kind="{_q(mark.kind)}" data-lane="{_q(mark.lane)}" '
            f'data-time="{mark.time}"><title>{_q(_tip(mark))}</title>{_shape(mark, x, y)}</g>')
    anchor = anchors.get((mark.source, mark.line))
    return f'<a href="#{_q(anchor)}">{body}</a>' if anchor else body
