"""The application layer: inputs -> Evidence -> findings -> ranked Diagnosis.

The CLI calls these; they know nothing of terminals or output formats.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from diagnose.errors import InputError, ParseError
from diagnose.evidence import (
    Evidence,
    ExitRecord,
    FileKind,
    Gap,
    GpuState,
    Packages,
    RunInfo,
    TextFile,
    TextKind,
)
from diagnose.findings import Diagnosis
from diagnose.rules import RuleSet
from diagnose.sniff import rank_from_path, skip_in_folder, sniff, split_kind
from diagnose.textio import HEAD_BYTES, looks_binary, read_head, read_text, why_unreadable

FileEntry = tuple[FileKind, Path, str, "int | None", "float | None"]  # kind, location, display, rank, mtime


def _display(path: Path) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return relative if not relative.startswith("..") else str(path)


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
            notes.append(f"skipped {_display(current)}/: {why_unreadable(exc)}")
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
                notes.append(f"skipped {_display(path)}: {'dangling symlink' if dangling else why_unreadable(exc)}")
                continue
            if stat_module.S_ISREG(st.st_mode):
                yield path
            # A FIFO, socket or device would block or never end a read; a link to a folder is not followed.
        if depth + 1 > MAX_DEPTH:
            notes.extend(f"skipped {_display(sub)}/: deeper than {MAX_DEPTH} folders" for sub in subfolders)
            continue
        # Reversed onto the stack so the first folder in sorted order is walked first.
        stack.extend((sub, depth + 1) for sub in reversed(subfolders))


def collect_paths(args: Sequence[str]) -> tuple[list[FileEntry], list[Path], list[str]]:
    """Resolve `diagnose scan` arguments into file entries, bundles, and notes on skipped files."""
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
        from diagnose.bundle import is_bundle as check

        return check(path)
    except OSError as exc:
        raise InputError(f"{path}: {why_unreadable(exc)}") from None


def _entry(path: Path, forced: FileKind | None, notes: list[str], strict: bool) -> FileEntry | None:
    try:
        # open() says why it cannot read (ELOOP: symlink loop, EACCES: permission denied); os.access
        # would call a loop "permission denied", and root may read what it denies.
        head = read_head(path, HEAD_BYTES)
    except InputError as exc:
        if strict:
            raise
        notes.append(f"skipped {exc.message}")
        return None
    if looks_binary(head):
        if strict:
            raise InputError(f"{path}: binary file, not a text log (give KIND:PATH only for text files)")
        notes.append(f"skipped {_display(path)}: binary file")
        return None
    kind = forced or sniff(path, head)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = None
    return (kind, path, _display(path), rank_from_path(path), mtime)


def evidence_from_files(entries: Sequence[FileEntry], boot_time: float | None = None, run: RunInfo | None = None,
                        notes: Sequence[str] = ()) -> Evidence:
    """Turn sniffed files into Evidence: text files to scan, package lists, GPU state, exit records."""
    texts: list[TextFile] = []
    versions: dict[str, str] = {}
    package_sources: list[str] = []
    gpu: GpuState | None = None
    exits: list[ExitRecord] = []
    gaps: list[Gap] = []
    for kind, location, display, rank, mtime in entries:
        text_kind = kind.text_kind
        if text_kind is not None:
            year = time.localtime(mtime).tm_year if mtime else None
            texts.append(TextFile(text_kind, location, display, rank, mtime, boot_time if text_kind.value == "dmesg" else None, year))
            continue
        content = read_text(location)
        try:
            parsed = _parse_one(kind, content, display, rank)
        except ParseError as exc:
            gaps.append(Gap(_GAP_SOURCE.get(kind, kind.value), f"{display}: {exc}"))
            continue
        except Exception as exc:  # a parser bug costs that file's evidence, never the diagnosis
            gaps.append(Gap(_GAP_SOURCE.get(kind, kind.value), f"{display}: could not parse ({type(exc).__name__}: {exc})"))
            continue
        if isinstance(parsed, Packages):
            for name, version in parsed.versions.items():
                versions.setdefault(name, version)
            package_sources.append(display)
        elif isinstance(parsed, ExitRecord):
            exits.append(parsed)
        elif isinstance(parsed, GpuState) and kind is FileKind.NVML:
            gpu = parsed
        elif isinstance(parsed, GpuState):
            smi = parsed
            if smi.gpus:
                gpu = smi
            else:
                # nvidia-smi printed an error ("Failed to initialize NVML: Driver/library version
                # mismatch", "couldn't communicate with the NVIDIA driver"): scan it like a log so
                # the driver rules see it, and say the GPU state is missing.
                year = time.localtime(mtime).tm_year if mtime else None
                texts.append(TextFile(TextKind.LOG, location, display, rank, mtime, None, year))
                first = next((line.strip() for line in content.splitlines() if line.strip()), "no output")
                gaps.append(Gap("gpu", f"{display}: no GPU state in it ({first[:200]})"))
    packages = Packages(versions, ", ".join(package_sources)) if package_sources else None
    info = run or RunInfo(id="scan", mode="scan", inputs=tuple(str(e[1]) for e in entries))
    return Evidence(info, tuple(texts), packages, gpu, exits=tuple(exits) if exits else None, gaps=tuple(gaps), notes=tuple(notes))


_GAP_SOURCE = {FileKind.PACKAGES: "packages", FileKind.NVIDIA_SMI: "gpu", FileKind.NVML: "gpu", FileKind.ELASTIC_ERROR: "exit"}


def _parse_one(kind: FileKind, content: str, display: str, rank: int | None) -> Packages | GpuState | ExitRecord | None:
    """The parsed content of a non-text evidence file; ParseError when it cannot be read."""
    # Each parser loads only when a file of its kind is there.
    if kind is FileKind.PACKAGES:
        from diagnose.parsers.packages import parse_packages

        return parse_packages(content, display)
    if kind is FileKind.NVIDIA_SMI:
        from diagnose.parsers.gpu import parse_gpu_text

        return parse_gpu_text(content, display)
    if kind is FileKind.NVML:
        from diagnose.parsers.gpu import parse_nvml_text

        return parse_nvml_text(content, display)
    if kind is FileKind.ELASTIC_ERROR:
        from diagnose.parsers.elastic import parse_elastic_error

        return parse_elastic_error(content, display, rank)[0]
    return None


def evidence_from_paths(args: Sequence[str]) -> Evidence:
    entries, bundles, notes = collect_paths(args)
    if not bundles:
        return evidence_from_files(entries, notes=notes)
    from diagnose.bundle import evidence_from_bundle

    if bundles and not entries and len(bundles) == 1:
        bundle = evidence_from_bundle(bundles[0])
        return Evidence(bundle.run, bundle.texts, bundle.packages, bundle.gpu, bundle.tmux, bundle.files,
                        bundle.checkpoints, bundle.process, bundle.exits, bundle.gaps, tuple(notes) + bundle.notes)
    evidence = evidence_from_files(entries, notes=notes)
    for path in bundles:
        evidence = merge(evidence, evidence_from_bundle(path))
    return evidence


def merge(first: Evidence, second: Evidence) -> Evidence:
    """Evidence from several inputs: texts add up; for single-valued facts the first wins."""
    packages = first.packages
    if second.packages is not None:
        versions = dict(second.packages.versions)
        versions.update(first.packages.versions if first.packages else {})
        packages = Packages(versions, ", ".join(s for s in (first.packages.source if first.packages else "", second.packages.source) if s))
    exits = None if first.exits is None and second.exits is None else (first.exits or ()) + (second.exits or ())
    return Evidence(
        first.run, first.texts + second.texts, packages, first.gpu or second.gpu, first.tmux or second.tmux,
        first.files if first.files is not None else second.files, first.checkpoints or second.checkpoints,
        first.process or second.process, exits, first.gaps + second.gaps, first.notes + second.notes,
    )


def diagnose(evidence: Evidence, rules: RuleSet, engine: str = "auto", since: float | None = None,
             until: float | None = None) -> Diagnosis:
    from diagnose.engine import run_rules
    from diagnose.rank import rank

    started = time.perf_counter()
    result = run_rules(rules.rules, evidence, engine=engine, since=since, until=until)
    causes = rank(result.findings, evidence)
    gaps = list(evidence.gaps)
    for scan in result.scans:
        if scan.cut_lines:
            gaps.append(Gap(scan.source.display, f"{scan.cut_lines} line(s) longer than 64 KiB were cut to their first 64 KiB"))
    stats: dict[str, object] = {
        "rules": len(rules.rules),
        "files_scanned": len(result.scans),
        "bytes_scanned": sum(s.bytes for s in result.scans),
        "lines_scanned": sum(s.lines for s in result.scans),
        "engine": result.scans[0].engine if result.scans else None,
        "seconds": round(time.perf_counter() - started, 3),
    }
    if evidence.stats:
        stats["collect"] = dict(evidence.stats)
    return Diagnosis(evidence, causes, result.skipped, gaps, stats)
