"""The run's processes beyond its command line: live pids whose working directory, environment
or open files name the run or its log; the panes of a tmux session named like the run; the
children of all of those; pids the log printed. For each: cgroup, start time, state letter and
CPU use over a short sample; for a stalled Python process, a py-spy stack (or a gap saying why
not). Also how the run was launched as the process tree shows it, and its interpreter.

Every /proc read tolerates a process that vanished meanwhile; every command runs under the
collector's deadline (ctx.run)."""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from diagnose.engine.runview import STALL_MIN
from diagnose.evidence.facts import LOW_CPU_PCT, RunProcess, rank_heads
from diagnose.evidence.model import Gap
from diagnose.live.collectors.base import Context
from diagnose.live.hosts import Host, ProcessInfo, ProcStat
from diagnose.live.runs import RunSpec, run_name_pattern

# Programs that name the run without being it: the multiplexer hosting it, pagers and tails
# reading its log, editors, and diagnose itself.
NOT_THE_RUN = {"tmux", "tmux: server", "tmux: client", "screen", "SCREEN", "less", "more", "tail", "head", "grep", "rg",
               "vi", "vim", "nvim", "nano", "emacs", "man", "watch", "journalctl", "dmesg", "nvidia-smi", "ssh", "sshd",
               "py-spy",
               # readers and carriers of the run's log (someone looking at it, or copying it away)
               "cat", "zcat", "wc", "sed", "awk", "cut", "sort", "gzip", "xz", "scp", "rsync", "sftp-server", "nsenter"}
_SHELLS = {"sh", "bash", "dash", "zsh"}


def not_the_run(proc: ProcessInfo) -> bool:
    """A program that names the run without being it: a multiplexer, a pager or reader of its log,
    an editor, diagnose itself, or a shell whose -c command is one of those (`sh -c "ssh h cat log"`)."""
    argv = proc.cmdline
    if proc.comm in NOT_THE_RUN or not argv or _is_diagnose(proc) or os.path.basename(argv[0]) in NOT_THE_RUN:
        return True
    if os.path.basename(argv[0]) in _SHELLS and len(argv) >= 3 and argv[1] == "-c":
        words = argv[2].split()
        return bool(words) and os.path.basename(words[0]) in NOT_THE_RUN
    return False
_INTERPRETER = re.compile(r"^(python[0-9.]*|torchrun|deepspeed|accelerate|srun|mpirun|bash|sh)$")


def _is_diagnose(proc: ProcessInfo) -> bool:
    """diagnose itself, or a command the other collectors run right now (NVML probe, package listing)."""
    head = proc.cmdline[:6]  # python -I -S -c SNIPPET: the snippet is the fifth word
    if any(os.path.basename(arg) == "diagnose" for arg in head) or ("-m" in head and "diagnose" in head):
        return True
    if "diagnose.live.supervise" in head:  # the supervisor of a `diagnose launch` (and its tmux pane)
        return True
    text = " ".join(head)
    return "nvml_probe.py" in text or "importlib.metadata as m" in text or "-m pip list" in text


CPU_SAMPLE = 0.5  # seconds between the two reads of utime+stime
PY_SPY_LIMIT = 10.0  # seconds one py-spy dump may take
MAX_STACKS = 3  # of processes that are not a rank's own (a launcher, a lone script)
MAX_RANK_STACKS = 64  # one per rank: where each waits names the rank the collective waits for
# The rank a process is, as its launcher told it: torchrun/torch.distributed, then MPI launchers.
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
MAX_PROCESSES = 200
ENV_SKIP = {"PWD", "OLDPWD", "_", "PS1", "HISTFILE"}  # a shell's location says where a user stood, not what runs
_PYTHON = re.compile(r"^python[0-9.]*$")
# torchelastic "(pid: 1234)", "DataLoader worker (pid 1234)", "Killing subprocess 1234"
_LOG_PIDS = re.compile(rb"\(pid:? (\d{1,9})\)|Killing subprocess (\d{1,9})")
LOG_TAIL = 256 * 1024


