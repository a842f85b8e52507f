"""The supervisor of a run started by `diagnose launch`: the parent of the run, in a session of
its own and outside the cgroups of the session that called launch, so that it sees the run's
exit status (waitpid) and writes it into the launch record whatever happens to the launcher:
a tmux server SIGKILLed (its panes get SIGHUP), an `ssh` or `pct exec` session that ends and
takes its process group, session or cgroup with it.

    python -m diagnose.live.supervise MODE --spec FILE

FILE (written by launch, 0600, removed once read) holds the record's path, the log, the working
directory, the command and its environment.

MODE:
  pane        the process of a tmux pane: starts the supervisor (fork, setsid, fork), then shows
              the run's log in the pane until the run ends and exits with its status; Ctrl-C in
              the pane reaches the run. The pane may die (the server may), the run goes on.
  detach      the same start (for --via setsid), then returns once the supervisor runs.
  foreground  be the supervisor in this process (systemd-run: the unit is the container).

The supervisor: leaves the launch's cgroups (one level up, else a leaf of its own beside them,
where it may write; --keep-cgroup: stays), opens the log (append), starts CMD with posix_spawn
in a new session (its own process group) with stdin /dev/null and stdout+stderr to the log,
records pid, process group, cgroup and start time, forwards SIGTERM/SIGINT/SIGQUIT to the run's
process group, waits, and records the exit status or the signal. SIGHUP does not reach it: it
ignores it, and the run (which gets the default) is in a session without a terminal.

Stdlib only, and imported by nothing heavy: a pane's python starts fast."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import posixpath
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnose.live import records

POLL = 0.2  # seconds between looks at the log and the record (pane)
DETACH_WAIT = 5.0  # seconds detach waits for the supervisor to say it runs


# ---------------------------------------------------------------- cgroups


def cgroup_lines(pid: int | str = "self") -> list[str]:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as handle:
            return [line.rstrip("\n") for line in handle if line.strip()]
    except OSError:
        return []


def cgroups(pid: int | str = "self") -> dict[str, str]:
    """Hierarchy -> path, from /proc/PID/cgroup: 'memory', 'name=systemd', 'cpu,cpuacct', '' (v2)."""
    found: dict[str, str] = {}
    for line in cgroup_lines(pid):
        _number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        found[controllers] = path
    return found


def hierarchy_name(key: str) -> str:
    return key or "unified (v2)"


def mounts() -> dict[str, tuple[str, str]]:
    """Hierarchy -> (mount point, the cgroup mounted there), from /proc/self/mountinfo."""
    found: dict[str, tuple[str, str]] = {}
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return found
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, point, kind = fields[3], fields[4].replace("\\040", " "), tail[0]
        if kind == "cgroup2":
            found.setdefault("", (point, root))
        elif kind == "cgroup":
            options = [o for o in tail[2].split(",") if o not in ("rw", "ro") and not o.startswith(("release_agent=", "clone_children"))]
            controllers = ",".join(o for o in options if o not in ("noprefix", "xattr", "cpuset_v2_mode"))
            found.setdefault(controllers, (point, root))
    return found


def _folder(mount: tuple[str, str], path: str) -> str | None:
    point, root = mount
    if root != "/":
        if not (path == root or path.startswith(root.rstrip("/") + "/")):
            return None
        path = path[len(root.rstrip("/")):] or "/"
    return point.rstrip("/") + (path if path != "/" else "")


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def escape_cgroups(pid: int, launch: dict[str, str], run_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Move pid out of the cgroups the launch ran in (an exec session's, in every hierarchy):
    to the parent, else (cgroup v2, whose inner cgroups hold no processes) into a leaf of its
    own beside them. Returns (moved, stayed), each {hierarchy, from, to | why}."""
    moved: list[dict[str, Any]] = []
    stayed: list[dict[str, Any]] = []
    mounted = mounts()
    for key, path in cgroups(pid).items():
        session = launch.get(key)
        if session is None or session == "/" or not _inside(path, session):
            continue  # not in the session's cgroup here (or the session is at the root)
        name = hierarchy_name(key)
        mount = mounted.get(key)
        if mount is None:
            stayed.append({"hierarchy": name, "path": path, "why": "not mounted here"})
            continue
        parent = posixpath.dirname(session.rstrip("/")) or "/"
        target = _folder(mount, parent)
        if target is None:
            stayed.append({"hierarchy": name, "path": path, "why": "its parent is outside this namespace"})
            continue
        try:
            _join(target, pid)
            moved.append({"hierarchy": name, "from": path, "to": parent})
            continue
        except OSError as exc:
            first = exc
        if first.errno in (errno.EBUSY, errno.EOPNOTSUPP):  # v2: processes only in leaves
            leaf = posixpath.join(parent, f"diagnose-launch-{run_id}")
            try:
                os.makedirs(target + "/" + f"diagnose-launch-{run_id}", exist_ok=True)
                _join(target + "/" + f"diagnose-launch-{run_id}", pid)
                moved.append({"hierarchy": name, "from": path, "to": leaf, "made": True})
                continue
            except OSError as exc:
                first = exc
        stayed.append({"hierarchy": name, "path": path, "why": f"cannot move to {parent}: {first.strerror or first}"})
    return moved, stayed


