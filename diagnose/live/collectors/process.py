"""Is the run still running? Its pid file (config `pid_file`), else processes whose command
line names the run (config `match`, default: the run id as a word) or that work in the run's
own directory. Exit statuses recorded elsewhere (a dead tmux pane, torchelastic error files)
are added when the collection is put together.
"""

from __future__ import annotations

import os
import re

from diagnose.evidence.facts import ProcessState, RunProcess
from diagnose.live.collectors.base import Context, Output
from diagnose.live.collectors.procscan import _INTERPRETER, not_the_run, scan_run
from diagnose.live.hosts import Host, ProcessInfo, cgroup_of
from diagnose.live.runs import RunSpec, run_name_pattern


def collect(ctx: Context) -> Output:
    try:
        how, found, pid_file_pid = _find(ctx.spec, ctx.host)
    except OSError as exc:
        return Output(status="gap", reason=f"{ctx.spec.pid_file}: {exc.strerror or exc}")
    recorded, ended = _record_pids(ctx.spec, ctx.host)
    found = [*found, *(p for p in recorded if p.pid not in {f.pid for f in found})]
    scan = scan_run(ctx, found, how, {p.pid: "launch record" for p in recorded})
    scan.processes.extend(ended)
    alive = [p for p in scan.processes if p.alive]
    pids = [p.pid for p in alive] if pid_file_pid is None else ([pid_file_pid] if found else [])
    command = alive[0].cmdline[:300] if alive else ""
    if found:
        command = " ".join(found[0].cmdline)[:300]
    sources = sorted({p.source for p in alive})
    state = ProcessState(how if not sources or pid_file_pid is not None else "process table (" + "; ".join(sources) + ")",
                         bool(alive), tuple(pids), command)
    # With the identity parts, moved into manifest.identity when the collection is put together.
    details = {"processes": [p.to_json() for p in scan.processes], "launcher": scan.launcher, "interpreter": scan.interpreter}
    return Output(facts={"process": {**state.to_json(), **details}}, gaps=scan.gaps, notes=scan.notes)


def _record_pids(spec: RunSpec, host: Host) -> tuple[list[ProcessInfo], list[RunProcess]]:
    """The pid the launch record names: live (same pid, same start time), or ended (kept, so the
    kernel's lines about it are the run's)."""
    record = spec.launch_record
    if not record or not isinstance(record.get("pid"), int):
        return [], []
    from diagnose.live import records

    pid = record["pid"]
    command = " ".join(str(w) for w in record.get("command") or [])[:2000]
    if host.local and records.alive(pid, record.get("pid_start_ticks")):
        proc = next((p for p in host.processes() if p.pid == pid), None)
        if proc is not None:
            return [proc], []
    ended = records.part(record, "exit")
    how = f"launch record ({ended.get('how')})" if ended.get("how") else "launch record (no longer alive)"
    started = record.get("started_at")
    lines = record.get("cgroup")
    cgroup = cgroup_of("\n".join(str(line) for line in lines)) if isinstance(lines, list) else None
    return [], [RunProcess(pid, 0, os.path.basename(str((record.get("command") or ["?"])[0]))[:15], command, False, how,
                           cgroup, float(started) if isinstance(started, (int, float)) else None)]


def run_processes(spec: RunSpec, host: Host) -> tuple[str, list[ProcessInfo]]:
    """The live processes of the run and how they were found (OSError: unreadable pid file)."""
    how, found, _pid = _find(spec, host)
    return how, found


def _find(spec: RunSpec, host: Host) -> tuple[str, list[ProcessInfo], int | None]:
    table = host.processes()
    by_pid = {p.pid: p for p in table}
    if spec.pid_file:
        try:
            raw = host.read_bytes(spec.pid_file, 64).decode("ascii", errors="replace").strip()
        except FileNotFoundError:
            raw = ""
        if raw.isdigit():
            proc = by_pid.get(int(raw))
            return f"pid file {spec.pid_file}", [proc] if proc else [], int(raw)
    # Ourselves and our ancestors (the shell or script that started diagnose, whose command
    # line may well name the run) are never the run.
    mine: set[int] = set()
    if host.local:
        pid = os.getpid()
        while pid in by_pid and pid > 1:
            mine.add(pid)
            pid = by_pid[pid].ppid
    pattern = re.compile(re.escape(spec.match)) if spec.match else run_name_pattern(spec.id)
    own_dir = spec.workdir if spec.workdir and spec.id in spec.workdir else None
    found: list[ProcessInfo] = []
    for proc in table:
        if proc.pid in mine or not_the_run(proc):
            continue
        by_command = bool(pattern.search(" ".join(proc.cmdline)))
        by_dir = own_dir is not None and proc.cwd == own_dir and bool(_INTERPRETER.match(os.path.basename(proc.cmdline[0])))
        if by_command or by_dir:
            found.append(proc)
    found.sort(key=lambda p: p.pid)
    how = f"command line names {spec.match or spec.id!r}" + (f" or works in {own_dir}" if own_dir else "")
    return f"process table ({how})", found, None
