"""One pass over the tail of every log of a run, shared by the multi-rank analyzers.

The analyzers of several rules look at the same run; what they need from the logs (each rank's
last line, the torchelastic summary, the collective-timeout records of every rank, the last
exception per rank) is read once per run and kept while the same evidence is analysed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

from diagnose.engine.findings import reread_gap
from diagnose.engine.tracebacks import Crash, find_crashes, on_clock
from diagnose.evidence import logview
from diagnose.evidence.lines import LinePrefix, log_time, rank_of, split_prefix, strip_ansi, strip_prefix
from diagnose.evidence.logview import TAIL_BYTES
from diagnose.evidence.model import Evidence, EvidenceItem, Gap, TextFile, TextKind
from diagnose.evidence.parsers.elastic import ROOT_HEADER, ElasticSummary, parse_failure_summary

# Torch C++ log lines and NCCL's own lines are the library talking, not the training script.
_LIBRARY_LINE = re.compile(
    r"^\[?[IWEF]\d{4} \d\d:\d\d:\d\d|^\[[IWEF] [\w.]+:\d+\]|NCCL (?:INFO|WARN)|^Exception raised from |^frame #\d+"
    r"|^(?:Extension modules:|Fatal Python error|Thread 0x|Current thread 0x|terminate called|<no Python frame>)"
)
_INNER_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (?P<rank>\d+)\]")
_PG = re.compile(r"\[PG (?:ID )?(?P<pg>\d+)")

# -- collective timeouts (formats by torch version: research/nccl.md; torch 2.11 from a real 2xH200 run)
_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
    r"(?:, NumelIn=(?P<nin>\d+), NumelOut=(?P<nout>\d+))?, Timeout\(ms\)=(?P<timeout>\d+)\) ran for (?P<ran>\d+) milliseconds"
)
_BLOCKING = re.compile(
    r"Work WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<nin>\d+), NumelOut=(?P<nout>\d+))?, "
    r"Timeout\(ms\)=(?P<timeout>\d+)\) timed out in blocking wait"
)
# "Timeout at NCCL work: N, last enqueued NCCL work: E, last completed NCCL work: C." (2.3-2.5)
# "... detected by watchdog at work: N, last enqueued NCCL work: E, last completed NCCL work: C." (2.4-2.5)
# "... failure detected by watchdog at work sequence id: N PG status: last enqueued work: E, last completed work: C" (2.6+)
# "Received a dump signal due to a collective timeout from  rank 0 ... Last enqueued NCCL work: E, last completed NCCL work: C." (a rank that did not time out itself)
_STATUS = re.compile(
    r"(?:at (?:NCCL )?work(?: sequence id)?: (?P<seq>-?\d+)(?:,| PG status:) )?[Ll]ast enqueued (?:NCCL )?work: (?P<enq>-?\d+), "
    r"last completed (?:NCCL )?work: (?P<done>-?\d+)"
)
_DUMP = re.compile(r"dump signal due to a collective timeout from\s+(?:rank (?P<from>\d+)|this local rank)")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (?P<timeout>\d+)ms for (?P<op>recv|send) operation to complete")
# Device-side errors: a kernel's assertion (printed by the GPU), a CUDA error reported to the host.
_DEVICE_LINE = re.compile(r"\.cuh?:\d+: .{0,200}?block: \[[\d,]+\], thread: \[[\d,]+\] Assertion `|CUDA error: |CUDA_ERROR_\w+: ")
MAX_DEVICE_LINES = 64
MAX_NCCL_LINES = 32
_LAST_ERROR = re.compile(r"Last error:\s*(?P<rest>.*)$")


@dataclass(frozen=True)
class LogLine:
    source: str
    line_no: int
    text: str
    rank: int | None
    year: int | None = None
    host: str | None = None  # the node whose file it is (several hosts merged)
    clock_offset: float = 0.0  # that node's clock offset (TextFile.clock_offset)

    @property
    def time(self) -> float | None:
        moment = log_time(self.text, self.year)
        return moment - self.clock_offset if moment is not None else None

    def item(self, host: str | None = None) -> EvidenceItem:
        return EvidenceItem(self.source, self.text, self.line_no, self.time, self.rank, self.host or host)

    @property
    def body(self) -> str:
        """The line without the launchers' prefixes (lines.split_prefix)."""
        return strip_prefix(self.text).strip()


