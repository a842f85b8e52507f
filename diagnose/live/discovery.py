"""Finding a run's evidence without config: files and folders named after the run under the
working directory or --dir, wandb run folders (wandb/*-<id>/files/), torchelastic error files
(/tmp/torchelastic_*/<id>_*/attempt_*/<rank>/error.json), checkpoint folders, start and last
times. A log the config names that does not exist is evidence (the launch never started)."""

from __future__ import annotations

import json
import os
import posixpath
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from diagnose.live.collectors.procscan import not_the_run
from diagnose.live.config import RUN_KEYS, Config
from diagnose.live.hosts import FileStat, Host, LocalHost
from diagnose.live.runs import (
    GLOB_CHARS,
    RunSpec,
    absolute_path,
    check_run_id,
    glob_escape,
    id_skeleton,
    render,
    run_name_pattern,
    template_values,
)

WALK_DEPTH = 3
WALK_LIMIT = 20000


LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".stdout", ".stderr", "")
SKIP_DIRS = {".git", "node_modules", "__pycache__", "site-packages", ".venv", "venv", ".tox", ".mypy_cache"}


CHECKPOINT_DIRS = ("checkpoints", "checkpoint", "ckpt", "ckpts")


def resolve(run_id: str, config: Config, search_dirs: Sequence[Path], host: Host | None = None,
            stall_after: float | None = None) -> RunSpec:
    """Where the run's things are: the config's templates first, then discovery for the rest."""
    check_run_id(run_id)
    host = host or LocalHost()
    settings, section = config.for_run(run_id)
    values = template_values(run_id, host)
    rendered: dict[str, Any] = {}
    for key, value in settings.items():
        is_template = RUN_KEYS[key][1]
        if isinstance(value, list):
            rendered[key] = [render(v, values) if is_template else v for v in value]
        else:
            rendered[key] = render(value, values) if is_template else value
    if host.local:
        dirs = [str(d.resolve()) for d in search_dirs] or [os.getcwd()]
        base_dir = config.path.parent if config.path else Path.cwd()
    else:
        # Paths of the run's host: relative ones from its home, never resolved on this machine.
        home = host.home()
        dirs = [posixpath.normpath(posixpath.join(home, str(d))) for d in search_dirs] or [home]
        base_dir = Path(home)
    if not search_dirs:
        dirs.extend(d for d in where_runs_live(host, run_id) if d not in dirs)
    workdir = absolute_path(rendered["dir"], str(base_dir)) if "dir" in rendered else (dirs[0] if search_dirs else None)
    spec = RunSpec(
        id=run_id, host=host, configured=bool(settings), config_path=str(config.path) if config.path else None,
        section=section, workdir=workdir, timeout=config.timeout, budget=config.budget, skip=config.skip,
    )
    if stall_after is not None:
        spec.stall_after = stall_after
    search = list(dict.fromkeys(([workdir] if workdir and "dir" in rendered else []) + dirs))
    anchor = workdir or str(base_dir)  # relative paths: from the run's dir, else the config's folder

    if "logs" in rendered:
        spec.expected_logs = [absolute_path(p, anchor) for p in rendered["logs"]]
        for pattern in spec.expected_logs:
            if GLOB_CHARS.search(pattern):
                spec.logs.extend(p for p in host.glob(pattern) if _is_file(host, p))
                spec.looked.append(f"{pattern} (config logs)")
            elif _is_file(host, pattern):
                spec.logs.append(pattern)
    if "error_files" in rendered:
        for pattern in rendered["error_files"]:
            spec.error_files.extend(p for p in host.glob(absolute_path(pattern, anchor)) if _is_file(host, p))
    if "checkpoints" in rendered:
        spec.checkpoint_dir = absolute_path(rendered["checkpoints"], anchor)
    spec.tmux_session = rendered.get("tmux_session")
    spec.tmux_socket = rendered.get("tmux_socket")
    spec.tmux_socket_name = rendered.get("tmux_socket_name")
    if "python" in rendered:
        python = rendered["python"]  # a bare name (python3) is looked up on the host's PATH
        spec.python, spec.python_source = (absolute_path(python, anchor) if "/" in python else python), "config python"
    elif "venv" in rendered:
        spec.python, spec.python_source = os.path.join(absolute_path(rendered["venv"], anchor), "bin", "python"), "config venv"
    if "pid_file" in rendered:
        spec.pid_file = absolute_path(rendered["pid_file"], anchor)
    spec.match = rendered.get("match")
    if "kernel_logs" in rendered:
        spec.kernel_logs = list(rendered["kernel_logs"])
    spec.launcher = rendered.get("launcher")
    if spec.launcher is not None:
        spec.launcher_source = f"launcher in {spec.config_path or 'the config'}"
    if "tmux_session" in rendered and spec.launcher is None:
        spec.launcher, spec.launcher_source = "tmux", f"tmux_session in {spec.config_path or 'the config'}"

    for path in spec.expected_logs or ():
        spec.log_sources[path] = ("config", f"logs in {spec.config_path or 'the config'}")
    _launch_record(spec, want_logs="logs" not in rendered, configured_launcher=spec.launcher is not None)
    _discover(spec, search, wandb_dir=rendered.get("wandb_dir"), want_logs="logs" not in rendered,
              want_checkpoints="checkpoints" not in rendered)
    if spec.tmux_session is None:
        spec.tmux_session_guess = run_id
    _times(spec)
    if "checkpoints" not in rendered:
        _checkpoints_beside_logs(spec)
    if "error_files" not in rendered:
        _elastic_errors_in_window(spec)
    return spec


