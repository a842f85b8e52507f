"""A Slurm job as the run to diagnose: its record, its nodes, its output files.

`--slurm-job J` (or $SLURM_JOB_ID inside an allocation):
- the job's record: `scontrol show job J` while slurmctld still keeps it (MinJobAge), and its
  accounting record `sacct -j J --parsable2 --format=...` (State OUT_OF_MEMORY / TIMEOUT /
  NODE_FAIL / PREEMPTED / CANCELLED by UID, ExitCode, MaxRSS per step), both kept as text of
  kind `slurm` that the scheduler rules match;
- its nodes: `scontrol show hostnames` of the job's NodeList;
- its output files (StdOut/StdErr of `scontrol show job`, else slurm-J.out found by name),
  scanned as the run's logs.
Every command runs through a Host with a deadline, its arguments a fixed list (the job id is
checked to be a job id first: it never reaches a shell).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diagnose.errors import DiagnoseError
from diagnose.evidence.model import FileKind, Gap
from diagnose.evidence.parsers.slurm import JOB_ID, SACCT_FIELDS, SacctRecord, parse_sacct, parse_scontrol_job
from diagnose.live.collectors.base import Captured, bundle_name
from diagnose.live.fanout import (
    CLOCK_TIMEOUT,
    ClockReading,
    NodeResult,
    add_logs,
    collect_nodes,
    dir_name,
    local_names,
)
from diagnose.live.hosts import CommandResult, Host

if TYPE_CHECKING:
    from diagnose.live.config import Config
    from diagnose.live.runs import RunSpec

TIMEOUT = 15.0
SRUN_GRACE = 30.0  # seconds past the collectors' budget for srun to start and end the tasks


def check_job_id(job: str) -> str:
    job = job.strip()
    if not JOB_ID.match(job):
        from diagnose.evidence.safetext import visible

        raise DiagnoseError(f"--slurm-job {visible(job[:60])!r}: not a Slurm job id (digits, or ARRAY_TASK like 123_4)")
    return job


def job_from_env(environ: dict[str, str] | None = None) -> str | None:
    """$SLURM_JOB_ID inside an allocation (sbatch, salloc, srun)."""
    value = (environ if environ is not None else os.environ).get("SLURM_JOB_ID", "").strip()
    return value if value and JOB_ID.match(value) else None


@dataclass
class SlurmJob:
    """What Slurm says of one job, and where each part came from."""

    id: str
    record: dict[str, str] = field(default_factory=dict)  # scontrol show job, {} when aged out
    accounting: SacctRecord = field(default_factory=SacctRecord)
    nodes: list[str] = field(default_factory=list)
    node_list: str = ""
    files: list[Captured] = field(default_factory=list)  # the slurm-kind texts (sacct, scontrol)
    gaps: list[Gap] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def state(self) -> str:
        """JobState of the controller, else the accounting's State word."""
        if self.record.get("JobState"):
            return self.record["JobState"]
        job = self.accounting.job
        return job.state if job else ""

    @property
    def running(self) -> bool:
        return self.state in ("RUNNING", "COMPLETING", "SUSPENDED")

    def output_files(self) -> list[str]:
        """The job's StdOut/StdErr as the controller names them (paths on the batch host)."""
        paths = []
        for key in ("StdOut", "StdErr"):
            value = self.record.get(key, "")
            if value.startswith("/") and value not in paths:
                paths.append(value)
        return paths

    def cgroups(self, node: str) -> list[str]:
        """Where slurmd puts the job's processes: cgroup v1 /slurm[_NODE]/uid_U/job_J (task/cgroup),
        v2 .../slurmstepd.scope/job_J. A kernel OOM kill inside one of them is the job's own."""
        uid = re.search(r"\((\d+)\)", self.record.get("UserId", ""))
        if uid is None:
            return [f"/system.slice/slurmstepd.scope/job_{self.id}"]
        return [f"/slurm/uid_{uid.group(1)}/job_{self.id}", f"/slurm_{node}/uid_{uid.group(1)}/job_{self.id}",
                f"/system.slice/slurmstepd.scope/job_{self.id}"]

    @property
    def batch_host(self) -> str | None:
        return self.record.get("BatchHost") or (self.nodes[0] if self.nodes else None)