def _join(folder: str, pid: int) -> None:
    with open(os.path.join(folder, "cgroup.procs"), "w", encoding="ascii") as handle:
        handle.write(str(pid))


# ---------------------------------------------------------------- the supervisor


def _update(path: Path, change: Any) -> None:
    with contextlib.suppress(records.RecordError, OSError):
        records.update(path, change)


def _spawn_failure(command: Sequence[str], exc: OSError, env: dict[str, str]) -> str:
    """Why CMD could not be started, in words: not on PATH, a #! interpreter that is missing..."""
    program = command[0]
    if isinstance(exc, FileNotFoundError):
        if "/" not in program:
            return f"{program}: not found on PATH ({env.get('PATH', '')[:300]})"
        if os.path.exists(program):
            try:
                with open(program, "rb") as handle:
                    first = handle.readline(256).decode("utf-8", "replace").strip()
            except OSError:
                first = ""
            if first.startswith("#!"):
                return f"{program}: its #! interpreter ({first[2:].strip()}) does not exist"
        return f"{program}: no such file"
    if isinstance(exc, PermissionError):
        return f"{program}: permission denied (not executable?)"
    return f"{program}: cannot be run ({exc.strerror or exc})"


def supervise(args: Spec) -> int:
    """Be the run's parent: start it, record it, wait, record how it ended."""
    path = Path(args.record)
    me = os.getpid()
    data = records.read(path) or {}
    launch = records.part(data, "launch")
    session_cgroups = records.part(launch, "cgroups")
    before = cgroup_lines()
    moved, stayed = ([], []) if args.keep_cgroup else escape_cgroups(me, {str(k): str(v) for k, v in session_cgroups.items()},
                                                                     str(data.get("run_id", "run")))

    def started_supervisor(rec: records.Record) -> None:
        rec["supervisor"] = {"pid": me, "start_ticks": records.proc_start_ticks(me), "sid": os.getsid(0),
                             "pgid": os.getpgid(0), "mode": args.mode, "cgroups_before": before,
                             "cgroups": cgroup_lines(), "escaped": moved, "stayed": stayed,
                             "kept_cgroup": bool(args.keep_cgroup)}
        if moved:
            records.note(rec, "supervisor left the launch's cgroups: " + ", ".join(
                f"{m['hierarchy']} {m['from']} -> {m['to']}" for m in moved))
        for item in stayed:
            records.note(rec, f"supervisor stayed in {item['hierarchy']} {item['path']}: {item['why']}")

    _update(path, started_supervisor)
    env = args.env
    child: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        """SIGTERM / SIGINT / SIGQUIT to the supervisor: meant for the run (installed before it starts)."""
        if child:
            with contextlib.suppress(OSError):
                os.killpg(child[0], signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(signum, forward)
    try:
        os.chdir(args.cwd)
        log = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOCTTY, 0o644)
    except OSError as exc:
        how = f"cannot start: {exc.filename}: {exc.strerror or exc}"
        _update(path, lambda rec: rec.__setitem__("exit", {"code": None, "signal": None, "time": time.time(), "how": how}))
        return 126
    try:
        pid = os.posix_spawnp(args.command[0], args.command, env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, log, 1),
            (os.POSIX_SPAWN_DUP2, log, 2),
        ], setsid=True, setsigdef=(signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGPIPE,
                                  signal.SIGXFSZ))
    except OSError as exc:
        how, why = f"never ran: {_spawn_failure(args.command, exc, env)}", exc.strerror or str(exc)
        _update(path, lambda rec: rec.__setitem__("exit", {"code": None, "signal": None, "time": time.time(),
                                                           "how": how, "spawn_error": why}))
        return 127
    finally:
        os.close(log)
    child.append(pid)
    started = time.time()

    def spawned(rec: records.Record) -> None:
        rec.update({"pid": pid, "pgid": pid, "sid": pid, "pid_start_ticks": records.proc_start_ticks(pid, zombie_ok=True),
                    "started_at": round(started, 3), "cgroup": cgroup_lines(pid)})
        records.note(rec, f"started pid {pid} (own session and process group)")

    _update(path, spawned)
    status: int | None = None
    while status is None:
        try:
            _pid, status = os.waitpid(pid, 0)
        except ChildProcessError:
            break
    ended = time.time()
    result: dict[str, Any] = {"code": None, "signal": None, "time": round(ended, 3), "seconds": round(ended - started, 3)}
    if status is not None and os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        result.update(signal=number, signal_name=records.signal_name(number), core_dumped=os.WCOREDUMP(status),
                      how=f"killed by {records.signal_name(number)}" + (" (core dumped)" if os.WCOREDUMP(status) else ""))
        code = 128 + number
    elif status is not None:
        code = os.waitstatus_to_exitcode(status)
        result.update(code=code, how=f"exit status {code}")
    else:
        code = 1
        result["how"] = "the supervisor lost its child"
    _update(path, lambda rec: rec.__setitem__("exit", result))
    return code


