"""Collecting one run on several nodes at once: every node's logs, kernel log and GPU state,
each node under its own deadline, into one bundle (hosts/<name>/ per node) or one Evidence.

Each node is a Host (LocalHost, RootedHost, SshHost): its run id is resolved and its
collectors run there exactly as for one machine (collect_run). A node reached over ssh is an
SshNode until its own worker connects to it, so a node that refuses, or never answers, costs
its own deadline and becomes its own gap while the others are collected. Nodes are collected in parallel,
at most `concurrency` at a time; a node that does not answer by its deadline (a hung mount, an
ssh that never returns) is given up on and becomes a gap naming it, never a hang. Before its
collection each node's clock is read (`date +%s.%N`) against ours; half the round trip bounds
the error. The offset goes with every time that node's evidence gives.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diagnose.evidence.model import Evidence, HostInfo, RunInfo
from diagnose.live.hosts import Host

if TYPE_CHECKING:
    from diagnose.evidence.bundle import Manifest
    from diagnose.live.collectors.run import Collection
    from diagnose.live.config import Config
    from diagnose.live.runs import RunSpec

CONCURRENCY = 16
CLOCK_SAMPLES = 3
CLOCK_TIMEOUT = 5.0
GRACE = 5.0  # seconds past the collectors' own budget before a node is given up on
_NODE_NAME = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class ClockReading:
    offset: float  # seconds the host's clock is ahead of ours
    rtt: float  # round trip of the best sample: the offset is good to within half of it


def measure_clock(host: Host, timeout: float = CLOCK_TIMEOUT, samples: int = CLOCK_SAMPLES) -> ClockReading | None:
    """The host's clock offset: its `date +%s.%N` against the midpoint of our clock around the
    call, the sample with the shortest round trip kept (the least queueing, the tightest bound)."""
    best: ClockReading | None = None
    for _ in range(samples):
        before = time.time()
        remote = host.clock(timeout)
        after = time.time()
        if remote is None:
            break
        reading = ClockReading(round(remote - (before + after) / 2, 6), round(after - before, 6))
        if best is None or reading.rtt < best.rtt:
            best = reading
    return best


@dataclass
class NodeResult:
    """What one node gave: its collection, or why there is none."""

    name: str
    status: str = "ok"  # ok | gap | timeout | error
    reason: str | None = None
    collection: Collection | None = None
    bundle: Path | None = None  # or: the node's own bundle (collected there, by srun)
    spec: RunSpec | None = None
    clock: ClockReading | None = None
    seconds: float = 0.0
    collected_at: float | None = None

    def info(self) -> HostInfo:
        return HostInfo(self.name, self.status, self.reason, self.clock.offset if self.clock else None,
                        self.clock.rtt if self.clock else None, self.collected_at, round(self.seconds, 3))


Collect = Callable[[Host], NodeResult]


class SshNode:
    """A node named by its ssh target ([USER@]HOST[:PORT], or an alias of the ssh config), reached
    with the [host] table's settings (exec prefix, ssh options, config file). `open()` connects;
    it runs in the node's worker thread, under that node's deadline."""

    def __init__(self, target: str, table: dict[str, Any] | None = None, exec_prefix: str | None = None) -> None:
        from diagnose.live.ssh import remote_for

        self.name = target
        self.remote = remote_for(target, table or {}, exec_prefix)  # a bad prefix or option: exit 2 now

    def open(self) -> Host:
        from diagnose.live.remotehost import SshHost

        host = SshHost(self.remote)
        host.name = self.name  # as named on the command line: two nodes on one machine stay two
        return host


Node = Host | SshNode


def open_node(node: Node) -> Host:
    """The node's Host: an ssh node connected now (DiagnoseError when it refuses or cannot be
    reached), any other as it is."""
    return node.open() if isinstance(node, SshNode) else node


def refusal(node: Node, exc: BaseException) -> str:
    """Why a node could not be reached, without its own name in front (it is said beside it)."""
    return str(exc).removeprefix(f"{node.name}: ")


def require_an_answer(results: Sequence[NodeResult]) -> None:
    """No node answered at all: one line naming each and why (exit 2), never an empty report."""
    from diagnose.errors import DiagnoseError

    if not any(r.collection is not None or r.bundle is not None for r in results):
        raise DiagnoseError("no node answered: " + "; ".join(f"{r.name}: {r.reason}" for r in results))


def dir_name(name: str) -> str:
    """A node's folder in the bundle: its name with anything but letters, digits and . _ - as '_'."""
    clean = _NODE_NAME.sub("_", name)[:200].strip(".") or "node"
    return clean