def _save(scratch: Path, name: str, data: bytes) -> Path:
    path = scratch / "slurm" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# Right after a short job ends, sacct may show the placeholder row slurmdbd makes before the job's
# submission reaches it: JobName "allocation", ReqMem "16?" (seen with Slurm 23 on Debian, for ~3 s
# after an OUT_OF_MEMORY job of one second). It is read again until whole, for at most this long.
PROVISIONAL_WAIT = 10.0


def _provisional(req_mem: str) -> bool:
    return req_mem.endswith("?")


def _accounting(host: Host, job_id: str, timeout: float) -> tuple[CommandResult, SacctRecord]:
    """`sacct -j JOB --parsable2` and its rows, read again (every second, PROVISIONAL_WAIT at most)
    while the job's row is slurmdbd's placeholder."""
    until = time.monotonic() + min(PROVISIONAL_WAIT, timeout)
    while True:
        acct = host.run(["sacct", "-j", job_id, "--parsable2", f"--format={','.join(SACCT_FIELDS)}"], timeout)
        record = parse_sacct(acct.out) if acct.ok else SacctRecord()
        row = record.job
        if row is None or not _provisional(row.get("ReqMem") or "") or time.monotonic() + 1 > until:
            return acct, record
        time.sleep(1.0)


def load_job(host: Host, job_id: str, scratch: Path, timeout: float = TIMEOUT) -> SlurmJob:
    """The job's record, accounting and node list; what cannot be had is a gap saying why."""
    job = SlurmJob(check_job_id(job_id))
    shown = host.run(["scontrol", "show", "job", job.id], timeout)
    if shown.ok and parse_scontrol_job(shown.out):
        job.record = parse_scontrol_job(shown.out)
        path = _save(scratch, "scontrol-show-job.txt", shown.stdout)
        job.files.append(Captured(FileKind.SLURM, "slurm/scontrol-show-job.txt", path, f"scontrol show job {job.id}",
                                  size=len(shown.stdout)))
    else:
        job.gaps.append(Gap("slurm", f"scontrol show job {job.id}: {shown.failure()} (a finished job is kept only MinJobAge "
                                     "seconds; sacct still has it)"))
    acct, record = _accounting(host, job.id, timeout)
    row = record.job
    if row is not None and _provisional(row.get("ReqMem") or ""):
        job.notes.append(f"sacct's record of job {job.id} is still provisional (JobName {row.get('JobName')!r}, "
                         f"ReqMem {row.get('ReqMem')!r}): slurmdbd had not recorded its submission yet; run again "
                         "in a few seconds for the whole record")
    if acct.ok and record.rows:
        job.accounting = record
        path = _save(scratch, "sacct.txt", acct.stdout)
        job.files.append(Captured(FileKind.SLURM, "slurm/sacct.txt", path, f"sacct -j {job.id}", size=len(acct.stdout)))
    elif acct.ok:
        job.gaps.append(Gap("slurm", f"sacct -j {job.id}: no accounting record of the job"))
    else:
        job.gaps.append(Gap("slurm", f"sacct -j {job.id}: {acct.failure()}"))
    if not job.record and not job.accounting.rows:
        raise DiagnoseError(f"--slurm-job {job.id}: Slurm knows no such job (scontrol: {shown.failure()}; "
                            f"sacct: {acct.failure() if not acct.ok else 'no record'})")
    row = job.accounting.job
    job.node_list = job.record.get("NodeList") or (row.get("NodeList") if row else "") or ""
    if job.node_list in ("", "(null)", "None assigned"):
        job.notes.append(f"Slurm job {job.id} has no nodes (it never started: {job.state or 'state unknown'})")
        return job
    names = host.run(["scontrol", "show", "hostnames", job.node_list], timeout)
    if names.ok and names.out.strip():
        job.nodes = [line.strip() for line in names.out.splitlines() if line.strip()]
    else:
        job.nodes = [job.node_list] if "[" not in job.node_list and "," not in job.node_list else []
        job.gaps.append(Gap("slurm", f"scontrol show hostnames {job.node_list}: {names.failure()}"))
    return job


