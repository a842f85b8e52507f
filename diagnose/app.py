"""The application layer: inputs -> Evidence -> findings -> ranked Diagnosis.

The CLI calls these; they know nothing of terminals or output formats.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diagnose.engine.findings import Diagnosis
from diagnose.errors import DiagnoseError
from diagnose.evidence.model import Evidence, Gap
from diagnose.rules.model import RuleSet

if TYPE_CHECKING:
    from diagnose.live.config import Config
    from diagnose.live.runs import RunSpec


def diagnose(evidence: Evidence, rules: RuleSet, engine: str = "auto", since: float | None = None,
             until: float | None = None, stall_after: float | None = None, timeline: bool = True) -> Diagnosis:
    """timeline=False: no run timeline (Diagnosis.timeline None), for callers whose reports do not
    draw it (report.render.DRAWS_TIMELINE): it costs a small scan its import, a re-read of the logs'
    tails and its masking. Decided here, not when a report first reads it: by then the logs may be
    gone (standard input's copy) or elsewhere (relative paths after a chdir)."""
    from diagnose.engine.checks import checks
    from diagnose.engine.evaluate import run_rules
    from diagnose.engine.rank import rank_all
    started = time.perf_counter()
    result = run_rules(rules.rules, evidence, engine=engine, since=since, until=until)
    # A bundle read without --stall-after: the threshold its collection was given, if any.
    ranked = rank_all(result.findings, evidence, stall_after=stall_after if stall_after is not None else evidence.run.stall_after)
    run_timeline = None
    if timeline:
        from diagnose.engine.timeline import build_timeline

        run_timeline = build_timeline(evidence, ranked.causes, ranked.events, ranked.view)
    # Engine and ranker gaps: budgets spent, logs that could not be read again (each said once).
    gaps = list(evidence.gaps) + list(dict.fromkeys(result.gaps + ranked.gaps))
    for scan in result.scans:
        if scan.cut_lines:
            gaps.append(Gap(scan.source.display, f"{scan.cut_lines} line(s) longer than 64 KiB were cut to their first 64 KiB"))
    remote = remote_stats(evidence, result.pattern_sets, gaps)
    stats: dict[str, object] = {
        "rules": len(rules.rules),
        "files_scanned": len(result.scans),
        "bytes_scanned": sum(s.bytes for s in result.scans),
        "lines_scanned": sum(s.lines for s in result.scans),
        "engine": result.scans[0].engine if result.scans else None,
        "seconds": round(time.perf_counter() - started, 3),
    }
    if remote:
        stats["remote"] = remote
    if evidence.stats:
        stats["collect"] = dict(evidence.stats)
    nodes: list[Any] = []
    first = None
    if evidence.hosts:
        from diagnose.engine.nodes import node_summaries

        nodes, first = node_summaries(evidence, ranked.causes)
    return Diagnosis(evidence, ranked.causes, result.skipped, gaps, stats, elsewhere=ranked.elsewhere,
                     checked=checks(evidence, ranked.view, ranked.events), state=ranked.state.state,
                     state_reason=ranked.state.reason,
                     window=(ranked.view.start, ranked.view.start_source, ranked.view.last_write, ranked.view.end_source),
                     timeline=run_timeline, nodes=nodes, first_failure=first)


def remote_stats(evidence: Evidence, sets: Any, gaps: list[Gap]) -> dict[str, object] | None:
    """For a run on another machine: where, through what, and how much of what was read there
    crossed the connection. A log fetched as an excerpt for other rules than these gets a gap:
    lines only these rules would match may not be in it."""
    from diagnose.evidence.model import TextKind

    remote = evidence.stats.get("remote") if evidence.stats else None
    if not isinstance(remote, dict):
        return None
    files = remote.get("files") if isinstance(remote.get("files"), dict) else {}
    assert isinstance(files, dict)
    read = sum(int(f.get("size") or 0) for f in files.values() if isinstance(f, dict))
    received = int(remote.get("bytes_received") or 0)
    log_set = sets.get(TextKind.LOG) if isinstance(sets, dict) else None
    for name, entry in files.items():
        digest = entry.get("patterns_digest") if isinstance(entry, dict) else None
        if digest and log_set is not None and digest != log_set.digest:
            gaps.append(Gap(str(entry.get("path") or name), "fetched as an excerpt for another set of rules: lines only "
                            "these rules match may be missing (collect it again with these rules)"))
    return {
        "host": remote.get("target"), "exec": remote.get("exec") or [],
        "search": "grep on the remote side, candidate lines confirmed here" if any(
            isinstance(f, dict) and str(f.get("mode", "")).startswith("grep") for f in files.values()) else "files fetched",
        "bytes_read_remotely": read, "bytes_transferred": received,
        "percent_transferred": round(100.0 * received / read, 3) if read else None,
        "commands": remote.get("commands"),
    }


# ---------------------------------------------------------------- live runs

def found_anything(spec: RunSpec, evidence: Evidence) -> bool:
    """Whether anything relates to the run id (without a config, a typo must not look like a
    crash). A run that was expected but left no trace (siblings, a known log path, a tmux
    socket of its launch) does: that absence is the finding."""
    from diagnose.live.identity import relates

    if evidence.identity is not None:
        return relates(spec, evidence.identity)
    if spec.configured or spec.logs or spec.error_files or spec.wandb_dirs or spec.checkpoint_dir:
        return True
    if evidence.process is not None and evidence.process.alive:
        return True
    tmux = evidence.tmux
    return tmux is not None and any(s.name == spec.id for s in tmux.sessions)


def nothing_found(spec: RunSpec, manifest: Any = None) -> DiagnoseError:
    """Exit 2: nothing relates to the id; name the closest ids that exist."""
    from diagnose.live.identity import did_you_mean

    close = did_you_mean(spec, manifest) if manifest is not None else []
    message = f"{spec.id}: no file, process, tmux session or launch record relates to this run id"
    if close:
        token, where = close[0]
        others = ", ".join(t for t, _w in close[1:])
        message += f"; did you mean {token}? {where}" + (f" (or {others})" if others else "")
    else:
        message += (f" (looked in: {'; '.join(spec.looked)}); check the run id, pass --dir, or say where its files "
                    "are in diagnose.toml")
    return DiagnoseError(message)


def open_host(config: Config, host: str | None = None, exec_prefix: str | None = None) -> Any:
    """The machine the run lives on: --host/--exec, else the config's [host], else None (this
    one). A remote one is connected here: a key or host-key problem is one line, exit 2."""
    from diagnose.live.ssh import remote_for

    table = dict(config.host)
    target = host if host is not None else table.get("target")
    if target is None:
        if exec_prefix is not None:
            raise DiagnoseError("--exec needs --host (or target in the [host] table of the config)")
        return None
    from diagnose.live.remotehost import SshHost

    return SshHost(remote_for(str(target), table, exec_prefix))


def _resolve(run_id: str, config: Config, search_dirs: list[Path], stall_after: float | None, host: Any,
             log_patterns: Any, engine: str) -> RunSpec:
    from diagnose.live.discovery import resolve

    try:
        spec = resolve(run_id, config, search_dirs, host=host, stall_after=stall_after)
    except (ConnectionError, TimeoutError) as exc:  # a remote host that dropped while we looked
        raise DiagnoseError(f"{run_id}: {exc.strerror or exc} (while looking for the run's files)") from None
    if host is not None:
        spec.log_patterns, spec.scan_engine = log_patterns, engine
        spec.remote_scan_timeout = host.remote.scan_timeout
        skew = host.clock_skew()
        if skew is not None and abs(skew) > 30:
            # File times and log stamps are the remote clock's; "now" (stalled? how long ago?) is ours.
            spec.notes.append(f"the clock of {host.remote.target} is {abs(skew):.0f} s {'ahead of' if skew > 0 else 'behind'} "
                              "this machine's: ages and the stall check are off by that much")
    return spec


def evidence_for_run(run_id: str, config: Config, search_dirs: list[Path], progress: bool = False,
                     stall_after: float | None = None, host: Any = None, log_patterns: Any = None,
                     engine: str = "auto") -> Evidence:
    """Collect everything the machine can tell about the run, as Evidence (mode 'live'). On a
    remote host the logs are searched there with `log_patterns` (a PatternSet)."""
    from diagnose.live.collectors.run import collect_run

    spec = _resolve(run_id, config, search_dirs, stall_after, host, log_patterns, engine)
    try:
        collection = collect_run(spec, progress=progress)
    finally:
        if host is not None:
            host.close()  # the connection; the files fetched stay until we exit
    evidence = collection.evidence()
    if not found_anything(spec, evidence):
        raise nothing_found(spec, collection.manifest)
    return evidence


class PendingRun:
    """evidence_for_run in a background thread, so collecting (mostly waiting on tmux, dmesg,
    the run's interpreter and the GPU driver) overlaps with loading and compiling the rules."""

    def __init__(self, run_id: str, config: Config, search_dirs: list[Path], progress: bool = False,
                 stall_after: float | None = None, **remote: Any) -> None:
        import threading

        self._result: Evidence | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, args=(run_id, config, search_dirs, progress, stall_after, remote),
                                        name="collect", daemon=True)
        self._thread.start()

    def _work(self, run_id: str, config: Config, search_dirs: list[Path], progress: bool, stall_after: float | None,
              remote: dict[str, Any]) -> None:
        try:
            self._result = evidence_for_run(run_id, config, search_dirs, progress, stall_after, **remote)
        except BaseException as exc:  # handed to the caller of evidence()
            self._error = exc

    def evidence(self) -> Evidence:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def start_run(run_id: str, config: Config, search_dirs: list[Path], progress: bool = False,
              stall_after: float | None = None, **remote: Any) -> PendingRun:
    return PendingRun(run_id, config, search_dirs, progress, stall_after, **remote)


