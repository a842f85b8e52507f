"""`diagnose scan` arguments -> file entries and bundles -> Evidence."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from diagnose.errors import InputError
from diagnose.evidence.assemble import FileEntry, display_path, evidence_from_files, merge
from diagnose.evidence.model import Evidence, FileKind
from diagnose.evidence.sniff import base_name, folder_skip_reason, rank_from_path, sniff, split_kind
from diagnose.evidence.stdin import DISPLAY as STDIN_DISPLAY
from diagnose.evidence.stdin import STDIN
from diagnose.evidence.textio import (
    HEAD_BYTES,
    looks_binary,
    not_regular,
    read_head,
    special_kind,
    why_unreadable,
)

# A file of a scanned folder that is no evidence (source code, weights, images): said in a note
# starting with this (the terminal counts them, -v lists them); unreadable ones stay "skipped".
PASSED_OVER = "passed over"
MAX_DEPTH = 64  # folders below a scanned folder; deeper ones are reported as skipped


_SKIP_DIRS = ("__pycache__", "node_modules")


def _walk(folder: Path, notes: list[str]) -> Iterable[Path]:
    """The regular files under a folder, in sorted order, with a stack instead of recursion (os.walk
    recurses, and a folder 1,500 deep ends it in RecursionError). What is not walked is said in
    `notes`: folders past MAX_DEPTH, folders we may not list, symlink loops, dangling links.
    Symlinked folders are not followed (a link to an ancestor would walk forever)."""
    import stat as stat_module

    stack: list[tuple[Path, int]] = [(folder, 0)]
    while stack:
        current, depth = stack.pop()
        try:
            with os.scandir(current) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            if current == folder:
                raise InputError(f"{current}: {why_unreadable(exc)}") from None
            notes.append(f"skipped {display_path(current)}/: {why_unreadable(exc)}")
            continue
        subfolders: list[Path] = []
        for entry in entries:
            path = Path(entry.path)
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not entry.name.startswith(".") and entry.name not in _SKIP_DIRS:
                        subfolders.append(path)
                    continue
                st = os.stat(entry.path)  # follows a link to a file
            except OSError as exc:
                dangling = exc.errno == errno.ENOENT and entry.is_symlink()
                notes.append(f"skipped {display_path(path)}: {'dangling symlink' if dangling else why_unreadable(exc)}")
                continue
            if stat_module.S_ISREG(st.st_mode):
                yield path
            elif (special := special_kind(st.st_mode)) is not None:
                # A FIFO, socket or device would block or never end a read: said, never opened.
                notes.append(f"skipped {display_path(path)}: not a regular file ({special})")
            # A link to a folder is not followed.
        if depth + 1 > MAX_DEPTH:
            notes.extend(f"skipped {display_path(sub)}/: deeper than {MAX_DEPTH} folders" for sub in subfolders)
            continue
        # Reversed onto the stack so the first folder in sorted order is walked first.
        stack.extend((sub, depth + 1) for sub in reversed(subfolders))


def collect_paths(args: Sequence[str], names: Mapping[str, str] | None = None) -> tuple[list[FileEntry], list[Path], list[str]]:
    """Resolve `diagnose scan` arguments into file entries, bundles, and notes on skipped files.
    names: display names for some paths: standard input's copy is "<stdin>" (`-` and `KIND:-` are
    replaced by that copy's path before this, by evidence.stdin.stdin_paths)."""
    entries: list[FileEntry] = []
    bundles: list[Path] = []
    notes: list[str] = []
    for arg in args:
        forced, raw = split_kind(arg)
        path = Path(raw)
        _check_exists(raw)
        if path.is_dir():
            if forced is None and is_bundle(path):
                bundles.append(path)
                continue
            found = 0
            walk_notes: list[str] = []
            members = list(_walk(path, walk_notes))
            notes.extend(walk_notes)
            if not members and walk_notes:
                more = f" (and {len(walk_notes) - 1} more)" if len(walk_notes) > 1 else ""
                raise InputError(f"{raw}: nothing to scan: {walk_notes[0]}{more}")
            if not members:
                raise InputError(f"{raw}: empty directory, nothing to scan")
            for member in members:
                why = folder_skip_reason(member) if forced is None else None
                if why is not None:
                    notes.append(f"{PASSED_OVER} {display_path(member)}: {why}")
                    continue
                entry = _entry(member, forced, notes, strict=False)
                if entry is not None:
                    entries.append(entry)
                    found += 1
            if not found:
                raise InputError(f"{raw}: no log, kernel log, nvidia-smi or package list found in this directory")
            continue
        if forced is None and not_regular(path) is None and is_bundle(path):
            bundles.append(path)
            continue
        try:
            entry = _entry(path, forced, notes, strict=True)
        except InputError as exc:
            shown = (names or {}).get(str(path)) or (names or {}).get(raw)
            if shown is None:
                raise
            # a copy of standard input: named as the user gave it, never by its temp path
            raise InputError(exc.message.replace(str(path), STDIN if shown == STDIN_DISPLAY else shown)) from None
        if entry is not None:
            if names and raw in names:
                entry = (entry[0], entry[1], names[raw], entry[3], entry[4])
            entries.append(entry)
    return entries, bundles, notes


