"""Reaching the remote host, and losing it: every problem with the connection is one clear line
and exit 2 before anything is collected (host key unknown or changed, key refused, nothing
listening, the exec prefix failing); a connection that drops in the middle of a collection
becomes gaps, never a hang; the ControlMaster never outlives diagnose.

All against a real sshd on loopback (tests/live/remote_support.py) with the test's own keys
and known_hosts, through real client configs written here (never ~/.ssh)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.live.test_remote_bigfile import write_log
from tests.support.cli import run_cli
from tests.support.paths import REPO
from tests.support.remote import INSIDE, free_port, keygen, ssh_masters


def toml(tmp_path: Path, ssh_config: Path, extra: str = "") -> Path:
    path = tmp_path / "diagnose.toml"
    path.write_text(f'[host]\nssh_config = "{ssh_config}"\n{extra}')
    return path


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("diagnose: error: ") and "Traceback" not in result.stderr
    return lines[0]


def test_unknown_host_key_is_one_line_and_never_accepted(tmp_path, sshd):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config = sshd.client_config_with("no-known-hosts", known=empty)
    result = run_cli(["flex7", "--host", sshd.target, "--config", str(toml(tmp_path, config))], cwd=tmp_path)
    line = one_line_error(result)
    assert f"{sshd.target}: host key verification failed" in line
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1" in line
    assert empty.read_text() == "", "the host key was added without anyone checking it"


def test_changed_host_key_is_named(tmp_path, sshd):
    other = keygen(tmp_path / "impostor")
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} ssh-ed25519 {other}\n")
    config = sshd.client_config_with("changed", known=known)
    line = one_line_error(run_cli(["flex7", "--host", sshd.target, "--config", str(toml(tmp_path, config))], cwd=tmp_path))
    assert "host key changed" in line and "ssh-keygen -R 127.0.0.1" in line


def test_refused_key_never_prompts(tmp_path, sshd):
    keygen(tmp_path / "stranger")
    config = sshd.client_config_with("stranger", key=tmp_path / "stranger")
    started = time.monotonic()
    result = run_cli(["flex7", "--host", sshd.target, "--config", str(toml(tmp_path, config))], cwd=tmp_path, timeout=60)
    line = one_line_error(result)
    assert "permission denied (publickey)" in line and "never prompts" in line
    assert time.monotonic() - started < 30


def test_nothing_listening(tmp_path, sshd):
    port = free_port()
    line = one_line_error(run_cli(["flex7", "--host", f"root@127.0.0.1:{port}", "--config",
                                   str(toml(tmp_path, sshd.client_config))], cwd=tmp_path))
    assert f"root@127.0.0.1:{port}: connection refused" in line


@pytest.mark.parametrize("target", ["-oProxyCommand=touch /tmp/diagnose-pwned", "a b", "host:99999", "us;er@host", ""])
def test_bad_targets_are_usage_errors(tmp_path, target):
    result = run_cli(["flex7", "--host", target], cwd=tmp_path)
    line = one_line_error(result)
    assert "--host" in line
    assert not Path("/tmp/diagnose-pwned").exists()


def test_exec_without_host(tmp_path):
    line = one_line_error(run_cli(["flex7", "--exec", "pct exec 200 --"], cwd=tmp_path))
    assert "--exec needs --host" in line


def test_failing_exec_prefix_is_one_line(tmp_path, sshd, container):
    """`pct exec 999 --` of a container that does not exist: pct's own words, exit 2."""
    result = run_cli(["flex7", "--host", sshd.target, "--exec", f"{container.pct} exec 999 --", "--config",
                      str(toml(tmp_path, sshd.client_config))], cwd=tmp_path)
    line = one_line_error(result)
    assert "the exec prefix" in line and "999.conf' does not exist" in line
    assert ssh_masters(sshd.port) == []


