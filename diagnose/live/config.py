"""diagnose.toml: where it is, and what it says (every problem as `file:line: ...`, exit 2).

Only light standard-library imports here: every command asks where the config is, and
`diagnose scan` of a small log must start fast (tomllib loads only when a file is read).

Config (TOML): `--config FILE`, else the nearest `diagnose.toml` or `pyproject.toml` with a
`[tool.diagnose]` table in the working directory or a folder above it (as ruff and pytest look),
else `~/.config/diagnose/config.toml` ($XDG_CONFIG_HOME respected). A found file is used only
when it is owned by this user (or root) and neither it nor its folder may be written by others:
a config names programs to run (the run's interpreter), so one planted in /tmp or a shared
folder is passed over. Strings in [run] / [runs."<id or pattern>"] are templates: {run}
(the RUN_ID), {home}, {user}, {host}.

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
    [host]                            # the runs live on another machine (--host/--exec override)
    target = "root@10.1.2.6"          # [USER@]HOST[:PORT], or an alias of ~/.ssh/config
    exec = "pct exec 200 --"          # a prefix every command there runs behind (docker exec -i C, sudo -u U)
    ssh_options = ["IdentityFile=~/.ssh/lab"]   # as ssh -o KEY=VALUE
    ssh_config = "~/.ssh/lab_config"  # as ssh -F FILE
    connect_timeout = 10              # seconds
    scan_timeout = 300                # seconds the remote search of the logs may take
"""

from __future__ import annotations

import fnmatch
import os
import re
import string
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.errors import ConfigError

CONFIG_NAME = "diagnose.toml"
PYPROJECT = "pyproject.toml"
TOOL_TABLE = "tool.diagnose"  # the table of pyproject.toml diagnose reads
MAX_PARENTS = 64  # folders walked up from the working directory


def default_config_path(cwd: Path | None = None) -> Path | None:
    """The nearest diagnose.toml, or pyproject.toml with [tool.diagnose], in the working directory
    or above; else $XDG_CONFIG_HOME (or ~/.config)/diagnose/config.toml; else None."""
    start = (cwd or Path.cwd()).absolute()
    for folder in [start, *start.parents][:MAX_PARENTS]:
        for name in (CONFIG_NAME, PYPROJECT):
            candidate = folder / name
            if _usable(candidate) and (name == CONFIG_NAME or _has_tool_table(candidate)):
                return candidate
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    user = Path(base) / "diagnose" / "config.toml"
    return user if _usable(user, trusted_folder=True) else None


def _usable(candidate: Path, trusted_folder: bool = False) -> bool:
    """A regular file owned by us or root that nobody else may change (nor its folder)."""
    import stat

    try:
        st = candidate.stat()
        if not stat.S_ISREG(st.st_mode):
            return False
        folder = candidate.parent.stat()
    except OSError:  # a home we may not look into (HOME of another user) has no config for us
        return False
    owners = {0, os.getuid()} if hasattr(os, "getuid") else {st.st_uid}
    if st.st_uid not in owners or st.st_mode & 0o022:
        return False
    return trusted_folder or not folder.st_mode & 0o002


