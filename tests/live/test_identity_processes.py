"""The run's processes from /proc: cwd, environment, open log, tree, tmux panes; cgroup, state,
CPU; launcher; a py-spy stack of a stalled run. Real children, all killed at teardown."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from diagnose.evidence.facts import RunIdentity, RunProcess
from diagnose.live.collectors import procscan
from diagnose.live.hosts import LocalHost, ProcessInfo, cgroup_of
from tests.support.identity import Children, collect_processes, identity_of, wait_for
from tests.support.live import PrivateTmux, collect, config, needs_tmux

SLEEP = "import time; time.sleep(120)"


def _proc(identity: RunIdentity, pid: int) -> RunProcess:
    processes = identity.processes
    found = [p for p in processes if p.pid == pid]
    assert found, f"pid {pid} not among {[(p.pid, p.source) for p in processes]}"
    return found[0]


def test_process_found_by_working_directory(tmp_path: Path, children: Children) -> None:
    folder = tmp_path / "flex7c"
    folder.mkdir()
    child = children.start(["sleep", "120"], cwd=folder)
    wait_for(lambda: os.readlink(f"/proc/{child.pid}/cwd") == str(folder))
    identity = identity_of(collect_processes("flex7c", [tmp_path]))
    proc = _proc(identity, child.pid)
    assert proc.alive and proc.source == f"works in {folder}" and proc.comm == "sleep"
    assert proc.state in ("S", "R") and proc.started_at is not None and proc.cpu_pct is not None


def test_process_found_by_environment(tmp_path: Path, children: Children) -> None:
    child = children.start(["sleep", "120"], cwd=tmp_path, env={"RUN_NAME": "flex7e"})
    identity = identity_of(collect_processes("flex7e", [tmp_path]))
    assert _proc(identity, child.pid).source == "environment RUN_NAME=flex7e names the run"


def test_process_found_by_its_open_log(tmp_path: Path, children: Children) -> None:
    log = tmp_path / "train_flex7f.log"
    with log.open("w") as handle:
        child = children.start(["sleep", "120"], cwd=tmp_path, stdout=handle)
    collection = collect_processes("flex7f", [tmp_path])
    proc = _proc(identity_of(collection), child.pid)
    assert proc.source == f"has the run's log {log} open"
    assert collection.evidence().process is not None and collection.evidence().process.alive  # type: ignore[union-attr]


def test_children_and_cgroup_of_a_real_process(tmp_path: Path, children: Children) -> None:
    parent = children.python("import subprocess, sys; subprocess.run(['sleep', '120'])", "--run", "flex7k")
    wait_for(lambda: any(p.ppid == parent.pid for p in _table()))
    kid = next(p for p in _table() if p.ppid == parent.pid)
    identity = identity_of(collect_processes("flex7k", [tmp_path]))
    assert _proc(identity, parent.pid).source == "command line names the run"
    assert _proc(identity, kid.pid).source == f"child of {parent.pid}"
    expected = cgroup_of(Path(f"/proc/{kid.pid}/cgroup").read_text())
    assert expected and _proc(identity, kid.pid).cgroup == expected
    assert expected in identity.cgroups


def _table() -> list[ProcessInfo]:
    return LocalHost().processes()


def test_cgroup_lines() -> None:
    assert cgroup_of("0::/user.slice/session-3.scope\n") == "/user.slice/session-3.scope"
    assert cgroup_of("4:memory:/docker/abc\n1:cpu:/\n0::/\n") == "/docker/abc"  # hybrid: the memory line says where
    assert cgroup_of("5:cpu,memory:/x\n") == "/x"


@needs_tmux
def test_tmux_pane_pids_and_launcher(tmp_path: Path, children: Children) -> None:
    tmux = PrivateTmux(tmp_path / "tmux.sock")
    try:
        tmux.start("flex7t", "sleep 120")
        pane = int(tmux.tmux("list-panes", "-t", "flex7t", "-F", "#{pane_pid}").stdout.strip())
        cfg = config(tmp_path, f'[run]\ntmux_socket = "{tmux.socket}"\n')
        identity = identity_of(collect("flex7t", cfg, [tmp_path], only=("process", "tmux")))
        assert _proc(identity, pane).source == "pane of tmux session flex7t"
        assert identity.launcher.kind == "tmux"
        assert identity.launcher.source == "a tmux session named like the run (flex7t) exists"
        assert (identity.launcher.tmux_session, identity.launcher.tmux_server) == ("flex7t", "running")
    finally:
        tmux.close()


@needs_tmux
def test_stale_socket_counts_only_inside_the_launch_window(tmp_path: Path) -> None:
    tmux = PrivateTmux(tmp_path / "tmux.sock")
    try:
        tmux.start("other", "sleep 120")
        tmux.kill_server_hard()  # the socket stays: a stale socket
        sibling = tmp_path / "train_flex7w.log"
        sibling.with_name("train_flex6w.log").write_text("step 1\n")
        cfg = config(tmp_path, f'[run]\ntmux_socket = "{tmux.socket}"\n')
        future = time.time() + 3600  # the previous run wrote after this socket was made: not this launch's
        os.utime(tmp_path / "train_flex6w.log", (future, future))
        state = collect("flex7w", cfg, [tmp_path], only=("tmux", "logs")).evidence().tmux
        assert state is not None and state.server.value == "stale_socket" and state.launched is False
        past = time.time() - 3600  # the socket was made after the previous run: inside the window
        os.utime(tmp_path / "train_flex6w.log", (past, past))
        evidence = collect("flex7w", cfg, [tmp_path], only=("tmux", "logs")).evidence()
        assert evidence.tmux is not None and evidence.tmux.launched is True
        assert "inside the run's launch window" in evidence.tmux.launched_basis
        assert evidence.identity is not None and evidence.identity.launcher.kind == "tmux"
    finally:
        tmux.close()


def test_nohup_launcher_of_a_reparented_child(tmp_path: Path, children: Children) -> None:
    log = tmp_path / "nohup.out"
    out = subprocess.run(["bash", "-c", f"RUN_NAME=flex7n nohup sleep 121 > {log} 2>&1 & echo $!"], capture_output=True,
                         text=True, timeout=10, cwd=tmp_path)
    pid = int(out.stdout.strip())
    children.extra.append(pid)
    wait_for(lambda: Path(f"/proc/{pid}").exists())
    identity = identity_of(collect_processes("flex7n", [tmp_path]))
    assert _proc(identity, pid).source == "environment RUN_NAME=flex7n names the run"
    assert identity.launcher.kind == "nohup", identity.launcher
    assert "output to a file" in identity.launcher.source


def test_slurm_launcher_from_the_environment(tmp_path: Path, children: Children) -> None:
    child = children.start(["sleep", "120"], env={"RUN_NAME": "flex7u", "SLURM_JOB_ID": "4242"})
    identity = identity_of(collect_processes("flex7u", [tmp_path]))
    assert _proc(identity, child.pid).alive
    assert identity.launcher.kind == "slurm" and "SLURM_JOB_ID=4242" in identity.launcher.source


def _stalled_run(tmp_path: Path, children: Children, run_id: str) -> int:
    log = tmp_path / f"train_{run_id}.log"
    log.write_text("step 100 loss 2.1\n")
    old = time.time() - 11 * 60  # silent for 11 minutes, past the default --stall-after of 10
    os.utime(log, (old, old))
    child = children.python(SLEEP, "--run-name", run_id)
    wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] == "S")
    return child.pid


def test_stalled_python_process_gets_a_stack_or_a_gap(tmp_path: Path, children: Children) -> None:
    pid = _stalled_run(tmp_path, children, "flex7s")
    collection = collect_processes("flex7s", [tmp_path])
    proc = _proc(identity_of(collection), pid)
    gaps = [g.reason for g in collection.evidence().gaps if g.source == "process"]
    if proc.stack is None:
        assert any(r.startswith(f"py-spy: cannot attach to pid {pid}: ") for r in gaps), gaps
    else:
        assert "sleep" in proc.stack or "<module>" in proc.stack
    identity = identity_of(collection)
    assert identity.last_output is not None and identity.last_output.age_s is not None
    assert identity.last_output.age_s > 600 and identity.last_output.line == "step 100 loss 2.1"


def test_missing_py_spy_is_a_gap(tmp_path: Path, children: Children, monkeypatch: pytest.MonkeyPatch) -> None:
    pid = _stalled_run(tmp_path, children, "flex7m")
    monkeypatch.setattr(procscan, "py_spy", lambda: None)
    collection = collect_processes("flex7m", [tmp_path])
    assert _proc(identity_of(collection), pid).stack is None
    assert any(g.reason.startswith(f"py-spy: not installed, no stack of stalled pid(s) {pid}")
               for g in collection.evidence().gaps)


def test_a_fresh_log_is_not_stalled(tmp_path: Path, children: Children) -> None:
    (tmp_path / "train_flex7r.log").write_text("step 1\n")
    child = children.python(SLEEP, "--run-name", "flex7r")
    identity = identity_of(collect_processes("flex7r", [tmp_path]))
    assert _proc(identity, child.pid).stack is None
    assert identity.window.end_source.startswith("collection time")


@needs_tmux
def test_a_stale_default_socket_alone_does_not_make_a_tmux_launch(tmp_path: Path) -> None:
    """Story: another user's stale default socket made 'tmux server died' outrank the nohup cause."""
    from tests.support.cli import run_cli
    from tests.support.live import causes

    socket_dir = tmp_path / f"tmux-{os.getuid()}"
    socket_dir.mkdir(mode=0o700)
    tmux = PrivateTmux(socket_dir / "default")
    try:
        tmux.start("someone-else", "sleep 120")
        tmux.kill_server_hard()
        work = tmp_path / "w"
        work.mkdir()
        later = time.time() + 600  # the last run wrote after that socket was made: it is not this launch's
        for name in ("train_flex6z.log", "train_flex5z.log"):
            (work / name).write_text("step 1\n")
            os.utime(work / name, (later, later))
        result = run_cli(["flex7z", "--dir", str(work), "--format", "json", "--fail-on", "never"], cwd=work,
                         env={"TMUX_TMPDIR": str(tmp_path)})
        assert result.returncode == 0, result.stderr
        found = causes(result)
        assert "launch.nohup-reaped" in found and "launch.tmux-server-died" not in found, found
    finally:
        tmux.close()