# ---------------------------------------------------------------- where to look without --dir

# Folders runs are commonly launched from inside containers (and GPU clouds' images).
WORKSPACES = ("/workspace",)


def where_runs_live(host: Host, run_id: str) -> list[str]:
    """Folders to search besides the default one (the cwd here, the login home on a remote host)
    when no --dir is given: the working directory of every live process whose command line names
    the run (a run found alive is found where it works, wherever that is), the folder the host's
    commands start in (an exec hop's), and /workspace. Only folders that exist, never `/`."""
    named = run_name_pattern(run_id)
    found: list[str] = []
    try:
        table = host.processes()
    except OSError:
        table = []
    for proc in table:
        # not_the_run: a pager, an editor or diagnose itself names the run without running it.
        if proc.cwd and proc.cmdline and not not_the_run(proc) and named.search(" ".join(proc.cmdline)[:4096]):
            found.append(proc.cwd)
    start = host.start_dir()
    if start and not host.local:
        found.append(start)
    if not host.local:
        found.extend(WORKSPACES)
    kept: list[str] = []
    for folder in dict.fromkeys(found):
        if folder != "/" and _is_dir(host, folder):
            kept.append(folder)
    return kept[:8]


# ---------------------------------------------------------------- a launch record


def _launch_record(spec: RunSpec, want_logs: bool, configured_launcher: bool) -> None:
    """What `diagnose launch` recorded of the run (live/records.py): its log, launcher, start,
    interpreter and, later, its pid and exit, as facts. A record folder another user owns or may
    write is not read (a planted record could name any file or pid)."""
    from diagnose.live import records

    host = spec.host
    folder = str(records.state_dir(host.environ(), host.home()))
    path = os.path.join(folder, f"{spec.id}.json")
    try:
        st = host.stat(folder)
    except PermissionError:
        return
    if st is None:
        return
    if not st.is_dir or st.uid != host.uid() or st.mode & 0o022:
        spec.notes.append(f"launch records in {folder} not read: the folder is not ours alone")
        return
    try:
        data = records.decode(host.read_bytes(path, records.MAX_RECORD_BYTES + 1), path)
    except FileNotFoundError:
        return
    except (OSError, records.RecordError) as exc:
        spec.notes.append(f"launch record {path} not read: {exc}")
        return
    if data.get("run_id") != spec.id:
        spec.notes.append(f"launch record {path} names run {data.get('run_id')!r}; not read")
        return
    spec.launch_record, spec.launch_record_path = data, path
    spec.looked.append(f"{path} (launch record)")
    via = str(data.get("via") or "?")
    launcher = records.part(data, "launcher")
    log = data.get("log")
    if want_logs and isinstance(log, str) and os.path.isabs(log):
        spec.expected_logs = [*(spec.expected_logs or []), log] if log not in (spec.expected_logs or []) else spec.expected_logs
        spec.log_sources[log] = ("launch-record", f"the launch record {path}")
        if _is_file(host, log) and log not in spec.logs:
            spec.logs.append(log)
    if not configured_launcher:
        where = (f", session {launcher.get('tmux_session')} on {launcher.get('tmux_socket')}" if via == "tmux"
                 else f", unit {launcher.get('unit')}" if launcher.get("unit") else "")
        spec.launcher, spec.launcher_source = "diagnose-launch", f"launch record {path} (via {via}{where})"
    if via == "tmux" and spec.tmux_session is None and spec.tmux_socket is None and spec.tmux_socket_name is None:
        socket_file, session = launcher.get("tmux_socket"), launcher.get("tmux_session")
        if isinstance(socket_file, str) and isinstance(session, str):
            spec.tmux_socket, spec.tmux_session = socket_file, session
    interpreter = data.get("interpreter")
    if isinstance(interpreter, dict) and isinstance(interpreter.get("path"), str):
        spec.record_python = interpreter["path"]
        spec.record_python_source = f"launch record ({interpreter.get('source') or 'at launch'})"


