"""What a RUN_ID means on this machine: config + discovery -> a RunSpec (where its evidence lives).

Config (TOML): `--config FILE`, else `./diagnose.toml`, else `~/.config/diagnose/config.toml`
($XDG_CONFIG_HOME respected). Every problem is one line `file:line: ...` and exit 2. Strings in
[run] / [runs."<id or pattern>"] are templates: {run} (the RUN_ID), {home}, {user}, {host}.

    rules = ["my-rules"]              # extra rule folders, relative to the config file
    [collect]
    timeout = 10                      # seconds each collector may take
    budget = 30                       # seconds for all of them together
    skip = ["gpu"]                    # collectors not to run
    [run]                             # applies to every run
    dir = "/workspace"                # the run's working directory (relative paths start here)
    logs = ["logs/{run}.log", "logs/{run}/rank*.log"]
    checkpoints = "ckpt/{run}"
    tmux_session = "{run}"            # tmux_socket = "/path" (-S) or tmux_socket_name = "x" (-L)
    python = "/opt/venvs/{run}/bin/python"   # or venv = "/opt/venvs/{run}"
    [runs."flex*"]                    # overrides for matching run ids (first match wins)
    dir = "/data/flex"

Without config (or for what it leaves out) the run is discovered: files and folders named
after the run under the working directory or --dir, wandb run folders (wandb/*-<id>/files/),
torchelastic error files (/tmp/torchelastic_*/<id>_*/attempt_*/<rank>/error.json). A log the
config names that does not exist is evidence (the launch never started), not an error.
"""

from __future__ import annotations

import fnmatch
import getpass
import json
import os
import re
import socket
import string
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.configfile import default_config_path
from diagnose.errors import ConfigError, DiagnoseError
from diagnose.evidence import Evidence
from diagnose.hosts import FileStat, Host, LocalHost

TEMPLATE_FIELDS = ("run", "home", "user", "host")
TOP_KEYS = ("rules", "collect", "run", "runs")
COLLECT_KEYS = ("timeout", "budget", "skip")
COLLECTOR_NAMES = ("logs", "dmesg", "checkpoints", "tmux", "packages", "gpu", "process")
# run keys: name -> (kind, template?) ; kind "str" or "list" (a string is taken as a one-item list)
RUN_KEYS: dict[str, tuple[str, bool]] = {
    "dir": ("str", True),
    "logs": ("list", True),
    "checkpoints": ("str", True),
    "tmux_session": ("str", True),
    "tmux_socket": ("str", True),
    "tmux_socket_name": ("str", True),
    "python": ("str", True),
    "venv": ("str", True),
    "pid_file": ("str", True),
    "match": ("str", True),
    "error_files": ("list", True),
    "wandb_dir": ("str", True),
    "kernel_logs": ("list", True),
    "launcher": ("str", False),
}
RUN_ID = re.compile(r"^[A-Za-z0-9_.@+=:-]+$")
DEFAULT_TIMEOUT = 10.0
DEFAULT_BUDGET = 30.0
WALK_DEPTH = 3
WALK_LIMIT = 20000
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".stdout", ".stderr", "")
SKIP_DIRS = {".git", "node_modules", "__pycache__", "site-packages", ".venv", "venv", ".tox", ".mypy_cache"}
CHECKPOINT_DIRS = ("checkpoints", "checkpoint", "ckpt", "ckpts")


# ---------------------------------------------------------------- config


@dataclass
class Config:
    rule_dirs: list[Path] = field(default_factory=list)
    path: Path | None = None
    defaults: dict[str, Any] = field(default_factory=dict)  # [run]
    runs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # [runs."pattern"], in file order
    timeout: float | None = None
    budget: float = DEFAULT_BUDGET
    skip: tuple[str, ...] = ()

    def for_run(self, run_id: str) -> tuple[dict[str, Any], str | None]:
        """The run's settings ([run] overlaid with the first matching [runs.X]) and which section matched."""
        merged = dict(self.defaults)
        for pattern, settings in self.runs:
            if pattern == run_id or fnmatch.fnmatchcase(run_id, pattern):
                merged.update(settings)
                return merged, pattern
        return merged, None


