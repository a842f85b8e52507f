"""Slurm's own record of a job: `sacct --parsable2` rows and `scontrol show job` fields.

Both are kept as text files of kind `slurm` that rules match line by line (the `slurm:`
condition); these parsers read the same text for the facts the live side and the report need:
the job's state, exit code, node list, output files.

sacct --parsable2 prints a header of the field names, then one row per job and per step,
fields separated by '|' (no trailing one):
    JobID|JobName|State|ExitCode|...
    12|train|OUT_OF_MEMORY|0:125|...
    12.batch|batch|OUT_OF_MEMORY|0:125|...
`scontrol show job J` prints `Key=Value` pairs, several to a line, values without spaces
except for the few that run to the end of their line (Command=, WorkDir=, StdOut=, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "DerivedExitCode", "Elapsed", "Timelimit", "MaxRSS", "ReqMem",
                "NodeList", "Start", "End", "Reason")
_PAIR = re.compile(r"(?:^|\s)([A-Za-z][\w/:]*)=(\S*)")
_WHOLE_LINE = ("Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Comment", "Reason", "JobName")
JOB_ID = re.compile(r"^[0-9]{1,12}(?:_[0-9]{1,9})?(?:\+[0-9]{1,6})?$")


@dataclass(frozen=True)
class SacctRow:
    fields: dict[str, str]

    def get(self, name: str) -> str:
        return self.fields.get(name, "")

    @property
    def job_id(self) -> str:
        return self.get("JobID")

    @property
    def is_step(self) -> bool:
        return "." in self.job_id

    @property
    def state(self) -> str:
        """The state word: 'CANCELLED by 0' -> 'CANCELLED'."""
        return self.get("State").split(" ", 1)[0]


@dataclass
class SacctRecord:
    rows: list[SacctRow] = field(default_factory=list)

    @property
    def job(self) -> SacctRow | None:
        """The allocation's row (not a step's)."""
        return next((r for r in self.rows if not r.is_step), self.rows[0] if self.rows else None)


def parse_sacct(text: str) -> SacctRecord:
    """Rows of `sacct --parsable2` output; the first line must be its header."""
    lines = [line for line in text.splitlines() if line.strip()]
    record = SacctRecord()
    if not lines or "|" not in lines[0] or not lines[0].startswith("JobID"):
        return record
    names = lines[0].split("|")
    for line in lines[1:]:
        values = line.split("|")
        if len(values) != len(names):
            continue
        record.rows.append(SacctRow(dict(zip(names, values, strict=True))))
    return record


def parse_scontrol_job(text: str) -> dict[str, str]:
    """`scontrol show job J` as a mapping; {} when it is not such output (an error message)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        key, sep, rest = stripped.partition("=")
        if sep and key in _WHOLE_LINE and " " in rest and not _PAIR.search(" " + rest.split(" ", 1)[1]):
            fields[key] = rest  # a value with spaces that runs to the end of its line
            continue
        for match in _PAIR.finditer(stripped):
            fields.setdefault(match.group(1), match.group(2))
    return fields if "JobId" in fields else {}


def looks_like_slurm(text: str) -> bool:
    head = text[:4000].lstrip()
    return head.startswith("JobID|") or (head.startswith("JobId=") and "JobState=" in head)
