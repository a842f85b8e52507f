"""Package versions of the run's own environment (never diagnose's own), without ever running
a program that the evidence names.

Run, only an interpreter that is the run's own: the config's `python`/`venv` (the user named
it), else the interpreter of a live process of the run (its /proc/PID/exe), and that one only
when nobody but us or root can change the file or a folder above it. Always `-I -S`: no .pth
file, sitecustomize, PYTHONPATH or user site of the environment runs; the snippet finds the
site-packages folders the way site.py would and lists them with importlib.metadata.

Read, never run, what files in the searched folders point at: wandb's requirements.txt of the
run; the *.dist-info/METADATA (name and version) of the environment beside a traceback's
site-packages path, of the `executable` wandb recorded, or of a .venv/venv in the run's
directory. The wandb executable is still reported, as a fact ("wandb recorded interpreter X").
A planted wandb-metadata.json or .venv/bin/python used to run as whoever ran diagnose (root).
"""

from __future__ import annotations

import json
import os
import re
import stat

from diagnose.evidence.model import FileKind
from diagnose.live.collectors.base import Captured, Context, Output, display_path
from diagnose.live.hosts import ProcessInfo

# Runs in the run's interpreter under -I -S; JSON like `pip list --format=json`.
SNIPPET = (
    "import json, os, site, sys, importlib.metadata as m\n"
    "exe_dir = os.path.dirname(os.path.abspath(sys.executable))\n"
    "venv = next((d for d in (exe_dir, os.path.dirname(exe_dir)) if os.path.isfile(os.path.join(d, 'pyvenv.cfg'))), None)\n"
    "paths = []\n"
    "if venv is not None:\n"
    "    with open(os.path.join(venv, 'pyvenv.cfg')) as cfg:\n"
    "        text = cfg.read().lower()\n"
    "    paths = site.getsitepackages([os.path.dirname(exe_dir)])\n"
    "    if 'include-system-site-packages = true' in text:\n"
    "        paths += site.getsitepackages()\n"
    "else:\n"
    "    paths = site.getsitepackages()\n"
    "for top in list(paths):\n"  # .pth path lines, as site adds them; import lines are code: skipped
    "    try:\n"
    "        names = sorted(n for n in os.listdir(top) if n.endswith('.pth'))\n"
    "    except OSError:\n"
    "        continue\n"
    "    for name in names:\n"
    "        try:\n"
    "            with open(os.path.join(top, name)) as pth:\n"
    "                for line in pth:\n"
    "                    line = line.rstrip()\n"
    "                    if line and not line.startswith(('#', 'import ', 'import\\t')):\n"
    "                        extra = os.path.join(top, line)\n"
    "                        if os.path.isdir(extra) and extra not in paths:\n"
    "                            paths.append(extra)\n"
    "        except (OSError, UnicodeDecodeError):\n"
    "            pass\n"
    "seen = {}\n"
    "for d in m.distributions(path=[p for p in paths if os.path.isdir(p)]):\n"
    "    name = d.metadata['Name']\n"
    "    if name and name.lower() not in seen:\n"
    "        seen[name.lower()] = {'name': name, 'version': d.version}\n"
    "print(json.dumps(sorted(seen.values(), key=lambda e: e['name'].lower())))\n"
)
_PYTHON = re.compile(r"^python[0-9.]*$")
# A traceback's frame in an installed package: File "/x/env/lib/python3.11/site-packages/torch/...".
_SITE_PACKAGES = re.compile(rb"(/[^\s\"'<>:]*/(?:site|dist)-packages)/")
LOG_TAIL = 2 * 1024 * 1024
MAX_DISTS = 5000


