"""The structured facts a live run or a bundle adds to the logs: GPU, tmux, expected files,
checkpoints, processes, and the run's identity. Kept apart from evidence/model.py (which
re-exports them) so that scanning a plain log does not pay for defining them.

Each fact has one JSON form, written by to_json and read by from_json: the bundle manifest
stores expected files, checkpoints and the process state in it, and rule test cases give
their facts in it under the condition's own key (docs/rules.md, "Evidence schema"). The key
names are the condition's field names wherever a condition reads a stored value as it is.
from_json checks every field's type (a ValueError naming the field's path); strict=True also
refuses keys the form does not have.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from diagnose.evidence.jsonread import (
    boolean,
    integer,
    ints,
    items,
    number,
    obj,
    opt_bool,
    opt_int,
    opt_number,
    opt_string,
    string,
    strings,
)


def _known(cls: type, strict: bool) -> tuple[str, ...] | None:
    return getattr(cls, "JSON_KEYS", None) if strict else None


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_mib: float | None

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("pid", "name", "used_mib")

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "used_mib": self.used_mib}

    @classmethod
    def from_json(cls, data: object, what: str = "gpu.gpus[].processes[]", strict: bool = False) -> GpuProcess:
        d = obj(data, what, _known(cls, strict))
        return cls(integer(d, "pid", what), string(d, "name", what), opt_number(d, "used_mib", what))


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

    # `utilization` and `throttle` as the gpu condition names them.
    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "index", "name", "uuid", "bus_id", "memory_used_mib", "memory_total_mib", "utilization", "temperature_c",
        "ecc_uncorrected", "retired_pages_pending", "remapped_rows_pending", "remapped_rows_failure", "throttle",
        "processes",
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index, "name": self.name, "uuid": self.uuid, "bus_id": self.bus_id,
            "memory_used_mib": self.memory_used_mib, "memory_total_mib": self.memory_total_mib,
            "utilization": self.utilization_pct, "temperature_c": self.temperature_c,
            "ecc_uncorrected": self.ecc_uncorrected, "retired_pages_pending": self.retired_pages_pending,
            "remapped_rows_pending": self.remapped_rows_pending, "remapped_rows_failure": self.remapped_rows_failure,
            "throttle": list(self.throttle_reasons), "processes": [p.to_json() for p in self.processes],
        }

    @classmethod
    def from_json(cls, data: object, what: str = "gpu.gpus[]", strict: bool = False, index: int = 0) -> Gpu:
        """`index` is the GPU's place in the list, for a reading that does not say its index."""
        d = obj(data, what, _known(cls, strict))
        return cls(
            index=integer(d, "index", what, index), name=opt_string(d, "name", what), uuid=opt_string(d, "uuid", what),
            bus_id=opt_string(d, "bus_id", what), memory_used_mib=opt_number(d, "memory_used_mib", what),
            memory_total_mib=opt_number(d, "memory_total_mib", what), utilization_pct=opt_number(d, "utilization", what),
            temperature_c=opt_number(d, "temperature_c", what), ecc_uncorrected=opt_int(d, "ecc_uncorrected", what),
            retired_pages_pending=opt_bool(d, "retired_pages_pending", what),
            remapped_rows_pending=opt_bool(d, "remapped_rows_pending", what),
            remapped_rows_failure=opt_bool(d, "remapped_rows_failure", what),
            throttle_reasons=strings(d, "throttle", what),
            processes=tuple(GpuProcess.from_json(p, f"{what}.processes[]", strict) for p in items(d, "processes", what)),
        )


