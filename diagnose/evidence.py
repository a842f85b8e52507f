"""Everything collected about one run, as frozen dataclasses.

A field that is None means "not collected" (rules needing it are skipped); an empty tuple
means "collected, and there was nothing". Gaps say why something could not be collected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path


class TextKind(str, Enum):
    """Kinds of line-oriented text that rules search with regexes."""

    LOG = "log"
    DMESG = "dmesg"


class FileKind(str, Enum):
    """What a file handed to `diagnose scan` (or stored in a bundle) contains."""

    LOG = "log"
    DMESG = "dmesg"
    NVIDIA_SMI = "nvidia-smi"
    NVML = "nvml"
    PACKAGES = "packages"
    ELASTIC_ERROR = "elastic-error"

    @property
    def text_kind(self) -> TextKind | None:
        if self is FileKind.LOG:
            return TextKind.LOG
        if self is FileKind.DMESG:
            return TextKind.DMESG
        return None


@dataclass(frozen=True)
class TextFile:
    """A file of lines (a training log or a kernel log) to be scanned."""

    kind: TextKind
    path: Path  # where the bytes are read from
    display: str  # how reports name it (relative path, or the original path on the run's host)
    rank: int | None = None  # rank of the process that wrote it, when the file is per rank
    mtime: float | None = None
    boot_time: float | None = None  # dmesg only: wall time of boot, to place [secs] on the clock
    year: int | None = None  # syslog-style kernel logs carry no year


@dataclass(frozen=True)
class Packages:
    versions: Mapping[str, str]  # normalised name -> version
    source: str


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
class ExitRecord:
    """How a process of the run ended: from a process table, a tmux pane or an error file."""

    source: str
    code: int | None = None
    signal: int | None = None
    rank: int | None = None
    pid: int | None = None
    message: str = ""


@dataclass(frozen=True)
class ProcessState:
    source: str
    alive: bool
    pids: tuple[int, ...] = ()
    command: str = ""


@dataclass(frozen=True)
class Gap:
    """Evidence that could not be collected, and why. Never silently 'healthy'."""

    source: str
    reason: str


@dataclass(frozen=True)
class RunInfo:
    id: str
    mode: str  # "scan" | "bundle" | "live"
    host: str | None = None
    collected_at: float | None = None
    launcher: str | None = None  # "tmux" | "nohup" | "torchrun" | ...
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Evidence:
    run: RunInfo
    texts: tuple[TextFile, ...] = ()
    packages: Packages | None = None
    gpu: GpuState | None = None
    tmux: TmuxState | None = None
    files: tuple[ExpectedFile, ...] | None = None
    checkpoints: CheckpointState | None = None
    process: ProcessState | None = None
    exits: tuple[ExitRecord, ...] | None = None
    gaps: tuple[Gap, ...] = ()
    notes: tuple[str, ...] = field(default=())  # e.g. "skipped binary file x.pt"
    # How the evidence was gathered (per collector: status, seconds, bytes); shown in JSON stats.
    stats: Mapping[str, object] = field(default_factory=dict)

    def texts_of(self, kind: TextKind) -> tuple[TextFile, ...]:
        return tuple(t for t in self.texts if t.kind is kind)
