"""Collectors: one module per evidence source, run concurrently, each under its own time limit.

A collector gets a Context (the host, the RunSpec, a deadline) and returns an Output: files
to scan or store (logs, the kernel lines, package lists, GPU readings), facts for the manifest
(tmux capture, expected files, checkpoints, process, exits) and gaps. It never raises for the
machine's sake: missing tools, permission errors and timeouts become gaps with the reason.
The runner turns a collector that still fails (a bug) or outlives its limit into a gap too.

Everything a live run is diagnosed from passes through a bundle Manifest, so `diagnose
collect` then `diagnose BUNDLE` gives the answer `diagnose RUN_ID` gave.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diagnose.evidence.model import FileKind, Gap
from diagnose.live.hosts import CommandResult, Host

if TYPE_CHECKING:
    from diagnose.live.runs import RunSpec



@dataclass
class Captured:
    """A file of evidence: where its bytes are now, where it goes in a bundle, how reports name it."""

    kind: FileKind
    bundle_path: str
    source: Path
    origin: str
    rank: int | None = None
    mtime: float | None = None
    size: int = 0


@dataclass
class Output:
    files: list[Captured] = field(default_factory=list)
    # Manifest fields: expected_files, checkpoints, process, exits as their facts' to_json(); tmux as tmux printed it.
    facts: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)  # additions to manifest.run (boot_time, dmesg_source, ...)
    gaps: list[Gap] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    status: str = "ok"  # ok | gap | timeout | error | skipped
    reason: str | None = None


def gap(reason: str, status: str = "gap") -> Output:
    return Output(status=status, reason=reason)


class Context:
    """What one collector works with: the host, the run, a scratch folder and a deadline."""

    def __init__(self, name: str, spec: RunSpec, scratch: Path, limit: float) -> None:
        self.name = name
        self.spec = spec
        self.host: Host = spec.host
        self.scratch = scratch
        self.limit = limit
        self.deadline = time.monotonic() + limit

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def run(self, argv: Sequence[str], cap: float | None = None, env: Mapping[str, str | None] | None = None,
            keep: str = "head") -> CommandResult:
        """Run a command on the host, killed (with its process group) at the collector's deadline.
        keep="tail": output over the limit keeps its end (a kernel log's recent part)."""
        timeout = self.remaining() if cap is None else min(cap, self.remaining())
        return self.host.run(argv, timeout, env, keep)

    def save(self, relative: str, data: bytes) -> Path:
        """Keep captured bytes (a command's output) in a file, for the scanner and the bundle."""
        target = self.scratch / self.name / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return target


Collect = Callable[[Context], Output]


@dataclass(frozen=True)
class CollectorInfo:
    name: str
    collect: Collect
    timeout: float  # default limit, seconds


def display_path(path: str, local: bool = True) -> str:
    """How reports name a file of the run: relative to the current folder when inside it (a
    remote host's paths are shown as they are there)."""
    if not local:
        return path
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return relative if not relative.startswith("..") else path


def bundle_name(prefix: str, path: str) -> str:
    """A bundle path that keeps the file's own path (so two rank0.log never collide)."""
    clean = os.path.normpath(path).lstrip(os.sep).replace(os.sep, "/")
    return f"{prefix}/{clean}"
