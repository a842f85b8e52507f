"""`diagnose launch`: start a run detached (tmux, setsid or systemd-run) under a supervisor
(supervise.py) that records its pid and its exit, then look at it for a few seconds: did it
really start?

start() makes the log and the launch record and starts the supervisor the chosen way;
observe() follows the record, the log and the run's processes until the wait is over or the
run ended, and says what it saw as it sees it; verdict() turns that (and the cause the rules
found in the log, which the app layer adds) into "started" or "did not start, because ...".

Nothing here runs anything but the command launch was given, tmux / systemd-run, and py-spy;
no run id or path ever becomes a command."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.errors import DiagnoseError
from diagnose.evidence.facts import LOW_CPU_PCT, busiest
from diagnose.live import records
from diagnose.live.supervise import cgroup_lines, cgroups, escape_cgroups

VIAS = ("tmux", "setsid", "systemd-run")
SUPERVISOR_WAIT = 5.0  # seconds launch waits (past --wait if need be) for the supervisor to start the run
POLL = 0.1
FIRST_LINES = 5
TMUX_TIMEOUT = 10.0
PY_SPY_LIMIT = 10.0
CPU_SAMPLE = 0.5
_PYTHON = re.compile(r"^python[0-9.]*$")


@dataclass(frozen=True)
class LaunchRequest:
    run_id: str
    command: tuple[str, ...]
    via: str | None = None  # None: tmux when installed, else setsid
    log: str | None = None  # default: {run}.log in the run's working directory
    cwd: str | None = None
    force: bool = False
    tmux_socket_name: str | None = None  # tmux -L NAME
    keep_cgroup: bool = False


@dataclass
class Started:
    run_id: str
    record_path: Path
    via: str
    log: Path
    cwd: str
    command: tuple[str, ...]
    started_at: float  # wall time launch started the supervisor
    launcher: dict[str, Any]
    notes: list[str] = field(default_factory=list)


Say = Callable[[str], None]


# ---------------------------------------------------------------- start


def start(request: LaunchRequest) -> Started:
    """Check everything that can be checked, make the log and the record, start the supervisor."""
    if not request.command:
        raise DiagnoseError("launch: no command given (diagnose launch RUN_ID -- CMD ...)")
    cwd = os.path.abspath(os.path.expanduser(request.cwd or os.getcwd()))
    if not os.path.isdir(cwd):
        raise DiagnoseError(f"--cwd {request.cwd}: not a folder")
    log = Path(os.path.normpath(os.path.join(cwd, os.path.expanduser(request.log or f"{request.run_id}.log"))))
    via = request.via or ("tmux" if shutil.which("tmux") else "setsid")
    notes: list[str] = []
    if request.via is None and via == "setsid":
        notes.append("tmux is not installed: launching with setsid")
    if via == "tmux" and shutil.which("tmux") is None:
        raise DiagnoseError("--via tmux: tmux is not installed (apt-get install tmux), or use --via setsid")
    if via == "systemd-run":
        _check_systemd()
    _check_log(log, request.force)
    try:
        folder = records.ensure_folder()
        path = records.record_path(request.run_id, folder)
        _check_not_running(path, request.run_id)
    except records.RecordError as exc:
        raise DiagnoseError(str(exc)) from None
    tmux: dict[str, Any] = {}
    if via == "tmux":
        tmux = _tmux_target(request)
        notes.extend(tmux.pop("notes"))
    made_log = _make_log(log, request.force)
    env = _run_env(request.run_id)
    now = time.time()
    record: records.Record = {
        "schema_version": records.SCHEMA_VERSION, "run_id": request.run_id, "command": list(request.command),
        "cwd": cwd, "host": socket.gethostname(), "user": _user(), "uid": os.getuid(), "via": via, "log": str(log),
        "interpreter": interpreter(request.command, env.get("PATH", "")), "created_at": round(now, 3),
        "launch_pid": os.getpid(), "launch_start_ticks": records.proc_start_ticks(os.getpid()),
        "launch": {"pid": os.getpid(), "cgroups": cgroups(), "cgroup_lines": cgroup_lines(),
                   "sid": os.getsid(0), "pgid": os.getpgid(0)},
        "launcher": {"kind": via, **({k: v for k, v in tmux.items() if k in ("tmux_socket", "tmux_session")})},
        "env_added": {k: env[k] for k in ("PYTHONUNBUFFERED", "DIAGNOSE_RUN_ID") if os.environ.get(k) != env[k]},
        "pid": None, "exit": None, "events": [],
    }
    try:
        with records.locked(path):
            records.write(path, record)
    except OSError as exc:
        _unmake_log(log, made_log)
        raise DiagnoseError(f"{path}: cannot write the launch record ({exc.strerror or exc})") from None
    spec = {"record": str(path), "log": str(log), "cwd": cwd, "command": list(request.command), "env": env,
            "keep_cgroup": request.keep_cgroup}
    spec_file = _spec_file(path.parent, request.run_id, spec)
    argv = supervisor_argv("pane" if via == "tmux" else "detach" if via == "setsid" else "foreground", spec_file)
    try:
        if via == "tmux":
            launcher = _start_tmux(tmux, argv, cwd, request.run_id)
        elif via == "setsid":
            launcher = _start_setsid(argv, cwd)
        else:
            launcher = _start_systemd(argv, request.run_id)
    except DiagnoseError as exc:
        with contextlib.suppress(OSError):
            os.unlink(spec_file)
        _unmake_log(log, made_log)
        failed = f"launch failed: {exc.message}"
        with contextlib.suppress(records.RecordError, OSError):
            records.update(path, lambda rec: rec.__setitem__("exit", {"code": None, "signal": None, "time": time.time(),
                                                                      "how": failed}))
        raise
    with contextlib.suppress(records.RecordError, OSError):
        records.update(path, lambda rec: rec["launcher"].update(launcher))
    return Started(request.run_id, path, via, log, cwd, request.command, now, launcher, notes)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry, no $USER: the uid says it
        return str(os.getuid())


def _check_log(log: Path, force: bool) -> None:
    if not log.parent.is_dir():
        raise DiagnoseError(f"--log {log}: its folder {log.parent} does not exist")
    if log.is_symlink() or log.exists():
        if not force:
            raise DiagnoseError(f"{log}: the log exists; launch never overwrites a log (pass --force, or another --log)")
        if log.is_symlink() or not log.is_file():
            raise DiagnoseError(f"{log}: not a regular file; launch writes its log only to a plain file")


def _make_log(log: Path, force: bool) -> bool:
    """Create (or with --force empty) the log now: a folder we may not write fails here, before
    anything starts. True when it was made (and may be removed again if the start fails)."""
    existed = log.exists()
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0) | (os.O_TRUNC if force else os.O_EXCL)
    try:
        os.close(os.open(log, flags, 0o644))
    except OSError as exc:
        raise DiagnoseError(f"{log}: cannot create the log ({exc.strerror or exc})") from None
    return not existed


def _unmake_log(log: Path, made: bool) -> None:
    with contextlib.suppress(OSError):
        if made and log.stat().st_size == 0:
            log.unlink()


def _check_not_running(path: Path, run_id: str) -> None:
    old = records.read(path)
    if old is None:
        return
    state = records.status(old)
    if state.state in ("running", "starting"):
        pid = old.get("pid") or (old.get("supervisor") or {}).get("pid")
        raise DiagnoseError(f"{run_id} is already {state.state} (pid {pid}, launched by diagnose launch; record {path}); "
                            "stop it or choose another run id")


def _run_env(run_id: str) -> dict[str, str]:
    """The caller's environment (a tmux pane would get the server's), with Python's output
    unbuffered (a run writing to a file shows life at once) and the run id (every process of
    the run can then be told by its environment)."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["DIAGNOSE_RUN_ID"] = run_id
    return env