@dataclass
class CollectiveRecord:
    """One line of a collective timeout, or of a rank's progress when another rank timed out."""

    kind: str  # watchdog | blocking | status | dump | gloo
    line: LogLine
    rank: int | None
    pg: str | None = None
    seq: int | None = None
    op: str | None = None
    numel: str | None = None  # "NumelIn/NumelOut", to tell mismatched collectives apart
    timeout_ms: int | None = None
    ran_ms: int | None = None
    enqueued: int | None = None
    completed: int | None = None

    @property
    def timed_out(self) -> bool:
        """This rank's own watchdog/timeout fired (a dump line only reports another rank's)."""
        return self.kind != "dump"


@dataclass
class RunLog:
    ranks: set[int] = field(default_factory=set)  # every rank seen: line prefixes, per-rank files, summaries, exits
    last_line: dict[int, LogLine] = field(default_factory=dict)  # last line each rank's own code printed
    collectives: list[CollectiveRecord] = field(default_factory=list)
    summaries: list[tuple[str, ElasticSummary]] = field(default_factory=list)  # (source, summary)
    crash_sources: list[TextFile] = field(default_factory=list)  # read again for crashes only when asked
    device_lines: list[LogLine] = field(default_factory=list)  # kernel assertions and CUDA errors, first few per file
    nccl_warnings: list[LogLine] = field(default_factory=list)  # NCCL's own WARN lines, first few per file
    nccl_last_errors: list[LogLine] = field(default_factory=list)  # the line after torch's "Last error:"
    host: str | None = None
    gaps: list[Gap] = field(default_factory=list)  # logs the scan read that could not be read again

    _crashes: list[tuple[str, Crash]] | None = None

    @property
    def crashes(self) -> list[tuple[str, Crash]]:
        """The last exception per rank/thread of every file (found only when an analyzer asks: it is slow)."""
        if self._crashes is None:
            found: list[tuple[str, Crash]] = []
            for source in self.crash_sources:
                try:
                    found.extend((source.display, on_clock(crash, source)) for crash in find_crashes(source))
                except Exception as exc:  # a log that cannot be re-read has no crashes to offer
                    self.gaps.append(reread_gap(source.display, exc, "its last exception was not looked for"))
            self._crashes = found
        return self._crashes

    def crashes_of(self, rank: int) -> list[tuple[str, Crash]]:
        return [(source, crash) for source, crash in self.crashes if crash.rank == rank]

    @property
    def summary(self) -> tuple[str, ElasticSummary] | None:
        """The torchelastic summary to trust: the last one printed."""
        return self.summaries[-1] if self.summaries else None


def line_rank(text: str, file_rank: int | None, prefix: LinePrefix | None = None) -> int | None:
    """Global rank of a line: torch's [rankN] (after torchrun's [defaultN]), NCCL's "[PG .. Rank N]", the file's rank.
    `prefix`: the line's launcher prefixes, when the caller has them already."""
    rank = rank_of(text) if prefix is None else prefix.global_rank
    if rank is not None:
        return rank
    inner = _INNER_RANK.search(text[:400]) if "Rank " in text else None
    if inner:
        return int(inner.group("rank"))
    return file_rank