@dataclass(frozen=True)
class GpuState:
    source: str
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: tuple[Gpu, ...] = ()

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("source", "driver", "cuda", "gpus")

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "driver": self.driver_version, "cuda": self.cuda_version,
                "gpus": [gpu.to_json() for gpu in self.gpus]}

    @classmethod
    def from_json(cls, data: object, what: str = "gpu", strict: bool = False) -> GpuState:
        d = obj(data, what, _known(cls, strict))
        gpus = tuple(Gpu.from_json(item, f"{what}.gpus[{n}]", strict, index=n) for n, item in enumerate(items(d, "gpus", what)))
        return cls(string(d, "source", what, "gpu"), opt_string(d, "driver", what), opt_string(d, "cuda", what), gpus)


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

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("target", "dead", "status", "signal", "command", "pid")

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "dead": self.dead, "status": self.dead_status, "signal": self.dead_signal,
                "command": self.command, "pid": self.pid}

    @classmethod
    def from_json(cls, data: object, what: str = "tmux.sessions[].panes[]", strict: bool = False,
                  target: str = "") -> TmuxPane:
        """`target` names a pane that does not say its own (session:window.pane)."""
        d = obj(data, what, _known(cls, strict))
        return cls(string(d, "target", what, target), boolean(d, "dead", what), opt_int(d, "status", what),
                   string(d, "command", what), opt_int(d, "signal", what), opt_int(d, "pid", what))


@dataclass(frozen=True)
class TmuxSession:
    name: str
    panes: tuple[TmuxPane, ...] = ()

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("name", "panes")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "panes": [pane.to_json() for pane in self.panes]}

    @classmethod
    def from_json(cls, data: object, what: str = "tmux.sessions[]", strict: bool = False) -> TmuxSession:
        d = obj(data, what, _known(cls, strict))
        name = string(d, "name", what, None)
        return cls(name, tuple(TmuxPane.from_json(p, f"{what}.panes[{n}]", strict, f"{name}:0.{n}")
                               for n, p in enumerate(items(d, "panes", what))))


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

    # `session` is the run's own session (by name); the condition's session: present | absent
    # asks whether it is among `sessions`, pane: alive | dead about that session's panes.
    JSON_KEYS: ClassVar[tuple[str, ...]] = ("server", "socket", "message", "session", "launched", "launched_basis",
                                            "sessions")

    def to_json(self) -> dict[str, Any]:
        return {"server": self.server.value, "socket": self.socket_path, "message": self.message,
                "session": self.expected_session, "launched": self.launched, "launched_basis": self.launched_basis,
                "sessions": [session.to_json() for session in self.sessions]}

    @classmethod
    def from_json(cls, data: object, what: str = "tmux", strict: bool = False) -> TmuxState:
        d = obj(data, what, _known(cls, strict))
        server = string(d, "server", what, None)
        try:
            state = TmuxServer(server)
        except ValueError:
            raise ValueError(f"{what}.server: {server!r} is not one of {', '.join(s.value for s in TmuxServer)}") from None
        return cls(state, string(d, "socket", what), string(d, "message", what),
                   tuple(TmuxSession.from_json(s, f"{what}.sessions[{n}]", strict) for n, s in enumerate(items(d, "sessions", what))),
                   opt_string(d, "session", what), opt_bool(d, "launched", what), string(d, "launched_basis", what))


@dataclass(frozen=True)
class ExpectedFile:
    """A file the run should have produced (its log), and whether it exists."""

    role: str  # "log" for now
    path: str
    exists: bool
    size: int | None = None
    mtime: float | None = None
    siblings: tuple[str, ...] = ()  # files of the same shape that do exist (older runs' logs)

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("role", "path", "exists", "size", "mtime", "siblings")

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "path": self.path, "exists": self.exists, "size": self.size, "mtime": self.mtime,
                "siblings": list(self.siblings)}

    @classmethod
    def from_json(cls, data: object, what: str = "expected_files[]", strict: bool = False) -> ExpectedFile:
        d = obj(data, what, _known(cls, strict))
        if "exists" not in d:
            raise ValueError(f"{what}.exists: missing")
        return cls(string(d, "role", what, "log"), string(d, "path", what, None), boolean(d, "exists", what),
                   opt_int(d, "size", what), opt_number(d, "mtime", what), strings(d, "siblings", what))