def add_logs(spec: RunSpec, paths: Sequence[str], source: str) -> None:
    """Logs the job's own record names (Slurm's StdOut/StdErr) join the ones discovery found."""
    for path in paths:
        if path in spec.logs:
            continue
        try:
            st = spec.host.stat(path)
        except PermissionError:
            st = None
        if st is not None and st.is_file:
            spec.logs.append(path)
            spec.log_sources.setdefault(path, ("launch-record", source))
            spec.last_activity = st.mtime if spec.last_activity is None else max(spec.last_activity, st.mtime)


Prepare = Callable[[Host, "RunSpec"], None]


def _collect_one(run_id: str, host: Host, config: Config, search_dirs: Sequence[Path],
                 stall_after: float | None, prepare: Prepare | None = None, log_patterns: Any = None) -> NodeResult:
    from diagnose.live.collectors.run import collect_run
    from diagnose.live.discovery import resolve

    started = time.monotonic()
    result = NodeResult(host.name, collected_at=time.time())
    result.clock = measure_clock(host)
    spec = resolve(run_id, config, search_dirs, host=host, stall_after=stall_after)
    remote = getattr(host, "remote", None)
    if remote is not None:  # an ssh node: its logs are searched there with the rules' patterns
        spec.log_patterns, spec.scan_engine = log_patterns, "auto"
        spec.remote_scan_timeout = remote.scan_timeout
    if prepare is not None:
        prepare(host, spec)
    result.spec = spec
    result.collection = collect_run(spec)
    result.seconds = time.monotonic() - started
    if result.clock is None:
        result.collection.manifest.run.setdefault("notes", []).append(
            f"the clock of {host.name} could not be read (date +%s.%N): its times are taken as they are")
    return result


def collect_nodes(run_id: str, hosts: Sequence[Node], config: Config, search_dirs: Sequence[Path], *,
                  stall_after: float | None = None, concurrency: int = CONCURRENCY, deadline: float | None = None,
                  collect: Callable[[Host], NodeResult] | None = None, prepare: Prepare | None = None,
                  log_patterns: Any = None) -> list[NodeResult]:
    """Collect every host in parallel (at most `concurrency` at once), each within `deadline`
    seconds of its start (default: the collectors' budget plus a grace, plus the ssh connect
    time for an ssh node); results in host order. `prepare` may add to each node's RunSpec
    before its collectors run (the job's output files); `log_patterns` (a PatternSet) searches
    an ssh node's logs where they are."""
    limit = deadline if deadline is not None else config.budget + GRACE
    if deadline is None and any(isinstance(h, SshNode) for h in hosts):
        limit += max(h.remote.connect_timeout for h in hosts if isinstance(h, SshNode))
    work = collect or (lambda host: _collect_one(run_id, host, config, search_dirs, stall_after, prepare, log_patterns))
    results: list[NodeResult | None] = [None] * len(hosts)
    done = threading.Condition()
    running: dict[int, float] = {}  # index -> monotonic start
    waiting = list(range(len(hosts)))

    def run(index: int) -> None:
        from diagnose.errors import DiagnoseError

        node = hosts[index]
        opened: Host | None = None
        try:
            host = opened = open_node(node)
            outcome = work(host)
        except DiagnoseError as exc:  # an ssh node that refused us (key, host key, exec prefix): its gap
            outcome = NodeResult(node.name, "gap", refusal(node, exc))
        except Exception as exc:  # a bug or a host that raised: that node is a gap, the others go on
            outcome = NodeResult(node.name, "error", f"collection failed: {type(exc).__name__}: {exc}")
        finally:
            if opened is not None and opened is not node:
                with contextlib.suppress(Exception):
                    opened.close()  # type: ignore[attr-defined]  # the connection; its fetched files stay
        with done:
            if results[index] is None:  # not given up on meanwhile
                results[index] = outcome
            done.notify_all()

    with done:
        while waiting or running:
            while waiting and len(running) < max(1, concurrency):
                index = waiting.pop(0)
                running[index] = time.monotonic()
                threading.Thread(target=run, args=(index,), name=f"node-{hosts[index].name}", daemon=True).start()
            now = time.monotonic()
            for index, began in list(running.items()):
                if results[index] is not None:
                    running.pop(index)
                elif now - began > limit:
                    # Abandoned (a daemon thread stuck in a call that never returns): a gap, not a hang.
                    results[index] = NodeResult(hosts[index].name, "timeout", f"did not answer within {limit:.0f} s",
                                                seconds=now - began)
                    running.pop(index)
            if running:
                soonest = min(running.values()) + limit - now
                done.wait(max(0.01, min(soonest, 0.5)))
    return [r for r in results if r is not None]


def node_evidence(result: NodeResult) -> Evidence | None:
    if result.bundle is not None:
        from diagnose.evidence.bundle import evidence_from_bundle

        return evidence_from_bundle(result.bundle)
    if result.collection is None:
        return None
    return result.collection.evidence()