def _check_exists(raw: str) -> None:
    """InputError naming why a path given on the command line cannot be used."""
    if "\0" in raw:
        raise InputError(f"{raw!r}: not a path (it holds a NUL byte)")
    try:
        os.stat(raw)
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.path.islink(raw):
            raise InputError(f"{raw}: dangling symlink (its target does not exist)") from None
        raise InputError(f"{raw}: {why_unreadable(exc)}") from None


def is_bundle(path: Path) -> bool:
    """A bundle directory or archive (bundle.py, with its tarfile import, only when it may be one).
    InputError for a folder we may not look into (pathlib's is_file() raises on EACCES)."""
    try:
        if path.is_dir():
            if not (path / "manifest.json").is_file():
                return False
        elif not path.name.lower().endswith((".tar.gz", ".tgz")):
            return False
        from diagnose.evidence.bundle import is_bundle as check

        return check(path)
    except OSError as exc:
        raise InputError(f"{path}: {why_unreadable(exc)}") from None


def _entry(path: Path, forced: FileKind | None, notes: list[str], strict: bool) -> FileEntry | None:
    special = not_regular(path)
    if special is not None:  # before any open: a FIFO blocks it forever
        if strict:
            raise InputError(f"{path}: not a regular file ({special}), nothing to scan")
        notes.append(f"skipped {display_path(path)}: not a regular file ({special})")
        return None
    try:
        # open() says why it cannot read (ELOOP: symlink loop, EACCES: permission denied); os.access
        # would call a loop "permission denied", and root may read what it denies.
        head = read_head(path, HEAD_BYTES)
    except InputError as exc:
        if strict:
            raise
        notes.append(f"skipped {exc.message}")
        return None
    kind = forced or sniff(path, head)
    if looks_binary(head) and kind is not FileKind.NCCL_TRACE:  # a flight-recorder dump is a pickle
        if strict:
            raise InputError(f"{path}: binary file, not a text log (give KIND:PATH only for text files)")
        notes.append(f"skipped {display_path(path)}: binary file")
        return None
    if not strict and forced is None and kind is FileKind.LOG and base_name(path).endswith(".json"):
        # JSON is read when its content is known evidence; any other (a config, a tokenizer) is said, not scanned
        notes.append(f"{PASSED_OVER} {display_path(path)}: JSON that is no known evidence (pod status, trainer_state, "
                     "wandb summary, error file, NVML)")
        return None
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = None
    return (kind, path, display_path(path), rank_from_path(path), mtime)


def evidence_from_paths(args: Sequence[str], names: Mapping[str, str] | None = None) -> Evidence:
    entries, bundles, notes = collect_paths(args, names)
    if not bundles:
        return _named_inputs(evidence_from_files(entries, notes=notes), names)
    from diagnose.evidence.bundle import evidence_from_bundle

    if bundles and not entries and len(bundles) == 1:
        bundle = evidence_from_bundle(bundles[0])
        return replace(bundle, notes=tuple(notes) + bundle.notes)
    evidence = evidence_from_files(entries, notes=notes)
    for path in bundles:
        evidence = merge(evidence, evidence_from_bundle(path))
    return _named_inputs(evidence, names)


def _named_inputs(evidence: Evidence, names: Mapping[str, str] | None) -> Evidence:
    """The run's inputs as the reports name them: standard input's copy is "<stdin>", never the
    path of a temp file that is gone when the report is read."""
    if not names or not any(name in names for name in evidence.run.inputs):
        return evidence
    return replace(evidence, run=replace(evidence.run, inputs=tuple(names.get(name, name) for name in evidence.run.inputs)))