# ---------------------------------------------------------------- fan-out through srun


def srun_argv(job: SlurmJob, command: list[str]) -> list[str]:
    """One task per node of the job's allocation, beside the job's own steps (--overlap)."""
    return ["srun", f"--jobid={job.id}", "--overlap", f"--nodes={len(job.nodes)}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=0", "--quiet", *command]


def diagnose_on_nodes() -> list[str] | None:
    """How to start diagnose on the job's nodes: the `diagnose` program on PATH (an install the
    nodes share), else None (then the Host interface collects them)."""
    found = shutil.which("diagnose")
    return [found] if found else None


def _srun_clocks(job: SlurmJob, host: Host, timeout: float) -> dict[str, ClockReading]:
    """Each node's clock offset, read by one `date +%s.%N` task per node; the round trip is the
    whole srun's (its start-up included), so the bound it gives is loose but honest."""
    before = time.time()
    result = host.run([*srun_argv(job, ["date", "+%s.%N"])[:-2], "--label", "date", "+%s.%N"], timeout)
    after = time.time()
    clocks: dict[str, ClockReading] = {}
    if not result.ok:
        return clocks
    for line in result.out.splitlines():
        task, _, value = line.partition(":")
        try:
            index, remote = int(task.strip()), float(value.strip())
        except ValueError:
            continue
        if 0 <= index < len(job.nodes):
            clocks[job.nodes[index]] = ClockReading(round(remote - (before + after) / 2, 6), round(after - before, 6))
    return clocks


def srun_collect(job: SlurmJob, run_id: str, command: list[str], config: Config, search_dirs: Sequence[Path],
                 stall_after: float | None, scratch: Path) -> list[NodeResult]:
    """`diagnose collect` on every node of a running job, one srun task per node, each writing
    its bundle to OUT/<node>. Nodes whose bundle is not there (OUT not shared with them, diagnose
    missing) are gaps; [] when no node gave one (the caller then collects over Hosts)."""
    from diagnose.live.hosts import LocalHost

    local = LocalHost()
    out = scratch / "nodes"
    out.mkdir(parents=True, exist_ok=True)
    options = ["-o", f"{out}/{{host}}", "--node", *[f"--log={p}" for p in job.output_files()],
               *[f"--dir={d}" for d in search_dirs]]
    if stall_after is not None:
        options += ["--stall-after", f"{stall_after:.0f}s"]
    if config.path is not None:
        options += ["--config", str(config.path)]
    started = time.monotonic()
    result = local.run(srun_argv(job, [*command, "collect", *options, "--", run_id]), config.budget + SRUN_GRACE)
    seconds = time.monotonic() - started
    clocks = _srun_clocks(job, local, CLOCK_TIMEOUT + 10)
    results = []
    for name in job.nodes:
        bundle = out / dir_name(name)
        if (bundle / "manifest.json").is_file():
            results.append(NodeResult(name, bundle=bundle, clock=clocks.get(name), seconds=seconds, collected_at=time.time()))
        else:
            why = result.failure() if not result.ok else "no bundle came back"
            results.append(NodeResult(name, "gap", f"srun diagnose collect: {why}", seconds=seconds))
    if not any(r.bundle is not None for r in results):
        return []
    job.notes.append(f"collected on the job's {len(job.nodes)} node(s) by srun --overlap (diagnose collect on each)")
    return results