def log_patterns(rules: RuleSet) -> Any:
    """The pattern set a remote log is prefiltered with: the one the scan of logs will use."""
    from diagnose.engine.evaluate import pattern_sets
    from diagnose.evidence.model import TextKind

    return pattern_sets(rules.rules)[TextKind.LOG]


def collect_bundle(run_id: str, config: Config, search_dirs: list[Path], out: Path, progress: bool = False,
                   raw: bool = False, stall_after: float | None = None, host: Any = None,
                   rules: RuleSet | None = None, logs: Sequence[str] = (), node: bool = False) -> tuple[Path, Any]:
    """`diagnose collect`: the run's evidence written as a bundle, secrets masked unless raw.
    `logs`: more of the run's logs (a Slurm job's output files); `node`: one node of a job
    (srun fan-out): its kernel log and GPU state are kept even when none of the run's files is
    there. Returns (path, manifest)."""
    from diagnose.evidence.bundle import write_bundle
    from diagnose.live.collectors.run import collect_run

    patterns = log_patterns(rules) if host is not None and rules is not None else None
    spec = _resolve(run_id, config, search_dirs, stall_after, host, patterns, "auto")
    from diagnose.live.fanout import add_logs

    add_logs(spec, logs, "diagnose collect --log")
    try:
        collection = collect_run(spec, progress=progress)
    finally:
        if host is not None:
            host.close()
    if not node and not found_anything(spec, collection.evidence()):
        raise nothing_found(spec, collection.manifest)
    return write_bundle(out, collection.manifest, collection.copies(), raw=raw), collection.manifest


