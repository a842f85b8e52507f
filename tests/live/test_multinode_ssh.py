"""Multi-node over real ssh: every node a real OpenSSH server (tests/support/remote.Sshd) on a
loopback port, each in a mount namespace of its own where /mnt/job is that node's folder of the
real 2-rank gloo run (tests/support/multinode.py: rank 1 raises on node-b, rank 0 then fails in
its all_reduce). node-b's sessions run under faketime five minutes ahead (SetEnv LD_PRELOAD in
its sshd_config), as its rank did: a node whose clock is off, read over ssh. node-c accepts TCP
connections and never says a word (a hung node); node-d is a name that does not resolve. The
nodes are ssh config aliases, as on a cluster. Beside the story, another user's process is
OOM-killed by the kernel in its own memory cgroup (a shared machine): it must not be blamed.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.multinode import FAKETIME_LIB, RUN, SKEW, torch_reason
from tests.support.remote import SSHD_REASON, Sshd, have_namespaces, have_sshd, ssh_masters

pytestmark = [
    pytest.mark.skipif(not have_sshd(), reason=SSHD_REASON),
    pytest.mark.skipif(not have_namespaces(), reason="needs root and unshare (util-linux) for each node's own /mnt/job"),
    pytest.mark.skipif(torch_reason() is not None, reason=torch_reason() or ""),
]

JOB = "/mnt/job"  # where each node sees its own folder


def _node_wrap(folder: Path) -> list[str]:
    """sshd in a private mount namespace where /mnt/job is the node's own folder."""
    script = 'mount -t tmpfs diagnose-node /mnt && mkdir /mnt/job && mount --bind "$0" /mnt/job && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(folder)]


@pytest.fixture(scope="module")
def nodes(gloo_cluster: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("sshnodes")
    skewed = {"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": f"+{SKEW:.0f}s"}
    servers = {name: Sshd(base / name, wrap=_node_wrap(gloo_cluster[name] / "job"),
                          session_env=skewed if name == "node-b" else None) for name in ("node-a", "node-b")}
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the handshakes; nothing ever answers
    known = base / "known_hosts"
    known.write_text("".join(s.known_hosts.read_text() for s in servers.values()))
    entries = []
    for name, server in servers.items():
        entries.append(f"Host {name}\n  HostName 127.0.0.1\n  Port {server.port}\n  IdentityFile {server.user_key}\n")
    entries.append(f"Host node-c\n  HostName 127.0.0.1\n  Port {silent.getsockname()[1]}\n")
    entries.append("Host node-d\n  HostName node-d.invalid\n")
    common = (f"Host *\n  User root\n  IdentitiesOnly yes\n  IdentityAgent none\n  UserKnownHostsFile {known}\n"
              "  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n")
    client = base / "ssh_config"
    client.write_text("".join(entries) + common)
    config = base / "diagnose.toml"
    config.write_text(f'[host]\nssh_config = "{client}"\nconnect_timeout = 3\n')
    hostfile = base / "hostfile"
    hostfile.write_text("# the job's nodes\nnode-a slots=1\nnode-b slots=1\nnode-c slots=1\nnode-d slots=1\n")
    try:
        yield {"config": config, "hostfile": hostfile, "servers": servers, "base": base}
    finally:
        silent.close()
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="module")
def diagnosed(nodes: dict[str, Any], unrelated_oom_kill_module: Any) -> tuple[int, dict[str, Any], str, float]:
    started = time.monotonic()
    result = run_cli([RUN, "--hostfile", str(nodes["hostfile"]), "--dir", JOB, "--config", str(nodes["config"]),
                      "--format", "json"], timeout=240)
    took = time.monotonic() - started
    assert result.returncode in (0, 1), result.stderr
    (nodes["base"].parent / "diagnosed.json").write_text(result.stdout)  # kept for a failing test's reader
    return result.returncode, json.loads(result.stdout), result.stderr, took


