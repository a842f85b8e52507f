"""Slurm accounting (`sacct`, as a table or with --parsable / --parsable2): the end state and exit
code of each job and step, as exit records.

The table's second line is dashes that give the column widths (sacct pads every field to them);
--parsable separates fields with "|". ExitCode is "<code>:<signal>" (src/sacct/print.c); State
is e.g. COMPLETED, FAILED, OUT_OF_MEMORY, TIMEOUT, CANCELLED (by <uid>), NODE_FAIL, PREEMPTED.
"""

from __future__ import annotations

import re

from diagnose.errors import ParseError
from diagnose.evidence.model import ExitRecord

MAX_ROWS = 10_000
FAILED_STATES = ("FAILED", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def _rows(text: str) -> list[dict[str, str]]:
    lines = [line.rstrip("\n") for line in text.splitlines() if line.strip()]
    if not lines:
        raise ParseError("sacct: empty")
    if "|" in lines[0]:
        header = [h.strip() for h in lines[0].strip("|").split("|")]
        return [dict(zip(header, (f.strip() for f in line.strip("|").split("|")), strict=False))
                for line in lines[1:MAX_ROWS]]
    if len(lines) < 2 or not re.fullmatch(r"[\s-]+", lines[1]):
        raise ParseError("sacct: no line of dashes under the header")
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[1])]
    def cut(line: str) -> list[str]:
        return [line[start:end + 1].strip() for start, end in spans]
    header = cut(lines[0])
    return [dict(zip(header, cut(line), strict=False)) for line in lines[2:MAX_ROWS]]


def parse_sacct(text: str, source: str) -> list[ExitRecord]:
    records = []
    for row in _rows(text):
        state = row.get("State", "")
        word = state.split()[0] if state else ""
        job = row.get("JobID", "?")
        code = signal = None
        exit_code = re.fullmatch(r"(\d{1,3}):(\d{1,3})", row.get("ExitCode", ""))
        if exit_code:
            code, signal = int(exit_code.group(1)), int(exit_code.group(2)) or None
        if word not in FAILED_STATES and not code and not signal:
            continue
        name = row.get("JobName", "")
        message = f"Slurm job {job}" + (f" ({name})" if name else "") + f": {state or 'exit ' + row.get('ExitCode', '')}"
        records.append(ExitRecord(source, code=code, signal=signal, message=message))
    return records