def collect(ctx: Context) -> Output:
    spec = ctx.spec
    problems: list[str] = []
    notes: list[str] = []
    if spec.wandb_python:
        notes.append(f"wandb recorded interpreter {spec.wandb_python} ({spec.wandb_python_source}); "
                     "not run: diagnose never runs a program named by a file in the searched folders")
    run_info = {"wandb_python": spec.wandb_python} if spec.wandb_python else {}

    python, source = _trusted_interpreter(ctx, problems)
    if python is not None:
        listed = _ask(ctx, python, source, problems)
        if listed is not None:
            listed.notes.extend(notes)
            listed.run.update(run_info)
            return listed

    if spec.requirements:
        requirements = spec.requirements[0]
        try:
            st = ctx.host.stat(requirements)
        except PermissionError:
            st = None
        if st is not None and st.is_file:
            out = Output(files=[Captured(FileKind.PACKAGES, "env/requirements.txt", ctx.host.local_path(requirements),
                                         display_path(requirements, ctx.host.local), None, st.mtime, st.size)], run=run_info)
            out.notes.extend(notes)
            out.notes.append("package versions from wandb's requirements.txt" + (": " + "; ".join(problems) if problems else ""))
            return out

    for folder, why in _environments(ctx):
        if ctx.remaining() <= 0:
            problems.append("no time left to read installed packages")
            break
        listing = _read_dist_info(ctx, folder)
        if listing:
            path = ctx.save("packages.json", json.dumps(listing, indent=0).encode())
            out = Output(files=[Captured(FileKind.PACKAGES, "env/packages.json", path, f"{folder} (dist-info, {why})",
                                         None, None, path.stat().st_size)], run=run_info)
            out.notes.extend(notes)
            return out
    if spec.wandb_python:
        problems.append(f"wandb recorded interpreter {spec.wandb_python}, not run; no installed packages readable beside it")
    elif python is None and not problems:
        problems.append("the run's Python interpreter is not known (set python or venv in diagnose.toml)")
    timed_out = any("timed out" in p for p in problems)
    return Output(status="timeout" if timed_out else "gap", reason="; ".join(problems), notes=notes, run=run_info)


# ---------------------------------------------------------------- running the run's own interpreter


def _trusted_interpreter(ctx: Context, problems: list[str]) -> tuple[str | None, str]:
    spec = ctx.spec
    if spec.python:
        if "/" in spec.python and not ctx.host.exists(spec.python):
            problems.append(f"the run's interpreter {spec.python} ({spec.python_source}) does not exist")
            return None, ""
        return spec.python, spec.python_source
    if not ctx.host.local:
        return None, ""  # the checks below need this machine's file system
    from diagnose.live.collectors.process import run_processes

    try:
        _how, procs = run_processes(spec, ctx.host)
    except OSError:
        return None, ""
    for proc in procs:
        python = _live_python(proc)
        if python is None:
            continue
        if not _only_we_can_change(python):
            problems.append(f"not running {python} (pid {proc.pid}): a user other than us or root can change it")
            continue
        return python, f"interpreter of the run's process {proc.pid}"
    return None, ""


def _live_python(proc: ProcessInfo) -> str | None:
    """The path the process's Python was started by (a venv's bin/python keeps the venv), when
    it is the very binary /proc/PID/exe shows; else that binary itself."""
    exe = proc.exe
    if not exe or not _PYTHON.match(os.path.basename(exe)) or not os.path.isabs(exe):
        return None
    argv0 = proc.cmdline[0] if proc.cmdline else ""
    if os.path.isabs(argv0) and os.path.realpath(argv0) == exe:
        return argv0
    return exe


def _only_we_can_change(path: str) -> bool:
    """Whether only we or root can change what `path` runs: the file, each folder above it, and
    the same for where its links lead. A sticky folder others may write (/tmp) is fine above an
    entry of ours: they can add names there, not replace ours."""
    me = os.geteuid()
    for chain in (os.path.abspath(path), os.path.realpath(path)):
        current = chain
        below_is_ours = False  # the entry just below `current` is ours or root's (checked)
        while True:
            try:
                st = os.lstat(current)
            except OSError:
                return False
            if st.st_uid not in (0, me):
                return False
            others_may_write = not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            sticky_above_ours = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and below_is_ours
            if others_may_write and not sticky_above_ours:
                return False
            below_is_ours = True
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return True


def _ask(ctx: Context, python: str, source: str, problems: list[str]) -> Output | None:
    if ctx.remaining() <= 0:
        problems.append("importlib.metadata: no time left")
        return None
    env: dict[str, str | None] = {"PYTHONPATH": None, "PYTHONHOME": None, "PYTHONSTARTUP": None}
    result = ctx.run([python, "-I", "-S", "-c", SNIPPET], env=env)
    if not result.ok:
        problems.append(result.failure())
        return None
    try:
        listing = json.loads(result.out)
    except ValueError:
        problems.append(f"{python} -c (importlib.metadata) printed no JSON")
        return None
    if not isinstance(listing, list):
        problems.append(f"{python} -c (importlib.metadata) printed no list")
        return None
    path = ctx.save("packages.json", json.dumps(listing, indent=0).encode())
    return Output(files=[Captured(FileKind.PACKAGES, "env/packages.json", path, f"{python} (importlib.metadata)", None, None,
                                  path.stat().st_size)], run={"python": python, "python_source": source})