@dataclass(frozen=True)
class CheckpointFile:
    path: str
    size: int
    mtime: float

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("path", "size", "mtime")

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "mtime": self.mtime}

    @classmethod
    def from_json(cls, data: object, what: str = "checkpoints.newest", strict: bool = False) -> CheckpointFile:
        d = obj(data, what, _known(cls, strict))
        return cls(string(d, "path", what, None), integer(d, "size", what), number(d, "mtime", what))


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

    # The checkpoint condition's `count` reads file_count and `newest_age` collected_at -
    # newest.mtime; zero_byte and partial are the file lists (the condition: "some").
    JSON_KEYS: ClassVar[tuple[str, ...]] = ("directory", "exists", "collected_at", "file_count", "total_bytes", "newest",
                                            "zero_byte", "partial", "free_bytes")

    def to_json(self) -> dict[str, Any]:
        return {"directory": self.directory, "exists": self.exists, "collected_at": self.collected_at,
                "file_count": self.file_count, "total_bytes": self.total_bytes,
                "newest": self.newest.to_json() if self.newest else None, "zero_byte": list(self.zero_byte),
                "partial": list(self.partial), "free_bytes": self.free_bytes}

    @classmethod
    def from_json(cls, data: object, what: str = "checkpoints", strict: bool = False) -> CheckpointState:
        d = obj(data, what, _known(cls, strict))
        newest = CheckpointFile.from_json(d["newest"], f"{what}.newest", strict) if d.get("newest") is not None else None
        if newest is not None and d.get("collected_at") is None:
            raise ValueError(f"{what}.collected_at: missing (the newest file's age is collected_at - newest.mtime)")
        return cls(string(d, "directory", what, None), boolean(d, "exists", what, True), number(d, "collected_at", what, 0.0),
                   integer(d, "file_count", what, 0), integer(d, "total_bytes", what, 0), newest,
                   strings(d, "zero_byte", what), strings(d, "partial", what), opt_int(d, "free_bytes", what))


@dataclass(frozen=True)
class ProcessState:
    source: str
    alive: bool
    pids: tuple[int, ...] = ()
    command: str = ""

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("source", "alive", "pids", "command")

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "alive": self.alive, "pids": list(self.pids), "command": self.command}

    @classmethod
    def from_json(cls, data: object, what: str = "process", strict: bool = False) -> ProcessState:
        d = obj(data, what, _known(cls, strict))
        return cls(opt_string(d, "source", what) or "process", bool(opt_bool(d, "alive", what)), ints(d, "pids", what),
                   opt_string(d, "command", what) or "")


# ---------------------------------------------------------------- run identity (docs/run-identity.md)
#
# Which run is being diagnosed, and where each part of that came from. The live side fills it
# (diagnose/live/identity.py); a bundle stores it as manifest `identity` in exactly this JSON;
# the engine adds state/state_reason. from_json validates every field: a hostile manifest gets
# a clear ValueError, never a crash deeper in.

LOG_SOURCES = ("config", "launch-record", "inferred", "found")
LAUNCHERS = ("tmux", "nohup", "torchrun", "slurm", "systemd", "diagnose-launch", "unknown")


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
        d = obj(data, what)
        source = string(d, "source", what, "found")
        if source not in LOG_SOURCES:
            raise ValueError(f"{what}.source: {source!r} is not one of {', '.join(LOG_SOURCES)}")
        return cls(string(d, "path", what, None), boolean(d, "exists", what), opt_int(d, "size", what),
                   opt_number(d, "mtime", what), source, string(d, "basis", what))


# Below this, in the run's busiest process, a silent run is waiting, not computing. Per process, not
# summed: a 0.5 s sample counts whole clock ticks (2 % each at 100 Hz), and the idle noise of a
# launcher and eight ranks adds up past any fixed total; a process that computes uses most of a core.
LOW_CPU_PCT = 5.0