# ---------------------------------------------------------------- several nodes, Slurm jobs

def _job_evidence(job: Any) -> Evidence:
    """What belongs to the job, not to one node: Slurm's record of it (and, with no node here,
    its output files), with the gaps and notes of reading it."""
    from diagnose.evidence.assemble import evidence_from_files
    from diagnose.evidence.model import ExitRecord

    base = evidence_from_files([(c.kind, c.source, c.origin, c.rank, c.mtime) for c in job.files], notes=job.notes)
    exits = list(base.exits or ())
    row = job.accounting.job
    # ExitCode (exit:signal) says how the batch script ended only for a job that ended by itself;
    # a cancelled, preempted or OOM-killed one reads 0:0 or a made-up signal (0:125): no record then.
    if row is not None and row.state in ("COMPLETED", "FAILED"):
        code, _, sig = row.get("ExitCode").partition(":")
        if code.isdigit():
            exits.append(ExitRecord(f"sacct -j {job.id}", int(code), int(sig) if sig.isdigit() and int(sig) else None,
                                    message=f"Slurm job {job.id} {row.state} (ExitCode {row.get('ExitCode')})"))
    return Evidence(run=base.run, texts=base.texts, exits=tuple(exits) or None, gaps=base.gaps + tuple(job.gaps),
                    notes=base.notes)


