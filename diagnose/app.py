"""The application layer: inputs -> Evidence -> findings -> ranked Diagnosis.

The CLI calls these; they know nothing of terminals or output formats.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from diagnose.errors import InputError
from diagnose.evidence import (
    Evidence,
    ExitRecord,
    FileKind,
    Gap,
    Packages,
    RunInfo,
    TextFile,
    TextKind,
)
from diagnose.findings import Diagnosis
from diagnose.rules import RuleSet
from diagnose.sniff import rank_from_path, skip_in_folder, sniff, split_kind
from diagnose.textio import HEAD_BYTES, looks_binary, not_regular, read_head, read_text

if TYPE_CHECKING:
    from diagnose.evidence import GpuState

FileEntry = tuple[FileKind, Path, str, "int | None", "float | None"]  # kind, location, display, rank, mtime


def _display(path: Path) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return relative if not relative.startswith("..") else str(path)


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
        if forced is None and not_regular(path) is None and is_bundle(path):
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
    from diagnose.bundle import is_bundle as check

    return check(path)


def _entry(path: Path, forced: FileKind | None, notes: list[str], strict: bool) -> FileEntry | None:
    special = not_regular(path)
    if special is not None:  # before any open: a FIFO blocks it forever
        if strict:
            raise InputError(f"{path}: not a regular file ({special}), nothing to scan")
        notes.append(f"skipped {_display(path)}: not a regular file ({special})")
        return None
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
        # Each parser loads only when a file of its kind is there.
        if kind is FileKind.PACKAGES:
            from diagnose.parsers.packages import parse_packages

            parsed = parse_packages(content, display)
            for name, version in parsed.versions.items():
                versions.setdefault(name, version)
            package_sources.append(display)
        elif kind is FileKind.NVIDIA_SMI:
            from diagnose.parsers.gpu import parse_gpu_text

            smi = parse_gpu_text(content, display)
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
        elif kind is FileKind.NVML:
            from diagnose.parsers.gpu import parse_nvml_json

            try:
                gpu = parse_nvml_json(json.loads(content), display)
            except ValueError as exc:
                gaps.append(Gap("gpu", f"{display}: unreadable NVML JSON ({exc})"))
        elif kind is FileKind.ELASTIC_ERROR:
            from diagnose.parsers.elastic import parse_elastic_error

            record, _message, _when = parse_elastic_error(content, display, rank)
            exits.append(record)
    packages = Packages(versions, ", ".join(package_sources)) if package_sources else None
    info = run or RunInfo(id="scan", mode="scan", inputs=tuple(str(e[1]) for e in entries))
    return Evidence(info, tuple(texts), packages, gpu, exits=tuple(exits) if exits else None, gaps=tuple(gaps), notes=tuple(notes))


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
