"""torchelastic error files (TORCHELASTIC_ERROR_FILE / @record): which rank failed, when, how."""

from __future__ import annotations

import json
from typing import Any

from diagnose.evidence import ExitRecord


def looks_like_elastic_error(text: str) -> bool:
    head = text[:4000]
    return head.lstrip().startswith("{") and '"message"' in head and ("extraInfo" in head or "py_callstack" in head or "errorTraits" in head)


def parse_elastic_error(text: str, source: str, rank: int | None = None) -> tuple[ExitRecord, str, float | None]:
    """(exit record, the error message, its timestamp) from one error file."""
    try:
        data: Any = json.loads(text)
    except ValueError:
        return ExitRecord(source, rank=rank, message="unreadable error file"), "", None
    message: Any = data.get("message", data) if isinstance(data, dict) else data
    text_message = ""
    timestamp: float | None = None
    if isinstance(message, dict):
        text_message = str(message.get("message", ""))
        extra = message.get("extraInfo") or {}
        if isinstance(extra, dict):
            try:
                stamp = extra.get("timestamp")
                timestamp = float(stamp) if stamp else None
            except (TypeError, ValueError):
                timestamp = None
    else:
        text_message = str(message)
    first_line = text_message.strip().splitlines()[-1] if text_message.strip() else ""
    return ExitRecord(source, code=1, rank=rank, message=first_line[:300]), text_message, timestamp