def _collective(line: LogLine) -> CollectiveRecord | None:
    text = line.text
    if "WorkNCCL" in text:
        match = _WATCHDOG.search(text) or _BLOCKING.search(text)
        if match:
            kind = "watchdog" if match.re is _WATCHDOG else "blocking"
            numel = f"{match.group('nin')}/{match.group('nout')}" if match.group("nin") else None
            ran = match.groupdict().get("ran")
            return CollectiveRecord(kind, line, line.rank, _pg(text), int(match.group("seq")), match.group("op"), numel,
                                    int(match.group("timeout")), int(ran) if ran else None)
    if "ast enqueued" in text:
        match = _STATUS.search(text)
        if match:
            dump = _DUMP.search(text)
            kind = "dump" if dump and dump.group("from") is not None else "status"
            seq = match.group("seq")
            if kind == "status" and seq is None and not dump:
                return None
            return CollectiveRecord(kind, line, line.rank, _pg(text), int(seq) if seq is not None else None,
                                    enqueued=int(match.group("enq")), completed=int(match.group("done")))
    if "Timed out waiting" in text:
        match = _GLOO_TIMEOUT.search(text)
        if match:
            return CollectiveRecord("gloo", line, line.rank, None, None, match.group("op"), None, int(match.group("timeout")))
    return None


def own_output(text: str, body: str | None = None) -> bool:
    """A line the training code printed itself: not torch's / NCCL's logging, not a traceback.
    `body`: the line past its launcher prefixes, when the caller has it already."""
    if body is None:
        body = strip_prefix(text)
    if not body.strip() or body[:1].isspace():  # traceback frames and code lines are indented
        return False
    return not _LIBRARY_LINE.search(body) and not body.startswith("Traceback")


def _pg(text: str) -> str | None:
    match = _PG.search(text)
    return match.group("pg") if match else None


def _summary_starts(lines: list[tuple[int, str]]) -> Iterable[int]:
    """Indexes where a torchelastic summary begins (its ChildFailedError line, or its title)."""
    last = -1
    for index, (_no, text) in enumerate(lines):
        if "ChildFailedError" in text and "Error:" in text and index > last:
            last = index + 1
            yield index
        elif text.strip() == ROOT_HEADER and index > last:
            # No ChildFailedError line before it in this tail (cut, or another launcher): start
            # at the title line a little above.
            start = max(0, index - 200)
            title = next((i for i in range(index, start - 1, -1) if lines[i][1].rstrip().endswith(" FAILED")), start)
            last = index + 1
            yield title


_COLLECTIVE_HINTS = ("WorkNCCL", "ast enqueued", "Timed out waiting")


def read_file(source: TextFile) -> RunLog:
    """What one log's tail says across ranks (kept on its view: read once per diagnosis)."""
    key = ("runlog", source.display, source.rank, source.host, source.clock_offset, source.year)
    kept = source.view.derived.get(key)
    if kept is None:
        kept = source.view.derived[key] = _read_file(source)
    kept.crash_sources = [source]  # this very file (a worker's answer names its own copy)
    return cast(RunLog, kept)


