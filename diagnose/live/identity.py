"""The run's identity (docs/run-identity.md): which logs, processes, cgroups, launcher, window,
interpreter and last output are the run's, and where each came from. Put together from the
RunSpec (discovery) and what the collectors found, once they are all done; stored in the
manifest as `identity`, so a bundle gives the same one. The engine derives the state."""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from diagnose.evidence.bundle import Manifest
from diagnose.evidence.facts import (
    ExpectedLog,
    Interpreter,
    LastOutput,
    RunIdentity,
    RunLauncher,
    RunProcess,
    RunWindow,
)
from diagnose.live.hosts import Host
from diagnose.live.runs import GLOB_CHARS, RunSpec

TAIL = 64 * 1024
_SITE_PACKAGES = re.compile(rb"(/[^\s\"'<>:]*?)/lib(?:64)?/python[0-9.]+/(?:site|dist)-packages/")


def build_identity(spec: RunSpec, manifest: Manifest, collected_at: float) -> RunIdentity:
    """The identity; moves the process collector's details out of manifest.process into it."""
    details = manifest.process or {}
    processes = tuple(_processes(details.pop("processes", None)))
    tree_launcher, live_python = details.pop("launcher", None), details.pop("interpreter", None)
    logs = _logs(spec, manifest)
    inferred = list(spec.inferred)
    for proc in processes:
        if proc.alive and proc.source not in ("command line names the run",) and not proc.source.startswith(("pid file", "launch record")):
            inferred.append(f"process {proc.pid} ({proc.comm}): {proc.source}")
    launcher = _launcher(spec, manifest, tree_launcher)
    if launcher.kind != "unknown" and not launcher.source.startswith(("launcher in", "tmux_session in", "launch record")):
        inferred.append(f"launcher {launcher.kind}: {launcher.source}")
    identity = RunIdentity(
        id=spec.id, host=spec.host.name, mode="live", collected_at=collected_at, logs=tuple(logs),
        processes=processes, cgroups=tuple(dict.fromkeys([*(p.cgroup for p in processes if p.alive and p.cgroup), *spec.cgroups])),
        launcher=launcher, window=_window(spec, manifest, processes, logs, collected_at),
        interpreter=_interpreter(spec, live_python), last_output=_last_output(spec.host, logs, collected_at),
        checkpoint_dir=spec.checkpoint_dir, inferred=tuple(inferred),
    )
    if not relates(spec, identity):
        identity = replace(identity, did_you_mean=tuple(token for token, _where in did_you_mean(spec, manifest)))
    return identity


def _processes(raw: Any) -> list[RunProcess]:
    if not isinstance(raw, list):
        return []
    return [RunProcess.from_json(item) for item in raw]


# ---------------------------------------------------------------- logs


def _logs(spec: RunSpec, manifest: Manifest) -> list[ExpectedLog]:
    expected = {str(f.get("path")): f for f in manifest.expected_files or () if isinstance(f, dict)}
    logs: list[ExpectedLog] = []
    patterns: list[str] = []
    for path in spec.expected_logs or ():
        source, basis = spec.log_sources.get(path, ("config", "the config"))
        if GLOB_CHARS.search(path):
            patterns.append(path)  # a pattern: the files it matched are listed below
            if expected.get(path, {}).get("exists"):
                continue
        entry = expected.get(path, {})
        logs.append(ExpectedLog(path, bool(entry.get("exists")), _int(entry.get("size")), _num(entry.get("mtime")),
                                source, basis))
    listed = {log.path for log in logs}
    for path in spec.logs:
        if path in listed:
            continue
        st = _stat(spec.host, path)
        by_config = next((p for p in patterns if fnmatch.fnmatchcase(path, p)), None)
        source, basis = ("config", f"matches {by_config}") if by_config else ("found", _found_basis(spec, path))
        logs.append(ExpectedLog(path, st is not None, st.size if st else None, st.mtime if st else None, source, basis))
    return logs


def _found_basis(spec: RunSpec, path: str) -> str:
    if any(path.startswith(folder + os.sep) for folder in spec.wandb_dirs):
        return "the run's wandb folder"
    if "torchelastic_" in path:
        return "the run's torchelastic folder"
    return "its path names the run"


def _stat(host: Host, path: str) -> Any:
    try:
        return host.stat(path)
    except OSError:  # not ours to look at, or a remote host that stopped answering
        return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# ---------------------------------------------------------------- launcher


def _launcher(spec: RunSpec, manifest: Manifest, tree: Mapping[str, str] | None) -> RunLauncher:
    from diagnose.evidence.parsers.tmux import parse_tmux

    socket = session = server = None
    tmux_launched, tmux_basis = False, ""
    if manifest.tmux is not None:
        state = parse_tmux(manifest.tmux, manifest.tmux.get("expected_session"))
        socket, session, server = state.socket_path, state.expected_session, state.server.value
        tmux_launched, tmux_basis = bool(state.launched), state.launched_basis
    tmux = {"tmux_socket": socket, "tmux_session": session, "tmux_server": server}
    if spec.launcher and spec.launcher_source.startswith(("launcher in", "tmux_session in", "launch record")):
        return RunLauncher(_kind(spec.launcher), spec.launcher_source, **tmux)
    if tmux_launched:
        return RunLauncher("tmux", tmux_basis, **tmux)
    if tree and isinstance(tree.get("kind"), str):
        return RunLauncher(_kind(str(tree["kind"])), str(tree.get("source", "the process tree")), **tmux)
    if spec.launcher:
        return RunLauncher(_kind(spec.launcher), spec.launcher_source, **tmux)
    return RunLauncher("unknown", "", **tmux)


