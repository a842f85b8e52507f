"""Per node and per rank: the last line, the first error and the state, and which of them
failed first across all nodes.

A job on several nodes dies on one; the others fail in collectives and are torn down. This
puts each rank's own story beside the others' on one clock (every time already moved by its
node's offset), and marks each rank's error with the role the ranking gave it: the root, a
symptom of it, or a failure nothing explained.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from diagnose.engine.analyzers.runlog import LogLine, read_file
from diagnose.engine.findings import FirstFailure, NodeSummary, RankSummary
from diagnose.engine.tracebacks import Crash
from diagnose.evidence.model import Evidence, GpuState, HostInfo, TextFile, TextKind
from diagnose.vocab import Role, is_crash_level

if TYPE_CHECKING:
    from diagnose.engine.findings import Cause

_LOCAL_RANK = re.compile(r"^\s*\[default([0-9]{1,6})\]:")  # torchrun --tee: the local rank, by convention its GPU


def _roles(causes: Sequence[Cause]) -> dict[tuple[str, int], str]:
    """(source, line) -> the role of the cause it is evidence of (the top root wins)."""
    roles: dict[tuple[str, int], str] = {}
    top_root = next((c for c in causes if is_crash_level(c.role, c.severity)), None)
    for cause in causes:
        role = "root" if cause is top_root else ("symptom" if cause.role == Role.SYMPTOM else "failed")
        for item in cause.evidence:
            if item.line is not None:
                roles.setdefault((item.source, item.line), role)
    return roles


def _gpu_words(gpu: GpuState | None, gaps: Iterable[str]) -> str:
    if gpu is not None and gpu.gpus:
        names = sorted({str(g.name) for g in gpu.gpus if getattr(g, "name", None)})
        return f"{len(gpu.gpus)} GPU(s)" + (f", {', '.join(names)}" if names else "")
    reason = next(iter(gaps), None)
    return f"no GPU state ({reason})" if reason else "no GPU state"


def _last_lines(source: TextFile) -> tuple[dict[int | None, LogLine], list[Crash], dict[int | None, int | None]]:
    from diagnose.engine.tracebacks import find_crashes, on_clock
    from diagnose.evidence import logview

    log = read_file(source)
    last: dict[int | None, LogLine] = {rank: line for rank, line in log.last_line.items()}
    local: dict[int | None, int | None] = {}
    try:
        data, first = logview.tail(source, 64 * 1024)
        lines = data.decode("utf-8", errors="replace").splitlines()
    except Exception:  # a log that cannot be re-read shows no last line here
        lines, first = [], 1
    for text in lines:
        match = _LOCAL_RANK.match(text)
        if match:
            from diagnose.engine.analyzers.runlog import line_rank

            local.setdefault(line_rank(text, source.rank), int(match.group(1)))
    if not last:
        numbered = [(first + i, t) for i, t in enumerate(lines) if t.strip()]
        if numbered:
            no, text = numbered[-1]
            last[source.rank] = LogLine(source.display, no, text.rstrip(), source.rank, source.year, source.host,
                                        source.clock_offset)
    try:
        crashes = [on_clock(c, source) for c in find_crashes(source)]
    except Exception:
        crashes = []
    return last, crashes, local


def node_summaries(evidence: Evidence, causes: Sequence[Cause]) -> tuple[list[NodeSummary], FirstFailure | None]:
    """Each node's ranks (host order; one unnamed node for evidence of one host), and the first
    failure: the top root cause's earliest evidence, with its node, rank and GPU."""
    roles = _roles(causes)
    hosts: list[HostInfo] = list(evidence.hosts) or [HostInfo(evidence.run.host or "this host", gpu=evidence.gpu)]
    multi = bool(evidence.hosts)
    gap_reasons: dict[str, list[str]] = {}
    for gap in evidence.gaps:
        if gap.source == "gpu":
            node, sep, rest = gap.reason.partition(": ")
            gap_reasons.setdefault(node if multi and sep else hosts[0].name, []).append(rest if multi and sep else gap.reason)
    nodes: list[NodeSummary] = []
    for info in hosts:
        texts = [t for t in evidence.texts_of(TextKind.LOG) if (t.host == info.name if multi else True)]
        ranks: dict[int | None, RankSummary] = {}
        for source in texts:
            last, crashes, local = _last_lines(source)
            for rank, line in last.items():
                ranks[rank] = RankSummary(rank, "stopped", line.text[:500], line.time, f"{line.source}:{line.line_no}",
                                          gpu=local.get(rank))
            for crash in sorted(crashes, key=lambda c: (c.time is None, c.time or 0.0, c.line_no)):
                current = ranks.get(crash.rank) or RankSummary(crash.rank, "stopped", gpu=local.get(crash.rank))
                if current.first_error is not None and (current.error_time or 0.0) <= (crash.time or 0.0):
                    continue
                role = next((roles[(source.display, no)] for no, _t in crash.lines if (source.display, no) in roles), "failed")
                ranks[crash.rank] = RankSummary(current.rank, role, current.last_line, current.last_time, current.last_at,
                                                crash.summary[:500], crash.time, f"{source.display}:{crash.line_no}",
                                                current.exit_code, current.gpu)
        for record in evidence.exits or ():
            if multi and record.host != info.name:
                continue
            current = ranks.get(record.rank) or RankSummary(record.rank, "stopped")
            state = current.state
            if state == "stopped":
                state = "finished" if record.code == 0 else "exited"
            ranks[record.rank] = RankSummary(current.rank, state, current.last_line, current.last_time, current.last_at,
                                             current.first_error, current.error_time, current.error_at,
                                             record.code if record.code is not None else current.exit_code, current.gpu)
        ordered = tuple(sorted(ranks.values(), key=lambda r: (r.rank is None, r.rank or 0)))
        nodes.append(NodeSummary(info.name, info.status, info.reason, info.clock_offset, info.clock_rtt,
                                 _gpu_words(info.gpu if multi else evidence.gpu, gap_reasons.get(info.name, ())), ordered))
    first = _first_failure(causes, nodes, multi)
    if first is not None and first.node is not None:
        nodes = [NodeSummary(n.name, n.status, n.reason, n.clock_offset, n.clock_rtt, n.gpu, n.ranks, n.name == first.node)
                 for n in nodes]
    return nodes, first


def _first_failure(causes: Sequence[Cause], nodes: Sequence[NodeSummary], multi: bool) -> FirstFailure | None:
    top = next((c for c in causes if is_crash_level(c.role, c.severity)), None)
    if top is None or not top.evidence:
        return None
    items = sorted(top.evidence, key=lambda i: (i.time is None, i.time or 0.0))
    item = next((i for i in items if i.rank is not None), items[0])
    node = item.host if multi else (nodes[0].name if nodes else None)
    gpu = None
    for summary in nodes:
        if summary.name == node:
            gpu = next((r.gpu for r in summary.ranks if r.rank == item.rank), None)
    text = item.text if len(item.text) <= 300 else item.text[:300] + "…"
    return FirstFailure(node, item.rank, gpu, top.time if top.time is not None else item.time, text, top.id)


def host_names(nodes: Sequence[NodeSummary]) -> Mapping[str, NodeSummary]:
    return {n.name: n for n in nodes}
