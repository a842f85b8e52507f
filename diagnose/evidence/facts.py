"""The structured facts a live run or a bundle adds to the logs: GPU, tmux, expected files,
checkpoints, processes. Kept apart from evidence.py (which re-exports them) so that scanning a
plain log does not pay for defining them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_mib: float | None


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization_pct: float | None = None
    temperature_c: float | None = None
    ecc_uncorrected: int | None = None  # volatile uncorrected ECC errors since driver load
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    throttle_reasons: tuple[str, ...] = ()
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class GpuState:
    source: str
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: tuple[Gpu, ...] = ()


class TmuxServer(str, Enum):
    RUNNING = "running"
    STALE_SOCKET = "stale_socket"  # the socket file exists but no server answers on it
    NO_SOCKET = "no_socket"  # no server and no socket file
    ERROR = "error"  # tmux answered with something else


@dataclass(frozen=True)
class TmuxPane:
    target: str
    dead: bool
    dead_status: int | None = None
    command: str = ""
    dead_signal: int | None = None  # tmux >= 3.3: the signal that ended the pane's command
    pid: int | None = None


@dataclass(frozen=True)
class TmuxSession:
    name: str
    panes: tuple[TmuxPane, ...] = ()


@dataclass(frozen=True)
class TmuxState:
    server: TmuxServer
    socket_path: str
    message: str  # what tmux said, e.g. "no server running on /tmp/tmux-0/default"
    sessions: tuple[TmuxSession, ...] = ()
    expected_session: str | None = None  # the session the run was launched in, if known


@dataclass(frozen=True)
class ExpectedFile:
    """A file the run should have produced (its log), and whether it exists."""

    role: str  # "log" for now
    path: str
    exists: bool
    size: int | None = None
    mtime: float | None = None
    siblings: tuple[str, ...] = ()  # files of the same shape that do exist (older runs' logs)


@dataclass(frozen=True)
class CheckpointFile:
    path: str
    size: int
    mtime: float


@dataclass(frozen=True)
class CheckpointState:
    directory: str
    exists: bool
    collected_at: float
    file_count: int = 0
    total_bytes: int = 0
    newest: CheckpointFile | None = None
    zero_byte: tuple[str, ...] = ()
    partial: tuple[str, ...] = ()  # *.tmp, *.partial, *.incomplete ... left by an interrupted save
    free_bytes: int | None = None


@dataclass(frozen=True)
class ProcessState:
    source: str
    alive: bool
    pids: tuple[int, ...] = ()
    command: str = ""