def slow_collection(tmp_path: Path, sshd: object, container: object) -> tuple[subprocess.Popen[str], float]:
    """`diagnose flex7` of a 200 MB remote log, started; returns once the remote search runs."""
    write_log(container.workspace / "train_flex7.log", 200 * 1024 * 1024)  # type: ignore[attr-defined]
    config = toml(tmp_path, sshd.client_config, f'[run]\ndir = "{INSIDE}"\n')  # type: ignore[attr-defined]
    env = {**os.environ, "DIAGNOSE_CACHE_DIR": str(REPO / ".pytest_cache" / "diagnose-cache")}
    proc = subprocess.Popen([sys.executable, "-m", "diagnose", "flex7", "--host", sshd.target,  # type: ignore[attr-defined]
                             "--exec", container.exec_prefix, "--config", str(config), "--format", "json"],  # type: ignore[attr-defined]
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    deadline = time.time() + 120
    while time.time() < deadline:
        for pid in container.pids():  # type: ignore[attr-defined]
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0]) in (b"grep", b"wc", b"head", b"cut") and any(
                    b"train_flex7.log" in arg for arg in argv):
                return proc, time.monotonic()
        if proc.poll() is not None:
            raise AssertionError(f"diagnose ended before its remote search was seen: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.005)
    proc.kill()
    raise AssertionError("the remote search never started")


def finish(proc: subprocess.Popen[str], killed_at: float) -> tuple[dict[str, object], float]:
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("diagnose hung after its connection dropped") from None
    took = time.monotonic() - killed_at
    assert proc.returncode in (0, 1), (proc.returncode, err)
    return json.loads(out), took


def test_connection_killed_mid_collection_becomes_gaps(tmp_path, sshd, container):
    """sshd's session (the server side of the connection) is killed while grep runs there."""
    proc, _seen = slow_collection(tmp_path, sshd, container)
    for pid in sshd.sessions():
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    data, took = finish(proc, killed)
    assert took < 20, f"{took:.1f} s to end after the connection dropped"
    reasons = " ".join(g["reason"] for g in data["gaps"])  # type: ignore[index, union-attr]
    assert "lost" in reasons or "cut short" in reasons, data["gaps"]
    assert ssh_masters(sshd.port) == []


def test_control_master_killed_mid_collection_becomes_gaps(tmp_path, sshd, container):
    """The client's ControlMaster is killed (SIGKILL) while grep runs there."""
    proc, _seen = slow_collection(tmp_path, sshd, container)
    masters = ssh_masters(sshd.port)
    assert len(masters) == 1, masters
    os.kill(masters[0], signal.SIGKILL)
    killed = time.monotonic()
    data, took = finish(proc, killed)
    assert took < 20, f"{took:.1f} s to end after the master died"
    reasons = " ".join(g["reason"] for g in data["gaps"])  # type: ignore[index, union-attr]
    assert "lost" in reasons, data["gaps"]
    assert ssh_masters(sshd.port) == []


def test_a_users_remote_command_and_forwardings_do_not_get_in_the_way(tmp_path, sshd, container):
    """~/.ssh/config may set RemoteCommand, LocalForward, PermitLocalCommand for the host: the
    connection of diagnose runs its own commands and binds no port."""
    port = free_port()
    config = sshd.client_config_with("busy", extra=f"  RemoteCommand touch /tmp/diagnose-pwned-rc\n"
                                                   f"  LocalForward 127.0.0.1:{port} 127.0.0.1:{sshd.port}\n"
                                                   "  PermitLocalCommand yes\n  LocalCommand touch /tmp/diagnose-pwned-lc\n")
    (container.workspace / "train_flex7.log").write_text("2026-11-30 04:36:47,572 INFO train: step 1 loss 2.30\n")
    result = run_cli(["flex7", "--host", sshd.target, "--exec", container.exec_prefix, "--config",
                      str(toml(tmp_path, config, f'[run]\ndir = "{INSIDE}"\n')), "--format", "json"], cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    assert json.loads(result.stdout)["run"]["logs"][0]["path"] == f"{INSIDE}/train_flex7.log"
    assert not Path("/tmp/diagnose-pwned-rc").exists() and not Path("/tmp/diagnose-pwned-lc").exists()
    assert container.run("test", "-e", "/tmp/diagnose-pwned-rc", check=False).returncode != 0