def merged_evidence(run_id: str, results: Sequence[NodeResult], extra: Evidence | None = None,
                    collected_at: float | None = None) -> Evidence:
    """Every node's evidence as one (evidence/assemble.merge_hosts), plus job-level evidence
    (a Slurm record) that belongs to no one node."""
    import socket
    from dataclasses import replace

    from diagnose.evidence.assemble import merge, merge_hosts

    run = RunInfo(id=run_id, mode="live", host=socket.gethostname(), collected_at=collected_at)
    merged = merge_hosts([(r.info(), node_evidence(r)) for r in results], run)
    if extra is not None:
        merged = replace(merge(merged, extra), run=run)
    return merged


def multi_manifest(run_id: str, results: Sequence[NodeResult], run_extra: dict[str, Any] | None = None) -> tuple[
        Manifest, dict[str, Manifest], dict[str, Path | bytes]]:
    """The top manifest of a multi-host bundle, each node's own manifest by folder, and every
    file to copy (bundle path -> source), nodes' files under hosts/<name>/."""
    import socket

    from diagnose.evidence.bundle import BundleFile, Manifest

    top = Manifest(run={"id": run_id, "host": socket.gethostname(), "collected_at": time.time(), **(run_extra or {})})
    nodes: dict[str, Manifest] = {}
    copies: dict[str, Path | bytes] = {}
    entries: list[dict[str, Any]] = []
    used: set[str] = set()
    for result in results:
        info = result.info()
        entry: dict[str, Any] = {"name": info.name, "dir": None, "status": info.status, "reason": info.reason,
                                 "clock_offset": info.clock_offset, "clock_rtt": info.clock_rtt,
                                 "collected_at": info.collected_at, "seconds": info.seconds}
        if result.collection is not None or result.bundle is not None:
            folder = dir_name(result.name)
            while folder in used:
                folder += "_"
            used.add(folder)
            entry["dir"] = f"hosts/{folder}"
            if result.bundle is not None:
                from diagnose.evidence.bundle import open_bundle

                root, manifest = open_bundle(result.bundle)
                files: dict[str, Path | bytes] = {f.path: root / f.path for f in manifest.files}
            else:
                assert result.collection is not None
                manifest = result.collection.manifest
                files = result.collection.copies()
            nodes[entry["dir"]] = manifest
            for relative, source in files.items():
                copies[f"{entry['dir']}/{relative}"] = source
            manifest.files = [BundleFile(f.path, f.kind, f.origin, f.rank, f.mtime) for f in manifest.files]
        entries.append(entry)
    top.hosts = entries
    return top, nodes, copies


# ---------------------------------------------------------------- naming the nodes


def local_names() -> set[str]:
    """Names that mean this machine."""
    import socket

    names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.gethostname().split(".")[0]}
    with contextlib.suppress(OSError):
        names.add(socket.getfqdn())
    return {n for n in names if n}


def host_for(name: str, table: dict[str, Any] | None = None, exec_prefix: str | None = None) -> Node:
    """A node named on the command line: NAME=DIR (its files under DIR here), this machine, or a
    node reached over ssh with the [host] table's settings (`table`) and `exec_prefix`."""
    from diagnose.errors import DiagnoseError
    from diagnose.evidence.safetext import visible
    from diagnose.live.hosts import LocalHost
    from diagnose.live.rooted import RootedHost

    name = name.strip()
    node, sep, root = name.partition("=")
    if sep:
        if not node or not root:
            raise DiagnoseError(f"{visible(name)!r}: expected NAME=DIR")
        if not Path(root).is_dir():
            raise DiagnoseError(f"{visible(name)}: {visible(root)} is not a folder")
        return RootedHost(root, node)
    if not name or any(c.isspace() or c in "/\\\0" for c in name):
        raise DiagnoseError(f"{visible(name)!r}: not a host name")
    if name in local_names():  # this machine is read directly (an exec prefix is for the ssh nodes)
        return LocalHost()
    return SshNode(name, table, exec_prefix)


def read_hostfile(path: Path) -> list[str]:
    """One node per line (`node1`, or MPI's `node1 slots=8`); blank lines and # comments skipped."""
    from diagnose.errors import DiagnoseError

    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise DiagnoseError(f"--hostfile {path}: cannot read it ({exc.strerror or exc})") from None
    names = []
    for line in text.splitlines()[:100_000]:
        word = line.split("#", 1)[0].strip().split(" ")[0].strip()
        if word and word not in names:
            names.append(word)
    if not names:
        raise DiagnoseError(f"--hostfile {path}: names no host")
    return names
