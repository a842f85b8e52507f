"""Multi-node without ssh: two "nodes" as folders of this machine (RootedHost), a real 2-rank
torch.distributed run (gloo, CPU) split across them, one collection over all of them.

Rank 0 runs on node-a, rank 1 on node-b; rank 1 raises a ValueError at step 5 and exits, and
rank 0 then fails in its all_reduce ("Connection closed by peer"). node-b's process runs under
faketime five minutes ahead, and node-b's Host reads its clock five minutes ahead too (a node
whose clock is off). A third node never answers (every call on it blocks): a gap by its
deadline, never a hang. The torch program needs its own venv (.torchvenv, made by .ci/run with
`pip install torch==2.13.0`); faketime comes from Debian's faketime package.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.multinode import RUN, SKEW, torch_reason
from tests.support.report import JSON_SCHEMA

pytestmark = pytest.mark.skipif(torch_reason() is not None, reason=torch_reason() or "")


@pytest.fixture(scope="module")
def cluster(gloo_cluster: dict[str, Path]) -> dict[str, Path]:
    """node-a and node-b after the real run: /job/mnrun_rank<R>.log on each."""
    return gloo_cluster


class SkewedHost:
    """Wraps a node's clock reading: it says the time `skew` seconds ahead (a node whose clock is off)."""

    def __new__(cls, root: Path, name: str, skew: float) -> Any:
        from diagnose.live.rooted import RootedHost

        class _Skewed(RootedHost):
            def clock(self, timeout: float) -> float | None:
                reading = super().clock(timeout)
                return None if reading is None else reading + skew

        return _Skewed(root, name)


def hanging_host(name: str, release: threading.Event) -> Any:
    """A node whose every operation blocks (a hung mount, an ssh that never returns) until released."""
    from diagnose.live.hosts import LocalHost

    class _Hanging(LocalHost):
        def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str | None] | None = None,
                keep: str = "head") -> Any:
            release.wait()
            raise OSError("released")

        def stat(self, path: str) -> Any:
            release.wait()
            raise OSError("released")

    host = _Hanging()
    host.name = name
    return host


def _diagnose(evidence: Any) -> Any:
    from diagnose.app import diagnose
    from diagnose.rules.load import load_rules

    return diagnose(evidence, load_rules([]))


@pytest.fixture(scope="module")
def merged(cluster: dict[str, Path]) -> Iterator[tuple[Any, Any, float]]:
    from diagnose.app import evidence_for_nodes
    from diagnose.live.config import Config
    from diagnose.live.rooted import RootedHost

    release = threading.Event()
    hosts = [RootedHost(cluster["node-a"], "node-a"), SkewedHost(cluster["node-b"], "node-b", SKEW),
             hanging_host("node-c", release)]
    started = time.monotonic()
    try:
        evidence = evidence_for_nodes(RUN, hosts, Config(), [Path("/job")], deadline=20.0)
        took = time.monotonic() - started
    finally:
        release.set()  # the abandoned thread of node-c ends
    yield evidence, _diagnose(evidence), took


def test_the_hung_node_is_a_gap_within_its_deadline(merged: tuple[Any, Any, float]) -> None:
    evidence, diagnosis, took = merged
    assert took < 40, f"a hung node held the collection {took:.0f} s"
    node_c = next(h for h in evidence.hosts if h.name == "node-c")
    assert node_c.status == "timeout" and "did not answer within 20 s" in (node_c.reason or "")
    assert any(g.source == "host" and g.reason.startswith("node-c:") for g in diagnosis.gaps)
    # The other two answered, and their evidence is there.
    assert {t.host for t in evidence.texts if t.kind.value == "log"} == {"node-a", "node-b"}


def test_the_root_is_rank_1_on_node_b_and_rank_0_is_its_symptom(merged: tuple[Any, Any, float]) -> None:
    _evidence, diagnosis, _took = merged
    top = diagnosis.causes[0]
    assert top.id == "unrecognised.crash" and "ValueError: bad batch at step 5" in top.title
    assert {(e.host, e.rank) for e in top.evidence} == {("node-b", 1)}
    symptom = next(c for c in diagnosis.causes if c.id == "distributed.gloo-peer-closed")
    assert symptom.role == "symptom" and {(e.host, e.rank) for e in symptom.evidence} == {("node-a", 0)}
    assert "distributed.gloo-peer-closed" in top.explains
    first = diagnosis.first_failure
    assert (first.node, first.rank) == ("node-b", 1) and "ValueError" in first.error


def test_the_clock_offset_is_measured_applied_and_shown(merged: tuple[Any, Any, float]) -> None:
    evidence, diagnosis, _took = merged
    offsets = {h.name: h.clock_offset for h in evidence.hosts}
    assert offsets["node-a"] is not None and abs(offsets["node-a"]) < 1.0
    assert offsets["node-b"] is not None and abs(offsets["node-b"] - SKEW) < 1.0
    nodes = {n.name: n for n in diagnosis.nodes}
    rank1 = nodes["node-b"].ranks[0]
    rank0 = nodes["node-a"].ranks[0]
    assert (rank1.rank, rank1.state) == (1, "root") and (rank0.rank, rank0.state) == (0, "symptom")
    # node-b wrote its lines five minutes ahead; on one clock its error comes first, by less than a few seconds.
    assert rank1.error_time is not None and rank0.error_time is not None
    assert 0 < rank0.error_time - rank1.error_time < 5, (rank0.error_time, rank1.error_time)
    assert nodes["node-b"].first_failure and not nodes["node-a"].first_failure
    # The Ranks table's first error of rank 1 says what failed (its exception line, though that
    # is also its last line), not the traceback's header above it.
    lane = next(lane for lane in diagnosis.timeline.rank_lanes if (lane.host, lane.rank) == ("node-b", 1))
    assert lane.first_error is not None and lane.first_error.label.startswith("ValueError: bad batch at step 5"), lane


