"""End to end on live runs built in temp dirs: real tmux, real files, a real kernel OOM kill.
`diagnose RUN_ID` ranks the right cause, and `diagnose collect` then `diagnose BUNDLE` gives
the same answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.live import PrivateTmux, needs_tmux, tmux_env

MEMCG = Path("/sys/fs/cgroup/memory")
needs_memcg = pytest.mark.skipif(
    os.geteuid() != 0 or not (MEMCG / "memory.limit_in_bytes").exists(),
    reason="needs root and a cgroup v1 memory controller at /sys/fs/cgroup/memory to make the kernel OOM-kill a child",
)

# The training script of the OOM runs: joins the memory cgroup, logs a few steps, then grows
# until the kernel kills it.
TRAIN = textwrap.dedent('''\
    import os, sys, time
    with open(sys.argv[1], "w") as handle:
        handle.write(str(os.getpid()))
    for step in range(3):
        print(time.strftime("%Y-%m-%d %H:%M:%S"), f"INFO step {step} loss {2.3 - step / 10:.2f}", flush=True)
    blocks = []
    while True:
        blocks.append(b"\\x01" * (8 << 20))
''')


@pytest.fixture
def memcg() -> Iterator[Path]:
    group = MEMCG / f"diagnose-test-{os.getpid()}-{time.monotonic_ns()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(96 << 20))
        memsw = group / "memory.memsw.limit_in_bytes"
        if memsw.exists():
            memsw.write_text(str(96 << 20))  # no escape into swap
        yield group
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def diagnose_json(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    result = run_cli([*args, "--format", "json"], cwd=cwd, env=env)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def answer(data: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a user reads: ranked causes with their evidence (not collection times)."""
    return [(c["id"], c["title"], c["explanation"], tuple(c["fix"]),
             tuple((e["source"], e["line"], e["text"]) for e in c["evidence"])) for c in data["causes"]]