@dataclass
class Scan:
    processes: list[RunProcess] = field(default_factory=list)
    launcher: dict[str, str] | None = None
    interpreter: dict[str, str] | None = None
    gaps: list[Gap] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def scan_run(ctx: Context, found: Sequence[ProcessInfo], how: str, reasons: dict[int, str] | None = None) -> Scan:
    spec, host = ctx.spec, ctx.host
    table = host.processes()
    by_pid = {p.pid: p for p in table}
    mine = _ours(host, by_pid)

    def eligible(proc: ProcessInfo) -> bool:
        return proc.pid not in mine and not not_the_run(proc)

    chosen: dict[int, str] = {p.pid: (reasons or {}).get(p.pid) or _first_reason(how) for p in found}
    for proc in table:
        if ctx.remaining() < 1.0 or len(chosen) >= MAX_PROCESSES:
            break
        if proc.pid not in chosen and eligible(proc):
            reason = _names_run(spec, host, proc)
            if reason:
                chosen[proc.pid] = reason
    for pid, reason in _tmux_panes(ctx).items():
        if pid in by_pid and pid not in chosen and eligible(by_pid[pid]):
            chosen[pid] = reason
    for pid, reason in _descendants(chosen, table, eligible).items():
        chosen.setdefault(pid, reason)
    scan = Scan()
    alive = [by_pid[pid] for pid in sorted(chosen) if pid in by_pid][:MAX_PROCESSES]
    cpu, latest = _cpu_sample(ctx, [p.pid for p in alive])
    for proc in alive:
        stat = latest.get(proc.pid)
        scan.processes.append(RunProcess(
            proc.pid, proc.ppid, proc.comm, " ".join(proc.cmdline)[:2000], stat is not None and stat.state != "Z",
            chosen[proc.pid], host.proc_cgroup(proc.pid), proc.start_time, stat.state if stat else None, cpu.get(proc.pid),
            rank=rank_of(host.proc_environ(proc.pid))))
    scan.processes.extend(_printed_pids(spec, host, set(by_pid)))
    _stacks(ctx, scan, by_pid)
    scan.launcher = _launcher(host, alive, by_pid)
    scan.interpreter = _interpreter(alive)
    return scan


def _first_reason(how: str) -> str:
    if how.startswith("pid file"):
        return how
    return "command line names the run"


def _ours(host: Host, by_pid: dict[int, ProcessInfo]) -> set[int]:
    """diagnose itself and its ancestors (the shell that started it may name the run)."""
    mine: set[int] = set()
    if host.local:
        pid = os.getpid()
        while pid in by_pid and pid > 1:
            mine.add(pid)
            pid = by_pid[pid].ppid
    return mine


def _log_paths(spec: RunSpec) -> set[str]:
    paths = set(spec.logs) | set(spec.expected_logs or ())
    if not spec.host.local:
        return paths  # realpath would follow this machine's links, not the host's
    return {os.path.realpath(p) for p in paths} | paths


def _names_run(spec: RunSpec, host: Host, proc: ProcessInfo) -> str | None:
    """Why this process is the run's: its working directory, environment or open files."""
    named = run_name_pattern(spec.id)
    if proc.cwd and named.search(proc.cwd) and not _is_shell_only(proc):
        return f"works in {proc.cwd}"
    env = host.proc_environ(proc.pid)
    if env:
        for key, value in env.items():
            if key not in ENV_SKIP and named.search(value) and len(value) < 4096:
                return f"environment {key}={value[:120]} names the run"
    logs = _log_paths(spec)
    if logs:
        for target in host.proc_fds(proc.pid) or ():
            if target in logs:
                return f"has the run's log {target} open"
    return None


def _is_shell_only(proc: ProcessInfo) -> bool:
    """An interactive shell sitting in the run's folder is a user looking, not the run."""
    return os.path.basename(proc.cmdline[0]).lstrip("-") in ("bash", "sh", "zsh", "fish", "dash") and len(proc.cmdline) == 1


def _tmux_panes(ctx: Context) -> dict[int, str]:
    """Pane pids of the tmux session named like the run (or the configured one)."""
    from diagnose.evidence.parsers.tmux import socket_path

    spec, host = ctx.spec, ctx.host
    session = spec.tmux_session or spec.tmux_session_guess or spec.id
    socket, _how = socket_path(host.uid(), host.environ(), spec.tmux_socket_name, spec.tmux_socket)
    if not host.exists(socket) or ctx.remaining() < 1.0:
        return {}
    result = ctx.run(["tmux", "-S", socket, "list-panes", "-s", "-t", f"={session}", "-F", "#{pane_pid}"],
                     cap=min(3.0, ctx.remaining() / 3), env={"TMUX": None})
    if not result.ok:
        return {}
    return {int(line): f"pane of tmux session {session}" for line in result.out.split() if line.isdigit()}


