"""Bundles: everything collected about a run, saved so `diagnose BUNDLE` gives the same answer
on any machine.

Layout (a directory, or the same packed as .tar.gz):
    manifest.json     run info, per-collector status, the file list, raw tmux output, and the
                      facts that are stat results (expected files, checkpoints, processes, exits)
    logs/...          copies of the run's logs (per rank where the run wrote per-rank files)
    kernel/dmesg.txt  kernel log lines
    env/...           package lists (pip freeze, collect_env, a wandb requirements.txt)
    gpu/...           nvml.json and/or nvidia-smi output
The raw files are parsed by the same parsers that read a live machine.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from diagnose import __version__
from diagnose.errors import InputError
from diagnose.evidence.model import (
    CheckpointFile,
    CheckpointState,
    Evidence,
    ExitRecord,
    ExpectedFile,
    FileKind,
    Gap,
    ProcessState,
    RunInfo,
)

if TYPE_CHECKING:
    from diagnose.evidence.assemble import FileEntry

MANIFEST = "manifest.json"
FORMAT = "diagnose-bundle"
SCHEMA_VERSION = 1


@dataclass
class CollectorStatus:
    status: str  # ok | gap | timeout | error | skipped
    duration_s: float = 0.0
    bytes: int = 0
    reason: str | None = None


@dataclass
class BundleFile:
    path: str  # relative, POSIX
    kind: str  # a FileKind value
    origin: str | None = None
    rank: int | None = None
    mtime: float | None = None


@dataclass
class Manifest:
    run: dict[str, Any]
    collectors: dict[str, CollectorStatus] = field(default_factory=dict)
    files: list[BundleFile] = field(default_factory=list)
    tmux: dict[str, Any] | None = None
    expected_files: list[dict[str, Any]] | None = None
    checkpoints: dict[str, Any] | None = None
    process: dict[str, Any] | None = None
    exits: list[dict[str, Any]] | None = None
    gaps: list[dict[str, str]] = field(default_factory=list)
    identity: dict[str, Any] | None = None  # RunIdentity.to_json(): which run, and where each part came from

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "created_by": f"diagnose {__version__}"}
        data.update(asdict(self))
        return data


def is_bundle(path: Path) -> bool:
    if path.is_dir():
        return (path / MANIFEST).is_file()
    name = path.name.lower()
    return path.is_file() and (name.endswith((".tar.gz", ".tgz")) and _tar_has_manifest(path))


def _tar_has_manifest(path: Path) -> bool:
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                if PurePosixPath(member.name).name == MANIFEST and len(PurePosixPath(member.name).parts) <= 2:
                    return True
    except (tarfile.TarError, OSError, EOFError):
        return False
    return False


def _safe_extract(archive_path: Path) -> Path:
    """Unpack a bundle archive into a temp dir, refusing members that would land outside it."""
    target = Path(tempfile.mkdtemp(prefix="diagnose-bundle-"))
    atexit.register(shutil.rmtree, target, True)  # the unpacked copy is ours; never leave it in /tmp
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            for member in archive.getmembers():
                name = PurePosixPath(member.name)
                if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
                    raise InputError(f"{archive_path}: unsafe or unsupported member {member.name!r} in bundle archive")
                archive.extract(member, target)
    except (tarfile.TarError, EOFError, OSError) as exc:
        shutil.rmtree(target, ignore_errors=True)
        raise InputError(f"{archive_path}: not a readable bundle archive ({exc})") from None
    roots = [p for p in target.iterdir()]
    if not (target / MANIFEST).is_file() and len(roots) == 1 and (roots[0] / MANIFEST).is_file():
        return roots[0]
    return target


def _inside(root: Path, relative: str) -> Path:
    rel = PurePosixPath(relative)
    if rel.is_absolute() or ".." in rel.parts:
        raise InputError(f"{root / MANIFEST}: file path {relative!r} points outside the bundle")
    return root.joinpath(*rel.parts)


def read_manifest(root: Path) -> Manifest:
    path = root / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a readable manifest ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{path}: not a diagnose bundle manifest (format should be {FORMAT!r})")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise InputError(f"{path}: bundle schema_version {data.get('schema_version')!r} is not supported (expected {SCHEMA_VERSION})")
    try:
        return Manifest(
            run=dict(data.get("run") or {}),
            collectors={k: CollectorStatus(**v) for k, v in (data.get("collectors") or {}).items()},
            files=[BundleFile(**f) for f in data.get("files") or []],
            tmux=data.get("tmux"),
            expected_files=data.get("expected_files"),
            checkpoints=data.get("checkpoints"),
            process=data.get("process"),
            exits=data.get("exits"),
            gaps=list(data.get("gaps") or []),
            identity=data.get("identity"),
        )
    except TypeError as exc:
        raise InputError(f"{path}: malformed manifest ({exc})") from None


def open_bundle(path: Path) -> tuple[Path, Manifest]:
    """The bundle's root directory (unpacked if it was an archive) and its manifest."""
    root = path if path.is_dir() else _safe_extract(path)
    return root, read_manifest(root)