def _spec_file(folder: Path, run_id: str, spec: dict[str, Any]) -> str:
    """What the supervisor is to do, with the caller's environment: 0600 in the record folder."""
    fd, name = tempfile.mkstemp(prefix=f".{run_id}.spec.", suffix=".json", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    return name


def interpreter(command: Sequence[str], path_env: str) -> dict[str, str] | None:
    """The Python a command runs, by a PATH lookup of CMD[0] (python3 -> /venv/bin/python3), or
    the #! line of a script on PATH (torchrun, accelerate). Read, never run."""
    program = command[0]
    found = shutil.which(program, path=path_env or None)
    if found is None:
        return None
    if _PYTHON.match(os.path.basename(program)):
        return {"path": found, "source": f"PATH lookup of {program} at launch"}
    try:
        with open(found, "rb") as handle:
            first = handle.readline(256).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if first.startswith("#!"):
        words = first[2:].split()
        named = words[1] if words and os.path.basename(words[0]) == "env" and len(words) > 1 else (words[0] if words else "")
        if _PYTHON.match(os.path.basename(named)):
            where = shutil.which(named, path=path_env or None) if "/" not in named else named
            return {"path": where or named, "source": f"#! line of {found}"}
    return None


def supervisor_argv(mode: str, spec_file: str) -> list[str]:
    """python -m diagnose.live.supervise ...: with this very code (PYTHONPATH when diagnose is
    not installed in the interpreter's own site-packages, e.g. a checkout)."""
    import site

    import diagnose

    root = str(Path(diagnose.__file__).resolve().parent.parent)
    installed = {os.path.realpath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    argv = [sys.executable, "-m", "diagnose.live.supervise", mode, "--spec", spec_file]
    if os.path.realpath(root) not in installed:
        env = shutil.which("env") or "/usr/bin/env"
        argv = [env, f"PYTHONPATH={root}", *argv]
    return argv


# ---------------------------------------------------------------- the three ways


def _tmux_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TMUX", None)  # we name the socket ourselves
    return env


def _tmux(socket_file: str, *args: str) -> subprocess.CompletedProcess[str]:
    """tmux on that socket. The default folder ($TMUX_TMPDIR/tmux-UID, 0700) is made as tmux
    makes it for a plain `tmux`: with -S it does not."""
    folder = os.path.dirname(socket_file)
    if os.path.basename(folder) == f"tmux-{os.getuid()}" and not os.path.isdir(folder):
        with contextlib.suppress(OSError):
            os.mkdir(folder, 0o700)
    try:
        return subprocess.run(["tmux", "-S", socket_file, *args], capture_output=True, text=True, env=_tmux_env(),
                              timeout=TMUX_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise DiagnoseError(f"tmux on {socket_file} did not answer within {TMUX_TIMEOUT:.0f} s") from None


def _tmux_target(request: LaunchRequest) -> dict[str, Any]:
    """The server (the user's default one, or -L NAME, under $TMUX_TMPDIR) and a free session name."""
    from diagnose.evidence.parsers.tmux import socket_path

    path, how = socket_path(os.getuid(), os.environ, request.tmux_socket_name, None)
    running = os.path.exists(path) and _tmux(path, "list-sessions").returncode == 0
    notes = []
    if running and _tmux(path, "has-session", "-t", f"={request.run_id}").returncode == 0:
        panes = _tmux(path, "list-panes", "-s", "-t", f"={request.run_id}", "-F", "#{pane_dead}").stdout.split()
        if not panes or any(flag != "1" for flag in panes):
            raise DiagnoseError(f"tmux session {request.run_id} exists already on {path}; "
                                f"attach to it (tmux attach -t {request.run_id}) or choose another run id")
        _tmux(path, "kill-session", "-t", f"={request.run_id}")  # only a dead pane of an earlier launch was left
        notes.append(f"removed the tmux session {request.run_id} of an earlier launch (its pane was dead)")
    return {"tmux_socket": path, "tmux_socket_source": how, "tmux_session": request.run_id,
            "server_was_running": running, "notes": notes}


def _start_tmux(target: dict[str, Any], argv: list[str], cwd: str, run_id: str) -> dict[str, Any]:
    sock = str(target["tmux_socket"])
    if any(word.endswith(";") for word in argv):  # tmux would split the command there
        raise DiagnoseError(f"cannot start a tmux pane with a path ending in ';' ({' '.join(argv)}); use --via setsid")
    # remain-on-exit: the pane stays, with the run's output and its exit status, once it ends.
    done = _tmux(sock, "new-session", "-d", "-s", run_id, "-x", "200", "-y", "50", "-c", cwd, "--", *argv,
                 ";", "set-option", "-w", "-t", f"={run_id}:", "remain-on-exit", "on")
    if done.returncode != 0:
        raise DiagnoseError(f"tmux new-session failed on {sock}: {(done.stderr or done.stdout).strip()[:300]}")
    info: dict[str, Any] = {"tmux_socket": sock, "tmux_session": run_id, "tmux_server_new": not target["server_was_running"]}
    shown = _tmux(sock, "display-message", "-p", "-t", f"={run_id}:", "#{pid} #{pane_pid}")
    words = shown.stdout.split()
    if shown.returncode == 0 and len(words) == 2 and all(w.isdigit() for w in words):
        server, pane = int(words[0]), int(words[1])
        info.update(tmux_server_pid=server, tmux_server_start_ticks=records.proc_start_ticks(server), tmux_pane_pid=pane)
        if not target["server_was_running"]:
            # A server started here was born in this session's cgroups: out with it too, so that
            # `tmux attach` still works after the exec session ends (the run does not need it).
            moved, _stayed = escape_cgroups(server, cgroups(), run_id)
            info["tmux_server_escaped"] = moved
    return info


def _start_setsid(argv: list[str], cwd: str) -> dict[str, Any]:
    try:
        done = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, start_new_session=True, timeout=SUPERVISOR_WAIT + 10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DiagnoseError(f"cannot start the supervisor: {exc}") from None
    if done.returncode != 0:
        raise DiagnoseError(f"the supervisor did not start: {done.stderr.decode('utf-8', 'replace').strip()[:300]}")
    return {}


def _check_systemd() -> None:
    if shutil.which("systemd-run") is None:
        raise DiagnoseError("--via systemd-run: systemd-run is not installed; use --via tmux or setsid")
    if not os.path.isdir("/run/systemd/system"):
        raise DiagnoseError("--via systemd-run: systemd is not running on this machine (no /run/systemd/system); "
                            "use --via tmux or setsid")


def unit_name(run_id: str) -> str:
    return "diagnose-" + re.sub(r"[^A-Za-z0-9:_.-]", "_", run_id) + f"-{int(time.time())}"


def _start_systemd(argv: list[str], run_id: str) -> dict[str, Any]:
    unit = unit_name(run_id)
    user = ["--user"] if os.getuid() != 0 else []
    try:
        done = subprocess.run(["systemd-run", *user, "--unit", unit, "--collect", "--quiet", "--", *argv],
                              capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DiagnoseError(f"systemd-run failed: {exc}") from None
    if done.returncode != 0:
        raise DiagnoseError(f"systemd-run failed: {(done.stderr or done.stdout).strip()[:300]}")
    return {"unit": f"{unit}.service", "systemd_user": bool(user)}


# ---------------------------------------------------------------- observe


@dataclass
class Observation:
    record: records.Record
    seconds: float  # how long launch looked
    pid: int | None = None
    supervisor: int | None = None
    pid_after: float | None = None  # seconds from launch to the run's pid
    first_output_after: float | None = None
    first_lines: list[str] = field(default_factory=list)
    lines: int = 0
    ended: dict[str, Any] | None = None
    tmux_server_died: bool = False
    alive: bool = False
    proc_state: str | None = None  # the state letters of the run's processes ("S", "R", ...)
    cpu_pct: float | None = None
    stack: str | None = None
    stack_gap: str | None = None
    processes: list[tuple[int, str]] = field(default_factory=list)  # (pid, command) of the run's session


def observe(started: Started, wait: float, say: Say) -> Observation:
    """Look at the run until `wait` seconds have passed or it ended (at least until the
    supervisor has started it, or SUPERVISOR_WAIT), saying what is seen when it is seen."""
    begin = time.monotonic()
    obs = Observation(record={}, seconds=0.0)
    offset, partial = 0, b""
    said_pid = said_server = False
    server_pid = started.launcher.get("tmux_server_pid")
    while True:
        elapsed = time.monotonic() - begin
        with contextlib.suppress(records.RecordError, OSError):
            obs.record = records.read(started.record_path) or obs.record
        rec = obs.record
        supervisor = rec.get("supervisor") if isinstance(rec.get("supervisor"), dict) else None
        obs.supervisor = supervisor.get("pid") if supervisor else None
        if isinstance(rec.get("pid"), int) and obs.pid is None:
            obs.pid = rec["pid"]
            obs.pid_after = max(0.0, float(rec.get("started_at") or time.time()) - started.started_at)
        if obs.pid is not None and not said_pid:
            said_pid = True
            say(f"{started.run_id}: pid {obs.pid} started {obs.pid_after:.1f} s after launch, supervised by pid "
                f"{obs.supervisor} ({_escaped(supervisor)})")
        chunk = _read_from(started.log, offset)
        if chunk:
            offset += len(chunk)
            text = partial + chunk
            *complete, partial = text.split(b"\n")
            for raw in complete:
                obs.lines += 1
                if len(obs.first_lines) < FIRST_LINES and raw.strip():
                    obs.first_lines.append(raw.decode("utf-8", "replace").rstrip("\r"))
            if obs.first_output_after is None:
                obs.first_output_after = time.time() - started.started_at
                say(f"{started.run_id}: first output after {obs.first_output_after:.1f} s")
        if server_pid and not said_server and not records.alive(server_pid, started.launcher.get("tmux_server_start_ticks")):
            said_server = obs.tmux_server_died = True
            say(f"{started.run_id}: the tmux server (pid {server_pid}) is gone"
                + (f"; the run goes on under its supervisor (pid {obs.supervisor})" if obs.supervisor else ""))
        if isinstance(rec.get("exit"), dict):
            obs.ended = rec["exit"]
            break
        if elapsed >= wait and (obs.pid is not None or elapsed >= max(wait, SUPERVISOR_WAIT)):
            break
        if obs.pid is None and elapsed >= SUPERVISOR_WAIT and (obs.tmux_server_died or not _supervisor_alive(rec)):
            break  # nothing will start it any more
        time.sleep(POLL)
    if partial.strip() and len(obs.first_lines) < FIRST_LINES:
        obs.lines += 1
        obs.first_lines.append(partial.decode("utf-8", "replace").rstrip("\r"))
    obs.seconds = time.monotonic() - begin
    if obs.ended is None and obs.pid is not None:
        _look_at_processes(obs)
    return obs


def refresh(started: Started, obs: Observation) -> None:
    """The record read once more (the rules took a moment): a run that ended meanwhile ended."""
    if obs.ended is not None:
        return
    with contextlib.suppress(records.RecordError, OSError):
        rec = records.read(started.record_path) or {}
        if isinstance(rec.get("exit"), dict):
            obs.record, obs.ended, obs.alive = rec, rec["exit"], False


def _escaped(supervisor: dict[str, Any] | None) -> str:
    if not supervisor:
        return "?"
    moved, stayed = supervisor.get("escaped") or [], supervisor.get("stayed") or []
    parts = [f"session {supervisor.get('sid')}"]
    if moved:
        parts.append("left " + ", ".join(f"{m.get('hierarchy')} {m.get('from')} -> {m.get('to')}" for m in moved[:3]))
    if stayed:  # the end of this session's cgroup would take the run along: say so
        parts.append("stayed in " + ", ".join(f"{m.get('hierarchy')} {m.get('path')} ({m.get('why')})" for m in stayed[:3]))
    if supervisor.get("kept_cgroup"):
        parts.append("kept the launch's cgroups (--keep-cgroup)")
    return "; ".join(parts)


def _supervisor_alive(rec: records.Record) -> bool:
    supervisor = rec.get("supervisor") if isinstance(rec.get("supervisor"), dict) else None
    if supervisor is None:
        # Not yet started: the pane (tmux) or detach may still be on its way.
        return True
    return records.alive(supervisor.get("pid"), supervisor.get("start_ticks"))


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(256 * 1024)
    except OSError:
        return b""


def session_processes(sid: int) -> list[tuple[int, str, str, int]]:
    """(pid, state, command, cpu ticks) of every process in the run's session (it leads its own)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read(4096).decode("utf-8", "replace").rpartition(")")[2].split()
            if int(fields[3]) != sid:
                continue
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                command = " ".join(p.decode("utf-8", "replace") for p in handle.read(4096).split(b"\0") if p)
            found.append((int(name), fields[0], command, int(fields[11]) + int(fields[12])))
        except (OSError, IndexError, ValueError):
            continue
    return sorted(found)


def _look_at_processes(obs: Observation) -> None:
    """Alive? Sleeping or busy (CPU over a short sample)? For a silent one, a py-spy stack."""
    assert obs.pid is not None
    first = {pid: (state, command, ticks) for pid, state, command, ticks in session_processes(obs.pid)}
    time.sleep(CPU_SAMPLE)
    second = {pid: (state, command, ticks) for pid, state, command, ticks in session_processes(obs.pid)}
    live = {pid: v for pid, v in second.items() if v[0] != "Z"}
    obs.alive = bool(live)
    if not live:
        return
    ticks = os.sysconf("SC_CLK_TCK")
    most = busiest(100.0 * (v[2] - first[pid][2]) / ticks / CPU_SAMPLE for pid, v in live.items() if pid in first)
    obs.cpu_pct = round(most, 1) if most is not None else None
    obs.proc_state = "".join(sorted({v[0] for v in live.values()}))
    obs.processes = [(pid, v[1]) for pid, v in live.items()]
    if obs.first_output_after is None and (obs.cpu_pct is None or obs.cpu_pct < LOW_CPU_PCT):
        _stack(obs, live)


def _stack(obs: Observation, live: dict[int, tuple[str, str, int]]) -> None:
    from diagnose.live.collectors.procscan import py_spy
    from diagnose.live.hosts import LocalHost

    pythons = [pid for pid in live if _is_python(pid)]
    if not pythons:
        names = ", ".join(f"{pid} ({live[pid][1][:40]})" for pid in list(live)[:3])
        obs.stack_gap = f"no Python process to take a stack of: {names}"
        return
    tool = py_spy()
    if tool is None:
        obs.stack_gap = "py-spy is not installed (pip install py-spy): no stack"
        return
    target = pythons[-1]  # the newest: a launcher script's python, not the shell before it
    result = LocalHost().run([tool, "dump", "--pid", str(target)], PY_SPY_LIMIT)
    if result.ok and result.out.strip():
        obs.stack = result.out[:16 * 1024]
    else:
        why = result.failure().partition(": ")[2] or result.failure()
        obs.stack_gap = f"py-spy could not read pid {target}: {why.strip().splitlines()[0][:200] if why.strip() else '?'}"


def _is_python(pid: int) -> bool:
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return bool(_PYTHON.match(os.path.basename(exe)))


# ---------------------------------------------------------------- verdict


@dataclass(frozen=True)
class Verdict:
    started: bool  # exit 0 of launch
    headline: str  # "started: ...", "did not start: ..."
    details: tuple[str, ...] = ()


def verdict(started: Started, obs: Observation, cause: tuple[str, str, str] | None) -> Verdict:
    """started / did not start, and why. cause: (id, title, category) of the top crash-level
    cause the rules found in the log so far, if any."""
    run = started.run_id
    program = os.path.basename(started.command[0])
    lines = tuple(f"| {line}" for line in obs.first_lines)
    named = (f"cause: {cause[1]} [{cause[0]}]",) if cause else ()
    ended = obs.ended
    if ended is not None:
        seconds = ended.get("seconds")
        after = f" after {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""
        code, sig = ended.get("code"), ended.get("signal")
        if code is None and sig is None:
            how = str(ended.get("how") or "it never ran")
            missing = "not found on PATH" in how or "#! interpreter" in how
            what = f"the interpreter is missing: {how.removeprefix('never ran: ')}" if missing and _PYTHON.match(program) \
                else how
            return Verdict(False, f"{run}: did not start: {what}", lines + named)
        if code == 0:
            return Verdict(True, f"{run}: started and finished: exit status 0{after}", lines)
        how = f"killed by {records.signal_name(sig)}" if sig is not None else f"exited with status {code}"
        never = code in (126, 127) or (cause is not None and cause[2] == "launch") or obs.first_output_after is None
        if never:
            reason = {127: " (command or script not found)", 126: " (not executable)"}.get(code or -1, "")
            return Verdict(False, f"{run}: did not start: {program} {how}{after}{reason}", lines + named)
        return Verdict(False, f"{run}: started, then failed: {program} {how}{after}", lines + named)
    if obs.pid is None:
        if obs.tmux_server_died:
            return Verdict(False, f"{run}: did not start: the tmux server died before the run started "
                                  f"(server pid {started.launcher.get('tmux_server_pid')})")
        if obs.supervisor is None:
            return Verdict(False, f"{run}: did not start: its supervisor never started ({_never_why(started)})")
        return Verdict(False, f"{run}: did not start: supervisor pid {obs.supervisor} has not started it after "
                              f"{obs.seconds:.1f} s")
    if not obs.alive:
        return Verdict(False, f"{run}: gone: pid {obs.pid} ended and no exit status was recorded", lines)
    busy = f"{obs.proc_state}, {obs.cpu_pct:.1f} % CPU" if obs.cpu_pct is not None else obs.proc_state or "?"
    if obs.first_output_after is None:
        if obs.cpu_pct is not None and obs.cpu_pct >= LOW_CPU_PCT:
            return Verdict(True, f"{run}: running, no output yet after {obs.seconds:.1f} s: pid {obs.pid} is busy ({busy})")
        stack = tuple(f"| {line}" for line in (obs.stack or "").splitlines()[:30] if line.strip())
        why = () if stack else (f"no stack: {obs.stack_gap}",) if obs.stack_gap else ()
        return Verdict(False, f"{run}: no output after {obs.seconds:.1f} s while pid {obs.pid} sleeps ({busy})",
                       stack + why)
    if cause is not None:
        return Verdict(False, f"{run}: running, but its log already shows an error (pid {obs.pid}, {busy})", lines + named)
    return Verdict(True, f"{run}: started: pid {obs.pid} is running ({busy}); first output after "
                         f"{obs.first_output_after:.1f} s, {obs.lines} line(s) in {obs.seconds:.1f} s", lines)


def _never_why(started: Started) -> str:
    if started.via == "tmux":
        return f"the tmux pane's command did not run on {started.launcher.get('tmux_socket')}"
    if started.via == "systemd-run":
        return f"see systemctl status {started.launcher.get('unit')}"
    return "the detached start failed"


def finish(started: Started, result: Verdict) -> None:
    """launch's verdict into the record; the environment file gone if nothing read it."""
    def change(rec: records.Record) -> None:
        rec["check"] = {"started": result.started, "verdict": result.headline, "at": round(time.time(), 3)}
        if isinstance(rec.get("supervisor"), dict) and rec["launcher"].get("kind") == "setsid":
            rec["launcher"]["setsid_pid"] = rec["supervisor"].get("sid")

    with contextlib.suppress(records.RecordError, OSError):
        records.update(started.record_path, change)
    for leftover in started.record_path.parent.glob(f".{started.run_id}.spec.*.json"):
        rec = None
        with contextlib.suppress(records.RecordError, OSError):
            rec = records.read(started.record_path)
        if rec is None or rec.get("supervisor") is None:
            with contextlib.suppress(OSError):
                leftover.unlink()
