"""The run's log files (every rank), torchelastic error files, and the logs the config expects.

Nothing here reads a log through: a stat and a 4 KiB head (to tell text from binary and sniff
the kind) per file; the scanner streams them later in chunks. A log the config names that does
not exist is recorded as an expected file (the launch rules read it), with same-shaped
siblings (older runs' logs) beside it.
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

from diagnose.evidence.facts import ExpectedFile
from diagnose.evidence.model import FileKind, Gap
from diagnose.evidence.sniff import rank_from_path, sniff
from diagnose.evidence.textio import HEAD_BYTES, looks_binary, why_unreadable
from diagnose.live.collectors.base import Captured, Context, Output, bundle_name, display_path
from diagnose.live.hosts import FileStat

SIBLINGS = 5
WANDB_FILES = (("logs/debug-internal.log", FileKind.LOG), ("files/wandb-summary.json", FileKind.WANDB_SUMMARY))


def collect(ctx: Context) -> Output:
    spec = ctx.spec
    out = Output()
    for path in spec.logs:
        captured = _file(ctx, path, None, out)
        if captured is not None:
            out.files.append(captured)
    for path in spec.error_files:
        captured = _file(ctx, path, FileKind.ELASTIC_ERROR, out)
        if captured is not None:
            out.files.append(captured)
    for folder in spec.wandb_dirs:
        # wandb's own record of the run: its internal log (why a run stopped syncing, a crash of
        # wandb-core) and the last value of each metric; both go into a bundle like the logs.
        for relative, kind in WANDB_FILES:
            captured = _file(ctx, os.path.join(folder, relative), kind, out)  # None when it is not there
            if captured is not None:
                out.files.append(captured)
    if spec.expected_logs is not None:
        expected = []
        for pattern in spec.expected_logs:
            expected.append(_expected(ctx, pattern))
        out.facts["expected_files"] = expected
    elif spec.logs:
        # Found by name: still the run's logs, so an empty one (a child reaped before it printed,
        # with Python's output still buffered) is a fact the launch rules can read.
        out.facts["expected_files"] = [_expected(ctx, path) for path in spec.logs[:16]]
    if not out.files and not out.gaps:
        if spec.expected_logs:
            out.notes.append("none of the run's expected logs exists: " + ", ".join(spec.expected_logs))
        else:
            out.status, out.reason = "gap", "no log file of the run was found"
    return out


def _file(ctx: Context, path: str, kind: FileKind | None, out: Output) -> Captured | None:
    host = ctx.host
    display = display_path(path, host.local)
    try:
        st = host.stat(path)
        if st is None:
            return None
        if not st.is_file and not st.is_dir:  # a FIFO, socket or device: reading it may never end
            out.notes.append(f"skipped {display}: not a regular file")
            return None
        head = host.read_bytes(path, HEAD_BYTES)
    except PermissionError:
        out.gaps.append(Gap("logs", f"{display}: permission denied"))
        return None
    except OSError as exc:
        out.gaps.append(Gap("logs", f"{display}: {why_unreadable(exc)}"))  # "symlink loop", not a bare errno
        return None
    if kind is None:
        if looks_binary(head) and not path.endswith((".gz", ".bz2", ".xz")):
            out.notes.append(f"skipped {display}: binary file")
            return None
        kind = sniff(Path(path), head) if head else FileKind.LOG
        if kind not in (FileKind.LOG, FileKind.DMESG, FileKind.ELASTIC_ERROR):
            kind = FileKind.LOG  # a log of the run that happens to start like a package list is still its log
    rank = rank_from_path(Path(path))
    if host.local:
        return Captured(kind, bundle_name("logs", path), host.local_path(path), display, rank, st.mtime, st.size)
    return _remote(ctx, path, kind, display, rank, st, out)


def _remote(ctx: Context, path: str, kind: FileKind, display: str, rank: int | None, st: FileStat,
            out: Output) -> Captured | None:
    """A remote log: searched where it is, only candidate lines fetched (remotescan); a small
    file (a torchelastic error file) is fetched whole."""
    from diagnose.live.remotehost import SshHost
    from diagnose.live.remotescan import RemoteScanError, fetch_log

    host = ctx.host
    bundle_path = bundle_name("logs", path)
    if kind is FileKind.ELASTIC_ERROR or not isinstance(host, SshHost):
        return Captured(kind, bundle_path, host.local_path(path), display, rank, st.mtime, st.size)
    try:
        excerpt = fetch_log(host, path, st.size, ctx.spec.log_patterns, ctx.spec.scan_engine,
                            display, rank, st.mtime, ctx.scratch / "remote", ctx.deadline)
    except RemoteScanError as exc:
        out.gaps.append(Gap("logs", f"{display}: {exc}"))
        return None
    out.notes.extend(excerpt.notes)
    out.run.setdefault("remote_files", {})[bundle_path] = {"path": path, **excerpt.stats}
    return Captured(kind, bundle_path, excerpt.path, display, rank, st.mtime, st.size)


def _expected(ctx: Context, pattern: str) -> dict[str, object]:
    """Whether an expected log exists, and which files of the same shape sit beside it."""
    return _expected_file(ctx, pattern).to_json()


def _expected_file(ctx: Context, pattern: str) -> ExpectedFile:
    host = ctx.host
    spec = ctx.spec
    matches = host.glob(pattern) if re.search(r"[*?\[]", pattern) else ([pattern] if host.exists(pattern) else [])
    if matches:
        try:
            st = host.stat(matches[0])
        except PermissionError:
            st = None
        return ExpectedFile("log", pattern, True, st.size if st else None, st.mtime if st else None)
    if pattern in spec.expected_siblings:  # inferred from these very siblings
        return ExpectedFile("log", pattern, False, siblings=tuple(spec.expected_siblings[pattern][:SIBLINGS]))
    # Same shape, another run: the template with the run id as a wildcard (train_{run}.log -> train_*.log).
    folder, name = os.path.split(pattern)
    if spec.id not in name:
        return ExpectedFile("log", pattern, False)
    shape = name.replace(spec.id, "*")
    found = []
    for other in host.listdir(folder):
        if other != name and fnmatch.fnmatchcase(other, shape):
            try:
                st = host.stat(os.path.join(folder, other))
            except PermissionError:
                continue
            if st is not None and st.is_file:
                found.append((st.mtime, other))
    return ExpectedFile("log", pattern, False, siblings=tuple(other for _mtime, other in sorted(found, reverse=True)[:SIBLINGS]))