def busiest(cpu_pcts: Iterable[float | None]) -> float | None:
    """The highest CPU use among the run's processes, None when none was measured."""
    known = [c for c in cpu_pcts if c is not None]
    return max(known) if known else None


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
    rank: int | None = None  # its RANK (torchrun, torch.distributed), from its environment; workers inherit it

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "ppid": self.ppid, "comm": self.comm, "cmdline": self.cmdline, "alive": self.alive,
                "source": self.source, "cgroup": self.cgroup, "started_at": self.started_at, "state": self.state,
                "cpu_pct": self.cpu_pct, "stack": self.stack, "rank": self.rank}

    @classmethod
    def from_json(cls, data: object) -> RunProcess:
        what = "identity.processes[]"
        d = obj(data, what)
        pid, ppid = opt_int(d, "pid", what), opt_int(d, "ppid", what)
        if pid is None:
            raise ValueError(f"{what}.pid: missing")
        return cls(pid, ppid or 0, string(d, "comm", what), string(d, "cmdline", what), boolean(d, "alive", what),
                   string(d, "source", what), opt_string(d, "cgroup", what), opt_number(d, "started_at", what),
                   opt_string(d, "state", what), opt_number(d, "cpu_pct", what), opt_string(d, "stack", what),
                   opt_int(d, "rank", what))


def rank_heads(processes: Iterable[tuple[int, int, int | None]]) -> dict[int, int]:
    """pid -> rank of each rank's own process among (pid, ppid, rank) entries: a DataLoader worker
    inherits its rank's RANK, so a rank's own process is the one whose parent (among these) is not
    of that rank."""
    entries = list(processes)
    rank_of = {pid: rank for pid, _ppid, rank in entries}
    return {pid: rank for pid, ppid, rank in entries if rank is not None and rank_of.get(ppid) != rank}


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
        d = obj(data, what)
        kind = string(d, "kind", what, "unknown")
        if kind not in LAUNCHERS:
            raise ValueError(f"{what}.kind: {kind!r} is not one of {', '.join(LAUNCHERS)}")
        return cls(kind, string(d, "source", what), opt_string(d, "tmux_socket", what), opt_string(d, "tmux_session", what),
                   opt_string(d, "tmux_server", what))


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
        d = obj(data, what)
        return cls(opt_number(d, "start", what), string(d, "start_source", what), opt_number(d, "end", what),
                   string(d, "end_source", what))


@dataclass(frozen=True)
class Interpreter:
    path: str
    source: str  # config python | config venv | live pid N | traceback site-packages in LOG

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "source": self.source}

    @classmethod
    def from_json(cls, data: object) -> Interpreter:
        what = "identity.interpreter"
        d = obj(data, what)
        return cls(string(d, "path", what, None), string(d, "source", what))


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
        d = obj(data, what)
        return cls(opt_number(d, "time", what), opt_number(d, "age_s", what), string(d, "line", what))


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
        d = obj(data, what)
        interpreter, last = d.get("interpreter"), d.get("last_output")
        return cls(
            id=string(d, "id", what, None), host=opt_string(d, "host", what), mode=string(d, "mode", what, "live"),
            collected_at=opt_number(d, "collected_at", what),
            logs=tuple(ExpectedLog.from_json(item) for item in items(d, "logs", what)),
            processes=tuple(RunProcess.from_json(item) for item in items(d, "processes", what)),
            cgroups=strings(d, "cgroups", what),
            launcher=RunLauncher.from_json(d["launcher"]) if d.get("launcher") is not None else RunLauncher(),
            window=RunWindow.from_json(d["window"]) if d.get("window") is not None else RunWindow(),
            interpreter=Interpreter.from_json(interpreter) if interpreter is not None else None,
            last_output=LastOutput.from_json(last) if last is not None else None,
            checkpoint_dir=opt_string(d, "checkpoint_dir", what),
            inferred=strings(d, "inferred", what), did_you_mean=strings(d, "did_you_mean", what),
            state=opt_string(d, "state", what), state_reason=opt_string(d, "state_reason", what),
        )