def _gathered(run_id: str, results: Sequence[Any], extra: Evidence | None, require_relation: bool) -> Evidence:
    from diagnose.live.fanout import merged_evidence, require_an_answer

    if require_relation:
        require_an_answer(results)
    if require_relation and not any(r.spec is not None and r.collection is not None and found_anything(r.spec, r.collection.evidence())
                                    for r in results):
        answered = [r for r in results if r.spec is not None]
        if answered:
            spec = answered[0].spec
            assert spec is not None
            spec.looked.append("on " + ", ".join(r.name for r in results))
            raise nothing_found(spec)
    return merged_evidence(run_id, results, extra, collected_at=time.time())


def evidence_for_nodes(run_id: str, hosts: Sequence[Any], config: Config, search_dirs: list[Path],
                       stall_after: float | None = None, deadline: float | None = None,
                       log_patterns: Any = None) -> Evidence:
    """`diagnose RUN_ID --hosts a,b`: every node collected in parallel, merged on one clock."""
    from diagnose.live.fanout import collect_nodes

    results = collect_nodes(run_id, hosts, config, search_dirs, stall_after=stall_after, deadline=deadline,
                            log_patterns=log_patterns)
    return _gathered(run_id, results, None, require_relation=True)


def _slurm_nodes(job_id: str, run_id: str | None, config: Config, search_dirs: list[Path], stall_after: float | None,
                 log_patterns: Any) -> tuple[Any, str, list[Any]]:
    """The job's record, its run id (default: its output file's name, slurm-J, not a bare
    number) and every node of it collected."""
    from diagnose.evidence.tempdirs import private_tempdir
    from diagnose.live.hosts import LocalHost
    from diagnose.live.slurm import collect_job, load_job

    scratch = private_tempdir("diagnose-slurm-")
    job = load_job(LocalHost(), job_id, scratch)
    run_id = run_id or f"slurm-{job.id}"
    return job, run_id, collect_job(job, run_id, config, search_dirs, stall_after, scratch, log_patterns=log_patterns)


def evidence_for_slurm(job_id: str, run_id: str | None, config: Config, search_dirs: list[Path],
                       stall_after: float | None = None, log_patterns: Any = None) -> Evidence:
    """`diagnose --slurm-job J`: the job's record, and every node of it."""
    job, run_id, results = _slurm_nodes(job_id, run_id, config, search_dirs, stall_after, log_patterns)
    evidence = _gathered(run_id, results, _job_evidence(job), require_relation=False)
    from dataclasses import replace

    return replace(evidence, run=replace(evidence.run, launcher="slurm"))


def collect_nodes_bundle(run_id: str | None, hosts: Sequence[Any] | None, job_id: str | None, config: Config,
                         search_dirs: list[Path], out: Path, raw: bool = False,
                         stall_after: float | None = None, log_patterns: Any = None) -> tuple[Path, Any, list[Any]]:
    """`diagnose collect RUN_ID --hosts ... / --slurm-job J -o OUT`: one bundle, hosts/<name>/ per node."""
    from diagnose.evidence.bundle import write_bundle
    from diagnose.live.fanout import collect_nodes, multi_manifest, require_an_answer

    copies: dict[str, Path | bytes] = {}
    extra_files: list[Any] = []
    run_extra: dict[str, Any] = {}
    if job_id is not None:
        job, run_id, results = _slurm_nodes(job_id, run_id, config, search_dirs, stall_after, log_patterns)
        extra_files = job.files
        run_extra = {"launcher": "slurm", "slurm_job": job.id, "notes": list(job.notes)}
        gaps = [{"source": g.source, "reason": g.reason} for g in job.gaps]
    else:
        assert run_id is not None and hosts is not None
        results = collect_nodes(run_id, hosts, config, search_dirs, stall_after=stall_after, log_patterns=log_patterns)
        require_an_answer(results)
        gaps = []
    top, nodes, node_copies = multi_manifest(run_id, results, run_extra)
    from diagnose.evidence.bundle import BundleFile

    for captured in extra_files:
        copies[captured.bundle_path] = captured.source
        top.files.append(BundleFile(captured.bundle_path, captured.kind.value, captured.origin, captured.rank, captured.mtime))
    top.gaps.extend(gaps)
    copies.update(node_copies)
    return write_bundle(out, top, copies, raw=raw, nodes=nodes), top, results