def _has_tool_table(path: Path) -> bool:
    """Whether a pyproject.toml has a [tool.diagnose] table: a text search first (most have none,
    and parsing TOML on every start costs), then the parsed file decides."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    if "diagnose" not in text:
        return False
    try:
        data = _toml_loads(text)
    except ValueError:
        return "[tool.diagnose" in text  # broken: load_config then says where
    tool = data.get("tool")
    return isinstance(tool, dict) and "diagnose" in tool


TEMPLATE_FIELDS = ("run", "home", "user", "host")


TOP_KEYS = ("rules", "collect", "run", "runs", "host")


HOST_KEYS = ("target", "exec", "ssh_options", "ssh_config", "connect_timeout", "scan_timeout")


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


DEFAULT_TIMEOUT = 10.0


DEFAULT_BUDGET = 30.0




@dataclass
class Config:
    rule_dirs: list[Path] = field(default_factory=list)
    path: Path | None = None
    defaults: dict[str, Any] = field(default_factory=dict)  # [run]
    runs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # [runs."pattern"], in file order
    timeout: float | None = None
    budget: float = DEFAULT_BUDGET
    skip: tuple[str, ...] = ()
    host: dict[str, Any] = field(default_factory=dict)  # [host]: where remote runs live (live/ssh.py)

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
    """Finds the line a key was written on (tomllib gives values, not positions). prefix: the
    table the config lives in ("tool.diagnose" in pyproject.toml); other tables are not ours."""

    def __init__(self, text: str, prefix: str | None = None) -> None:
        self.lines = text.splitlines()
        self.prefix = prefix

    def _ours(self, header: str) -> str | None:
        """A table header as a table of the config: None for its top level, "<other>" for a table
        that is not the config's."""
        if self.prefix is None:
            return header
        if header == self.prefix:
            return None
        if header.startswith(self.prefix + "."):
            return header[len(self.prefix) + 1:]
        return "<other>"

    def of(self, table: str | None, key: str | None = None) -> int:
        current: str | None = None if self.prefix is None else "<other>"  # keys above the first table
        table_line = 1
        for number, raw in enumerate(self.lines, 1):
            line = raw.strip()
            header = re.match(r"^\[\s*([^\[\]]+?)\s*\]$", line)
            if header:
                current = self._ours(re.sub(r"\s*\.\s*", ".", header.group(1)).replace('"', "").replace("'", ""))
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
    if path.name == PYPROJECT:
        tool = data.get("tool")
        table = tool.get("diagnose") if isinstance(tool, dict) else None
        if table is None:
            raise ConfigError(f"{path}: no [{TOOL_TABLE}] table in it")
        if not isinstance(table, dict):
            raise ConfigError(f"{path}:{_Lines(text).of(None, 'tool')}: {TOOL_TABLE} must be a table")
        return parse_config(table, path, _Lines(text, TOOL_TABLE))
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
    if "host" in data:
        config.host = _host_table(data["host"], path, lines)
    runs = data.get("runs", {})
    if not isinstance(runs, dict):
        raise ConfigError(f"{_where(path, lines, None, 'runs')}: runs must hold tables like [runs.\"flex*\"]")
    for pattern, table in runs.items():
        config.runs.append((pattern, _run_table(table, path, lines, f"runs.{pattern}")))
    return config


def _host_table(data: Any, path: Path, lines: _Lines) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError(f"{_where(path, lines, 'host')}: [host] must be a table")
    out: dict[str, Any] = {}
    for key, value in data.items():
        where = _where(path, lines, "host", key)
        if key not in HOST_KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} in [host] (known: {', '.join(HOST_KEYS)})")
        if key in ("target", "ssh_config"):
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{where}: {key} in [host] must be a non-empty string")
            out[key] = os.path.expanduser(value) if key == "ssh_config" else value
        elif key == "exec":
            if isinstance(value, str):
                import shlex

                try:
                    out[key] = shlex.split(value)
                except ValueError as exc:
                    raise ConfigError(f"{where}: exec in [host]: {exc}") from None
            elif isinstance(value, list) and all(isinstance(v, str) and v for v in value):
                out[key] = list(value)
            else:
                raise ConfigError(f"{where}: exec in [host] must be a string or a list of strings")
        elif key == "ssh_options":
            if not isinstance(value, list) or not all(isinstance(v, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*=[^\n\r\0]*", v)
                                                       for v in value):
                raise ConfigError(f"{where}: ssh_options in [host] must be a list of \"Key=Value\" strings (as for ssh -o)")
            out[key] = list(value)  # ssh expands ~ in the options that take paths
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{where}: {key} in [host] must be a positive number of seconds")
            out[key] = float(value)
    return out