def _descendants(roots: dict[int, str], table: Iterable[ProcessInfo], eligible: Callable[[ProcessInfo], bool]) -> dict[int, str]:
    """Children of the run's processes, and theirs: a launcher script's python, DataLoader workers."""
    children: dict[int, list[ProcessInfo]] = {}
    for proc in table:
        children.setdefault(proc.ppid, []).append(proc)
    found: dict[int, str] = {}
    queue = list(roots)
    while queue and len(found) < MAX_PROCESSES:
        parent = queue.pop()
        for child in children.get(parent, ()):
            if child.pid not in roots and child.pid not in found and eligible(child):
                found[child.pid] = f"child of {parent}"
                queue.append(child.pid)
    return found


def _cpu_sample(ctx: Context, pids: Sequence[int]) -> tuple[dict[int, float], dict[int, ProcStat]]:
    """CPU use (% of one core) of each process over a short sample, and the second reading
    (state letters as of now). Each reading is one host call: one command on a remote host."""
    host = ctx.host
    if not pids:
        return {}, {}
    before = host.proc_stats(pids)
    started = time.monotonic()
    time.sleep(max(0.0, min(CPU_SAMPLE, ctx.remaining() / 4)))
    after = host.proc_stats(pids)
    elapsed = time.monotonic() - started
    result: dict[int, float] = {}
    for pid in pids:
        first, second = before.get(pid), after.get(pid)
        if first is None or second is None or elapsed <= 0:
            continue
        result[pid] = round(100.0 * (second.cpu_ticks - first.cpu_ticks) / second.ticks_per_s / elapsed, 1)
    return result, after


def _printed_pids(spec: RunSpec, host: Host, live: set[int]) -> list[RunProcess]:
    """Pids the log printed that are gone now: the kernel's OOM line may name them."""
    seen: dict[int, RunProcess] = {}
    for log in spec.logs[:10]:
        try:
            tail = host.read_bytes(log, LOG_TAIL, -LOG_TAIL)
        except OSError:
            continue
        for match in _LOG_PIDS.finditer(tail):
            pid = int(match.group(1) or match.group(2))
            if pid not in live and pid not in seen and len(seen) < 64:
                seen[pid] = RunProcess(pid, 0, "", "", False, f"printed in {os.path.basename(log)}")
    return list(seen.values())


# ---------------------------------------------------------------- stalled: where is it stuck?


def py_spy() -> str | None:
    """Our own py-spy (beside the interpreter diagnose runs in, else on PATH); never one the evidence names."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def _stalled(ctx: Context, proc: RunProcess) -> bool:
    """Silent and idle for as long as the run could count as stalled: --stall-after, else the least
    the run's cadence may set (the engine decides from the log; a stack too many costs a dump, a
    stack missing leaves a stalled run's report without where it waits)."""
    last = ctx.spec.last_activity
    if not proc.alive or last is None or proc.cpu_pct is None:
        return False
    threshold = ctx.spec.stall_after if ctx.spec.stall_after is not None else STALL_MIN
    return time.time() - last > threshold and proc.cpu_pct < LOW_CPU_PCT


def _is_python(proc: ProcessInfo) -> bool:
    names = [proc.comm, os.path.basename(proc.exe or ""), os.path.basename(proc.cmdline[0]) if proc.cmdline else ""]
    return any(_PYTHON.match(name) for name in names)


def rank_of(env: dict[str, str] | None) -> int | None:
    """The process's rank from its environment (None: not a rank, or not readable)."""
    for key in RANK_VARIABLES:
        value = (env or {}).get(key, "")
        if value.isdigit() and len(value) < 9:
            return int(value)
    return None


def _stack_order(scan: Scan, stalled: list[int]) -> list[int]:
    """Each rank's own process first, in rank order (among the stalled Python processes: a wrapper
    shell with the same RANK does not count), then a few others."""
    procs = scan.processes
    own = rank_heads((procs[i].pid, procs[i].ppid, procs[i].rank) for i in stalled)
    heads = sorted((i for i in stalled if procs[i].pid in own), key=lambda i: (own[procs[i].pid], procs[i].pid))
    others = [i for i in stalled if procs[i].pid not in own]
    return heads[:MAX_RANK_STACKS] + others[:MAX_STACKS]