def test_the_root_is_rank_1_on_node_b_over_ssh(diagnosed: tuple[int, dict[str, Any], str, float]) -> None:
    code, data, _err, _took = diagnosed
    assert code == 1
    top = data["causes"][0]
    assert top["id"] == "unrecognised.crash" and "ValueError: bad batch at step 5" in top["title"], \
        [(c["id"], c["title"]) for c in data["causes"]]
    assert {(e["host"], e["rank"]) for e in top["evidence"]} == {("node-b", 1)}
    symptom = next(c for c in data["causes"] if c["id"] == "distributed.gloo-peer-closed")
    assert symptom["role"] == "symptom" and {e["host"] for e in symptom["evidence"]} == {"node-a"}
    first = data["first_failure"]
    assert (first["node"], first["rank"]) == ("node-b", 1) and "ValueError" in first["error"]


def test_each_node_clock_is_read_over_ssh_and_applied(diagnosed: tuple[int, dict[str, Any], str, float]) -> None:
    _code, data, _err, _took = diagnosed
    by_name = {n["name"]: n for n in data["nodes"]}
    assert abs(by_name["node-a"]["clock_offset"]) < 2.0
    assert abs(by_name["node-b"]["clock_offset"] - SKEW) < 2.0
    rank1 = by_name["node-b"]["ranks"][0]
    rank0 = by_name["node-a"]["ranks"][0]
    assert (rank1["state"], rank0["state"]) == ("root", "symptom")


def test_a_silent_node_and_an_unknown_one_are_gaps_not_hangs(diagnosed: tuple[int, dict[str, Any], str, float]) -> None:
    _code, data, _err, took = diagnosed
    by_name = {n["name"]: n for n in data["nodes"]}
    assert by_name["node-c"]["status"] in ("gap", "timeout") and by_name["node-c"]["reason"]
    assert by_name["node-d"]["status"] == "gap" and "could not resolve" in by_name["node-d"]["reason"]
    gaps = [g for g in data["gaps"] if g["source"] == "host"]
    assert {g["reason"].split(":")[0] for g in gaps} >= {"node-c", "node-d"}
    assert took < 120, f"a silent node held the diagnosis {took:.0f} s"


def test_the_unrelated_oom_kill_is_not_blamed(diagnosed: tuple[int, dict[str, Any], str, float],
                                              unrelated_oom_kill_module: Any) -> None:
    _code, data, _err, _took = diagnosed
    for cause in data["causes"]:
        if cause["id"] == "memory.host-oom-kill":
            assert cause["attribution"] != "own" and cause["role"] != "root", cause
    assert data["causes"][0]["id"] != "memory.host-oom-kill"


def test_no_connection_is_left_behind(diagnosed: tuple[int, dict[str, Any], str, float], nodes: dict[str, Any]) -> None:
    for server in nodes["servers"].values():
        deadline = time.time() + 5
        while ssh_masters(server.port) and time.time() < deadline:
            time.sleep(0.1)
        assert ssh_masters(server.port) == []


def test_one_bundle_over_ssh_gives_the_same_root(nodes: dict[str, Any], tmp_path: Path,
                                                 diagnosed: tuple[int, dict[str, Any], str, float]) -> None:
    out = tmp_path / "job.tar.gz"
    made = run_cli(["collect", RUN, "--hosts", "node-a,node-b,node-d", "--dir", JOB, "--config", str(nodes["config"]),
                    "-o", str(out)], timeout=240)
    assert made.returncode == 0, made.stderr
    assert "node-d" in made.stderr and "gap" in made.stderr
    result = run_cli([str(out), "--format", "json"])
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["first_failure"]["node"] == "node-b" and data["first_failure"]["rank"] == 1
    assert [c["id"] for c in data["causes"]][:1] == [diagnosed[1]["causes"][0]["id"]]
    offsets = {n["name"]: n["clock_offset"] for n in data["nodes"]}
    assert abs(offsets["node-b"] - SKEW) < 2.0


def test_no_node_answering_is_one_line_and_exit_2(nodes: dict[str, Any]) -> None:
    result = run_cli([RUN, "--hosts", "node-c,node-d", "--dir", JOB, "--config", str(nodes["config"])], timeout=120)
    assert result.returncode == 2, result.stdout
    assert result.stderr.startswith("diagnose: error: no node answered: node-c: ") and "node-d: could not resolve" \
        in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
