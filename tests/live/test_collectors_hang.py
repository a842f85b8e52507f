"""Hang-proofing: tools that never return or fail, collectors that hang or crash. The run still
finishes within its budget and every loss is reported as a gap with its reason."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from diagnose.live.collectors.base import CollectorInfo, Context, Output
from diagnose.live.collectors.dmesg import collect as collect_dmesg
from diagnose.live.collectors.run import collect_run
from diagnose.live.discovery import resolve
from diagnose.live.hosts import CommandResult, LocalHost
from tests.support.cli import run_cli
from tests.support.live import config, empty_config


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def fake_tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def test_run_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    started = time.monotonic()
    result = LocalHost().run(["sh", "-c", f"sleep 1000 & echo $! > {pidfile}; sleep 1000"], timeout=0.5)
    assert result.timed_out and result.rc is None
    assert time.monotonic() - started < 3
    assert result.failure() == "sh timed out after 1 s" or result.failure() == "sh timed out after 0 s"
    background = int(pidfile.read_text())
    deadline = time.time() + 5
    while alive(background) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(background)


def test_missing_tool_is_a_result_not_an_exception() -> None:
    result = LocalHost().run(["diagnose-no-such-tool-xyz"], timeout=5)
    assert result.rc is None and result.error == "not found"
    assert result.failure() == "diagnose-no-such-tool-xyz: not found"


def test_hanging_tools_still_finish_within_the_budget(tmp_path: Path) -> None:
    """dmesg, journalctl and nvidia-smi that never return: the run ends on time with gaps."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("dmesg", "journalctl", "nvidia-smi"):
        # a child that would outlive a plain kill of the script, to prove the group is killed
        fake_tool(bin_dir, name, f'sleep 100000 &\necho $! >> {tmp_path}/{name}.pids\necho $$ >> {tmp_path}/{name}.pids\nwait\n')
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "train_flex7.log", "w") as handle:
        subprocess.run([sys.executable, "-c", "print('step 1')"], stdout=handle, check=True)
    (run / "diagnose.toml").write_text(
        '[collect]\ntimeout = 2\n[run]\nkernel_logs = ["/nonexistent/kern.log"]\nlogs = "train_{run}.log"\n')
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "TMUX_TMPDIR": str(tmp_path)}
    started = time.monotonic()
    result = run_cli(["flex7", "--format", "json", "--fail-on", "never"], cwd=run, env=env, timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert elapsed < 10, f"took {elapsed:.1f} s with a 2 s collector limit"
    data = json.loads(result.stdout)
    gaps = {g["source"]: g["reason"] for g in data["gaps"]}
    assert gaps["dmesg"].startswith("timed out (dmesg timed out after")
    assert "journalctl timed out" in gaps["dmesg"]
    collectors = data["stats"]["collect"]["collectors"]
    assert collectors["dmesg"]["status"] == "timeout"
    assert all(c["duration_s"] < 2 + 1.0 for c in collectors.values())
    if collectors["gpu"]["status"] != "ok":  # with a working NVML, nvidia-smi is never asked
        assert collectors["gpu"]["status"] == "timeout" and "nvidia-smi timed out after" in gaps["gpu"]
    # Every fake and its background child were killed with their process group.
    pids = [int(p) for f in tmp_path.glob("*.pids") for p in f.read_text().split()]
    assert pids
    deadline = time.time() + 5
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)]


def test_failing_tools_are_gaps_with_reasons(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(bin_dir, "dmesg", "exit 1\n")
    fake_tool(bin_dir, "journalctl", "exit 1\n")
    fake_tool(bin_dir, "nvidia-smi", "exit 9\n")
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "train_flex7.log", "w") as handle:
        subprocess.run([sys.executable, "-c", "print('step 1')"], stdout=handle, check=True)
    (run / "diagnose.toml").write_text('[run]\nkernel_logs = ["/nonexistent/kern.log"]\nlogs = "train_{run}.log"\n')
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "TMUX_TMPDIR": str(tmp_path)}
    result = run_cli(["flex7", "--format", "json", "--fail-on", "never", "-v"], cwd=run, env=env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    gaps = {g["source"]: g["reason"] for g in data["gaps"]}
    assert gaps["dmesg"] == ("no kernel log available (dmesg exited with 1; journalctl exited with 1; "
                             "/nonexistent/kern.log: not found)")
    if data["stats"]["collect"]["collectors"]["gpu"]["status"] != "ok":
        assert "nvidia-smi exited with 9" in gaps["gpu"]
    # The kernel rule is reported as skipped (evidence missing), never as "no match".
    skipped = {s["rule"]: s["reason"] for s in data["skipped"]}
    assert "memory.host-oom-kill" in skipped and "kernel log" in skipped["memory.host-oom-kill"]


class NobodyHost(LocalHost):
    """This machine, but commands run as the unprivileged user nobody (as a normal user's would)."""

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str | None] | None = None,
            keep: str = "head") -> CommandResult:
        result = super().run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv], timeout, env, keep)
        return dataclasses.replace(result, argv=tuple(argv))