# ---------------------------------------------------------------- siblings: other runs of the same shape


class _Shaped:
    """Names seen while looking that differ from the run id only in its digits (flex6 for flex7):
    files (train_flex6.log) and folders (flex6/ holding train.log), with the path the run's own
    would have (train_flex7.log, flex7/train.log)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.skeleton = id_skeleton(run_id)
        self.expected: dict[str, list[tuple[float, str]]] = {}  # expected path -> [(mtime, sibling shown)]

    def see(self, host: Host, folder: str, name: str, st: FileStat, nearby: dict[str, str]) -> None:
        _remember_ids(name, os.path.join(folder, name), nearby)
        if self.skeleton is None:
            return
        match = self.skeleton.search(name)
        if match is None or match.group(0) == self.run_id:
            return
        other = match.group(0)
        own = name.replace(other, self.run_id)
        if st.is_file and _looks_like_log(name):
            # flex6/train_flex6.log -> flex7/train_flex7.log: the run's folder too
            parts = folder.split(os.sep)
            own_folder = os.sep.join(self.run_id if part == other else part for part in parts)
            shown = name if own_folder == folder else f"{parts[-1]}/{name}"
            self._add(os.path.join(own_folder, own), st.mtime, shown)
        elif st.is_dir and own == self.run_id:  # a folder per run: flex6/train.log -> flex7/train.log
            for inner in host.listdir(os.path.join(folder, name))[:200]:
                inner_st = _readable_stat(host, os.path.join(folder, name, inner))
                if inner_st is not None and inner_st.is_file and _looks_like_log(inner) and other not in inner:
                    self._add(os.path.join(folder, own, inner), inner_st.mtime, f"{name}/{inner}")

    def _add(self, expected: str, mtime: float, shown: str) -> None:
        self.expected.setdefault(expected, []).append((mtime, shown))


MAX_INFERRED = 3
NEARBY_IDS = 5000


def _remember_ids(name: str, path: str, nearby: dict[str, str]) -> None:
    """Id-like parts of a name (flex7 of train_flex7.log; the folder name itself), for "did you mean"."""
    if len(nearby) >= NEARBY_IDS:
        return
    stem = name.split(".", 1)[0] if not name.startswith(".") else ""
    for token in {stem, *re.split(r"[_.\-\s]+", stem)}:
        if 2 <= len(token) <= 80 and check_id(token):
            nearby.setdefault(token, path)


def check_id(token: str) -> bool:
    from diagnose.live.runs import RUN_ID

    return bool(RUN_ID.match(token))


def _infer_logs(spec: RunSpec, shaped: _Shaped) -> None:
    """Expected logs from the siblings: the shapes most runs before this one wrote."""
    host = spec.host
    candidates = [(path, sorted(found, reverse=True)) for path, found in shaped.expected.items()
                  if not host.exists(path)]
    candidates.sort(key=lambda item: (-len(item[1]), -item[1][0][0]))
    chosen = candidates[:MAX_INFERRED]
    if not chosen:
        return
    spec.expected_logs = []
    for path, found in chosen:
        names = [shown for _mtime, shown in found[:5]]
        basis = f"{', '.join(names)} differ{'s' if len(names) == 1 else ''} only by the run id"
        spec.expected_logs.append(path)
        spec.expected_siblings[path] = names
        spec.log_sources[path] = ("inferred", basis)
        spec.inferred.append(f"expected log {path}: from its siblings {', '.join(names)}")
        newest = found[0][0]
        if spec.window_hint is None or newest > spec.window_hint[0]:
            spec.window_hint = (newest, f"sibling mtime ({found[0][1]})")


def _checkpoints_beside_logs(spec: RunSpec) -> None:
    """checkpoints/, ckpt/ or an output_dir holding checkpoint-* beside a log the run wrote."""
    host = spec.host
    if spec.checkpoint_dir is not None:
        return
    for log in spec.logs[:5]:
        folder = os.path.dirname(log)
        names = host.listdir(folder)
        for name in CHECKPOINT_DIRS:
            if name in names and _is_dir(host, os.path.join(folder, name)):
                spec.checkpoint_dir = os.path.join(folder, name)
                spec.inferred.append(f"checkpoint dir {spec.checkpoint_dir}: beside the log {os.path.basename(log)}")
                return
        for name in names[:200]:
            path = os.path.join(folder, name)
            if name not in SKIP_DIRS and _is_dir(host, path) and host.glob(os.path.join(glob_escape(path), "checkpoint-*")):
                spec.checkpoint_dir = path
                spec.inferred.append(f"checkpoint dir {path}: holds checkpoint-* beside the log {os.path.basename(log)}")
                return


def _is_dir(host: Host, path: str) -> bool:
    st = _readable_stat(host, path)
    return st is not None and st.is_dir


ELASTIC_SLACK = 600.0  # seconds past the last write an error file may still be the run's


def _elastic_errors_in_window(spec: RunSpec) -> None:
    """torchelastic error files of any rendezvous id (torchrun without --rdzv-id writes none_*)
    written inside the run's window, when none is named after the run."""
    host = spec.host
    start, end = spec.started_at, spec.last_activity
    if spec.error_files or start is None or end is None or not spec.logs:
        return
    tmp = host.environ().get("TMPDIR") or "/tmp"
    for path in host.glob(os.path.join(tmp, "torchelastic_*", "*", "attempt_*", "*", "error.json"))[:200]:
        st = _readable_stat(host, path)
        if st is not None and st.is_file and start - 60 <= st.mtime <= end + ELASTIC_SLACK:
            spec.error_files.append(path)
            spec.inferred.append(f"torchelastic error file {path}: written inside the run's window")
            if spec.launcher is None:
                spec.launcher, spec.launcher_source = "torchrun", "torchelastic error file inside the run's window"