def _kind(name: str) -> str:
    from diagnose.evidence.facts import LAUNCHERS

    return name if name in LAUNCHERS else "unknown"


# ---------------------------------------------------------------- window, interpreter, last output


def _window(spec: RunSpec, manifest: Manifest, processes: Sequence[RunProcess], logs: Sequence[ExpectedLog],
            now: float) -> RunWindow:
    alive = [p for p in processes if p.alive]
    started = [p.started_at for p in alive if p.started_at is not None]
    mtimes = [log.mtime for log in logs if log.exists and log.mtime is not None]
    start, start_source = None, ""
    record = spec.launch_record or {}
    launched = _num(record.get("started_at")) or _num(record.get("created_at"))
    ended = record.get("exit") if isinstance(record.get("exit"), dict) else None
    if launched is not None:
        start, start_source = launched, "launch record"
    elif spec.started_at is not None:
        start, start_source = spec.started_at, "first log line"
    elif mtimes:
        start, start_source = min(mtimes), "log mtime"
    elif spec.window_hint is not None:
        start, start_source = spec.window_hint
    elif manifest.tmux and manifest.tmux.get("launched") and _num(manifest.tmux.get("socket_ctime")) is not None:
        start, start_source = _num(manifest.tmux.get("socket_ctime")), "tmux socket time"
    if started and (start is None or min(started) < start) and launched is None:
        start, start_source = min(started), "process start"  # a log without timestamps says only when it last moved
    if alive:
        return RunWindow(start, start_source, now, "collection time (a process of the run is alive)")
    if ended is not None and _num(ended.get("time")) is not None:
        return RunWindow(start, start_source, _num(ended.get("time")), "exit (launch record)")
    if spec.last_activity is not None:
        return RunWindow(start, start_source, spec.last_activity, "last write")
    exits = [_num(e.get("time")) for e in manifest.exits or () if isinstance(e, dict)]
    ended = [t for t in exits if t is not None]
    if ended:
        return RunWindow(start, start_source, max(ended), "exit")
    return RunWindow(start, start_source, None, "")


def _interpreter(spec: RunSpec, live: Mapping[str, str] | None) -> Interpreter | None:
    """The config's, else a live pid's /proc/PID/exe, else the env a traceback's site-packages
    path names (read, never run)."""
    if spec.python:
        return Interpreter(spec.python, spec.python_source)
    if live and isinstance(live.get("path"), str):
        return Interpreter(str(live["path"]), str(live.get("source", "a live pid")))
    if spec.record_python:
        return Interpreter(spec.record_python, spec.record_python_source)
    for log in spec.logs[:10]:
        try:
            tail = spec.host.read_bytes(log, 2 * 1024 * 1024, -2 * 1024 * 1024)
        except OSError:
            continue
        match = _SITE_PACKAGES.search(tail)
        if match:
            env = match.group(1).decode("utf-8", errors="replace")
            return Interpreter(os.path.join(env, "bin", "python"),
                               f"traceback site-packages in {os.path.basename(log)} (environment {env})")
    if spec.wandb_python:
        return Interpreter(spec.wandb_python, spec.wandb_python_source)
    return None


def _last_output(host: Host, logs: Sequence[ExpectedLog], now: float) -> LastOutput | None:
    written = [log for log in logs if log.exists and log.mtime is not None]
    if not written:
        return None
    newest = max(written, key=lambda log: log.mtime or 0.0)
    assert newest.mtime is not None
    line = ""
    try:
        tail = host.read_bytes(newest.path, TAIL, -TAIL).decode("utf-8", errors="replace")
        line = next((text.strip() for text in reversed(re.split(r"[\r\n]", tail)) if text.strip()), "")
    except OSError:
        pass
    return LastOutput(newest.mtime, round(max(0.0, now - newest.mtime), 1), line[:500])


# ---------------------------------------------------------------- does anything relate to the id?


def relates(spec: RunSpec, identity: RunIdentity) -> bool:
    """Whether anything says a run of this id exists or was expected: a config for it, a file or
    folder named after it, expected logs (config, launch record, siblings), a live process, a
    tmux session or socket of its launch. Else the id is most likely a typo."""
    if spec.configured or spec.logs or spec.error_files or spec.wandb_dirs or spec.checkpoint_dir:
        return True
    if any(log.source in ("config", "launch-record", "inferred") for log in identity.logs):
        return True
    if any(p.alive for p in identity.processes):
        return True
    return identity.launcher.kind != "unknown"


def did_you_mean(spec: RunSpec, manifest: Manifest) -> list[tuple[str, str]]:
    """Existing run ids close to this one, each with where it shows: (flex7, 'train_flex7.log is here')."""
    from diagnose.evidence.parsers.tmux import parse_tmux

    def shown(path: str) -> str:
        if not spec.host.local:
            return path
        relative = os.path.relpath(path)
        return relative if not relative.startswith("..") else path

    seen: dict[str, str] = {token: f"{shown(path)} is here" for token, path in spec.nearby_ids.items()}
    if manifest.tmux is not None:
        for session in parse_tmux(manifest.tmux, None).sessions:
            seen.setdefault(session.name, f"tmux session {session.name} exists")
    close = difflib.get_close_matches(spec.id, list(seen), n=3, cutoff=0.6)
    return [(token, seen[token]) for token in close if token != spec.id]