def _toml_loads(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
    result: dict[str, Any] = tomllib.loads(text)
    return result


class _Lines:
    """Finds the line a key was written on (tomllib gives values, not positions)."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def of(self, table: str | None, key: str | None = None) -> int:
        current: str | None = None
        table_line = 1
        for number, raw in enumerate(self.lines, 1):
            line = raw.strip()
            header = re.match(r"^\[\s*([^\[\]]+?)\s*\]$", line)
            if header:
                current = re.sub(r"\s*\.\s*", ".", header.group(1)).replace('"', "").replace("'", "")
                if key is None and current == table:
                    return number
                if current == table:
                    table_line = number
                continue
            if key is not None and current == table:
                match = re.match(r'^["\']?([A-Za-z0-9_.-]+)["\']?\s*=', line)
                if match and match.group(1) == key:
                    return number
        return table_line


def load_config(path: Path | None, cwd: Path | None = None) -> Config:
    """The config from --config PATH, ./diagnose.toml or the user's config; defaults when none."""
    if path is None:
        path = default_config_path(cwd)
        if path is None:
            return Config()
    elif not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config ({exc})") from None
    try:
        data = _toml_loads(text)
    except ValueError as exc:  # tomllib.TOMLDecodeError: "... (at line 3, column 5)"
        message = str(exc)
        match = re.search(r"\(at line (\d+), column \d+\)", message)
        line = match.group(1) if match else "1"
        raise ConfigError(f"{path}:{line}: invalid TOML: {re.sub(r' *[(]at line.*[)]', '', message)}") from None
    return parse_config(data, path, _Lines(text))


def _where(path: Path, lines: _Lines, table: str | None, key: str | None = None) -> str:
    return f"{path}:{lines.of(table, key)}"


def check_template(value: str) -> str | None:
    """None when the template is fine, else what is wrong with it."""
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as exc:
        return f"bad template {value!r}: {exc} (write a literal brace as {{{{ or }}}})"
    for _literal, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in TEMPLATE_FIELDS:
            known = ", ".join("{" + f + "}" for f in TEMPLATE_FIELDS)
            return f"bad template {value!r}: unknown field {{{name}}} (known: {known})"
        if spec or conversion:
            return f"bad template {value!r}: {{{name}}} takes no format spec or conversion"
    return None


def _run_table(data: Any, path: Path, lines: _Lines, table: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError(f"{_where(path, lines, table)}: [{table}] must be a table")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in RUN_KEYS:
            raise ConfigError(f"{_where(path, lines, table, key)}: unknown key {key!r} in [{table}] "
                              f"(known: {', '.join(RUN_KEYS)})")
        kind, is_template = RUN_KEYS[key]
        values: list[Any] = [value] if kind == "list" and isinstance(value, str) else value if kind == "list" else [value]
        if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
            wanted = "a string or a list of strings" if kind == "list" else "a string"
            raise ConfigError(f"{_where(path, lines, table, key)}: {key} in [{table}] must be {wanted}")
        if is_template:
            for item in values:
                problem = check_template(item)
                if problem:
                    raise ConfigError(f"{_where(path, lines, table, key)}: {key}: {problem}")
        out[key] = values if kind == "list" else values[0]
    return out


def parse_config(data: Mapping[str, Any], path: Path, lines: _Lines | None = None) -> Config:
    lines = lines or _Lines("")
    config = Config(path=path)
    for key in data:
        if key not in TOP_KEYS:
            raise ConfigError(f"{_where(path, lines, key if isinstance(data[key], dict) else None, None if isinstance(data[key], dict) else key)}: "
                              f"unknown key {key!r} (known: {', '.join(TOP_KEYS)})")
    rules = data.get("rules", [])
    if isinstance(rules, str):
        rules = [rules]
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise ConfigError(f"{_where(path, lines, None, 'rules')}: rules must be a list of folders")
    config.rule_dirs = [(path.parent / os.path.expanduser(r)).resolve() for r in rules]
    collect = data.get("collect", {})
    if not isinstance(collect, dict):
        raise ConfigError(f"{_where(path, lines, None, 'collect')}: collect must be a table")
    for key, value in collect.items():
        where = _where(path, lines, "collect", key)
        if key not in COLLECT_KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} in [collect] (known: {', '.join(COLLECT_KEYS)})")
        if key in ("timeout", "budget"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{where}: {key} must be a positive number of seconds")
            setattr(config, key, float(value))
        else:
            if not isinstance(value, list) or not all(v in COLLECTOR_NAMES for v in value):
                raise ConfigError(f"{where}: skip must be a list of collector names ({', '.join(COLLECTOR_NAMES)})")
            config.skip = tuple(value)
    if "run" in data:
        config.defaults = _run_table(data["run"], path, lines, "run")
    runs = data.get("runs", {})
    if not isinstance(runs, dict):
        raise ConfigError(f"{_where(path, lines, None, 'runs')}: runs must hold tables like [runs.\"flex*\"]")
    for pattern, table in runs.items():
        config.runs.append((pattern, _run_table(table, path, lines, f"runs.{pattern}")))
    return config


# ---------------------------------------------------------------- the run


@dataclass
class RunSpec:
    """Where one run's evidence lives on its host."""

    id: str
    host: Host
    configured: bool  # a config applied (its templates say where things are)
    config_path: str | None = None
    section: str | None = None
    workdir: str | None = None
    logs: list[str] = field(default_factory=list)  # existing log files
    expected_logs: list[str] | None = None  # log templates from the config (rendered), existence checked later
    error_files: list[str] = field(default_factory=list)  # torchelastic error.json
    wandb_dirs: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)  # wandb requirements.txt
    checkpoint_dir: str | None = None
    tmux_session: str | None = None
    tmux_session_guess: str | None = None  # without config: the run id, used only when such a session exists
    tmux_socket: str | None = None
    tmux_socket_name: str | None = None
    python: str | None = None
    python_source: str = ""
    pid_file: str | None = None
    match: str | None = None
    kernel_logs: list[str] = field(default_factory=lambda: ["/var/log/kern.log", "/var/log/messages"])
    launcher: str | None = None
    started_at: float | None = None
    last_activity: float | None = None
    looked: list[str] = field(default_factory=list)  # where discovery looked, for "nothing found"
    notes: list[str] = field(default_factory=list)
    timeout: float | None = None
    budget: float = DEFAULT_BUDGET
    skip: tuple[str, ...] = ()

    def time_window(self) -> tuple[float | None, float | None]:
        """The run's time span for the kernel log: from two minutes before its start (dmesg's
        clock drifts a little from the wall clock) to an hour after its last write (the OOM
        killer strikes after the last line); None = open."""
        start = self.started_at - 120 if self.started_at is not None else None
        end = self.last_activity + 3600 if self.last_activity is not None else None
        return start, end


def render(template: str, values: Mapping[str, str]) -> str:
    return os.path.expanduser(template.format_map(dict(values)))


def _template_values(run_id: str, host: Host) -> dict[str, str]:
    try:
        user = getpass.getuser()
    except Exception:
        user = str(host.uid())
    return {"run": run_id, "home": os.path.expanduser("~"), "user": user, "host": socket.gethostname()}


def check_run_id(run_id: str) -> None:
    if not RUN_ID.match(run_id) or run_id in (".", ".."):
        target = Path(run_id)
        if target.exists():
            raise DiagnoseError(f"{run_id}: not a bundle (no manifest.json) and not a run id; "
                                f"for captured files use `diagnose scan {run_id}`")
        raise DiagnoseError(f"{run_id!r}: not a run id (letters, digits and . _ - @ + = : only) "
                            "and no such bundle")


_GLOB_CHARS = re.compile(r"[*?\[]")


def _absolute(path: str, base: str | None) -> str:
    if os.path.isabs(path) or base is None:
        return os.path.normpath(path)
    return os.path.normpath(os.path.join(base, path))


def resolve(run_id: str, config: Config, search_dirs: Sequence[Path], host: Host | None = None) -> RunSpec:
    """Where the run's things are: the config's templates first, then discovery for the rest."""
    check_run_id(run_id)
    host = host or LocalHost()
    settings, section = config.for_run(run_id)
    values = _template_values(run_id, host)
    rendered: dict[str, Any] = {}
    for key, value in settings.items():
        is_template = RUN_KEYS[key][1]
        if isinstance(value, list):
            rendered[key] = [render(v, values) if is_template else v for v in value]
        else:
            rendered[key] = render(value, values) if is_template else value
    dirs = [str(d.resolve()) for d in search_dirs] or [os.getcwd()]
    base_dir = config.path.parent if config.path else Path.cwd()
    workdir = _absolute(rendered["dir"], str(base_dir)) if "dir" in rendered else (dirs[0] if search_dirs else None)
    spec = RunSpec(
        id=run_id, host=host, configured=bool(settings), config_path=str(config.path) if config.path else None,
        section=section, workdir=workdir, timeout=config.timeout, budget=config.budget, skip=config.skip,
    )
    search = list(dict.fromkeys(([workdir] if workdir and "dir" in rendered else []) + dirs))
    anchor = workdir or str(base_dir)  # relative paths: from the run's dir, else the config's folder

    if "logs" in rendered:
        spec.expected_logs = [_absolute(p, anchor) for p in rendered["logs"]]
        for pattern in spec.expected_logs:
            if _GLOB_CHARS.search(pattern):
                spec.logs.extend(p for p in host.glob(pattern) if _is_file(host, p))
                spec.looked.append(f"{pattern} (config logs)")
            elif _is_file(host, pattern):
                spec.logs.append(pattern)
    if "error_files" in rendered:
        for pattern in rendered["error_files"]:
            spec.error_files.extend(p for p in host.glob(_absolute(pattern, anchor)) if _is_file(host, p))
    if "checkpoints" in rendered:
        spec.checkpoint_dir = _absolute(rendered["checkpoints"], anchor)
    spec.tmux_session = rendered.get("tmux_session")
    spec.tmux_socket = rendered.get("tmux_socket")
    spec.tmux_socket_name = rendered.get("tmux_socket_name")
    if "python" in rendered:
        python = rendered["python"]  # a bare name (python3) is looked up on the host's PATH
        spec.python, spec.python_source = (_absolute(python, anchor) if "/" in python else python), "config python"
    elif "venv" in rendered:
        spec.python, spec.python_source = os.path.join(_absolute(rendered["venv"], anchor), "bin", "python"), "config venv"
    if "pid_file" in rendered:
        spec.pid_file = _absolute(rendered["pid_file"], anchor)
    spec.match = rendered.get("match")
    if "kernel_logs" in rendered:
        spec.kernel_logs = list(rendered["kernel_logs"])
    spec.launcher = rendered.get("launcher")
    if "tmux_session" in rendered and spec.launcher is None:
        spec.launcher = "tmux"

    _discover(spec, search, wandb_dir=rendered.get("wandb_dir"), want_logs="logs" not in rendered,
              want_checkpoints="checkpoints" not in rendered)
    if spec.tmux_session is None:
        spec.tmux_session_guess = run_id
    _times(spec)
    return spec


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


def run_name_pattern(run_id: str) -> re.Pattern[str]:
    """The run id as a whole word in a file name: flex7 matches train_flex7.log, not flex70.log."""
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(run_id) + r"(?![A-Za-z0-9])")


