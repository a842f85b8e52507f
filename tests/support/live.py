"""Helpers for tests that build live runs: private tmux servers, configs, the collector runner."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from diagnose.live.collectors.run import Collection, collect_run
from diagnose.live.config import Config, parse_config
from diagnose.live.discovery import resolve

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs the tmux program (apt-get install tmux)")


def tmux_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TMUX", None)  # never talk to a server the test runner may itself live in
    return env


class PrivateTmux:
    """A tmux server on its own socket under a temp dir (-S), never the user's default server."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.pids: list[int] = []

    def tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-S", str(self.socket), "-f", "/dev/null", *args], capture_output=True, text=True,
                              env=tmux_env(), check=check, timeout=20)

    def start(self, session: str, command: str) -> None:
        self.tmux("new-session", "-d", "-s", session, command)
        self.pids.append(self.server_pid())

    def server_pid(self) -> int:
        return int(self.tmux("display-message", "-p", "#{pid}").stdout.strip())

    def kill_server_hard(self) -> None:
        """SIGKILL the server: it cannot remove its socket, as when the OOM killer takes it."""
        pid = self.server_pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 10
        while time.time() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.05)
        # The pane's shell got SIGHUP when the pty closed; its children may linger.

    def wait_dead_pane(self, session: str, timeout: float = 20) -> str:
        """Wait until the session's pane is dead; '1:<status><signal>' ('1:' when tmux recorded
        neither, which tmux 3.3a sometimes does when it sees the pty close before the exit)."""
        deadline = time.time() + timeout
        dead_since: float | None = None
        while time.time() < deadline:
            # tmux marks the pane dead at EOF and fills in the status when it reaps the child.
            out = self.tmux("list-panes", "-t", session, "-F", "#{pane_dead}:#{pane_dead_status}#{pane_dead_signal}",
                            check=False).stdout.strip()
            if out.startswith("1:"):
                dead_since = dead_since or time.time()
                if len(out) > 2 or time.time() - dead_since > 2:
                    return out
            time.sleep(0.1)
        raise AssertionError(f"pane of {session} did not die within {timeout} s")

    def start_until_status(self, session: str, command: str, tries: int = 10) -> str:
        """Start a session whose command ends, until tmux records how it ended."""
        for _ in range(tries):
            self.tmux("new-session", "-d", "-s", session, command)
            out = self.wait_dead_pane(session)
            if len(out) > 2:
                return out
            self.tmux("kill-session", "-t", session)
        raise AssertionError(f"tmux never recorded how {command!r} ended")

    def close(self) -> None:
        self.tmux("kill-server", check=False)
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def config(tmp_path: Path, text: str) -> Config:
    """A config from TOML text, as if read from tmp_path/diagnose.toml."""
    path = tmp_path / "diagnose.toml"
    path.write_text(text)
    from diagnose.live.config import load_config

    return load_config(path)


def collect(run_id: str, cfg: Config, dirs: list[Path], only: tuple[str, ...] | None = None) -> Collection:
    from diagnose.live.collectors.run import registry

    spec = resolve(run_id, cfg, dirs)
    chosen = [c for c in registry() if only is None or c.name in only]
    return collect_run(spec, collectors=chosen)


def empty_config() -> Config:
    return parse_config({}, Path("diagnose.toml"))


def causes(result: subprocess.CompletedProcess[str]) -> list[str]:
    import json

    data: Any = json.loads(result.stdout)
    return [c["id"] for c in data["causes"]]
