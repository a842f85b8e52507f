"""`diagnose scan` arguments -> file entries and bundles -> Evidence."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from diagnose.errors import InputError
from diagnose.evidence.assemble import FileEntry, display_path, evidence_from_files, merge
from diagnose.evidence.model import Evidence, FileKind
from diagnose.evidence.sniff import rank_from_path, skip_in_folder, sniff, split_kind
from diagnose.evidence.textio import HEAD_BYTES, looks_binary, read_head


def _walk(folder: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in ("__pycache__", "node_modules"))
        for name in sorted(filenames):
            yield Path(dirpath) / name


def collect_paths(args: Sequence[str]) -> tuple[list[FileEntry], list[Path], list[str]]:
    """Resolve `diagnose scan` arguments into file entries, bundles, and notes on skipped files."""
    entries: list[FileEntry] = []
    bundles: list[Path] = []
    notes: list[str] = []
    for arg in args:
        forced, raw = split_kind(arg)
        path = Path(raw)
        if not path.exists():
            raise InputError(f"{raw}: no such file or directory")
        if path.is_dir():
            if forced is None and is_bundle(path):
                bundles.append(path)
                continue
            found = 0
            members = list(_walk(path))
            if not members:
                raise InputError(f"{raw}: empty directory, nothing to scan")
            for member in members:
                if forced is None and skip_in_folder(member):
                    continue
                entry = _entry(member, forced, notes, strict=False)
                if entry is not None:
                    entries.append(entry)
                    found += 1
            if not found:
                raise InputError(f"{raw}: no log, kernel log, nvidia-smi or package list found in this directory")
            continue
        if forced is None and is_bundle(path):
            bundles.append(path)
            continue
        entry = _entry(path, forced, notes, strict=True)
        if entry is not None:
            entries.append(entry)
    return entries, bundles, notes


def is_bundle(path: Path) -> bool:
    """A bundle directory or archive (bundle.py, with its tarfile import, only when it may be one)."""
    if path.is_dir():
        if not (path / "manifest.json").is_file():
            return False
    elif not path.name.lower().endswith((".tar.gz", ".tgz")):
        return False
    from diagnose.evidence.bundle import is_bundle as check

    return check(path)


def _entry(path: Path, forced: FileKind | None, notes: list[str], strict: bool) -> FileEntry | None:
    try:
        if not os.access(path, os.R_OK):
            raise InputError(f"{path}: permission denied")
        head = read_head(path, HEAD_BYTES)
    except InputError as exc:
        if strict:
            raise
        notes.append(f"skipped {exc.message}")
        return None
    if looks_binary(head):
        if strict:
            raise InputError(f"{path}: binary file, not a text log (give KIND:PATH only for text files)")
        notes.append(f"skipped {display_path(path)}: binary file")
        return None
    kind = forced or sniff(path, head)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = None
    return (kind, path, display_path(path), rank_from_path(path), mtime)


def evidence_from_paths(args: Sequence[str]) -> Evidence:
    entries, bundles, notes = collect_paths(args)
    if not bundles:
        return evidence_from_files(entries, notes=notes)
    from diagnose.evidence.bundle import evidence_from_bundle

    if bundles and not entries and len(bundles) == 1:
        bundle = evidence_from_bundle(bundles[0])
        return Evidence(bundle.run, bundle.texts, bundle.packages, bundle.gpu, bundle.tmux, bundle.files,
                        bundle.checkpoints, bundle.process, bundle.exits, bundle.gaps, tuple(notes) + bundle.notes,
                        identity=bundle.identity)
    evidence = evidence_from_files(entries, notes=notes)
    for path in bundles:
        evidence = merge(evidence, evidence_from_bundle(path))
    return evidence