def _looks_like_log(name: str) -> bool:
    from diagnose.sniff import SKIP_SUFFIXES, base_name

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
        for wandb in ([_absolute(wandb_dir, spec.workdir)] if wandb_dir else [os.path.join(top, "wandb")]):
            spec.looked.append(f"{wandb}/*-{spec.id}")
            for folder in host.glob(os.path.join(wandb, f"*-{glob_escape(spec.id)}")):
                if folder not in spec.wandb_dirs and _is_wandb_run(host, folder):
                    _take_wandb(spec, folder, add_log if want_logs else None)
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
        spec.launcher = spec.launcher or "torchrun"


def glob_escape(text: str) -> str:
    import glob

    return glob.escape(text)


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
    executable = meta.get("executable")
    if spec.python is None and isinstance(executable, str) and executable:
        spec.python, spec.python_source = executable, f"{files}/wandb-metadata.json executable"


def _times(spec: RunSpec) -> None:
    """When the run started (first timestamp in its logs, wandb, error files) and last wrote."""
    from diagnose.lineinfo import log_time

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


# ---------------------------------------------------------------- run -> evidence


def found_anything(spec: RunSpec, evidence: Evidence) -> bool:
    """Whether anything of the run exists (without a config, a typo must not look like a crash)."""
    if spec.configured:
        return True
    if spec.logs or spec.error_files or spec.wandb_dirs or spec.checkpoint_dir:
        return True
    if evidence.process is not None and evidence.process.alive:
        return True
    tmux = evidence.tmux
    return tmux is not None and any(s.name == spec.id for s in tmux.sessions)


