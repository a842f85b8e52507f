"""The structured facts a live run or a bundle adds to the logs: GPU, tmux, expected files,
checkpoints, processes. Kept apart from evidence.py (which re-exports them) so that scanning a
plain log does not pay for defining them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


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
    # Whether the run was launched in tmux: config, launch record, a session named like the run,
    # or a socket made inside the launch window; never a stale socket alone. None: not said
    # (older bundles), which reads as "an expected session is known".
    launched: bool | None = None
    launched_basis: str = ""


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


# ---------------------------------------------------------------- run identity (docs/run-identity.md)
#
# Which run is being diagnosed, and where each part of that came from. The live side fills it
# (diagnose/live/identity.py); a bundle stores it as manifest `identity` in exactly this JSON;
# the engine adds state/state_reason. from_json validates every field: a hostile manifest gets
# a clear ValueError, never a crash deeper in.

LOG_SOURCES = ("config", "launch-record", "inferred", "found")
LAUNCHERS = ("tmux", "nohup", "torchrun", "slurm", "systemd", "diagnose-launch", "unknown")


def _obj(data: object, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{what}: expected an object, got {type(data).__name__}")
    return data


def _str(data: Mapping[str, Any], key: str, what: str, default: str | None = "") -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"{what}.{key}: expected a string, got {type(value).__name__}")
    return value


def _opt_str(data: Mapping[str, Any], key: str, what: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{what}.{key}: expected a string or null, got {type(value).__name__}")
    return value


def _opt_num(data: Mapping[str, Any], key: str, what: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what}.{key}: expected a number or null, got {type(value).__name__}")
    return float(value)


def _opt_int(data: Mapping[str, Any], key: str, what: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}.{key}: expected an integer or null, got {type(value).__name__}")
    return value


def _bool(data: Mapping[str, Any], key: str, what: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{what}.{key}: expected true or false, got {type(value).__name__}")
    return value


def _list(data: Mapping[str, Any], key: str, what: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{what}.{key}: expected a list, got {type(value).__name__}")
    return value


def _strs(data: Mapping[str, Any], key: str, what: str) -> tuple[str, ...]:
    items = _list(data, key, what)
    if not all(isinstance(item, str) for item in items):
        raise ValueError(f"{what}.{key}: expected a list of strings")
    return tuple(items)


@dataclass(frozen=True)
class ExpectedLog:
    """A log of the run: found on disk, named by the config or a launch record, or inferred."""

    path: str
    exists: bool
    size: int | None = None
    mtime: float | None = None
    source: str = "found"  # config | launch-record | inferred | found
    basis: str = ""  # why this path (e.g. "train_flex6.log, train_flex5.log differ only by the run id")

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "exists": self.exists, "size": self.size, "mtime": self.mtime,
                "source": self.source, "basis": self.basis}

    @classmethod
    def from_json(cls, data: object) -> ExpectedLog:
        what = "identity.logs[]"
        d = _obj(data, what)
        source = _str(d, "source", what, "found")
        if source not in LOG_SOURCES:
            raise ValueError(f"{what}.source: {source!r} is not one of {', '.join(LOG_SOURCES)}")
        return cls(_str(d, "path", what, None), _bool(d, "exists", what), _opt_int(d, "size", what),
                   _opt_num(d, "mtime", what), source, _str(d, "basis", what))


@dataclass(frozen=True)
class RunProcess:
    """A process of the run, how it was tied to the run, and what it was doing."""

    pid: int
    ppid: int
    comm: str
    cmdline: str
    alive: bool
    source: str  # "command line names the run", "works in the run's directory", "tmux pane of ...", "child of N"
    cgroup: str | None = None
    started_at: float | None = None
    state: str | None = None  # the /proc/PID/stat state letter (R, S, D, Z, T)
    cpu_pct: float | None = None  # over a short sample at collection
    stack: str | None = None  # py-spy dump, for a stalled Python process

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "ppid": self.ppid, "comm": self.comm, "cmdline": self.cmdline, "alive": self.alive,
                "source": self.source, "cgroup": self.cgroup, "started_at": self.started_at, "state": self.state,
                "cpu_pct": self.cpu_pct, "stack": self.stack}

    @classmethod
    def from_json(cls, data: object) -> RunProcess:
        what = "identity.processes[]"
        d = _obj(data, what)
        pid, ppid = _opt_int(d, "pid", what), _opt_int(d, "ppid", what)
        if pid is None:
            raise ValueError(f"{what}.pid: missing")
        return cls(pid, ppid or 0, _str(d, "comm", what), _str(d, "cmdline", what), _bool(d, "alive", what),
                   _str(d, "source", what), _opt_str(d, "cgroup", what), _opt_num(d, "started_at", what),
                   _opt_str(d, "state", what), _opt_num(d, "cpu_pct", what), _opt_str(d, "stack", what))


@dataclass(frozen=True)
class RunLauncher:
    kind: str = "unknown"  # tmux | nohup | torchrun | slurm | systemd | diagnose-launch | unknown
    source: str = ""
    tmux_socket: str | None = None
    tmux_session: str | None = None
    tmux_server: str | None = None  # running | stale_socket | no_socket (a TmuxServer value)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source, "tmux_socket": self.tmux_socket,
                "tmux_session": self.tmux_session, "tmux_server": self.tmux_server}

    @classmethod
    def from_json(cls, data: object) -> RunLauncher:
        what = "identity.launcher"
        d = _obj(data, what)
        kind = _str(d, "kind", what, "unknown")
        if kind not in LAUNCHERS:
            raise ValueError(f"{what}.kind: {kind!r} is not one of {', '.join(LAUNCHERS)}")
        return cls(kind, _str(d, "source", what), _opt_str(d, "tmux_socket", what), _opt_str(d, "tmux_session", what),
                   _opt_str(d, "tmux_server", what))


@dataclass(frozen=True)
class RunWindow:
    start: float | None = None
    start_source: str = ""  # first log line | process start | log mtime | sibling mtime | tmux socket time
    end: float | None = None
    end_source: str = ""  # last write | exit | collection time (alive)

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "start_source": self.start_source, "end": self.end, "end_source": self.end_source}

    @classmethod
    def from_json(cls, data: object) -> RunWindow:
        what = "identity.window"
        d = _obj(data, what)
        return cls(_opt_num(d, "start", what), _str(d, "start_source", what), _opt_num(d, "end", what),
                   _str(d, "end_source", what))


@dataclass(frozen=True)
class Interpreter:
    path: str
    source: str  # config python | config venv | live pid N | traceback site-packages in LOG

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "source": self.source}

    @classmethod
    def from_json(cls, data: object) -> Interpreter:
        what = "identity.interpreter"
        d = _obj(data, what)
        return cls(_str(d, "path", what, None), _str(d, "source", what))


@dataclass(frozen=True)
class LastOutput:
    time: float | None = None  # the log's last write (mtime)
    age_s: float | None = None  # seconds from that write to the collection
    line: str = ""  # the last non-empty line

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "age_s": self.age_s, "line": self.line}

    @classmethod
    def from_json(cls, data: object) -> LastOutput:
        what = "identity.last_output"
        d = _obj(data, what)
        return cls(_opt_num(d, "time", what), _opt_num(d, "age_s", what), _str(d, "line", what))


@dataclass(frozen=True)
class RunIdentity:
    """Which run this is (docs/run-identity.md, manifest `identity`, JSON `run`)."""

    id: str
    host: str | None = None
    mode: str = "live"
    collected_at: float | None = None
    logs: tuple[ExpectedLog, ...] = ()
    processes: tuple[RunProcess, ...] = ()
    cgroups: tuple[str, ...] = ()
    launcher: RunLauncher = RunLauncher()
    window: RunWindow = RunWindow()
    interpreter: Interpreter | None = None
    last_output: LastOutput | None = None
    checkpoint_dir: str | None = None
    inferred: tuple[str, ...] = ()  # sentences: which parts are inferences and from what
    did_you_mean: tuple[str, ...] = ()
    state: str | None = None  # filled by the engine
    state_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "host": self.host, "mode": self.mode, "collected_at": self.collected_at,
            "state": self.state, "state_reason": self.state_reason,
            "logs": [log.to_json() for log in self.logs],
            "processes": [proc.to_json() for proc in self.processes],
            "cgroups": list(self.cgroups),
            "launcher": self.launcher.to_json(),
            "window": self.window.to_json(),
            "interpreter": self.interpreter.to_json() if self.interpreter else None,
            "last_output": self.last_output.to_json() if self.last_output else None,
            "checkpoint_dir": self.checkpoint_dir,
            "inferred": list(self.inferred),
            "did_you_mean": list(self.did_you_mean),
        }

    @classmethod
    def from_json(cls, data: object) -> RunIdentity:
        what = "identity"
        d = _obj(data, what)
        interpreter, last = d.get("interpreter"), d.get("last_output")
        return cls(
            id=_str(d, "id", what, None), host=_opt_str(d, "host", what), mode=_str(d, "mode", what, "live"),
            collected_at=_opt_num(d, "collected_at", what),
            logs=tuple(ExpectedLog.from_json(item) for item in _list(d, "logs", what)),
            processes=tuple(RunProcess.from_json(item) for item in _list(d, "processes", what)),
            cgroups=_strs(d, "cgroups", what),
            launcher=RunLauncher.from_json(d["launcher"]) if d.get("launcher") is not None else RunLauncher(),
            window=RunWindow.from_json(d["window"]) if d.get("window") is not None else RunWindow(),
            interpreter=Interpreter.from_json(interpreter) if interpreter is not None else None,
            last_output=LastOutput.from_json(last) if last is not None else None,
            checkpoint_dir=_opt_str(d, "checkpoint_dir", what),
            inferred=_strs(d, "inferred", what), did_you_mean=_strs(d, "did_you_mean", what),
            state=_opt_str(d, "state", what), state_reason=_opt_str(d, "state_reason", what),
        )
