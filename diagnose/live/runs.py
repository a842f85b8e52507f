"""What a RUN_ID names: the RunSpec (where its evidence lives and where each part came from),
run-id checks and the run's name pattern. Discovery fills a RunSpec (discovery.py)."""

from __future__ import annotations

import getpass
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.errors import DiagnoseError
from diagnose.live.config import DEFAULT_BUDGET
from diagnose.live.hosts import Host

RUN_ID = re.compile(r"^[A-Za-z0-9_.@+=:-]+$")
MAX_RUN_ID = 200  # characters: far past any real run name, well short of a file name's 255 bytes


# ---------------------------------------------------------------- config


















# ---------------------------------------------------------------- the run


@dataclass
class RunSpec:
    """Where one run's evidence lives on its host."""

    id: str
    host: Host
    configured: bool  # a config applied (its templates say where things are)
    config_path: str | None = None
    section: str | None = None
    workdir: str | None = None
    logs: list[str] = field(default_factory=list)  # existing log files
    expected_logs: list[str] | None = None  # log templates from the config (rendered), existence checked later
    error_files: list[str] = field(default_factory=list)  # torchelastic error.json
    wandb_dirs: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)  # wandb requirements.txt
    checkpoint_dir: str | None = None
    tmux_session: str | None = None
    tmux_session_guess: str | None = None  # without config: the run id, used only when such a session exists
    tmux_socket: str | None = None
    tmux_socket_name: str | None = None
    python: str | None = None  # only an interpreter the user configured: collectors may run it
    python_source: str = ""
    wandb_python: str | None = None  # what wandb-metadata.json says: reported and read beside, never run
    wandb_python_source: str = ""
    pid_file: str | None = None
    match: str | None = None
    kernel_logs: list[str] = field(default_factory=lambda: ["/var/log/kern.log", "/var/log/messages"])
    launcher: str | None = None
    launcher_source: str = ""
    cgroups: list[str] = field(default_factory=list)  # the run's cgroups its launcher names (a Slurm job's)
    started_at: float | None = None
    last_activity: float | None = None
    looked: list[str] = field(default_factory=list)  # where discovery looked, for "nothing found"
    notes: list[str] = field(default_factory=list)
    timeout: float | None = None
    budget: float = DEFAULT_BUDGET
    skip: tuple[str, ...] = ()
    # --stall-after's seconds; None: the run's own cadence decides (engine.runview.stall_threshold)
    stall_after: float | None = None
    # identity (docs/run-identity.md): where each expected log came from, as (source, basis)
    log_sources: dict[str, tuple[str, str]] = field(default_factory=dict)
    expected_siblings: dict[str, list[str]] = field(default_factory=dict)  # inferred log -> the siblings it came from
    inferred: list[str] = field(default_factory=list)  # sentences: what was inferred, from what
    window_hint: tuple[float, str] | None = None  # a start when no log says one (newest sibling's mtime)
    nearby_ids: dict[str, str] = field(default_factory=dict)  # id-like names seen while looking -> a path showing it
    # The record `diagnose launch` wrote (live/records.py): its log, pid, launcher and exit are facts.
    launch_record: dict[str, Any] | None = None
    launch_record_path: str | None = None
    record_python: str | None = None  # the interpreter a PATH lookup found at launch: reported, never run
    record_python_source: str = ""
    # A remote host: the run's log patterns, for the line prefilter pushed to where the logs are
    # (engine.scan.PatternSet of the log kind), the scan engine, and how long that search may take.
    log_patterns: Any = None
    scan_engine: str = "auto"
    remote_scan_timeout: float = 300.0

    def launch_window(self) -> tuple[float | None, float | None]:
        """The run's own span, unpadded: first log line (else the hint) to the last write (None: open)."""
        start = self.started_at if self.started_at is not None else (self.window_hint[0] if self.window_hint else None)
        return start, self.last_activity

    def time_window(self) -> tuple[float | None, float | None]:
        """The run's time span for the kernel log: from two minutes before its start (dmesg's
        clock drifts a little from the wall clock) to an hour after its last write (the OOM
        killer strikes after the last line); None = open."""
        begin = self.launch_window()[0]
        start = begin - 120 if begin is not None else None
        end = self.last_activity + 3600 if self.last_activity is not None else None
        return start, end


def render(template: str, values: Mapping[str, str]) -> str:
    text = template.format_map(dict(values))
    if text == "~" or text.startswith("~/"):
        return values["home"] + text[1:]  # the home of the run's host (a remote one's too)
    return os.path.expanduser(text)


def template_values(run_id: str, host: Host) -> dict[str, str]:
    """{run} {home} {user} {host}: of the machine the run lives on."""
    if not host.local:
        user = getattr(host, "user", None)
        return {"run": run_id, "home": host.home(), "user": user() if callable(user) else str(host.uid()),
                "host": host.name}
    try:
        user_name = getpass.getuser()
    except Exception:
        user_name = str(host.uid())
    return {"run": run_id, "home": os.path.expanduser("~"), "user": user_name, "host": socket.gethostname()}


def check_run_id(run_id: str) -> None:
    """A usage error (exit 2) for what cannot be a run id; checked before the id names any path."""
    from diagnose.evidence.safetext import visible

    shown = visible(run_id[:60]) + ("…" if len(run_id) > 60 else "")
    if any(c in run_id for c in "\0\r\n"):
        raise DiagnoseError(f"{shown}: not a run id (it holds a NUL byte or a line break)")
    if len(run_id) > MAX_RUN_ID:
        raise DiagnoseError(f"{shown}: not a run id ({len(run_id):,} characters; a run id has at most {MAX_RUN_ID})")
    if not RUN_ID.match(run_id) or run_id in (".", ".."):
        target = Path(run_id)
        if path_exists(target):
            raise DiagnoseError(f"{run_id}: not a bundle (no manifest.json) and not a run id; "
                                f"for captured files use `diagnose scan {run_id}`")
        raise DiagnoseError(f"{run_id!r}: not a run id (letters, digits and . _ - @ + = : only) "
                            "and no such bundle")


def path_exists(path: Path) -> bool:
    """Path.exists() that is False, not an exception, for a name the OS refuses (too long, NUL)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


GLOB_CHARS = re.compile(r"[*?\[]")


def absolute_path(path: str, base: str | None) -> str:
    if os.path.isabs(path) or base is None:
        return os.path.normpath(path)
    return os.path.normpath(os.path.join(base, path))








def id_skeleton(run_id: str) -> re.Pattern[str] | None:
    """The run id with each digit run as \\d+, as a whole word: flex7 -> flex\\d+ (matches train_flex6.log,
    not flex6b.log). None for an id without digits: nothing to vary."""
    parts = re.split(r"(\d+)", run_id)
    if len(parts) == 1:
        return None
    body = "".join(r"\d+" if i % 2 else re.escape(part) for i, part in enumerate(parts))
    return re.compile(r"(?<![A-Za-z0-9])" + body + r"(?![A-Za-z0-9])")


def run_name_pattern(run_id: str) -> re.Pattern[str]:
    """The run id as a whole word in a file name: flex7 matches train_flex7.log, not flex70.log."""
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(run_id) + r"(?![A-Za-z0-9])")








def glob_escape(text: str) -> str:
    import glob

    return glob.escape(text)








# ---------------------------------------------------------------- run -> evidence