# ---------------------------------------------------------------- reading an environment's files


def _environments(ctx: Context) -> list[tuple[str, str]]:
    """site-packages folders to read, best first, each with why it is the run's."""
    spec = ctx.spec
    host = ctx.host
    found: dict[str, str] = {}
    counts: dict[str, int] = {}
    for log in spec.logs[:20]:
        try:
            st = host.stat(log)
            if st is None or not st.is_file:
                continue
            tail = host.read_bytes(log, LOG_TAIL, -LOG_TAIL)
        except OSError:
            continue
        for match in _SITE_PACKAGES.finditer(tail):
            folder = match.group(1).decode("utf-8", errors="replace")
            counts[folder] = counts.get(folder, 0) + 1
    for folder in sorted(counts, key=lambda f: -counts[f]):
        found.setdefault(folder, "named by a traceback in the run's log")
    prefixes: list[tuple[str, str]] = []
    if spec.python and os.path.isabs(spec.python):  # configured, but it would not answer (too old, broken)
        prefixes.append((os.path.dirname(os.path.dirname(spec.python)), f"environment of the {spec.python_source}"))
    if spec.wandb_python and os.path.isabs(spec.wandb_python):
        prefixes.append((os.path.dirname(os.path.dirname(spec.wandb_python)), "environment of the interpreter wandb recorded"))
    if spec.record_python and os.path.isabs(spec.record_python):  # found on PATH at launch: read beside, never run
        prefixes.append((os.path.dirname(os.path.dirname(spec.record_python)), "environment of the interpreter the launch record names"))
    if spec.workdir:
        prefixes += [(os.path.join(spec.workdir, name), f"{name} in the run's directory") for name in (".venv", "venv")]
    for prefix, why in prefixes:
        for pattern in ("lib/python*/site-packages", "lib64/python*/site-packages", "lib/python3*/dist-packages"):
            for folder in host.glob(os.path.join(glob_escape(prefix), pattern)):
                found.setdefault(folder, why)
    return [(folder, why) for folder, why in found.items() if _is_dir(ctx, folder)]


def _is_dir(ctx: Context, path: str) -> bool:
    try:
        st = ctx.host.stat(path)
    except PermissionError:
        return False
    return st is not None and st.is_dir


def _read_dist_info(ctx: Context, folder: str) -> list[dict[str, str]]:
    """Name and version of each *.dist-info (or *.egg-info) in a site-packages folder."""
    host = ctx.host
    seen: dict[str, dict[str, str]] = {}
    names = sorted(n for n in host.listdir(folder) if n.endswith((".dist-info", ".egg-info")))[:MAX_DISTS]
    # All METADATA files in one go (one command on a remote host), then PKG-INFO where there was none;
    # read_heads opens regular files only, never a FIFO or device planted as METADATA.
    heads = host.read_heads([os.path.join(folder, name, "METADATA") for name in names], 8192)
    rest = [name for name in names if os.path.join(folder, name, "METADATA") not in heads]
    if rest and ctx.remaining() > 0:
        heads.update(host.read_heads([os.path.join(folder, name, "PKG-INFO") for name in rest], 8192))
    for name in names:
        head = heads.get(os.path.join(folder, name, "METADATA"), heads.get(os.path.join(folder, name, "PKG-INFO")))
        if head is None:
            continue
        dist, version = _headers(head.decode("utf-8", errors="replace"))
        if dist and version and dist.lower() not in seen:
            seen[dist.lower()] = {"name": dist, "version": version}
    return sorted(seen.values(), key=lambda e: e["name"].lower())


def _headers(text: str) -> tuple[str | None, str | None]:
    name = version = None
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first blank line
        if line.startswith("Name:") and name is None:
            name = line[5:].strip() or None
        elif line.startswith("Version:") and version is None:
            version = line[8:].strip() or None
    return name, version


def glob_escape(text: str) -> str:
    import glob

    return glob.escape(text)