# ---------------------------------------------------------------- launch, watch


def log_cause(log: Path, rules: RuleSet) -> tuple[str, str, str] | None:
    """The top crash-level cause the rules find in a log so far: (id, title, category)."""
    from diagnose.evidence.inputs import evidence_from_paths
    from diagnose.vocab import Role, Severity

    try:
        evidence = evidence_from_paths([str(log)])
    except DiagnoseError:
        return None  # empty, binary: nothing to read yet
    found = diagnose(evidence, rules)
    for cause in found.causes:
        if cause.role != Role.CONTEXT and Severity(cause.severity).at_least(Severity.ERROR) and cause.category != "run":
            return cause.id, cause.title, cause.category
    return None


def launch(request: Any, wait: float, load_rules: Any, say: Any) -> Any:
    """`diagnose launch`: start the run detached under its supervisor, look at it for `wait`
    seconds, and say whether it started (a Verdict). load_rules() is called only when the log
    has something to read."""
    from diagnose.live.launch import finish, observe, refresh, start, verdict

    started = start(request)
    where = started.launcher
    how = (f"session {where.get('tmux_session')} on {where.get('tmux_socket')}" if started.via == "tmux"
           else f"unit {where.get('unit')}" if started.via == "systemd-run" else "own session")
    for note in started.notes:
        say(f"diagnose: {note}")
    say(f"{request.run_id}: launched via {started.via} ({how}); log {started.log}; record {started.record_path}")
    seen = observe(started, wait, say)
    cause = None
    ended = seen.ended or {}
    if seen.lines and not (ended and ended.get("code") == 0):
        cause = log_cause(started.log, load_rules())
        refresh(started, seen)
    result = verdict(started, seen, cause)
    finish(started, result)
    return result


def watch(run_id: str, config: Config, search_dirs: list[Path], every: float, stall_after: float,
          on_event: Any) -> Evidence:
    """`diagnose watch`: follow the run (through its launch record, else as discovery finds it),
    hand every change to on_event, and once it ends or stalls collect its evidence for the
    diagnosis. Nothing relating to the id: DiagnoseError (exit 2), as for `diagnose RUN_ID`."""
    from diagnose.live import records
    from diagnose.live.runs import check_run_id
    from diagnose.live.watch import Follower

    check_run_id(run_id)
    path = records.record_path(run_id)
    try:
        record = records.read(path) if records.trusted_folder(path.parent) is None else None
    except records.RecordError:
        record = None
    if record is not None:
        follower = Follower(run_id, stall_after, record_path=path)
    else:
        spec, found = _follower(run_id, config, search_dirs, stall_after, None)
        if found is None:
            raise nothing_found(spec)
        follower = found
    _follow({None: follower}, every, on_event)
    return evidence_for_run(run_id, config, search_dirs, stall_after=stall_after)


def _follower(run_id: str, config: Config, search_dirs: list[Path], stall_after: float, host: Any) -> tuple[RunSpec, Any]:
    """The run as discovery finds it on `host` (None: this machine), and a Follower of it (None
    when nothing there relates to the id)."""
    from diagnose.live.collectors.process import run_processes
    from diagnose.live.discovery import resolve
    from diagnose.live.watch import Follower

    spec = resolve(run_id, config, search_dirs, host=host, stall_after=stall_after)

    def find() -> dict[int, str]:
        try:
            _how, found = run_processes(spec, spec.host)
        except OSError:
            return {}
        return {p.pid: " ".join(p.cmdline) for p in found}

    logs = list(dict.fromkeys([*spec.logs, *(p for p in spec.expected_logs or () if "*" not in p)]))
    if not (spec.configured or spec.logs or spec.error_files or spec.wandb_dirs or find()):
        return spec, None
    return spec, Follower(run_id, stall_after, logs=logs, find_pids=find, host=spec.host)