def _readable_stat(host: Host, path: str) -> FileStat | None:
    """host.stat, with a file we may not stat treated like one that is not there."""
    try:
        return host.stat(path)
    except PermissionError:
        return None


def _is_file(host: Host, path: str) -> bool:
    try:
        st = host.stat(path)
    except PermissionError:
        return True  # it is there; the logs collector reports that it cannot be read
    return st is not None and st.is_file


def _looks_like_log(name: str) -> bool:
    from diagnose.evidence.sniff import SKIP_SUFFIXES, base_name

    base = base_name(Path(name))
    suffix = Path(base).suffix
    if suffix in SKIP_SUFFIXES or suffix == ".json":
        return False
    return suffix in LOG_SUFFIXES or not re.fullmatch(r"\.[a-z]{1,5}", suffix)


def _is_bundle_dir(host: Host, path: str) -> bool:
    return "manifest.json" in host.listdir(path)


def _discover(spec: RunSpec, search: Sequence[str], wandb_dir: str | None, want_logs: bool, want_checkpoints: bool) -> None:
    host = spec.host
    named = run_name_pattern(spec.id)
    seen_logs = set(spec.logs)
    walked = 0

    def add_log(path: str) -> None:
        if path not in seen_logs:
            seen_logs.add(path)
            spec.logs.append(path)

    def take_run_folder(folder: str) -> None:
        """Everything of a folder named after the run: logs (ranks too), error files, checkpoints."""
        nonlocal walked
        if _is_bundle_dir(host, folder):
            spec.notes.append(f"{folder} looks like a saved bundle; diagnose it with `diagnose {folder}`")
            return
        if _is_wandb_run(host, folder):
            _take_wandb(spec, folder, add_log if want_logs else None)
            return
        for name in host.listdir(folder):
            if want_checkpoints and name in CHECKPOINT_DIRS and spec.checkpoint_dir is None:
                spec.checkpoint_dir = os.path.join(folder, name)
        for path, _st in host.walk(folder, 5000):
            relative = os.path.relpath(path, folder)
            if any(part in CHECKPOINT_DIRS or part.startswith(".") for part in relative.split(os.sep)[:-1]):
                continue
            base = os.path.basename(path)
            if base == "error.json" or (base.endswith(".json") and "error" in base):
                if path not in spec.error_files:
                    spec.error_files.append(path)
            elif want_logs and _looks_like_log(base):
                add_log(path)

    shaped = _Shaped(spec.id)
    for top in search:
        spec.looked.append(f"{top} (names containing '{spec.id}', {WALK_DEPTH} levels deep)")
        stack: list[tuple[str, int]] = [(top, 0)]
        while stack and walked < WALK_LIMIT:
            folder, depth = stack.pop()
            for name in host.listdir(folder):
                walked += 1
                path = os.path.join(folder, name)
                st = _readable_stat(host, path)
                if st is None:
                    continue
                shaped.see(host, folder, name, st, spec.nearby_ids)
                if st.is_dir:
                    if name in SKIP_DIRS or name.startswith(".") or "pyvenv.cfg" in host.listdir(path):
                        continue
                    if named.search(name):
                        take_run_folder(path)
                    elif depth + 1 < WALK_DEPTH:
                        stack.append((path, depth + 1))
                    if want_checkpoints and spec.checkpoint_dir is None and name in CHECKPOINT_DIRS:
                        sub = os.path.join(path, spec.id)
                        sub_st = host.stat(sub)
                        if sub_st is not None and sub_st.is_dir:
                            spec.checkpoint_dir = sub
                elif st.is_file and want_logs and named.search(name) and _looks_like_log(name):
                    add_log(path)
        if walked >= WALK_LIMIT:
            spec.notes.append(f"stopped looking after {WALK_LIMIT} entries under {top}")
        # wandb keeps runs in wandb/run-<date>-<id> (offline-run-... offline)
        for wandb in ([absolute_path(wandb_dir, spec.workdir)] if wandb_dir else [os.path.join(top, "wandb")]):
            spec.looked.append(f"{wandb}/*-{spec.id}")
            for folder in host.glob(os.path.join(wandb, f"*-{glob_escape(spec.id)}")):
                if folder not in spec.wandb_dirs and _is_wandb_run(host, folder):
                    _take_wandb(spec, folder, add_log if want_logs else None)
    if want_logs and not spec.logs:
        _infer_logs(spec, shaped)  # nothing named after the run: what its siblings say it would have written
    tmp = host.environ().get("TMPDIR") or "/tmp"
    pattern = os.path.join(tmp, "torchelastic_*", f"{glob_escape(spec.id)}_*")
    spec.looked.append(f"{pattern}/attempt_*/<rank>/error.json")
    for folder in host.glob(pattern):
        for path in host.glob(os.path.join(folder, "attempt_*", "*", "*")):
            base = os.path.basename(path)
            if base == "error.json" and path not in spec.error_files:
                spec.error_files.append(path)
            elif want_logs and base in ("stdout.log", "stderr.log"):
                add_log(path)
        if spec.launcher is None:
            spec.launcher, spec.launcher_source = "torchrun", f"torchelastic folder {folder}"


