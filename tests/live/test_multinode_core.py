"""The pieces of multi-node collection that need no cluster: rooted hosts, clock offsets, the
fan-out's deadline and concurrency, naming nodes, Slurm records read from files."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.paths import DATA


def test_a_rooted_host_reads_and_names_paths_of_its_node(tmp_path: Path) -> None:
    from diagnose.live.rooted import RootedHost

    (tmp_path / "job" / "sub").mkdir(parents=True)
    (tmp_path / "job" / "train.log").write_text("hello\n")
    (tmp_path / "job" / "sub" / "rank1.log").write_text("x\n")
    host = RootedHost(tmp_path, "node-x")
    assert host.name == "node-x"
    st = host.stat("/job/train.log")
    assert st is not None and st.size == 6
    assert host.stat("/etc/hostname") is None or (tmp_path / "etc" / "hostname").exists()
    assert host.read_bytes("/job/train.log", 100) == b"hello\n"
    assert host.glob("/job/**/*.log") == ["/job/sub/rank1.log", "/job/train.log"]
    assert sorted(p for p, _st in host.walk("/job", 10)) == ["/job/sub/rank1.log", "/job/train.log"]
    assert host.listdir("/job") == ["sub", "train.log"]
    assert host.local_path("/job/train.log") == tmp_path / "job" / "train.log"
    # '..' cannot climb out of the node's /
    assert host.inside("/../../etc/passwd") == str(tmp_path.resolve()) + "/etc/passwd"


def test_clock_offset_halves_the_round_trip() -> None:
    from diagnose.live.fanout import measure_clock
    from diagnose.live.hosts import LocalHost

    class Slow(LocalHost):
        def clock(self, timeout: float) -> float | None:
            time.sleep(0.05)
            now = time.time() + 120.0  # 2 minutes ahead
            time.sleep(0.05)
            return now

    reading = measure_clock(Slow())
    assert reading is not None
    assert abs(reading.offset - 120.0) < 0.03 and reading.rtt >= 0.1
    real = measure_clock(LocalHost())  # `date +%s.%N` on this machine
    assert real is not None and abs(real.offset) < max(0.5, real.rtt)


def test_a_node_that_hangs_is_a_gap_and_the_others_are_kept() -> None:
    from diagnose.live.config import Config
    from diagnose.live.fanout import NodeResult, collect_nodes
    from diagnose.live.hosts import LocalHost

    release = threading.Event()
    running = 0
    most = 0
    lock = threading.Lock()

    def work(host: Any) -> NodeResult:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        try:
            if host.name == "stuck":
                release.wait()
            else:
                time.sleep(0.2)
            return NodeResult(host.name)
        finally:
            with lock:
                running -= 1

    hosts = []
    for name in ("a", "stuck", "b", "c", "d"):
        host = LocalHost()
        host.name = name
        hosts.append(host)
    started = time.monotonic()
    try:
        results = collect_nodes("r", hosts, Config(), [], concurrency=2, deadline=1.0, collect=work)
    finally:
        release.set()
    assert time.monotonic() - started < 5
    assert [r.name for r in results] == ["a", "stuck", "b", "c", "d"]
    assert [r.status for r in results] == ["ok", "timeout", "ok", "ok", "ok"]
    assert "did not answer within 1 s" in (results[1].reason or "")
    assert most <= 2


def test_naming_nodes(tmp_path: Path) -> None:
    import socket

    from diagnose.errors import DiagnoseError
    from diagnose.live.fanout import host_for, read_hostfile
    from diagnose.live.hosts import LocalHost
    from diagnose.live.rooted import RootedHost

    assert isinstance(host_for("localhost"), LocalHost)
    assert isinstance(host_for(socket.gethostname()), LocalHost)
    rooted = host_for(f"n1={tmp_path}")
    assert isinstance(rooted, RootedHost) and rooted.name == "n1"
    from diagnose.live.fanout import SshNode

    remote = host_for("root@gpu7:2222", {"exec": "pct exec 200 --", "connect_timeout": 4}, None)
    assert isinstance(remote, SshNode) and remote.name == "root@gpu7:2222"  # connected later, in its worker
    assert (remote.remote.target.host, remote.remote.target.port) == ("gpu7", 2222)
    assert remote.remote.exec_prefix == ("pct", "exec", "200", "--") and remote.remote.connect_timeout == 4
    assert host_for("gpu7", {"exec": "pct exec 200 --"}, "docker exec -i c1").remote.exec_prefix[:2] == ("docker", "exec")
    with pytest.raises(DiagnoseError, match="not a host name"):
        host_for("gpu 7")
    with pytest.raises(DiagnoseError, match="expected \\[USER@\\]HOST"):
        host_for("-oProxyCommand")  # an option, never a host
    with pytest.raises(DiagnoseError, match="is not a folder"):
        host_for(f"n1={tmp_path / 'missing'}")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the job\nnode1 slots=8\nnode2\n\nnode1\n")
    assert read_hostfile(hostfile) == ["node1", "node2"]


def test_sacct_text_is_slurm_evidence_the_rules_match(tmp_path: Path) -> None:
    """`diagnose scan` of a saved sacct record (real, tests/data/slurm/HOW.md) finds the state."""
    result = run_cli(["scan", str(DATA / "slurm" / "sacct-1.txt"), "--format", "json"])
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["causes"][0]["id"] == "memory.slurm-job-out-of-memory"
    result = run_cli(["scan", str(DATA / "slurm" / "scontrol-show-job-8.txt"), "--format", "json"])
    data = json.loads(result.stdout)
    assert data["causes"][0]["id"] == "scheduler.slurm-job-node-fail"


def test_sacct_and_scontrol_parsers() -> None:
    from diagnose.evidence.parsers.slurm import parse_sacct, parse_scontrol_job

    record = parse_sacct((DATA / "slurm" / "sacct-3.txt").read_text())
    assert [r.job_id for r in record.rows] == ["3", "3.batch"]
    assert record.job is not None and record.job.state == "CANCELLED" and record.job.get("State") == "CANCELLED by 0"
    fields = parse_scontrol_job((DATA / "slurm" / "scontrol-show-job-1.txt").read_text())
    assert fields["JobState"] == "OUT_OF_MEMORY" and fields["NodeList"] == "vm"
    assert fields["StdOut"].endswith("/slurm-1.out")
    assert parse_scontrol_job("slurm_load_jobs error: Invalid job id specified\n") == {}


def test_an_old_single_host_bundle_still_reads() -> None:
    from diagnose.evidence.bundle import evidence_from_bundle
    from tests.support.paths import FIXTURES

    evidence = evidence_from_bundle(FIXTURES / "torchrun-rank-exception")
    assert evidence.hosts == () and all(t.host is None and t.clock_offset == 0.0 for t in evidence.texts)