def _follow(followers: dict[str | None, Any], every: float, on_event: Any) -> None:
    """Poll every follower until each has ended (a node's run ends with the job: watch them all)."""
    from dataclasses import replace

    from diagnose.live.watch import Event

    while True:
        for node, follower in followers.items():
            if follower.finished:
                continue
            try:
                events = follower.poll()
            except OSError as exc:  # a node's connection dropped: said once, the others go on
                if node is None:
                    raise
                follower.finished, follower.outcome = True, "gap"
                events = [Event("gap", follower.run_id, time.time(), f"stopped following: {exc.strerror or exc}")]
            for event in events:
                on_event(event if node is None else replace(event, node=node))
        if all(f.finished for f in followers.values()):
            return
        time.sleep(every)


def watch_slurm(job_id: str, run_id: str | None, config: Config, search_dirs: list[Path], every: float,
                stall_after: float, on_event: Any, log_patterns: Any = None) -> Evidence:
    """`diagnose watch --slurm-job J`: the job's state changes (PENDING, RUNNING on its nodes,
    its end) and its output's first lines, until it ends; then `diagnose --slurm-job J`."""
    from diagnose.evidence.tempdirs import private_tempdir
    from diagnose.live.slurm import JobFollower

    follower = JobFollower(job_id, run_id or f"slurm-{job_id}", stall_after, private_tempdir("diagnose-slurm-"))
    _follow({None: follower}, every, on_event)
    return evidence_for_slurm(job_id, run_id, config, search_dirs, stall_after, log_patterns=log_patterns)


def watch_nodes(run_id: str, nodes: Sequence[Any], config: Config, search_dirs: list[Path], every: float,
                stall_after: float, on_event: Any, log_patterns: Any = None) -> Evidence:
    """`diagnose watch RUN_ID --hosts ...`: follow the run on every node at once (events name
    their node), and once it has ended or stalled on all of them, collect every node for the
    diagnosis. A node that cannot be reached or has nothing of the run is said once, as a gap."""
    from diagnose.live.fanout import open_node, refusal
    from diagnose.live.runs import check_run_id
    from diagnose.live.watch import Event

    check_run_id(run_id)
    followers: dict[str | None, Any] = {}
    opened: list[Any] = []
    reasons: list[str] = []

    def start(node: Any) -> tuple[Any, str | None]:
        try:
            host = open_node(node)
            if host is not node:
                opened.append(host)
            _spec, follower = _follower(run_id, config, search_dirs, stall_after, host)
            return follower, None if follower is not None else f"nothing of {run_id} there"
        except (DiagnoseError, OSError) as exc:
            return None, refusal(node, exc)

    from concurrent.futures import ThreadPoolExecutor

    try:
        with ThreadPoolExecutor(max_workers=16) as pool:  # connecting and finding the run, every node at once
            started = list(pool.map(start, nodes))
        for node, (follower, reason) in zip(nodes, started, strict=True):
            if follower is None:
                reasons.append(f"{node.name}: {reason}")
                on_event(Event("gap", run_id, time.time(), str(reason), node=node.name))
            else:
                followers[node.name] = follower
        if not followers:
            raise DiagnoseError(f"{run_id}: no node has it: " + "; ".join(reasons))
        _follow(followers, every, on_event)
    finally:
        for host in opened:
            with contextlib.suppress(Exception):
                host.close()
    return evidence_for_nodes(run_id, nodes, config, search_dirs, stall_after, log_patterns=log_patterns)


def recent_runs(limit: int | None = None) -> list[tuple[dict[str, Any], Any]]:
    """`diagnose runs`: the launch records, newest first, each with its state."""
    from diagnose.live import records

    return [(data, records.status(data)) for data in records.recent(limit=limit)]