def _is_wandb_run(host: Host, folder: str) -> bool:
    """wandb/run-<date>-<id>/ (offline-run-... offline): a files/ folder of what the run wrote."""
    files = set(host.listdir(os.path.join(folder, "files")))
    name = os.path.basename(folder)
    shaped = name.startswith(("run-", "offline-run-")) or os.path.basename(os.path.dirname(folder)) == "wandb"
    return bool(files & {"output.log", "requirements.txt", "wandb-metadata.json", "config.yaml"}) and shaped


def _take_wandb(spec: RunSpec, folder: str, add_log: Any) -> None:
    host = spec.host
    if folder in spec.wandb_dirs:
        return
    spec.wandb_dirs.append(folder)
    files = os.path.join(folder, "files")
    if add_log is not None and _is_file(host, os.path.join(files, "output.log")):
        add_log(os.path.join(files, "output.log"))
    if _is_file(host, os.path.join(files, "requirements.txt")):
        spec.requirements.append(os.path.join(files, "requirements.txt"))
    try:
        meta = json.loads(host.read_bytes(os.path.join(files, "wandb-metadata.json"), 1024 * 1024))
    except (OSError, ValueError):
        return
    if not isinstance(meta, dict):
        return
    started = meta.get("startedAt")
    if isinstance(started, str):
        from datetime import datetime, timezone

        try:
            moment = datetime.fromisoformat(started.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=timezone.utc)  # wandb writes UTC
            stamp = moment.timestamp()
            spec.started_at = stamp if spec.started_at is None else min(spec.started_at, stamp)
        except ValueError:
            pass
    # A file in the searched folders can say anything: its interpreter is a fact to report,
    # never a program to run (a planted one ran as root).
    executable = meta.get("executable")
    if spec.wandb_python is None and isinstance(executable, str) and executable:
        spec.wandb_python, spec.wandb_python_source = executable, f"{files}/wandb-metadata.json executable"


def _times(spec: RunSpec) -> None:
    """When the run started (first timestamp in its logs, wandb, error files) and last wrote."""
    from diagnose.evidence.lines import log_time

    host = spec.host
    for path in spec.logs[:50] + spec.error_files[:50]:
        st = _readable_stat(host, path)
        if st is None:
            continue
        spec.last_activity = st.mtime if spec.last_activity is None else max(spec.last_activity, st.mtime)
        try:
            head = host.read_bytes(path, 64 * 1024)
        except OSError:
            continue
        year = time.localtime(st.mtime).tm_year
        for line in head.decode("utf-8", errors="replace").splitlines()[:400]:
            moment = log_time(line, year)
            if moment is not None:
                spec.started_at = moment if spec.started_at is None else min(spec.started_at, moment)
                break