def collect_then_diagnose(run_id: str, cwd: Path, out: Path, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    collected = run_cli(["collect", run_id, "-o", str(out)], cwd=cwd, env=env)
    assert collected.returncode == 0, collected.stderr
    assert f"wrote {out}" in collected.stderr
    return diagnose_json([str(out)], cwd=cwd.parent, env=env)


@needs_tmux
def test_live_run_tmux_died_then_bundle_gives_the_same_answer(tmp_path: Path) -> None:
    """No root needed: the tmux server hosting the run is SIGKILLed before the run's shell
    opened its log. Live: the launch rule ranks first; the bundle says exactly the same."""
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    with open(run / "logs" / "train_flex6.log", "w") as handle:  # the previous run's log, by a real program
        subprocess.run([sys.executable, "-c", "print('epoch 3 done')"], stdout=handle, check=True)
    sock_dir = tmp_path / "s"
    sock_dir.mkdir()
    tmux = PrivateTmux(sock_dir / "srv")
    try:
        tmux.start("flex7", "sleep 120")
        tmux.kill_server_hard()
        (run / "diagnose.toml").write_text(textwrap.dedent(f'''\
            [run]
            dir = "{run}"
            logs = "logs/train_{{run}}.log"
            tmux_session = "{{run}}"
            tmux_socket = "{tmux.socket}"
        '''))
        code, live = diagnose_json(["flex7"], cwd=run, env=tmux_env())
        assert code == 1
        assert live["causes"][0]["id"] == "launch.tmux-server-died"
        bundle_code, bundle = collect_then_diagnose("flex7", run, tmp_path / "flex7.tar.gz", env=tmux_env())
        assert bundle_code == code
        assert answer(bundle) == answer(live)
        assert {g["source"] for g in bundle["gaps"]} == {g["source"] for g in live["gaps"]}
        assert {s["rule"] for s in bundle["skipped"]} == {s["rule"] for s in live["skipped"]}
    finally:
        tmux.close()


@needs_memcg
def test_kernel_oom_kill_diagnosed_from_the_real_dmesg(tmp_path: Path, memcg: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.py").write_text(TRAIN)
    pidfile = tmp_path / "child.pid"
    with open(run / "train_flexoom.log", "w") as log:
        child = subprocess.Popen([sys.executable, "train.py", str(pidfile)], cwd=run, stdout=log, stderr=subprocess.STDOUT,
                                 preexec_fn=lambda: (memcg / "cgroup.procs").write_text(str(os.getpid())))
        assert child.wait(timeout=120) == -9  # SIGKILL from the OOM killer
    pid = int(pidfile.read_text())
    code, data = diagnose_json(["flexoom"], cwd=run)
    assert code == 1
    top = data["causes"][0]
    assert top["id"] == "memory.host-oom-kill"
    assert any(f"Killed process {pid} (" in e["text"] and e["source"] == "dmesg" for e in top["evidence"])
    assert top["severity"] == "critical"
    # dmesg's [seconds since boot] were put on the wall clock, near now.
    times = [e["time"] for e in top["evidence"] if f"Killed process {pid} (" in e["text"]]
    assert times and times[0] is not None and times[0].startswith(time.strftime("%Y-%m-%d", time.gmtime()))
    bundle_code, bundle = collect_then_diagnose("flexoom", run, tmp_path / "flexoom.tar.gz")
    assert bundle_code == 1 and bundle["causes"][0]["id"] == "memory.host-oom-kill"
    assert any(f"Killed process {pid} (" in e["text"] for e in bundle["causes"][0]["evidence"])


@needs_tmux
@needs_memcg
def test_live_run_in_tmux_oom_killed_then_bundle(tmp_path: Path, memcg: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.py").write_text(TRAIN)
    (run / "ckpt").mkdir()
    pidfile = tmp_path / "child.pid"
    sock_dir = tmp_path / "s"
    sock_dir.mkdir()
    tmux = PrivateTmux(sock_dir / "srv")
    try:
        tmux.start("holder", "sleep 120")
        tmux.tmux("set-option", "-g", "remain-on-exit", "on")
        command = (f"sh -c 'echo $$ > {memcg}/cgroup.procs && exec {sys.executable} train.py {pidfile} "
                   f">> train_flexlive.log 2>&1'")
        tmux.tmux("new-session", "-d", "-s", "flexlive", "-c", str(run), command)
        tmux.wait_dead_pane("flexlive", timeout=120)
        pid = int(pidfile.read_text())
        (run / "diagnose.toml").write_text(textwrap.dedent(f'''\
            [run]
            dir = "{run}"
            logs = "train_{{run}}.log"
            checkpoints = "ckpt"
            tmux_session = "{{run}}"
            tmux_socket = "{tmux.socket}"
            python = "{sys.executable}"
        '''))
        code, live = diagnose_json(["flexlive"], cwd=run, env=tmux_env())
        assert code == 1
        assert live["causes"][0]["id"] == "memory.host-oom-kill"
        assert any(f"Killed process {pid} (" in e["text"] for e in live["causes"][0]["evidence"])
        assert live["run"]["mode"] == "live" and live["run"]["launcher"]["kind"] == "tmux"
        collectors = live["stats"]["collect"]["collectors"]
        assert {name: c["status"] for name, c in collectors.items() if name in ("logs", "dmesg", "tmux", "packages", "process",
                                                                                  "checkpoints")} == {
            "logs": "ok", "dmesg": "ok", "tmux": "ok", "packages": "ok", "process": "ok", "checkpoints": "ok"}
        bundle_code, bundle = collect_then_diagnose("flexlive", run, tmp_path / "flexlive-bundle", env=tmux_env())
        assert bundle_code == code
        assert [c["id"] for c in bundle["causes"]] == [c["id"] for c in live["causes"]]
        assert bundle["run"]["mode"] == "bundle" and bundle["run"]["id"] == "flexlive"
        manifest = json.loads((tmp_path / "flexlive-bundle" / "manifest.json").read_text())
        assert manifest["schema_version"] == 1 and manifest["tmux"]["expected_session"] == "flexlive"
        assert (tmp_path / "flexlive-bundle" / "env" / "packages.json").is_file()
    finally:
        tmux.close()
