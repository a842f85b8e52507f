"""The tmux collector against real tmux servers on private sockets, in each state a run's
server can be in, and the launch rule reading what it found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from diagnose.evidence.model import TmuxServer
from diagnose.evidence.parsers.tmux import parse_tmux, socket_path
from tests.support.cli import run_cli
from tests.support.live import PrivateTmux, causes, collect, config, needs_tmux, tmux_env

pytestmark = needs_tmux


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    folder = tmp_path / "sock"
    folder.mkdir()
    tmux = PrivateTmux(folder / "srv")
    yield tmux
    tmux.close()


def _tmux_config(tmp_path: Path, socket: Path, extra: str = "") -> str:
    return f'[run]\ntmux_session = "{{run}}"\ntmux_socket = "{socket}"\n{extra}'


def test_session_alive(tmp_path: Path, server: PrivateTmux) -> None:
    server.start("flex7", "sleep 60")
    cfg = config(tmp_path, _tmux_config(tmp_path, server.socket))
    evidence = collect("flex7", cfg, [tmp_path], only=("tmux",)).evidence()
    state = evidence.tmux
    assert state is not None
    assert state.server is TmuxServer.RUNNING
    assert state.expected_session == "flex7"
    session = next(s for s in state.sessions if s.name == "flex7")
    assert session.panes and not session.panes[0].dead
    assert session.panes[0].pid is not None and Path(f"/proc/{session.panes[0].pid}").exists()
    assert evidence.exits is None  # nothing has ended


def test_server_killed_leaves_stale_socket_untouched(tmp_path: Path, server: PrivateTmux) -> None:
    server.start("flex7", "sleep 60")
    server.kill_server_hard()
    assert server.socket.exists()
    before = os.stat(server.socket)
    cfg = config(tmp_path, _tmux_config(tmp_path, server.socket))
    collection = collect("flex7", cfg, [tmp_path], only=("tmux",))
    state = collection.evidence().tmux
    assert state is not None
    assert state.server is TmuxServer.STALE_SOCKET
    assert state.message == f"no server running on {server.socket}"
    assert state.sessions == ()
    # Evidence is never modified: the socket is still there, unchanged.
    after = os.stat(server.socket)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert collection.manifest.tmux is not None and collection.manifest.tmux["socket_exists"] is True


def test_no_socket(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here" / "srv"
    cfg = config(tmp_path, _tmux_config(tmp_path, missing))
    state = collect("flex7", cfg, [tmp_path], only=("tmux",)).evidence().tmux
    assert state is not None
    assert state.server is TmuxServer.NO_SOCKET
    assert state.message == f"error connecting to {missing} (No such file or directory)"


def test_dead_panes_keep_exit_status_and_signal(tmp_path: Path, server: PrivateTmux) -> None:
    server.start("holder", "sleep 60")
    server.tmux("set-option", "-g", "remain-on-exit", "on")
    server.start_until_status("flex7", "sh -c 'sleep 0.2; exit 3'")
    server.start_until_status("other", f"{sys.executable} -c 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'")
    cfg = config(tmp_path, _tmux_config(tmp_path, server.socket))
    evidence = collect("flex7", cfg, [tmp_path], only=("tmux",)).evidence()
    state = evidence.tmux
    assert state is not None and state.server is TmuxServer.RUNNING
    panes = {s.name: s.panes[0] for s in state.sessions}
    assert panes["flex7"].dead and panes["flex7"].dead_status == 3
    assert panes["other"].dead and panes["other"].dead_signal == 9 and panes["other"].dead_status is None
    # Only the run's own session gives the run's exit status.
    assert evidence.exits is not None
    assert [(e.source, e.code, e.signal) for e in evidence.exits] == [("tmux", 3, None)]
    cfg_other = config(tmp_path, f'[run]\ntmux_session = "other"\ntmux_socket = "{server.socket}"\n')
    other = collect("flex7", cfg_other, [tmp_path], only=("tmux",)).evidence()
    assert other.exits is not None and [(e.code, e.signal) for e in other.exits] == [(None, 9)]


def test_socket_name_under_tmux_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path))
    monkeypatch.delenv("TMUX", raising=False)
    env = tmux_env()
    subprocess.run(["tmux", "-L", "flexsock", "-f", "/dev/null", "new-session", "-d", "-s", "flex7", "sleep 60"], env=env,
                   check=True, timeout=20)
    try:
        expected = f"{tmp_path}/tmux-{os.getuid()}/flexsock"
        assert socket_path(os.getuid(), os.environ, "flexsock") == (expected, "-L")
        cfg = config(tmp_path, '[run]\ntmux_session = "{run}"\ntmux_socket_name = "flexsock"\n')
        state = collect("flex7", cfg, [tmp_path], only=("tmux",)).evidence().tmux
        assert state is not None and state.socket_path == expected
        assert state.server is TmuxServer.RUNNING and any(s.name == "flex7" for s in state.sessions)
    finally:
        subprocess.run(["tmux", "-L", "flexsock", "kill-server"], env=env, check=False, timeout=20)


def test_socket_resolution_rules() -> None:
    assert socket_path(1000, {}, None, "/x/y") == ("/x/y", "-S")
    assert socket_path(1000, {}) == ("/tmp/tmux-1000/default", "default")
    assert socket_path(1000, {"TMUX_TMPDIR": "/run/t/"}) == ("/run/t/tmux-1000/default", "TMUX_TMPDIR")
    assert socket_path(1000, {"TMUX": "/tmp/tmux-1000/work,123,0"}) == ("/tmp/tmux-1000/work", "$TMUX")
    assert socket_path(0, {"TMUX": "/tmp/tmux-0/work,1,0"}, "other") == ("/tmp/tmux-0/other", "-L")


def test_old_five_field_pane_capture_still_parses() -> None:
    capture = {"socket": "/tmp/tmux-0/default", "socket_exists": True,
               "list_sessions": {"rc": 0, "stdout": "train\n", "stderr": ""},
               "list_panes": {"rc": 0, "stdout": "train\ttrain:0.0\t1\t137\tbash\n", "stderr": ""}}
    state = parse_tmux(capture, "train")
    pane = state.sessions[0].panes[0]
    assert (pane.dead, pane.dead_status, pane.dead_signal, pane.pid) == (True, 137, None, None)


def test_launch_rule_reads_a_killed_server(tmp_path: Path, server: PrivateTmux) -> None:
    """tmux died before the training shell opened its log: the launch rule names it; with the
    server alive and the session there it stays silent."""
    logs = tmp_path / "logs"
    logs.mkdir()
    # An earlier run's log beside where this run's should be (written by a real program).
    with open(logs / "train_flex6.log", "w") as handle:
        subprocess.run([sys.executable, "-c", "print('epoch 0 done')"], stdout=handle, check=True)
    toml = _tmux_config(tmp_path, server.socket, 'logs = "logs/train_{run}.log"\n')
    # Only the launch evidence: this machine's kernel log may hold other tests' OOM kills.
    (tmp_path / "diagnose.toml").write_text('[collect]\nskip = ["dmesg", "gpu", "packages"]\n'
                                            f'[run]\ndir = "{tmp_path}"\n' + toml.split("[run]\n", 1)[1])
    server.start("flex7", "sleep 60")
    alive = run_cli(["flex7", "--format", "json"], cwd=tmp_path, env=tmux_env())
    assert alive.returncode in (0, 1), alive.stderr
    assert "launch.tmux-server-died" not in causes(alive)
    server.kill_server_hard()
    dead = run_cli(["flex7", "--format", "json"], cwd=tmp_path, env=tmux_env())
    assert dead.returncode == 1, dead.stderr
    assert causes(dead)[0] == "launch.tmux-server-died"
    import json

    cause = json.loads(dead.stdout)["causes"][0]
    assert str(logs / "train_flex7.log") in cause["explanation"]
    assert "train_flex6.log" in cause["explanation"]