def _read_file(source: TextFile) -> RunLog:
    log = RunLog()
    data, first_line = logview.tail(source, TAIL_BYTES)
    text = strip_ansi(data).decode("utf-8", errors="replace")
    if source.rank is not None:
        log.ranks.add(source.rank)
    lines: list[tuple[int, str]] = []
    year = source.year
    seen_records: set[tuple[str, int | None, str | None, int | None, int | None]] = set()
    want_last_error = False
    for offset, raw in enumerate(text.split("\n")):
        line_no = first_line + offset
        for segment in raw.split("\r") if "\r" in raw else (raw,):
            if not segment.strip():
                continue
            lines.append((line_no, segment))
            prefix, body = split_prefix(segment)  # once a line: its rank and whether the program printed it
            rank = line_rank(segment, source.rank, prefix)
            if rank is not None:
                log.ranks.add(rank)
                if own_output(segment, body):
                    log.last_line[rank] = LogLine(source.display, line_no, segment, rank, year, source.host, source.clock_offset)
            if want_last_error:
                want_last_error = False
                if len(log.nccl_last_errors) < MAX_NCCL_LINES:
                    log.nccl_last_errors.append(LogLine(source.display, line_no, segment, rank, year, source.host, source.clock_offset))
            if "Last error:" in segment:
                last = _LAST_ERROR.search(segment)
                if last and last.group("rest").strip():
                    log.nccl_last_errors.append(LogLine(source.display, line_no, last.group("rest").strip(), rank, year, source.host, source.clock_offset))
                else:
                    want_last_error = True
            if "NCCL WARN" in segment and len(log.nccl_warnings) < MAX_NCCL_LINES:
                log.nccl_warnings.append(LogLine(source.display, line_no, segment, rank, year, source.host, source.clock_offset))
            if len(log.device_lines) < MAX_DEVICE_LINES and ("Assertion `" in segment or "CUDA" in segment) and _DEVICE_LINE.search(segment):
                log.device_lines.append(LogLine(source.display, line_no, segment, rank, year, source.host, source.clock_offset))
            if any(hint in segment for hint in _COLLECTIVE_HINTS):
                record = _collective(LogLine(source.display, line_no, segment, rank, year, source.host, source.clock_offset))
                if record is not None:
                    key = (record.kind, record.rank, record.pg, record.seq, record.enqueued)
                    if key not in seen_records:
                        seen_records.add(key)
                        log.collectives.append(record)
    for start in _summary_starts(lines):
        summary = parse_failure_summary(lines[start:start + 2000])
        if summary is not None:
            log.summaries.append((source.display, summary))
            log.ranks.update(f.rank for f in summary.failures if f.rank is not None)
    log.crash_sources.append(source)
    return log


def _read_ahead(sources: Sequence[TextFile]) -> None:
    """Several big logs: their tails read at once in worker processes (engine/tailwork, a map
    that returns each log's RunLog), kept on each log's view; reading every line of a 4 MiB tail
    is ~0.5-1 s a log."""
    from diagnose.engine import tailwork

    logs = [source for source in tailwork.worth_it(sources) if not any(
        isinstance(key, tuple) and key[:1] == ("runlog",) for key in source.view.derived)]
    if len(logs) < tailwork.MIN_LOGS:
        return
    answers = tailwork.in_processes(read_file, logs)
    for source, log in zip(logs, answers or (), strict=False):
        key = ("runlog", source.display, source.rank, source.host, source.clock_offset, source.year)
        source.view.derived.setdefault(key, log)


_RUN_LOG = "run_log"  # the key of the merged RunLog among an Evidence's derived answers


def cached_gaps(evidence: Evidence) -> list[Gap]:
    """The gaps of the RunLog already read for this evidence (none if no analyzer read it)."""
    found = evidence.derived.get(_RUN_LOG)
    return list(dict.fromkeys(found.gaps)) if found is not None else []


def run_log(evidence: Evidence) -> RunLog:
    """What every log of the run says, read once per diagnosis (kept on the evidence)."""
    cached = evidence.derived.get(_RUN_LOG)
    if cached is not None:
        return cast(RunLog, cached)
    merged = RunLog(host=evidence.run.host)
    _read_ahead(evidence.texts_of(TextKind.LOG))
    for source in evidence.texts_of(TextKind.LOG):
        try:
            part = read_file(source)
        except Exception as exc:  # a log we scanned but cannot re-read adds nothing here
            merged.gaps.append(reread_gap(source.display, exc, "the analysis across ranks left it out"))
            continue
        merged.ranks |= part.ranks
        merged.last_line.update(part.last_line)
        merged.collectives.extend(part.collectives)
        merged.summaries.extend(part.summaries)
        merged.crash_sources.extend(part.crash_sources)
        merged.device_lines.extend(part.device_lines)
        merged.nccl_warnings.extend(part.nccl_warnings)
        merged.nccl_last_errors.extend(part.nccl_last_errors)
    for record in evidence.exits or ():
        if record.rank is not None:
            merged.ranks.add(record.rank)
    evidence.derived[_RUN_LOG] = merged
    return merged
