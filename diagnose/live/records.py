"""Launch records: what `diagnose launch` started, where, and how it ended.

One JSON file per run id under the user's state directory ($XDG_STATE_HOME, else
~/.local/state, then diagnose/runs/), written atomically (a 0600 temp file beside it, then
os.replace) in a 0700 folder. Several processes write one record (launch, then the
supervisor: the run's pid, then its exit), each a read-modify-write under an flock of a lock
file beside it, so no update is lost.

A record is evidence of the run like its log: `diagnose RUN_ID`, `collect`, `watch` and `runs`
read it. Nothing in it is ever run: its command is what launch was given, its interpreter what a
PATH lookup found at launch. A record folder that is not ours, or that others may write, is
not read (a planted record could name any pid and any file).

Stdlib only (the supervisor imports this in a bare tmux pane)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
MAX_RECORD_BYTES = 1024 * 1024
_RUN_ID = re.compile(r"^[A-Za-z0-9_.@+=:-]{1,200}$")

Record = dict[str, Any]


class RecordError(Exception):
    """A record or its folder that cannot be used (not ours, not writable, not JSON)."""


def state_dir(environ: Mapping[str, str] | None = None, home: str | None = None) -> Path:
    """$XDG_STATE_HOME/diagnose/runs (an absolute XDG_STATE_HOME only, as the spec says), else
    ~/.local/state/diagnose/runs."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(home or env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Path(base) / "diagnose" / "runs"


def record_path(run_id: str, folder: Path | None = None) -> Path:
    if not _RUN_ID.match(run_id) or run_id in (".", ".."):
        raise RecordError(f"{run_id!r}: not a run id")
    return (folder or state_dir()) / f"{run_id}.json"


def trusted_folder(folder: Path, uid: int | None = None) -> str | None:
    """Why the folder may not be trusted (None: it is ours, and nobody else may write it)."""
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return exc.strerror or str(exc)
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    if st.st_uid != (os.getuid() if uid is None else uid):
        return f"owned by uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def ensure_folder(folder: Path | None = None) -> Path:
    """The record folder, made 0700 (parents too) when missing; RecordError when it is not ours."""
    folder = folder or state_dir()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise RecordError(f"{folder}: cannot make the launch record folder ({exc.strerror or exc})") from None
    why = trusted_folder(folder)
    if why is not None:
        raise RecordError(f"{folder}: launch record folder {why}; refusing to use it")
    return folder


def decode(raw: bytes, where: str) -> Record:
    """A record from its bytes: a JSON object of our schema, else RecordError."""
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError(f"{where}: larger than {MAX_RECORD_BYTES // 1024} KiB; not a launch record")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RecordError(f"{where}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION or not isinstance(data.get("run_id"), str):
        raise RecordError(f"{where}: not a launch record of schema {SCHEMA_VERSION}")
    return data


def read(path: Path) -> Record | None:
    """The record at path, None when there is none."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordError(f"{path}: {exc.strerror or exc}") from None
    return decode(raw, str(path))


def write(path: Path, data: Record) -> None:
    """Atomically: a 0600 temp file in the same folder, flushed, then renamed over the record."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock of the record's lock file (.RUN.json.lock beside it)."""
    import fcntl

    lock = path.with_name(f".{path.name}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def update(path: Path, change: Callable[[Record], None]) -> Record:
    """Read, change, write back, under the lock: the writers never lose each other's fields."""
    with locked(path):
        data = read(path)
        if data is None:
            raise RecordError(f"{path}: the launch record is gone")
        change(data)
        write(path, data)
        return data


def note(data: Record, text: str) -> None:
    """An event of the launch (what the supervisor did, what launch saw), with its time."""
    data.setdefault("events", []).append({"time": round(time.time(), 3), "what": text})


def recent(folder: Path | None = None, limit: int | None = None) -> list[Record]:
    """Every readable record in the folder, newest launch first."""
    folder = folder or state_dir()
    if trusted_folder(folder) is not None:
        return []
    found: list[Record] = []
    for entry in sorted(folder.glob("*.json")):
        if entry.name.startswith("."):
            continue  # a launch's spec file (.RUN.spec.*.json), not a record
        with contextlib.suppress(RecordError):
            data = read(entry)
            if data is not None:
                data["_path"] = str(entry)
                found.append(data)
    found.sort(key=lambda d: _num(d.get("created_at")) or 0.0, reverse=True)
    return found[:limit] if limit else found


# ---------------------------------------------------------------- what a record says


def part(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A sub-object of a record ({} when missing or not an object)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def proc_start_ticks(pid: int, zombie_ok: bool = False) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot): with the pid, it names
    one process for good (a pid alone may be reused). None for a zombie (it has ended) unless
    zombie_ok."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read(4096).decode("utf-8", "replace").rpartition(")")[2].split()
        if fields[0] == "Z" and not zombie_ok:
            return None
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid: object, ticks: object) -> bool:
    """Whether the process the record names (pid and start ticks) still runs, on this machine."""
    number = _int(pid)
    if number is None or number <= 0:
        return False
    now = proc_start_ticks(number)
    return now is not None and (_int(ticks) is None or now == ticks)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class RunStatus:
    state: str  # starting | running | exited | killed | did-not-start | gone
    text: str  # "exited 0", "killed by SIGKILL", "running (pid 123)"
    code: int | None = None
    signal: int | None = None


def status(data: Record, local: bool = True) -> RunStatus:
    """The run's state as its record (and, on this machine, the process table) says."""
    ended = data.get("exit")
    if isinstance(ended, dict):
        code, sig = _int(ended.get("code")), _int(ended.get("signal"))
        if sig is not None:
            return RunStatus("killed", f"killed by {signal_name(sig)}", None, sig)
        if code is not None:
            return RunStatus("exited", f"exited {code}", code, None)
        return RunStatus("did-not-start", f"did not start: {ended.get('how') or 'no process'}")
    pid = _int(data.get("pid"))
    supervisor = part(data, "supervisor")
    if not local:
        return RunStatus("running" if pid else "starting", f"running (pid {pid})" if pid else "starting")
    if pid is not None and alive(pid, data.get("pid_start_ticks")):
        return RunStatus("running", f"running (pid {pid})")
    if alive(supervisor.get("pid"), supervisor.get("start_ticks")):
        return RunStatus("running" if pid else "starting", f"ending (pid {pid})" if pid else "starting")
    if pid is None and alive(data.get("launch_pid"), data.get("launch_start_ticks")):
        return RunStatus("starting", "starting")
    if pid is None:
        return RunStatus("did-not-start", "did not start: no supervisor and no process ever recorded")
    return RunStatus("gone", f"gone (pid {pid}; no exit recorded: its supervisor is gone too)")