def test_the_terminal_and_json_reports_show_the_nodes(merged: tuple[Any, Any, float]) -> None:
    import io

    import jsonschema

    from diagnose.report.render import Format, render

    _evidence, diagnosis, _took = merged
    out = io.StringIO()
    render(Format.TERMINAL, diagnosis, out)
    text = out.getvalue()
    assert "Nodes" in text and "*node-b" in text and "clock +300." in text
    assert "node-c" in text and "timeout: did not answer within 20 s" in text
    assert "first failure: rank 1 on node-b" in text
    out = io.StringIO()
    render(Format.JSON, diagnosis, out)
    data = json.loads(out.getvalue())
    jsonschema.validate(data, JSON_SCHEMA)
    by_name = {n["name"]: n for n in data["nodes"]}
    assert by_name["node-b"]["first_failure"] and by_name["node-b"]["ranks"][0]["state"] == "root"
    assert data["first_failure"]["node"] == "node-b" and data["first_failure"]["rank"] == 1
    assert by_name["node-c"]["status"] == "timeout"


def test_one_bundle_of_every_node_gives_the_same_answer(cluster: dict[str, Path], tmp_path: Path) -> None:
    from diagnose.app import collect_nodes_bundle
    from diagnose.live.config import Config
    from diagnose.live.rooted import RootedHost

    hosts = [RootedHost(cluster["node-a"], "node-a"), SkewedHost(cluster["node-b"], "node-b", SKEW)]
    out = tmp_path / "job.tar.gz"
    written, top, _results = collect_nodes_bundle(RUN, hosts, None, Config(), [Path("/job")], out)
    assert [h["dir"] for h in top.hosts] == ["hosts/node-a", "hosts/node-b"]
    result = run_cli([str(written), "--format", "json"])
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["causes"][0]["id"] == "unrecognised.crash", [(c["id"], c["basis"]) for c in data["causes"]]
    assert data["first_failure"]["node"] == "node-b"
    offsets = {n["name"]: n["clock_offset"] for n in data["nodes"]}
    assert abs(offsets["node-b"] - SKEW) < 1.0


def test_bundles_collected_per_node_merge(cluster: dict[str, Path], tmp_path: Path) -> None:
    """A CI that collected on every node: `diagnose B1 B2` merges them (no clock offset measured)."""
    bundles = []
    for name in ("node-a", "node-b"):
        out = tmp_path / f"{name}-bundle"
        made = run_cli(["collect", RUN, "--hosts", f"{name}={cluster[name]}", "--dir", "/job", "-o", str(out)])
        assert made.returncode == 0, made.stderr
        bundles.append(str(out))
    result = run_cli([*bundles, "--format", "json"])
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert {n["name"] for n in data["nodes"]} == {"node-a", "node-b"}
    top = data["causes"][0]
    assert top["id"] == "unrecognised.crash" and {e["host"] for e in top["evidence"]} == {"node-b"}


def test_a_remote_node_that_does_not_resolve_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A name that is not this machine nor NAME=DIR is an ssh node; when no node answers, one line, exit 2."""
    result = run_cli([RUN, "--hosts", "gpu-node-17.invalid", "--dir", str(tmp_path)])
    assert result.returncode == 2
    assert result.stderr.strip() == "diagnose: error: no node answered: gpu-node-17.invalid: could not resolve the host name"


def test_plain_bundles_of_one_machine_stay_apart(cluster: dict[str, Path], tmp_path: Path) -> None:
    """Two plain `diagnose collect` bundles made on the same machine: two nodes, told apart by the bundle."""
    bundles = []
    for name in ("node-a", "node-b"):
        out = tmp_path / f"{name}.tar.gz"
        made = run_cli(["collect", RUN, "--dir", str(cluster[name] / "job"), "-o", str(out)])
        assert made.returncode == 0, made.stderr
        bundles.append(str(out))
    result = run_cli([*bundles, "--format", "json"])
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    here = socket.gethostname()
    assert [n["name"] for n in data["nodes"]] == [here, f"{here}~node-b.tar.gz"]
    assert all(n["clock_offset"] is None for n in data["nodes"])  # not measured between separate bundles
    # These bundles hold this machine's dmesg, where other runs' OOM kills may land (a shared
    # machine) and outrank the crash: what is checked is that each node keeps its own ranks.
    ranks = {n["name"]: [(r["rank"], r["first_error"]) for r in n["ranks"]] for n in data["nodes"]}
    assert [r for r, _e in ranks[here]] == [0] and "Connection closed by peer" in (ranks[here][0][1] or "")
    assert ranks[f"{here}~node-b.tar.gz"] == [(1, "ValueError: bad batch at step 5: expected 1000 features, got 999")]
