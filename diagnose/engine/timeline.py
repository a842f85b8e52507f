"""The run told in time, for reports that show it: one lane per rank (and per node), and on each
the log's activity, its last line, its first error, watchdog timeouts and exits; a lane per host
for the kernel's events (OOM kills, Xids, segfaults), each tied to the run or not.

Built once per diagnosis whose reports draw it (app.diagnose(timeline=...)) from what the engine
already knows (the causes' evidence, the collective-timeout records and torchelastic summary of
the run log, the kernel events and their attribution) plus a bounded read of each log's head and
tail for activity and line times. It lives on the Diagnosis, so reports mask it like everything
else: they never read a log themselves.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from diagnose.engine.analyzers.collectives import analyse
from diagnose.engine.analyzers.runlog import LogLine, line_rank, own_output, run_log
from diagnose.engine.attribution import ELSEWHERE, OWN, attribute
from diagnose.engine.findings import Cause, Lane, Mark, Timeline
from diagnose.engine.kernel_events import KernelEvent
from diagnose.engine.runview import RunView, own_logs
from diagnose.evidence import logview
from diagnose.evidence.lines import log_time, strip_ansi, strip_prefix
from diagnose.evidence.model import Evidence, EvidenceItem, TextFile
from diagnose.vocab import Role, Severity

HEAD_BYTES = 64 * 1024
# Activity and line times near the end (where a run fails): this much in all, shared by the
# logs of the run (a run of 64 per-rank files reads 32 KiB of each), so building
# the timeline costs a bounded read, whatever the size of the logs.
TAIL_BUDGET = 512 * 1024
MIN_TAIL = 32 * 1024
MTIME_SLACK = 3600.0  # seconds between a loose file's last timestamp and an mtime that is still its last write
BUCKETS = 240  # activity is kept as at most this many (time, lines) buckets per lane
MAX_MARKS_PER_LANE = 40

# Mark kinds, in the words reports use for them.
LAST_LINE = "last-line"
ERROR = "error"
TIMEOUT = "timeout"
OOM_KILL = "oom-kill"
XID = "xid"
SEGFAULT = "segfault"
EXIT = "exit"
FAILURES = (ERROR, TIMEOUT, OOM_KILL, XID, SEGFAULT, EXIT)  # what may be the first failure
KERNEL_KINDS = {"oom_kill": OOM_KILL, "xid": XID, "segfault": SEGFAULT}

MAIN = "main"  # the lane of lines without a rank when the run has no ranks
LAUNCHER = "launcher"  # lines without a rank (torchrun's agent, a wrapper script) beside rank lanes


# ---------------------------------------------------------------- reading the logs

@dataclass
class _FileLines:
    """Timestamped lines of one log (head and tail), to place untimed lines in time."""

    source: TextFile
    numbers: list[int] = field(default_factory=list)  # line numbers of timestamped lines, ascending
    times: list[float] = field(default_factory=list)
    last_line_no: int = 0
    trust_mtime: bool = True  # the file's mtime is its last write (not a copy's time): see last_write()

    def last_write(self) -> float | None:
        """The file's mtime, when it can be the time of its last line: collected from the run (a
        live run, a bundle) or, for loose files, no more than MTIME_SLACK after its last timestamp
        (a log copied out of CI has its copy's time)."""
        mtime = self.source.on_clock(self.source.mtime)  # on the report's clock (its node's offset)
        if mtime is None:
            return None
        if self.times:
            last = max(self.times)
            return mtime if last - 1.0 <= mtime <= last + MTIME_SLACK else None
        return mtime if self.trust_mtime else None

    def time_at(self, line_no: int) -> tuple[float | None, bool]:
        """The time of a line: its own, else the last write when it is the file's last line, else
        the nearest earlier timestamped line's (approximate)."""
        at = bisect.bisect_right(self.numbers, line_no) - 1
        if at >= 0 and self.numbers[at] == line_no:
            return self.times[at], False
        last_write = self.last_write() if line_no >= self.last_line_no else None
        if last_write is not None:
            return last_write, True
        if at >= 0:
            return self.times[at], True
        return None, False


def _lane_key(rank: int | None, host: str | None, hosts: int, has_ranks: bool) -> str:
    name = f"rank {rank}" if rank is not None else (LAUNCHER if has_ranks else MAIN)
    return f"{host} {name}" if hosts > 1 and host else name


def _read(source: TextFile, tail_bytes: int) -> list[tuple[int, str]]:
    """(line number, text) of the head and the tail of a log, without ANSI escapes."""
    tail, first = logview.tail(source, tail_bytes)
    lines = [(first + n, t) for n, t in enumerate(strip_ansi(tail).decode("utf-8", "replace").split("\n"))]
    if first > 1:
        head = strip_ansi(logview.head(source, HEAD_BYTES)).decode("utf-8", "replace").split("\n")[:-1]
        lines = [(n + 1, t) for n, t in enumerate(head) if n + 1 < first] + lines
    return [(n, t) for n, t in lines if t.strip()]


def _scan_logs(logs: Sequence[TextFile], host: str | None, hosts: int, has_ranks: bool,
               trust_mtime: bool) -> tuple[dict[str, list[float]], dict[str, _FileLines], dict[str, list[LogLine]], set[int], set[str]]:
    activity: dict[str, list[float]] = {}
    files: dict[str, _FileLines] = {}
    last_own: dict[str, list[LogLine]] = {}  # lane -> its last own line in each file
    ranks: set[int] = set()
    early: set[str] = set()
    tail_bytes = max(MIN_TAIL, TAIL_BUDGET // max(len(logs), 1))
    for source in logs:
        node = source.host or host  # several nodes: each file's own
        try:
            lines = _read(source, tail_bytes)
        except Exception:  # a log we scanned but cannot re-read adds nothing to the timeline
            continue
        info = files[source.display] = _FileLines(source, last_line_no=lines[-1][0] if lines else 0,
                                                  trust_mtime=trust_mtime)
        keyed: list[tuple[str, int | None]] = []
        for line_no, text in lines:
            rank = line_rank(text, source.rank)
            if rank is not None:
                ranks.add(rank)
            key = _lane_key(rank, node, hosts, has_ranks or rank is not None)
            keyed.append((key, rank))
            moment = source.on_clock(log_time(text, source.year))
            if moment is not None:
                info.numbers.append(line_no)
                info.times.append(moment)
                activity.setdefault(key, []).append(moment)
            elif not activity.setdefault(key, []):
                early.add(key)
        # Each lane's last line of its own in this file: from the end back, until every lane of
        # the file has one. The latest of the files' wins (below).
        wanting = {key for key, _rank in keyed}
        for (line_no, text), (key, rank) in zip(reversed(lines), reversed(keyed), strict=True):
            if not wanting:
                break
            if key in wanting and own_output(text):
                last_own.setdefault(key, []).append(LogLine(source.display, line_no, text, rank, source.year, source.host,
                                                            source.clock_offset))
                wanting.discard(key)
        last_write = info.last_write()
        if last_write is not None and lines and source.rank is not None:
            own_file = _lane_key(source.rank, node, hosts, has_ranks)
            activity.setdefault(own_file, []).append(last_write)
    return activity, files, last_own, ranks, early


# ---------------------------------------------------------------- building it

def build_timeline(evidence: Evidence, causes: Sequence[Cause], events: Sequence[KernelEvent],
                   view: RunView) -> Timeline:
    """The run in time. Empty lanes (nothing timed, nothing failed) are left out."""
    host = evidence.run.host
    item_hosts = {item.host for cause in causes for item in cause.evidence if item.host}
    text_hosts = {t.host for t in evidence.texts if t.host}  # several nodes merged
    hosts = len(item_hosts | text_hosts) if text_hosts else len(item_hosts | ({host} if host else set()))
    by_display = {t.display: t for t in evidence.texts}

    def host_of(display: str) -> str | None:
        text = by_display.get(display)
        return text.host if text is not None and text.host else host
    logs = own_logs(evidence)
    log = run_log(evidence)
    has_ranks = bool(log.ranks) or any(t.rank is not None for t in logs)
    activity, files, last_own, ranks, early = _scan_logs(logs, host, hosts, has_ranks, evidence.run.mode != "scan")
    ranks |= log.ranks
    marks: list[Mark] = []

    def key_of(rank: int | None, item_host: str | None = None) -> str:
        return _lane_key(rank, item_host or host, hosts, has_ranks)

    def place(source: str, line: int | None, moment: float | None) -> tuple[float | None, bool]:
        if moment is not None or line is None or source not in files:
            return moment, False
        return files[source].time_at(line)

    # The last line each lane's own code printed.
    last_lines: dict[str, Mark] = {}
    for key, candidates in last_own.items():
        for line in candidates:
            moment, approx = place(line.source, line.line_no, line.time)
            mark = Mark(LAST_LINE, key, moment, _bare(line.body), line.text, line.source, line.line_no, approx)
            held = last_lines.get(key)
            # The latest; at the same time (a line in the console log and in the rank's own
            # file) the rank's own file, which is read after the console.
            if held is None or (moment is not None and (held.time is None or moment >= held.time)):
                last_lines[key] = mark
    own_lines = {(line.source, line.line_no) for candidates in last_own.values() for line in candidates}
    # Collective timeouts: which rank's watchdog fired, which rank was behind.
    verdict = analyse(log)
    for rank, records in verdict.timed_out.items():
        record = records[0]
        what = f"{record.op} #{record.seq}" if record.op and record.seq is not None else (record.op or "collective")
        moment, approx = place(record.line.source, record.line.line_no, record.line.time)
        marks.append(Mark(TIMEOUT, key_of(rank, record.line.host), moment, f"watchdog timeout ({what})", record.line.text,
                          record.line.source, record.line.line_no, approx))
    # Exits: torchelastic's summary (per rank, with its time), exit records.
    exits: dict[str, str] = {}
    summary = log.summary
    in_summary: set[tuple[str, int]] = set()  # its lines are shown as the exits they report
    if summary is not None:
        source, found = summary
        last_no = max((no for f in found.failures for no, _text in f.lines), default=found.line_no)
        in_summary.update((source, no) for no in range(found.line_no, last_no + 1))
        summary_text = by_display.get(source)
        for failure in found.failures:
            lane = key_of(failure.rank, host_of(source))
            words = _exit_words(failure.exitcode, failure.signal)
            exits[lane] = words
            moment = log_time(failure.time.replace("_", " ")) if failure.time else None
            if summary_text is not None:
                moment = summary_text.on_clock(moment)
            at = failure.lines[0][0] if failure.lines else failure.line_no
            said = failure.error_raw or failure.error or words
            marks.append(Mark(EXIT, lane, moment, words, said, source, at, moment is None))
    for exit_record in evidence.exits or ():
        lane = key_of(exit_record.rank, exit_record.host)
        if lane in exits and exit_record.rank is not None:
            continue
        words = _exit_words(exit_record.code, exit_record.signal)
        exits.setdefault(lane, words)
        marks.append(Mark(EXIT, lane, exit_record.time, words, exit_record.message or words, exit_record.source, None,
                          exit_record.time is None))
    # Kernel events of the run's window, tied to the run or not.
    start, end = view.window()
    for event in events:
        verdict_of = attribute(event, view)
        inside = event.time is None or ((start is None or event.time >= start) and (end is None or event.time <= end))
        if verdict_of.verdict != OWN and (verdict_of.verdict == ELSEWHERE or not inside):
            continue
        node = host_of(event.source)
        kernel = f"kernel {node}" if hosts > 1 and node else "kernel"
        marks.append(Mark(KERNEL_KINDS.get(event.kind, event.kind), kernel, event.time, event.describe(), event.text,
                          event.source, event.line, own=verdict_of.verdict == OWN))
    # Errors: the evidence of the causes, on the lane of its rank.
    for cause in causes:
        if cause.role == Role.CONTEXT or not Severity(cause.severity).at_least(Severity.WARNING):
            continue
        placed: dict[str, Mark] = {}  # per lane, the cause's earliest line that says what failed
        telling: set[str] = set()  # lanes whose mark is such a line (not a traceback's header or frames)
        for item in cause.evidence:
            if item.line is None or item.source not in files or (item.source, item.line) in in_summary:
                continue
            key = key_of(item.rank, item.host)
            tells = not _TRACEBACK_FRAME.match(strip_prefix(item.text))
            if (item.source, item.line) in own_lines and not (tells and key in placed and key not in telling):
                continue  # a lane's last line, quoted as where it stopped: marked as that (unless it alone says what)
            moment, approx = place(item.source, item.line, item.time)
            held = placed.get(key)
            if held is not None and (key in telling or not tells) and (
                    moment is None or (held.time is not None and held.time <= moment)):
                continue
            if held is not None and key in telling and not tells:
                continue
            placed[key] = Mark(ERROR, key, moment, _short(item), item.text, item.source, item.line, approx, cause=cause.id)
            if tells:
                telling.add(key)
        marks.extend(placed.values())
    return _assemble(marks, activity, last_lines, exits, ranks, verdict.lagging, causes, host, hosts, has_ranks, early)


def _assemble(marks: list[Mark], activity: dict[str, list[float]], last_lines: dict[str, Mark], exits: dict[str, str],
              ranks: set[int], lagging: Iterable[int], causes: Sequence[Cause], host: str | None, hosts: int,
              has_ranks: bool, early: set[str]) -> Timeline:
    times = [t for ts in activity.values() for t in ts] + [m.time for m in marks if m.time is not None]
    times += [m.time for m in last_lines.values() if m.time is not None]
    own_times = [m.time for m in marks if m.time is not None and (m.own or not m.lane.startswith("kernel"))]
    if not times:
        return Timeline()
    start = min(times)
    end = max(max(times), max(own_times, default=start))
    keys = {m.lane for m in marks} | set(last_lines) | {k for k, ts in activity.items() if ts}
    # A rank seen only in passing (a summary, an exit record) joins its lane; with several nodes
    # that lane is named by its node, so a rank that has one already gets no second one.
    present = {_parse_key(k, host)[1] for k in keys if _parse_key(k, host)[0] == "rank"}
    keys |= {_lane_key(r, host, hosts, has_ranks) for r in ranks if r not in present}
    lagging_set = set(lagging)
    lagging_keys = {k for k in keys if _parse_key(k, host)[0] == "rank" and _parse_key(k, host)[1] in lagging_set}
    by_lane: dict[str, list[Mark]] = {}
    marks = [m if m.time is not None or m.kind != EXIT else replace(m, time=end, approx=True) for m in marks]
    for mark in sorted(marks, key=lambda m: (m.time is None, m.time or 0.0, m.kind == ERROR, m.line or 0)):
        kept = by_lane.setdefault(mark.lane, [])
        if len(kept) < MAX_MARKS_PER_LANE and not any(_same(mark, k) for k in kept):
            kept.append(mark)
    lanes: list[Lane] = []
    for key in sorted(keys, key=_lane_order):
        lane_marks = by_lane.get(key, [])
        first_error = next((m for m in lane_marks if m.kind in (ERROR, TIMEOUT) and m.time is not None), None) or \
            next((m for m in lane_marks if m.kind in (ERROR, TIMEOUT)), None)
        ts = sorted(activity.get(key, []))
        states = []
        if any(m.kind == TIMEOUT for m in lane_marks):
            states.append("watchdog timeout")
        if key in lagging_keys:
            states.append("behind (hung)")
        if key in exits:
            states.append(exits[key])
        kind, rank, lane_host = _parse_key(key, host)
        lanes.append(Lane(key, kind, rank, lane_host, "; ".join(states), ts[0] if ts else None, ts[-1] if ts else None,
                          _buckets(ts, start, end), key in early and bool(ts), last_lines.get(key), first_error))
    all_marks = tuple(m for lane in lanes for m in by_lane.get(lane.key, []))
    failures = [m for m in all_marks if m.kind in FAILURES and m.own and not (m.kind == EXIT and m.label == "exit 0")]
    timed = [m for m in failures if m.time is not None]
    first = min(timed, key=lambda m: (m.time or 0.0, m.line or 0)) if timed else (failures[0] if failures else None)
    return Timeline(tuple(lanes), all_marks, start, end, first, _blamed(causes, host, hosts, has_ranks))


def _blamed(causes: Sequence[Cause], host: str | None, hosts: int, has_ranks: bool) -> str:
    """The lane the top cause points at: the rank of its first evidence line."""
    top = next((c for c in causes if c.role != Role.CONTEXT), None)
    if top is None:
        return ""
    first = next((i for i in top.evidence if i.rank is not None), None)  # analyzers lead with the telling line
    return _lane_key(first.rank, first.host or host, hosts, has_ranks) if first is not None else ""


def _same(mark: Mark, other: Mark) -> bool:
    """The same line shown twice (several causes quote it): kept once, on its first cause."""
    if mark.kind != other.kind and ERROR not in (mark.kind, other.kind):
        return False
    if mark.kind == ERROR or other.kind == ERROR:
        # The same line in the console log and in the rank's own file, or the error line of a
        # timeout or exit marked already.
        return mark.text == other.text or (mark.source, mark.line) == (other.source, other.line) or \
            (mark.time is not None and mark.time == other.time and (mark.label == other.label or other.kind != ERROR))
    return (mark.source, mark.line, mark.label) == (other.source, other.line, other.label)


def _buckets(times: Sequence[float], start: float, end: float) -> tuple[tuple[float, int], ...]:
    if not times:
        return ()
    width = max(end - start, 1e-6) / BUCKETS
    counts: dict[int, int] = {}
    for moment in times:
        index = min(BUCKETS - 1, max(0, int((moment - start) / width)))
        counts[index] = counts.get(index, 0) + 1
    return tuple((start + index * width, count) for index, count in sorted(counts.items()))


def _lane_order(key: str) -> tuple[int, str, int]:
    name = key.rsplit(" ", 2)
    if key.startswith("kernel"):
        return (3, key, 0)
    if len(name) >= 2 and name[-2] == "rank" and name[-1].isdigit():
        return (1, " ".join(name[:-2]), int(name[-1]))
    return (0 if key.endswith((MAIN, LAUNCHER)) else 2, key, 0)


def _parse_key(key: str, host: str | None) -> tuple[str, int | None, str | None]:
    if key.startswith("kernel"):
        return "kernel", None, key.removeprefix("kernel").strip() or host
    words = key.split(" ")
    if len(words) >= 2 and words[-2] == "rank" and words[-1].isdigit():
        return "rank", int(words[-1]), " ".join(words[:-2]) or host
    return (MAIN if words[-1] == MAIN else LAUNCHER), None, " ".join(words[:-1]) or host


def _exit_words(code: int | None, signal: str | int | None) -> str:
    """ "exit 1", "SIGKILL (exit 137)", "SIGTERM (-15)"."""
    if isinstance(signal, int):
        import signal as signals

        try:
            signal = signals.Signals(signal).name
        except ValueError:
            signal = f"signal {signal}"
    if signal:
        return f"{signal}" + ("" if code is None else f" ({code})" if code < 0 else f" (exit {code})")
    if code is None:
        return "exited"
    return f"exit {code}"


# A traceback's header, its frames and code lines (indented), the lines between chained ones:
# they say where, not what failed; a lane's first error is shown by a line that says what.
_TRACEBACK_FRAME = re.compile(r"\s|Traceback \(most recent call last\)|During handling of the above exception"
                              r"|The above exception was the direct cause")
_HEADER = re.compile(r"^\[?[IWEF]\d{4} \d\d:\d\d:\d\d[.\d]* [^\]]{0,80}\]\s*|^(?:\[(?:PG [^\]]{0,80}|Rank \d+)\]\s*)+")


_LEADING_TIME = re.compile(r"^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s*")


def _bare(text: str) -> str:
    """A line without the timestamp it starts with: reports show its time beside it."""
    return _LEADING_TIME.sub("", text, count=1) or text


def _short(item: EvidenceItem, limit: int = 120) -> str:
    """The part of an evidence line worth a label: what matched, else the line without its rank
    prefixes, glog header and process-group tags."""
    if item.match and len(item.match.strip()) >= 12:
        text = item.match.strip()
    else:
        text = LogLine("", 0, item.text, None).body
        for _ in range(2):
            text = _HEADER.sub("", text, count=1)
    return text if len(text) <= limit else text[: limit - 1] + "…"