def nothing_found(spec: RunSpec) -> DiagnoseError:
    looked = "; ".join(spec.looked)
    return DiagnoseError(
        f"{spec.id}: found no files, process or tmux session of this run (looked in: {looked}); "
        "check the run id, pass --dir, or say where its files are in diagnose.toml",
        details=[],
    )


def evidence_for_run(run_id: str, config: Config, search_dirs: list[Path], progress: bool = False) -> Evidence:
    """Collect everything the machine can tell about the run, as Evidence (mode 'live')."""
    from diagnose.collectors import collect_run

    spec = resolve(run_id, config, search_dirs)
    collection = collect_run(spec, progress=progress)
    evidence = collection.evidence()
    if not found_anything(spec, evidence):
        raise nothing_found(spec)
    return evidence


class PendingRun:
    """evidence_for_run in a background thread, so collecting (mostly waiting on tmux, dmesg,
    the run's interpreter and the GPU driver) overlaps with loading and compiling the rules."""

    def __init__(self, run_id: str, config: Config, search_dirs: list[Path], progress: bool = False) -> None:
        import threading

        self._result: Evidence | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, args=(run_id, config, search_dirs, progress),
                                        name="collect", daemon=True)
        self._thread.start()

    def _work(self, run_id: str, config: Config, search_dirs: list[Path], progress: bool) -> None:
        try:
            self._result = evidence_for_run(run_id, config, search_dirs, progress)
        except BaseException as exc:  # handed to the caller of evidence()
            self._error = exc

    def evidence(self) -> Evidence:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def start_run(run_id: str, config: Config, search_dirs: list[Path], progress: bool = False) -> PendingRun:
    return PendingRun(run_id, config, search_dirs, progress)


def collect_bundle(run_id: str, config: Config, search_dirs: list[Path], out: Path, progress: bool = False,
                   raw: bool = False) -> tuple[Path, Any]:
    """`diagnose collect`: the run's evidence written as a bundle, secrets masked unless raw.
    Returns (path, manifest)."""
    from diagnose.bundle import write_bundle
    from diagnose.collectors import collect_run

    spec = resolve(run_id, config, search_dirs)
    collection = collect_run(spec, progress=progress)
    if not found_anything(spec, collection.evidence()):
        raise nothing_found(spec)
    return write_bundle(out, collection.manifest, collection.copies(), raw=raw), collection.manifest