def _stacks(ctx: Context, scan: Scan, by_pid: dict[int, ProcessInfo]) -> None:
    """py-spy dump of each stalled rank of the run and of a few other stalled Python processes."""
    stalled = [i for i, p in enumerate(scan.processes) if _stalled(ctx, p) and p.pid in by_pid and _is_python(by_pid[p.pid])]
    wanted = _stack_order(scan, stalled)
    if not wanted:
        return
    # Here, our own py-spy; on a remote host, the one on its PATH (as its tmux and python3 are), never
    # one a path in the evidence names (the run's venv).
    tool = py_spy() if ctx.host.local else ("py-spy" if ctx.host.has_program("py-spy") else None)
    where = "" if ctx.host.local else f" on {ctx.host.name}"
    if tool is None:
        pids = ", ".join(str(scan.processes[i].pid) for i in wanted[:10]) + (", ..." if len(wanted) > 10 else "")
        scan.gaps.append(Gap("process", f"py-spy: not installed{where}, no stack of stalled pid(s) {pids} "
                                        f"(pip install py-spy{where})"))
        return
    for index in wanted:
        proc = scan.processes[index]
        if ctx.remaining() < 1.0:
            scan.gaps.append(Gap("process", f"py-spy: no time left for a stack of pid {proc.pid}"))
            return
        result = ctx.run([tool, "dump", "--pid", str(proc.pid)], cap=min(PY_SPY_LIMIT, ctx.remaining() - 0.5))
        if result.ok and result.out.strip():
            scan.processes[index] = replace(proc, stack=result.out[:64 * 1024])
        else:
            why = result.failure().partition(": ")[2] or result.failure()
            scan.gaps.append(Gap("process", f"py-spy: cannot attach to pid {proc.pid}: {why[:300]}"))


# ---------------------------------------------------------------- launcher and interpreter


def _launcher(host: Host, alive: Sequence[ProcessInfo], by_pid: dict[int, ProcessInfo]) -> dict[str, str] | None:
    """How the process tree says the run was started: tmux, torchrun, Slurm, systemd, nohup/background."""
    chosen = {p.pid for p in alive}
    roots = [p for p in alive if p.ppid not in chosen]
    for proc in roots:
        for ancestor in _ancestors(proc, by_pid):
            if ancestor.comm.startswith("tmux"):
                return {"kind": "tmux", "source": f"pid {proc.pid} runs under the tmux server (pid {ancestor.pid})"}
    for proc in alive:
        words = proc.cmdline[:4]
        if words and (os.path.basename(words[0]) == "torchrun" or "torch.distributed.run" in words
                      or "torch.distributed.launch" in words or any(os.path.basename(w) == "torchrun" for w in words)):
            return {"kind": "torchrun", "source": f"pid {proc.pid} is torchrun"}
    for proc in roots:
        env = host.proc_environ(proc.pid) or {}
        if env.get("SLURM_JOB_ID"):
            return {"kind": "slurm", "source": f"pid {proc.pid} has SLURM_JOB_ID={env['SLURM_JOB_ID']}"}
        cgroup = host.proc_cgroup(proc.pid) or ""
        unit = re.search(r"system\.slice/([^/]+\.service)", cgroup)
        if unit:
            return {"kind": "systemd", "source": f"pid {proc.pid} is in {unit.group(1)}"}
    for proc in roots:
        parent = by_pid.get(proc.ppid)
        if proc.ppid == 1 or parent is None or parent.comm in ("setsid", "nohup", "systemd", "init"):
            redirected = [t for t in (host.proc_fds(proc.pid) or ())[:3] if t.startswith("/")]
            how = f"pid {proc.pid} was reparented to {proc.ppid}" + (", output to a file" if redirected else "")
            return {"kind": "nohup", "source": how}
    return None


def _ancestors(proc: ProcessInfo, by_pid: dict[int, ProcessInfo]) -> Iterable[ProcessInfo]:
    seen: set[int] = set()
    pid = proc.ppid
    while pid > 1 and pid in by_pid and pid not in seen:
        seen.add(pid)
        yield by_pid[pid]
        pid = by_pid[pid].ppid


def _interpreter(alive: Sequence[ProcessInfo]) -> dict[str, str] | None:
    for proc in alive:
        if proc.exe and _PYTHON.match(os.path.basename(proc.exe)):
            argv0 = proc.cmdline[0] if proc.cmdline else ""
            path = argv0 if os.path.isabs(argv0) and os.path.realpath(argv0) == proc.exe else proc.exe
            return {"path": path, "source": f"live pid {proc.pid}"}
    return None
