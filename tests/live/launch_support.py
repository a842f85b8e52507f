"""Real state for the `diagnose launch` / `watch` tests: a private state folder, a private tmux
($TMUX_TMPDIR: the default server is a private one), and an exec session made of cgroups that
the launch runs in and that can be killed as a whole, as lxc/runc/logind end a session.

Every launch of these tests runs inside such a session when the machine lets us make cgroups
(root): the supervisor then leaves the test's own cgroups for their parent (the root), never
the cgroups the test runner itself sits in. Teardown kills what the launches started (by the
pids their records name, checked by start time), the tmux server, the cgroups, the folders."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from diagnose.live import records
from diagnose.live.supervise import cgroups, mounts
from tests.conftest import REPO

PYTHON3 = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else (shutil.which("python3") or "python3")


@dataclass
class Session:
    """An exec session as a set of cgroups (freezer, the v2 tree, and every hierarchy where the
    test runner is not at the root): join() puts a child in all of them; end() freezes it, SIGKILLs
    every process in it and thaws it, the way a container runtime ends an exec session."""

    dirs: list[Path] = field(default_factory=list)
    freezer: Path | None = None

    def join(self) -> None:  # a preexec_fn: runs in the child before it execs
        for folder in self.dirs:
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for folder in self.dirs:
            with contextlib.suppress(OSError):
                found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
        return found

    def end(self) -> set[int]:
        """Kill every process in the session; returns the pids that were in it."""
        if self.freezer is not None:
            (self.freezer / "freezer.state").write_text("FROZEN")
        killed = self.pids()
        for pid in killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.freezer is not None:
            (self.freezer / "freezer.state").write_text("THAWED")
        deadline = time.time() + 10
        while self.pids() and time.time() < deadline:
            time.sleep(0.05)
        return killed

    def remove(self) -> None:
        self.end()
        for folder in reversed(self.dirs):
            for _ in range(100):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def make_session(tag: str) -> Session | None:
    """None when this machine does not let us make cgroups (not root, nothing mounted)."""
    if os.geteuid() != 0:
        return None
    mounted = mounts()
    wanted = {key for key, path in cgroups().items() if path != "/"} | ({"freezer", ""} & set(mounted))
    session = Session()
    name = f"diagnose-launch-test-{tag}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    try:
        for key in sorted(wanted):
            if key not in mounted or mounted[key][1] != "/":
                continue
            folder = Path(mounted[key][0]) / name
            folder.mkdir()
            session.dirs.append(folder)
            if "cpuset" in key.split(","):
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (folder / knob).write_text((folder.parent / knob).read_text())
            if key == "freezer":
                session.freezer = folder
    except OSError:
        session.remove()
        return None
    return session if session.dirs else None


@dataclass
class Done:
    code: int
    out: str
    err: str


class Launches:
    """Run the real CLI (`python -m diagnose ...`) with a private state folder and tmux."""

    def __init__(self, root: Path, tmux_dir: Path, session: Session | None) -> None:
        self.root = root
        self.state = root / "state"
        self.tmux_dir = tmux_dir
        self.session = session
        self.env = {**os.environ, "XDG_STATE_HOME": str(self.state), "TMUX_TMPDIR": str(tmux_dir),
                    "DIAGNOSE_CACHE_DIR": str(REPO / ".pytest_cache" / "diagnose-cache")}
        self.env.pop("TMUX", None)
        self.started: list[subprocess.Popen[str]] = []

    def popen(self, args: Sequence[str], cwd: Path) -> subprocess.Popen[str]:
        """The CLI, started inside the session's cgroups (when there is one)."""
        proc = subprocess.Popen([sys.executable, "-m", "diagnose", *args], cwd=cwd, env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=self.session.join if self.session else None)
        self.started.append(proc)
        return proc

    def run(self, args: Sequence[str], cwd: Path, timeout: float = 60) -> Done:
        proc = self.popen(args, cwd)
        out, err = proc.communicate(timeout=timeout)
        return Done(proc.returncode, out, err)

    def record(self, run_id: str) -> dict[str, Any]:
        data = records.read(self.state / "diagnose" / "runs" / f"{run_id}.json")
        assert data is not None, f"no launch record of {run_id}"
        return data

    def wait_record(self, run_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 15) -> dict[str, Any]:
        deadline = time.time() + timeout
        while True:
            path = self.state / "diagnose" / "runs" / f"{run_id}.json"
            with contextlib.suppress(records.RecordError):
                data = records.read(path)
                if data is not None and check(data):
                    return data
            if time.time() > deadline:
                raise AssertionError(f"the record of {run_id} never got there: {records.read(path)}")
            time.sleep(0.05)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, env=self.env, timeout=20)

    def close(self) -> None:
        for proc in self.started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        folder = self.state / "diagnose" / "runs"
        for path in folder.glob("*.json") if folder.is_dir() else ():
            with contextlib.suppress(records.RecordError, OSError):
                data = records.read(path) or {}
                if records.alive(data.get("pid"), data.get("pid_start_ticks")):
                    os.killpg(int(data["pgid"]), signal.SIGKILL)
                supervisor = records.part(data, "supervisor")
                if records.alive(supervisor.get("pid"), supervisor.get("start_ticks")):
                    os.kill(int(supervisor["pid"]), signal.SIGKILL)
                launcher = records.part(data, "launcher")
                for key in ("tmux_pane_pid", "tmux_server_pid"):
                    if isinstance(launcher.get(key), int) and records.alive(launcher[key], None):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(launcher[key], signal.SIGKILL)
        self.tmux("kill-server")
        if self.session is not None:
            self.session.remove()
        shutil.rmtree(self.tmux_dir, ignore_errors=True)


@pytest.fixture
def launches(tmp_path: Path) -> Iterator[Launches]:
    tmux_dir = Path(f"/tmp/dgl-{os.getpid()}-{time.monotonic_ns() % 10**8}")  # a socket path fits in 108 bytes
    tmux_dir.mkdir(mode=0o700)
    helper = Launches(tmp_path, tmux_dir, make_session("run"))
    try:
        yield helper
    finally:
        helper.close()


def events(out: str) -> list[dict[str, Any]]:
    """`watch --format json` output: one object per line."""
    return [json.loads(line) for line in out.splitlines() if line.strip()]
