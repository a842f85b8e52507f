"""JSON output, held to schema/diagnosis.schema.json by the tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import IO, Any

from diagnose.engine.findings import Cause, Diagnosis
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
    }


def to_json(diagnosis: Diagnosis) -> dict[str, Any]:
    run = diagnosis.evidence.run
    return {
        "schema_version": SCHEMA_VERSION,
        "run": {
            "id": run.id, "mode": run.mode, "host": run.host, "collected_at": iso(run.collected_at),
            "launcher": run.launcher, "inputs": list(run.inputs),
        },
        "causes": [cause_json(c) for c in diagnosis.causes],
        "gaps": [{"source": g.source, "reason": g.reason} for g in diagnosis.gaps],
        "skipped": [{"rule": s.rule_id, "reason": s.reason} for s in diagnosis.skipped],
        "notes": list(diagnosis.evidence.notes),
        "stats": diagnosis.stats,
    }


def report(diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
           rules: Mapping[str, object] | None = None, fail_on: str = "error") -> None:
    json.dump(to_json(diagnosis), out, indent=2)
    out.write("\n")