def _restricted() -> bool:
    try:
        return Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"
    except OSError:
        return False


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run dmesg as the unprivileged user nobody")
@pytest.mark.skipif(not _restricted(), reason="needs kernel.dmesg_restrict=1 for dmesg to refuse an unprivileged user")
def test_real_dmesg_permission_denied_is_a_gap(tmp_path: Path) -> None:
    spec = resolve("flex7", empty_config(), [tmp_path], host=NobodyHost())
    spec.kernel_logs = [str(tmp_path / "kern.log")]
    output = collect_dmesg(Context("dmesg", spec, tmp_path, 10))
    assert output.status == "gap"
    assert output.reason is not None
    assert output.reason.startswith("permission denied (dmesg exited with 1: dmesg: read kernel buffer failed: "
                                    "Operation not permitted; journalctl")
    assert output.run["boot_time"] is not None and not output.files


def test_stuck_or_broken_collector_is_a_gap(tmp_path: Path) -> None:
    def stuck(ctx: Context) -> Output:
        time.sleep(3600)  # in Python, where no process group can be killed: the runner gives up on it
        return Output()

    def broken(ctx: Context) -> Output:
        raise RuntimeError("collector bug")

    def fine(ctx: Context) -> Output:
        return Output(notes=["fine ran"])

    cfg = config(tmp_path, "[collect]\nbudget = 30\n")
    spec = resolve("flex7", cfg, [tmp_path])
    started = time.monotonic()
    collection = collect_run(spec, collectors=[CollectorInfo("stuck", stuck, 1.0), CollectorInfo("broken", broken, 5.0),
                                               CollectorInfo("fine", fine, 5.0)])
    assert time.monotonic() - started < 3
    statuses = collection.manifest.collectors
    assert (statuses["stuck"].status, statuses["stuck"].reason) == ("timeout", "timed out after 1 s")
    assert statuses["broken"].status == "error" and statuses["broken"].reason == "failed: RuntimeError: collector bug"
    assert statuses["fine"].status == "ok"
    gaps = {g.source: g.reason for g in collection.evidence().gaps}
    assert gaps == {"stuck": "timed out after 1 s", "broken": "failed: RuntimeError: collector bug"}
    assert "fine ran" in collection.evidence().notes


def test_config_skip_and_budget(tmp_path: Path) -> None:
    cfg = config(tmp_path, '[collect]\nskip = ["gpu", "packages"]\nbudget = 1\n')
    spec = resolve("flex7", cfg, [tmp_path])
    collection = collect_run(spec)
    statuses = collection.manifest.collectors
    assert statuses["gpu"].status == "skipped" and statuses["packages"].status == "skipped"
    assert not any(g.source in ("gpu", "packages") for g in collection.evidence().gaps)


def test_progress_only_when_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from diagnose.live.collectors.run import _Progress

    class Terminal(io.StringIO):  # what rich draws its spinner on
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    quiet = _Progress(False, "flex7")
    quiet.update(5.0, ["gpu"])
    progress = _Progress(True, "flex7")
    progress.update(0.2, ["gpu"])  # fast runs print nothing
    assert stream.getvalue() == ""
    progress.update(2.5, ["gpu", "packages"])
    progress.done()
    shown = stream.getvalue()
    assert "diagnose: collecting flex7: waiting for gpu, packages (2.5 s)" in shown  # a rich spinner line, then cleared
    assert "\x1b[?25l" in shown and "\x1b[?25h" in shown and shown.endswith("\x1b[2K")  # cursor back, line cleared


def test_run_from_before_the_last_boot_asks_the_previous_boots_journal(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_tool(bin_dir, "dmesg", f"touch {tmp_path}/dmesg-called\n")
    fake_tool(bin_dir, "journalctl", f'echo "$@" > {tmp_path}/journalctl-args\n')
    log = tmp_path / "train_flex7.log"
    with open(log, "w") as handle:
        subprocess.run([sys.executable, "-c", "print('step 1')"], stdout=handle, check=True)
    boot = LocalHost().boot_time()
    assert boot is not None
    os.utime(log, (boot - 3600, boot - 3600))  # last written an hour before this boot
    cfg = config(tmp_path, f'[run]\nlogs = "{log}"\nkernel_logs = ["/nonexistent/kern.log"]\n')
    spec = resolve("flex7", cfg, [tmp_path])
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}:{old_path}"
    try:
        output = collect_dmesg(Context("dmesg", spec, tmp_path, 10))
    finally:
        os.environ["PATH"] = old_path
    assert not (tmp_path / "dmesg-called").exists()
    assert (tmp_path / "journalctl-args").read_text().split()[:7] == ["-k", "--no-pager", "-q", "-o", "short-iso", "-b", "-1"]
    assert output.reason is not None
    assert "the run ended before the last boot" in output.reason and "journalctl -k -b -1: no entries" in output.reason