def collect_job(job: SlurmJob, run_id: str, config: Config, search_dirs: Sequence[Path], stall_after: float | None,
                scratch: Path, use_srun: bool = True, log_patterns: Any = None) -> list[NodeResult]:
    """Every node of the job: through srun when the job still runs and diagnose is on PATH, else
    over Hosts: this machine for a node that is this machine, ssh (with the [host] table's
    settings) for the others; a node ssh cannot reach is a gap naming why."""
    from diagnose.live.fanout import Node, SshNode
    from diagnose.live.hosts import LocalHost

    command = diagnose_on_nodes()
    if use_srun and job.running and job.nodes and command is not None:
        results = srun_collect(job, run_id, command, config, search_dirs, stall_after, scratch)
        if results:
            return results
        job.notes.append("srun could not collect on the job's nodes; collected over this machine instead")
    here = local_names()
    hosts: list[Node] = []
    refused: dict[str, str] = {}
    for name in job.nodes:
        if name in here:
            host = LocalHost()
            host.name = name
            hosts.append(host)
        else:
            try:
                hosts.append(SshNode(name, dict(config.host)))
            except DiagnoseError as exc:  # a name ssh would not take, or bad [host] settings
                refused[name] = str(exc)
    outputs = job.output_files()
    batch = job.batch_host

    def prepare(host: Host, spec: RunSpec) -> None:
        if host.name == batch or len(hosts) == 1:
            add_logs(spec, outputs, f"scontrol show job {job.id}")
        spec.launcher = "slurm"
        spec.launcher_source = f"Slurm job {job.id}"
        spec.cgroups.extend(job.cgroups(host.name))

    collected = {r.name: r for r in collect_nodes(run_id, hosts, config, search_dirs, stall_after=stall_after,
                                                  prepare=prepare, log_patterns=log_patterns)}
    results = [collected.get(name) or NodeResult(name, "gap", refused.get(name, "not collected")) for name in job.nodes]
    answered = [r.name for r in results if r.status == "ok"]
    if batch not in answered and not (len(hosts) == 1 and answered):
        # No node that answered holds the output files: they may still be here (a shared file system).
        from diagnose.evidence.sniff import rank_from_path

        for path in outputs:
            st = os.stat(path) if os.path.isfile(path) else None
            if st is not None:
                job.files.append(Captured(FileKind.LOG, bundle_name("logs", path), Path(path), path,
                                          rank_from_path(Path(path)), st.st_mtime, st.st_size))
    return results


# ---------------------------------------------------------------- following a job (diagnose watch --slurm-job)

ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "STAGE_OUT")


class JobFollower:
    """A Slurm job between polls: its state as the controller (else the accounting) says it,
    and the first output and first step of its output files. It ends with the job."""

    def __init__(self, job_id: str, run_id: str, stall_after: float, scratch: Path, host: Host | None = None) -> None:
        from diagnose.live.hosts import LocalHost

        self.job_id, self.run_id, self.stall_after, self.scratch = job_id, run_id, stall_after, scratch
        self.host = host or LocalHost()
        self.state = ""
        self.finished = False
        self.outcome = ""
        self.logs: Any = None  # a watch.Follower of the output files, once the controller names them

    def poll(self) -> list[Any]:
        from diagnose.live.watch import Event, Follower

        now = time.time()
        job = load_job(self.host, self.job_id, self.scratch)
        state = job.state.split(" ")[0]
        events: list[Any] = []
        if not state:
            if not self.state:
                reasons = "; ".join(g.reason for g in job.gaps) or "no record"
                raise DiagnoseError(f"Slurm job {self.job_id}: neither scontrol nor sacct knows it ({reasons})")
            return events  # between the controller forgetting it and the accounting having it
        if state != self.state:
            where = f" on {job.node_list}" if state == "RUNNING" and job.node_list else ""
            why = job.record.get("Reason", "")
            because = f" ({why})" if why and why != "None" and state != "RUNNING" else ""
            events.append(Event("state", self.run_id, now, f"Slurm job {job.id} {job.state}{where}{because}",
                                {"slurm_job": job.id, "state": state}))
            self.state = state
        if self.logs is None and job.output_files():
            self.logs = Follower(self.run_id, self.stall_after, logs=job.output_files(), host=self.host)
        if self.logs is not None:
            self.host.refresh()
            events.extend(self.logs.read_logs(now))
        if state not in ACTIVE:
            self.finished, self.outcome = True, state.lower()
        return events