def evidence_from_bundle(path: Path) -> Evidence:
    root, manifest = open_bundle(path)
    entries = []
    for item in manifest.files:
        try:
            kind = FileKind(item.kind)
        except ValueError:
            raise InputError(f"{root / MANIFEST}: unknown file kind {item.kind!r} for {item.path}") from None
        location = _inside(root, item.path)
        if not location.is_file():
            raise InputError(f"{root / MANIFEST}: lists {item.path} but the bundle has no such file")
        entries.append((kind, location, item.origin or item.path, item.rank, item.mtime))
    return evidence_from_manifest(manifest, entries, mode="bundle", inputs=(str(path),), default_id=path.name)


def evidence_from_manifest(manifest: Manifest, entries: Sequence[FileEntry], mode: str, inputs: tuple[str, ...] = (),
                           default_id: str = "run") -> Evidence:
    """Evidence from a manifest and its files. A live collection goes through here too (its
    files still in place), so a bundle gives the same answer the live run gave."""
    from diagnose.evidence.assemble import evidence_from_files
    from diagnose.evidence.parsers.tmux import parse_tmux

    run = manifest.run
    boot_time = run.get("boot_time")
    base = evidence_from_files(entries, boot_time=boot_time)
    gaps = list(base.gaps) + [Gap(g.get("source", "?"), g.get("reason", "?")) for g in manifest.gaps]
    for name, status in manifest.collectors.items():
        if status.status not in ("ok", "skipped") and not any(g.source == name for g in gaps):
            gaps.append(Gap(name, status.reason or status.status))
    tmux = None
    if manifest.tmux is not None:
        tmux = parse_tmux(manifest.tmux, manifest.tmux.get("expected_session"))
    expected = None
    if manifest.expected_files is not None:
        expected = tuple(
            ExpectedFile(f["role"], f["path"], bool(f["exists"]), f.get("size"), f.get("mtime"), tuple(f.get("siblings") or ()))
            for f in manifest.expected_files
        )
    checkpoints = _checkpoints(manifest.checkpoints) if manifest.checkpoints is not None else None
    process = None
    if manifest.process is not None:
        process = ProcessState(manifest.process.get("source", "process"), bool(manifest.process.get("alive")),
                               tuple(manifest.process.get("pids") or ()), manifest.process.get("command", ""))
    exits = base.exits
    if manifest.exits is not None:
        exits = (exits or ()) + tuple(ExitRecord(**e) for e in manifest.exits)
    identity = None
    if manifest.identity is not None:
        from diagnose.evidence.facts import RunIdentity

        try:
            identity = RunIdentity.from_json(manifest.identity)
        except ValueError as exc:
            raise InputError(f"manifest: malformed {exc}") from None
    info = RunInfo(
        id=str(run.get("id") or default_id), mode=mode, host=run.get("host"), collected_at=run.get("collected_at"),
        launcher=run.get("launcher"), inputs=inputs,
    )
    stats: dict[str, object] = {}
    if manifest.collectors:
        stats["collectors"] = {name: asdict(status) for name, status in manifest.collectors.items()}
    if run.get("collect_seconds") is not None:
        stats["collect_seconds"] = run["collect_seconds"]
    return Evidence(info, base.texts, base.packages, base.gpu, tmux, expected, checkpoints, process, exits, tuple(gaps),
                    base.notes + tuple(str(n) for n in run.get("notes") or ()), stats, identity=identity)


def _checkpoints(data: Mapping[str, Any]) -> CheckpointState:
    newest = data.get("newest")
    return CheckpointState(
        directory=data["directory"], exists=bool(data["exists"]), collected_at=float(data["collected_at"]),
        file_count=int(data.get("file_count", 0)), total_bytes=int(data.get("total_bytes", 0)),
        newest=CheckpointFile(**newest) if newest else None, zero_byte=tuple(data.get("zero_byte") or ()),
        partial=tuple(data.get("partial") or ()), free_bytes=data.get("free_bytes"),
    )


def write_bundle(out: Path, manifest: Manifest, copies: Mapping[str, Path | bytes]) -> Path:
    """Write a bundle: `copies` maps bundle-relative paths to source files or raw bytes.

    Sources are only read, never moved. OUT ending in .tar.gz/.tgz gives an archive.
    """
    archive = out.name.lower().endswith((".tar.gz", ".tgz"))
    root = Path(tempfile.mkdtemp(prefix="diagnose-collect-")) / out.name.split(".")[0] if archive else out
    if not archive and out.exists() and any(out.iterdir()):
        raise InputError(f"{out}: exists and is not empty; choose a new output path")
    root.mkdir(parents=True, exist_ok=True)
    for relative, source in copies.items():
        target = _inside(root, relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, bytes):
            target.write_bytes(source)
        else:
            shutil.copyfile(source, target)
    (root / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1, sort_keys=False) + "\n", encoding="utf-8")
    if archive:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(root, arcname=root.name)
        tmp.replace(out)
        shutil.rmtree(root.parent, ignore_errors=True)
    return out
