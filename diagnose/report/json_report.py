"""JSON output, held to schema/diagnosis.schema.json by the tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import IO, Any

from diagnose import __version__
from diagnose.engine.findings import Cause, Diagnosis, NodeSummary
from diagnose.evidence.model import EvidenceItem

SCHEMA_VERSION = 1


def iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def evidence_json(item: EvidenceItem) -> dict[str, Any]:
    return {
        "source": item.source, "line": item.line, "time": iso(item.time), "rank": item.rank, "host": item.host,
        "text": item.text, "count": item.count,
    }


def cause_json(cause: Cause) -> dict[str, Any]:
    return {
        "id": cause.id, "title": cause.title, "category": cause.category, "role": cause.role,
        "severity": cause.severity, "confidence": cause.confidence, "score": cause.score,
        "time": iso(cause.time),
        "evidence": [evidence_json(e) for e in cause.evidence],
        "explanation": cause.explanation, "fix": list(cause.fix), "references": list(cause.references),
        "relaunch": cause.relaunch, "explains": list(cause.explains),
        "attribution": cause.attribution, "basis": cause.basis,
    }


def iso_ms(moment: float | None) -> str | None:
    """To the millisecond: the ranks of several nodes fail within a second of each other."""
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def node_json(node: NodeSummary) -> dict[str, Any]:
    return {
        "name": node.name, "status": node.status, "reason": node.reason, "clock_offset": node.clock_offset,
        "clock_rtt": node.clock_rtt, "gpu": node.gpu, "first_failure": node.first_failure,
        "ranks": [{"rank": r.rank, "state": r.state, "last_line": r.last_line, "last_time": iso_ms(r.last_time),
                   "last_at": r.last_at, "first_error": r.first_error, "error_time": iso_ms(r.error_time),
                   "error_at": r.error_at, "exit_code": r.exit_code, "gpu": r.gpu} for r in node.ranks],
    }


def first_failure_json(diagnosis: Diagnosis) -> dict[str, Any] | None:
    first = diagnosis.first_failure
    if first is None:
        return None
    return {"node": first.node, "rank": first.rank, "gpu": first.gpu, "time": iso_ms(first.time), "error": first.error,
            "cause": first.cause}


def run_json(diagnosis: Diagnosis) -> dict[str, Any]:
    """The run as the tool understood it: identity (where each part came from), state, window."""
    run = diagnosis.evidence.run
    identity = diagnosis.evidence.identity
    data: dict[str, Any] = identity.to_json() if identity is not None else {}
    data.update({"id": run.id, "mode": run.mode, "host": run.host, "collected_at": iso(run.collected_at),
                 "inputs": list(run.inputs), "state": diagnosis.state, "state_reason": diagnosis.state_reason})
    if identity is None:
        data["launcher"] = {"kind": run.launcher, "source": "manifest"} if run.launcher else None
    start, start_source, end, end_source = diagnosis.window
    data["window"] = {"start": iso(start), "start_source": start_source, "end": iso(end), "end_source": end_source}
    return data


def to_json(diagnosis: Diagnosis) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "diagnose", "version": __version__},
        "run": run_json(diagnosis),
        "causes": [cause_json(c) for c in diagnosis.causes],
        "checked": [{"what": c.what, "result": c.result, "detail": c.detail} for c in diagnosis.checked],
        "elsewhere": [cause_json(c) for c in diagnosis.elsewhere],
        "gaps": [{"source": g.source, "reason": g.reason} for g in diagnosis.gaps],
        "skipped": [{"rule": s.rule_id, "reason": s.reason} for s in diagnosis.skipped],
        "nodes": [node_json(n) for n in diagnosis.nodes],
        "first_failure": first_failure_json(diagnosis),
        "notes": list(diagnosis.evidence.notes),
        "stats": diagnosis.stats,
    }


def report(diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
           rules: Mapping[str, object] | None = None, fail_on: str = "error") -> None:
    json.dump(to_json(diagnosis), out, indent=2)
    out.write("\n")