# ---------------------------------------------------------------- starting it detached


def detach(args: Spec) -> int:
    """fork, setsid, fork: the grandchild (no terminal, its own session, stdin/out/err
    /dev/null) supervises; the middle one exits at once. Returns the supervisor's pid."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:  # pragma: no cover - runs in the forked children
        code = 1
        try:
            os.close(read_end)
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            if null > 2:
                os.close(null)
            os.write(write_end, f"{os.getpid()}\n".encode())
            os.close(write_end)
            code = supervise(args)
        except BaseException as exc:  # nobody sees our stderr: say it in the record
            code = 1
            failed = f"supervisor failed: {type(exc).__name__}: {exc}"
            _update(Path(args.record), lambda rec: records.note(rec, failed))
        finally:
            os._exit(code)
    os.close(write_end)
    os.waitpid(middle, 0)
    with os.fdopen(read_end, "rb") as handle:
        raw = handle.read(64).strip()
    return int(raw) if raw.isdigit() else 0


def _wait_supervisor(path: Path, timeout: float) -> records.Record | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(records.RecordError):
            data = records.read(path)
            if data and isinstance(data.get("supervisor"), dict):
                return data
        time.sleep(0.02)
    return None


def pane(args: Spec) -> int:
    """Supervise detached, then show the log in the pane until the run ends."""
    path = Path(args.record)
    detach(args)
    out = sys.stdout.buffer

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(records.RecordError, OSError):
            data = records.read(path) or {}
            if isinstance(data.get("pgid"), int) and data.get("exit") is None:
                os.killpg(data["pgid"], signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(signum, forward)
    offset = 0
    try:
        out.write(f"diagnose launch: {shlex.join(args.command)} > {shlex.quote(args.log)}\n".encode())
        out.flush()
        while True:
            data = None
            with contextlib.suppress(records.RecordError, OSError):
                data = records.read(path)
            offset = _show(args.log, offset, out)
            ended = data.get("exit") if data else None
            if isinstance(ended, dict):
                offset = _show(args.log, offset, out)
                out.write(f"diagnose launch: {ended.get('how') or 'ended'}\n".encode())
                out.flush()
                code, sig = ended.get("code"), ended.get("signal")
                return code if isinstance(code, int) else (128 + sig if isinstance(sig, int) else 1)
            time.sleep(POLL)
    except OSError:  # the pane's terminal is gone (the server died): the supervisor goes on
        return 0


def _show(log: str, offset: int, out: Any) -> int:
    try:
        with open(log, "rb") as handle:
            handle.seek(offset)
            chunk = handle.read(1024 * 1024)
    except OSError:
        return offset
    if chunk:
        out.write(chunk)
        out.flush()
    return offset + len(chunk)


@dataclass
class Spec:
    """What launch hands the supervisor (a 0600 file in the record folder, removed once read):
    never through tmux's command line, which splits a word ending in ';'."""

    mode: str
    record: str
    log: str
    cwd: str
    command: list[str]
    env: dict[str, str]
    keep_cgroup: bool = False


def load_spec(mode: str, path: str) -> Spec:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)  # it holds the caller's environment: gone once read
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a launch spec")
    command = data.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(w, str) for w in command):
        raise ValueError(f"{path}: no command")
    env = records.part(data, "env") or dict(os.environ)
    return Spec(mode, str(data["record"]), str(data["log"]), str(data["cwd"]), command,
                {str(k): str(v) for k, v in env.items()}, bool(data.get("keep_cgroup")))


def parse(argv: Sequence[str]) -> Spec:
    parser = argparse.ArgumentParser(prog="python -m diagnose.live.supervise")
    parser.add_argument("mode", choices=("pane", "detach", "foreground"))
    parser.add_argument("--spec", required=True, help="the launch spec launch wrote (read, then removed)")
    args = parser.parse_args(list(argv))
    try:
        return load_spec(args.mode, args.spec)
    except (OSError, ValueError, KeyError) as exc:
        parser.exit(2, f"diagnose supervise: {exc}\n")


def main(argv: Sequence[str] | None = None) -> int:
    # First: a tmux server that dies now sends the pane SIGHUP; the supervisor must not go with it.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.mode == "foreground":
        return supervise(args)
    if args.mode == "detach":
        detach(args)
        _wait_supervisor(Path(args.record), DETACH_WAIT)
        return 0
    return pane(args)


if __name__ == "__main__":
    sys.exit(main())
