"""The packages, checkpoints, process, logs and dmesg collectors on real interpreters, trees,
processes and kernel logs of this machine."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diagnose.evidence.lines import dmesg_seconds
from diagnose.live.collectors.base import Context
from diagnose.live.collectors.checkpoints import is_partial
from diagnose.live.collectors.dmesg import _window_dmesg
from diagnose.live.collectors.dmesg import collect as collect_dmesg
from diagnose.live.discovery import resolve
from diagnose.live.hosts import LocalHost
from tests.support.live import collect, config, empty_config
from tests.support.paths import DATA

SAMPLES = DATA / "samples" / "h200"


def test_packages_come_from_the_runs_interpreter_not_ours(tmp_path: Path) -> None:
    """The run's interpreter here is the system Python, whose packages differ from diagnose's venv."""
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None or Path(system).resolve() == Path(sys.executable).resolve():
        pytest.skip("needs a second Python interpreter (/usr/bin/python3) besides the one running the tests")
    listing = subprocess.run([system, "-I", "-c", "import importlib.metadata as m; print(sorted({(d.metadata['Name'] or '').lower() "
                                            "for d in m.distributions()}))"], capture_output=True, text=True, check=True)
    cfg = config(tmp_path, f'[run]\npython = "{system}"\n')
    evidence = collect("flex7", cfg, [tmp_path], only=("packages",)).evidence()
    assert evidence.packages is not None
    assert evidence.packages.source.startswith(f"{system} (importlib.metadata)")
    assert "regex" in {d.metadata["Name"].lower() for d in importlib.metadata.distributions()}
    theirs = eval(listing.stdout)  # a list of names that python printed
    assert set(evidence.packages.versions) == {n.replace("_", "-").replace(".", "-") for n in theirs if n}
    assert "regex" not in evidence.packages.versions or "regex" in theirs


def test_packages_of_our_venv_match_importlib(tmp_path: Path) -> None:
    cfg = config(tmp_path, f'[run]\nvenv = "{Path(sys.executable).parent.parent}"\n')
    evidence = collect("flex7", cfg, [tmp_path], only=("packages",)).evidence()
    assert evidence.packages is not None
    assert evidence.packages.versions["regex"] == importlib.metadata.version("regex")
    assert evidence.packages.versions["nvidia-ml-py"] == importlib.metadata.version("nvidia-ml-py")


def test_bad_interpreter_is_a_gap(tmp_path: Path) -> None:
    cfg = config(tmp_path, '[run]\npython = "/opt/nowhere/bin/python"\n')
    collection = collect("flex7", cfg, [tmp_path], only=("packages",))
    status = collection.manifest.collectors["packages"]
    assert status.status == "gap"
    assert status.reason == "the run's interpreter /opt/nowhere/bin/python (config python) does not exist"
    assert collection.evidence().packages is None


def test_checkpoints_tree(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "step_100").mkdir(parents=True)
    (ckpt / "step_100" / "model.pt").write_bytes(b"\0" * 4096)
    (ckpt / "step_200").mkdir()
    (ckpt / "step_200" / "model.pt.tmp").write_bytes(b"\0" * 1000)
    (ckpt / "step_200" / "optim.pt").write_bytes(b"")
    old = time.time() - 7200
    os.utime(ckpt / "step_100" / "model.pt", (old, old))
    cfg = config(tmp_path, f'[run]\ncheckpoints = "{ckpt}"\n')
    state = collect("flex7", cfg, [tmp_path], only=("checkpoints",)).evidence().checkpoints
    assert state is not None and state.exists
    assert (state.file_count, state.total_bytes) == (3, 5096)
    assert state.zero_byte == ("step_200/optim.pt",)
    assert state.partial == ("step_200/model.pt.tmp",)
    assert state.newest is not None and state.newest.path.startswith("step_200/")
    # other writers on the machine move free space between the two readings; a few MB either way
    assert state.free_bytes is not None and abs(state.free_bytes - shutil.disk_usage(ckpt).free) < 256 * 2**20
    missing = config(tmp_path, f'[run]\ncheckpoints = "{tmp_path / "none"}"\n')
    gone = collect("flex7", missing, [tmp_path], only=("checkpoints",)).evidence().checkpoints
    assert gone is not None and not gone.exists and gone.file_count == 0


def test_partial_names() -> None:
    assert all(is_partial(n) for n in ("model.pt.tmp", "x.partial", "shard.incomplete", "a.safetensors.part"))
    assert not any(is_partial(n) for n in ("model.pt", "temperature.json", "step_10.safetensors"))


def test_process_alive_then_gone(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--name", "flex7q"])
    try:
        state = collect("flex7q", empty_config(), [tmp_path], only=("process",)).evidence().process
        assert state is not None and state.alive and state.pids == (proc.pid,)
        assert "--name flex7q" in state.command
    finally:
        proc.kill()
        proc.wait()
    state = collect("flex7q", empty_config(), [tmp_path], only=("process",)).evidence().process
    assert state is not None and not state.alive and state.pids == ()


def test_process_by_pid_file(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (tmp_path / "run.pid").write_text(f"{proc.pid}\n")
    cfg = config(tmp_path, f'[run]\npid_file = "{tmp_path}/run.pid"\n')
    try:
        state = collect("flex7", cfg, [tmp_path], only=("process",)).evidence().process
        assert state is not None and state.alive and state.pids == (proc.pid,)
        assert state.source == f"pid file {tmp_path}/run.pid"
    finally:
        proc.kill()
        proc.wait()
    state = collect("flex7", cfg, [tmp_path], only=("process",)).evidence().process
    assert state is not None and not state.alive


def test_expected_log_missing_is_evidence_with_siblings(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("train_flex5.log", "train_flex6.log", "eval_flex6.log"):
        with open(logs / name, "w") as handle:
            subprocess.run([sys.executable, "-c", "print('done')"], stdout=handle, check=True)
    os.utime(logs / "train_flex5.log", (time.time() - 100, time.time() - 100))
    cfg = config(tmp_path, f'[run]\ndir = "{tmp_path}"\nlogs = ["logs/train_{{run}}.log", "logs/rank*_{{run}}.log"]\n')
    collection = collect("flex7", cfg, [tmp_path], only=("logs",))
    files = collection.evidence().files
    assert files is not None
    first, second = files
    assert (first.path, first.exists, first.siblings) == (str(logs / "train_flex7.log"), False,
                                                          ("train_flex6.log", "train_flex5.log"))
    assert (second.exists, second.siblings) == (False, ())
    assert collection.manifest.collectors["logs"].status == "ok"  # a missing expected log is evidence, not a gap


def test_unreadable_log_is_a_gap_not_a_crash(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        log = tmp_path / "train_flex7.log"
        log.write_text("x\n")
        log.chmod(0)
        collection = collect("flex7", empty_config(), [tmp_path], only=("logs",))
        assert any(g.reason.endswith("permission denied") for g in collection.evidence().gaps)
        return
    # Root reads any file, so run the real CLI as the unprivileged user nobody (HOME still /root,
    # which nobody may not even look into: that must not crash either).
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to drop root privileges")
    work = Path(tempfile.mkdtemp(prefix="diagnose-nobody-"))
    try:
        work.chmod(0o755)
        log = work / "train_flex7.log"
        log.write_text("x\n")
        log.chmod(0)
        result = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "diagnose",
             "flex7", "--dir", str(work), "--format", "json"],
            capture_output=True, text=True, timeout=120, cwd=work,
            env={**os.environ, "DIAGNOSE_NO_CACHE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        assert result.returncode in (0, 1), result.stderr
        gaps = {g["source"]: g["reason"] for g in json.loads(result.stdout)["gaps"]}
        assert gaps["logs"] == "train_flex7.log: permission denied"
        assert "permission denied" in gaps["dmesg"]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_dmesg_window_uses_boot_time() -> None:
    """Real dmesg lines (H200 sample): [seconds since boot] + boot time = wall time."""
    data = (SAMPLES / "dmesg-nvrm-tail.txt").read_bytes()
    boot = 1_796_000_000.0
    kept, total = _window_dmesg(data, boot, boot + 60, None)
    lines = kept.decode().splitlines()
    assert total == len(data.splitlines()) and total > len(lines) > 0
    assert all((dmesg_seconds(line) or 0) >= 60 for line in lines)
    assert "Xid (PCI:0000:00:06): 43" in lines[-1]
    everything, _ = _window_dmesg(data, boot, None, None)
    assert everything.decode().splitlines() == data.decode().splitlines()


def test_real_dmesg_collects_with_boot_time(tmp_path: Path) -> None:
    probe = subprocess.run(["dmesg"], capture_output=True)
    if probe.returncode != 0 or not probe.stdout.strip():
        pytest.skip(f"dmesg is not readable here ({probe.stderr.decode(errors='replace').strip()}); needs root or dmesg_restrict=0")
    spec = resolve("flex7", empty_config(), [tmp_path])
    output = collect_dmesg(Context("dmesg", spec, tmp_path, 10))
    btime = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    assert output.status == "ok" and output.run["boot_time"] == btime
    assert output.run["dmesg_source"] == "dmesg"
    (captured,) = output.files
    assert captured.bundle_path == "kernel/dmesg.txt" and captured.source.read_bytes().strip()
    assert LocalHost().boot_time() == btime
