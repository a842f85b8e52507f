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

import functools
import importlib.resources
import json
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

from diagnose import __version__
from diagnose.errors import InputError
from diagnose.evidence.jsoncheck import problem
from diagnose.evidence.model import Evidence, ExitRecord, FileKind, Gap, HostInfo, RunInfo
from diagnose.evidence.tempdirs import private_tempdir
from diagnose.evidence.tempdirs import remove as remove_tempdir

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
    # A multi-host bundle: one entry per node ({name, dir, status, reason, clock_offset, clock_rtt,
    # collected_at, seconds}); each node that answered is a whole bundle of its own under `dir`
    # (hosts/<name>/manifest.json and its files). None: a bundle of one host (the old layout).
    hosts: list[dict[str, Any]] | None = None
    launch: dict[str, Any] | None = None  # the record `diagnose launch` wrote (live/records.py), as it was

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "created_by": f"diagnose {__version__}"}
        data.update(asdict(self))
        return data


# What an untrusted archive may unpack to: a 10 MB .tar.gz of zeros can hold 10 GiB. The
# environment variables raise (or lower) them for a bundle known to be bigger.
MAX_UNPACKED_BYTES = 2 * 1024**3
MAX_MEMBERS = 100_000
MAX_MANIFEST_BYTES = 64 * 1024**2
BYTES_ENV = "DIAGNOSE_BUNDLE_MAX_BYTES"
MEMBERS_ENV = "DIAGNOSE_BUNDLE_MAX_MEMBERS"
_CHUNK = 1024 * 1024


def _limit(env: str, default: int) -> int:
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) <= 0:
        raise InputError(f"{env}={raw!r}: expected a positive whole number")
    return int(raw)


def is_bundle(path: Path) -> bool:
    if path.is_dir():
        return (path / MANIFEST).is_file()
    name = path.name.lower()
    return path.is_file() and (name.endswith((".tar.gz", ".tgz")) and _tar_has_manifest(path))


def _tar_has_manifest(path: Path) -> bool:
    """Whether the archive holds a manifest.json at its top (or one folder down). The scan stops
    once the caps are passed: a bomb then counts as a bundle, and unpacking it says why not."""
    members, declared = 0, 0
    max_members, max_bytes = _limit(MEMBERS_ENV, MAX_MEMBERS), _limit(BYTES_ENV, MAX_UNPACKED_BYTES)
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                if PurePosixPath(member.name).name == MANIFEST and len(_parts(member.name)) <= 2:
                    return True
                members += 1
                declared += max(member.size, 0)
                if members > max_members or declared > max_bytes:
                    return True
    except (tarfile.TarError, OSError, EOFError, zlib.error):
        return False
    return False


def _parts(name: str) -> tuple[str, ...]:
    """A member name as path parts, without the '.' parts tar writers put in ('./logs/x')."""
    return tuple(part for part in PurePosixPath(name).parts if part != ".")


def _human(size: int) -> str:
    return f"{size / 1024**3:.1f} GiB" if size >= 1024**3 else f"{size / 1024**2:.0f} MiB"


class _Unpack:
    """The rules every member of an untrusted archive must pass, applied the same way by the
    dry pass (nothing written) and the real one: tarfile's 'data' filter, stricter (regular
    files and folders only), with caps on the member count and the unpacked size."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.max_members = _limit(MEMBERS_ENV, MAX_MEMBERS)
        self.max_bytes = _limit(BYTES_ENV, MAX_UNPACKED_BYTES)
        self.members = 0
        self.bytes = 0
        self.files: set[tuple[str, ...]] = set()

    def check(self, member: tarfile.TarInfo) -> tuple[str, ...]:
        self.members += 1
        if self.members > self.max_members:
            raise InputError(f"{self.label}: bundle archive has more than {self.max_members:,} members; refusing it "
                             f"(set {MEMBERS_ENV} to allow more)")
        name = PurePosixPath(member.name)
        if name.is_absolute() or ".." in name.parts or "\0" in member.name:
            raise InputError(f"{self.label}: bundle archive member {member.name!r} points outside the bundle; refusing it")
        parts = _parts(member.name)
        if member.isreg() and not parts:
            raise InputError(f"{self.label}: bundle archive has a file member without a name; refusing it")
        if not (member.isreg() or member.isdir()):
            what = ("a symbolic link" if member.issym() else "a hard link" if member.islnk() else "a device"
                    if member.ischr() or member.isblk() else "a fifo" if member.isfifo() else "not a regular file")
            raise InputError(f"{self.label}: bundle archive member {member.name!r} is {what}; "
                             "a bundle holds only files and folders, refusing it")
        if member.isreg():
            if parts in self.files:  # tar lets a later copy win; a bundle has each file once
                raise InputError(f"{self.label}: bundle archive has member {member.name!r} twice; refusing it")
            self.files.add(parts)
            self.bytes += max(member.size, 0)
            if self.bytes > self.max_bytes:
                raise InputError(f"{self.label}: bundle archive unpacks to more than {_human(self.max_bytes)}; "
                                 f"refusing it (set {BYTES_ENV} to allow more)")
        return parts


def _safe_extract(archive_path: Path, label: str | None = None) -> Path:
    """Unpack a bundle archive into a private (0700) temp folder, removed at exit (SIGTERM too).

    Owners, modes, times and special files of the archive are never applied: folders are made
    0700 and files 0600 by us. A first pass reads the headers only, so a bomb or a bad member is
    refused before a byte is written.
    """
    label = label or str(archive_path)
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            rules = _Unpack(label)
            for member in archive:
                rules.check(member)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise InputError(f"{label}: not a readable bundle archive ({exc})") from None
    target = private_tempdir("diagnose-bundle-")
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            rules = _Unpack(label)  # again: the file may have changed since the dry pass
            for member in archive:
                parts = rules.check(member)
                if hasattr(tarfile, "data_filter"):  # 3.11.4+: the standard rules too, as a second guard
                    tarfile.data_filter(member, str(target))
                if not parts:
                    continue  # the '.' member: the folder is ours, its mode stays 0700
                location = target.joinpath(*parts)
                if member.isdir():
                    location.mkdir(mode=0o700, parents=True, exist_ok=True)
                    continue
                location.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                source = archive.extractfile(member)
                if source is None:
                    raise InputError(f"{label}: bundle archive member {member.name!r} has no data")
                # O_EXCL|O_NOFOLLOW: a duplicate member cannot overwrite, nor write through a link.
                fd = os.open(location, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                             | getattr(os, "O_CLOEXEC", 0), 0o600)
                with os.fdopen(fd, "wb") as handle, source:
                    shutil.copyfileobj(source, handle, _CHUNK)
    except InputError:
        remove_tempdir(target)
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        remove_tempdir(target)
        raise InputError(f"{label}: cannot unpack bundle archive ({exc})") from None
    roots = list(target.iterdir())
    if not (target / MANIFEST).is_file() and len(roots) == 1 and (roots[0] / MANIFEST).is_file():
        return roots[0]
    return target


def _inside(root: Path, relative: str, where: str) -> Path:
    rel = PurePosixPath(relative)
    if rel.is_absolute() or ".." in rel.parts or "\0" in relative:
        raise InputError(f"{where}: {relative!r} points outside the bundle")
    return root.joinpath(*rel.parts)


@functools.lru_cache(maxsize=1)
def manifest_schema() -> dict[str, Any]:
    """schema/bundle-manifest.schema.json: what read_manifest holds every manifest to."""
    # By package, not by this file's place: the module may move, the schema folder stays.
    schema = importlib.resources.files("diagnose") / "schema" / "bundle-manifest.schema.json"
    loaded: dict[str, Any] = json.loads(schema.read_text(encoding="utf-8"))
    return loaded


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def read_manifest(root: Path, label: str | None = None) -> Manifest:
    """The manifest, checked field by field against the schema: a misfit in a fact section
    (tmux, checkpoints, ...) leaves that section out with a gap; any other refuses the bundle."""
    path = root / MANIFEST
    where = f"bundle {label or root}: {MANIFEST}"
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)
        if len(raw) > MAX_MANIFEST_BYTES:
            raise InputError(f"{where}: larger than {_human(MAX_MANIFEST_BYTES)}; not a manifest diagnose wrote")
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{where}: not readable JSON ({exc})") from None
    except RecursionError:
        raise InputError(f"{where}: not readable JSON (nested too deeply)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{where}: not a diagnose bundle manifest (format should be {FORMAT!r})")
    if data.get("schema_version") != SCHEMA_VERSION or isinstance(data.get("schema_version"), bool):
        raise InputError(f"{where}: schema_version {data.get('schema_version')!r} is not supported (expected {SCHEMA_VERSION})")
    schema = manifest_schema()
    gaps: list[dict[str, str]] = []
    for key, section in schema["properties"].items():
        if key not in data:
            continue
        found = problem(data[key], section, key, schema)
        if found is None:
            continue
        if section.get("x-on-error") != "gap":
            raise InputError(f"{where}: {found}")
        gaps.append({"source": key, "reason": f"{MANIFEST}: {found}; left out"})
        data[key] = None
    return Manifest(
        run=dict(data.get("run") or {}),
        collectors={name: CollectorStatus(**_known(CollectorStatus, v)) for name, v in (data.get("collectors") or {}).items()},
        files=[BundleFile(**_known(BundleFile, f)) for f in data.get("files") or []],
        tmux=data.get("tmux"),
        expected_files=data.get("expected_files"),
        checkpoints=data.get("checkpoints"),
        process=data.get("process"),
        exits=data.get("exits"),
        gaps=[{"source": str(g.get("source", "?")), "reason": str(g.get("reason", "?"))} for g in data.get("gaps") or []]
        + gaps,
        identity=_checked_identity(data.get("identity"), where),
        hosts=data.get("hosts"),
        launch=data.get("launch"),
    )


def _checked_identity(data: Any, where: str) -> dict[str, Any] | None:
    """The identity section, decoded once here so a hostile one fails with the bundle's name."""
    if data is None:
        return None
    from diagnose.evidence.facts import RunIdentity

    try:
        return RunIdentity.from_json(data).to_json()
    except (ValueError, TypeError) as exc:
        raise InputError(f"{where}: {exc}") from None


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a dataclass that `data` has (later versions may add more)."""
    names = {f.name for f in fields(cls)}
    return {key: value for key, value in data.items() if key in names}


def open_bundle(path: Path) -> tuple[Path, Manifest]:
    """The bundle's root directory (unpacked if it was an archive) and its manifest."""
    root = path if path.is_dir() else _safe_extract(path)
    return root, read_manifest(root, str(path))


def evidence_from_bundle(path: Path) -> Evidence:
    root, manifest = open_bundle(path)
    if manifest.hosts is not None:
        return _multi_host(path, root, manifest)
    return _one_host(path, root, manifest)


def host_info(entry: Mapping[str, Any]) -> HostInfo:
    """A manifest's hosts[] entry as a HostInfo (the schema has checked its types)."""
    return HostInfo(str(entry["name"]), str(entry.get("status") or "ok"), entry.get("reason"), entry.get("clock_offset"),
                    entry.get("clock_rtt"), entry.get("collected_at"), entry.get("seconds"))


def _multi_host(path: Path, root: Path, manifest: Manifest) -> Evidence:
    """Every node's part of a multi-host bundle, merged on one clock; a node that did not answer is a gap."""
    from diagnose.evidence.assemble import merge, merge_hosts

    parts: list[tuple[HostInfo, Evidence | None]] = []
    for index, entry in enumerate(manifest.hosts or ()):
        info = host_info(entry)
        folder = entry.get("dir")
        if not folder:
            parts.append((info, None))
            continue
        where = f"bundle {path}: {MANIFEST}: hosts[{index}].dir"
        node_root = _inside(root, str(folder), where)
        try:
            usable = node_root.is_dir() and node_root.resolve().is_relative_to(root.resolve())
        except (OSError, RuntimeError):
            usable = False
        if not usable:
            raise InputError(f"{where}: lists {folder!r} but the bundle has no such folder")
        node_manifest = read_manifest(node_root, f"{path} ({folder})")
        parts.append((info, _one_host(path, node_root, node_manifest, label=f"{path} ({folder})")))
    run = manifest.run
    run_info = RunInfo(id=str(run.get("id") or path.name), mode="bundle", host=run.get("host"),
                       collected_at=run.get("collected_at"), launcher=run.get("launcher"), inputs=(str(path),),
                       stall_after=_seconds_or_none(run.get("stall_after")))
    merged = merge_hosts(parts, run_info)
    # What belongs to no one node (the Slurm job's record), its gaps and notes: the top manifest's.
    job = _one_host(path, root, manifest)
    return replace(merge(merged, job), run=run_info, identity=merged.identity or job.identity)


def evidence_from_bundles(paths: Sequence[Path]) -> Evidence:
    """Several bundles of one run (a CI that collected on every node): one Evidence, each bundle
    a node named by the host it was collected on. Clock offsets between them were not measured."""
    if len(paths) == 1:
        return evidence_from_bundle(paths[0])
    from diagnose.evidence.assemble import merge, merge_hosts

    parts: list[tuple[HostInfo, Evidence | None]] = []
    already: list[Evidence] = []  # multi-host bundles: their nodes are tagged already
    names: set[str] = set()
    for path in paths:
        evidence = evidence_from_bundle(path)
        if evidence.hosts:
            already.append(evidence)
            names.update(h.name for h in evidence.hosts)
            continue
        name = evidence.run.host or path.name
        if name in names:  # two bundles of one host name (collected on the same machine): keep them apart
            name = f"{name}~{path.name}"
        names.add(name)
        parts.append((HostInfo(name, collected_at=evidence.run.collected_at), evidence))
    first = (already[0] if already else parts[0][1])
    assert first is not None
    run = replace(first.run, inputs=tuple(str(p) for p in paths), mode="bundle")
    merged = merge_hosts(parts, run) if parts else None
    for evidence in already:
        merged = evidence if merged is None else merge(merged, evidence)
    assert merged is not None
    return replace(merged, run=run)


def _one_host(path: Path, root: Path, manifest: Manifest, label: str | None = None) -> Evidence:
    where = f"bundle {label or path}: {MANIFEST}"
    entries = []
    members: dict[Path, str] = {}  # where a file was unpacked -> its path inside the bundle
    resolved_root = root.resolve()
    for index, item in enumerate(manifest.files):
        kind = FileKind(item.kind)  # the schema allows only FileKind values
        location = _inside(root, item.path, f"{where}: files[{index}].path")
        try:
            # A folder bundle may hold links: never read through one to a file outside it.
            usable = location.is_file() and location.resolve().is_relative_to(resolved_root)
        except (OSError, RuntimeError):
            usable = False
        if not usable:
            raise InputError(f"{where}: files[{index}].path: lists {item.path!r} but the bundle has no such file")
        entries.append((kind, location, item.origin or item.path, item.rank, item.mtime))
        members[location] = item.path
    evidence = evidence_from_manifest(manifest, entries, mode="bundle", inputs=(str(path),), default_id=path.name)
    texts = tuple(replace(t, bundle=str(path), member=members.get(t.path)) for t in evidence.texts)
    return replace(evidence, texts=texts)


def evidence_from_manifest(manifest: Manifest, entries: Sequence[FileEntry], mode: str, inputs: tuple[str, ...] = (),
                           default_id: str = "run") -> Evidence:
    """Evidence from a manifest and its files. A live collection goes through here too (its
    files still in place), so a bundle gives the same answer the live run gave."""
    from diagnose.evidence.assemble import evidence_from_files
    from diagnose.evidence.facts import CheckpointState, ExpectedFile, ProcessState
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
        tmux = parse_tmux(manifest.tmux, manifest.tmux.get("expected_session"))  # tmux's own words, parsed
    expected = _section(manifest.expected_files, "expected_files", gaps, lambda data: tuple(
        ExpectedFile.from_json(f, f"expected_files[{n}]") for n, f in enumerate(data)))
    checkpoints = _section(manifest.checkpoints, "checkpoints", gaps, CheckpointState.from_json)
    process = _section(manifest.process, "process", gaps, ProcessState.from_json)
    exits = base.exits
    stored = _section(manifest.exits, "exits", gaps, lambda data: tuple(
        ExitRecord.from_json(e, f"exits[{n}]") for n, e in enumerate(data)))
    if stored is not None:
        exits = (exits or ()) + stored
    identity = None
    if manifest.identity is not None:
        from diagnose.evidence.facts import RunIdentity

        try:
            identity = RunIdentity.from_json(manifest.identity)
        except (ValueError, TypeError) as exc:
            raise InputError(f"bundle manifest: {exc}") from None
    info = RunInfo(
        id=str(run.get("id") or default_id), mode=mode, host=run.get("host"), collected_at=run.get("collected_at"),
        launcher=run.get("launcher"), inputs=inputs, stall_after=_seconds_or_none(run.get("stall_after")),
    )
    stats: dict[str, object] = {}
    if manifest.collectors:
        stats["collectors"] = {name: asdict(status) for name, status in manifest.collectors.items()}
    if run.get("collect_seconds") is not None:
        stats["collect_seconds"] = run["collect_seconds"]
    if isinstance(run.get("remote"), dict):
        stats["remote"] = run["remote"]  # the run's host, the exec prefix, what crossed the connection
    return replace(base, run=info, tmux=tmux, files=expected, checkpoints=checkpoints, process=process, exits=exits,
                   gaps=tuple(gaps), notes=base.notes + tuple(str(n) for n in run.get("notes") or ()), stats=stats,
                   identity=identity)


T = TypeVar("T")


def _section(data: Any, name: str, gaps: list[Gap], decode: Callable[[Any], T]) -> T | None:
    """A fact section of the manifest, decoded by its fact's from_json. The schema check let it
    through; a value it does not pin down (a wrong type deeper in) leaves the section out with a
    gap, as read_manifest does for a section that misfits the schema."""
    if data is None:
        return None
    try:
        return decode(data)
    except (ValueError, TypeError) as exc:
        gaps.append(Gap(name, f"{MANIFEST}: {exc}; left out"))
        return None


def _seconds_or_none(value: object) -> float | None:
    """A manifest's seconds value: a positive finite number, else None (a hand-edited manifest)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value < 1e9 else None


def write_bundle(out: Path, manifest: Manifest, copies: Mapping[str, Path | bytes], raw: bool = False,
                 nodes: Mapping[str, Manifest] | None = None) -> Path:
    """Write a bundle: `copies` maps bundle-relative paths to source files or raw bytes.

    Bundles get attached to issues and shared: unless raw, every file is written masked
    (evidence/redact.py: within lines, so line numbers stay) and so is every string of the
    manifest (command lines, paths, notes, tmux output). A bundle path that held a secret is
    masked the same way in the file list and on disk, so the manifest still names its files.

    Sources are only read, never moved. OUT ending in .tar.gz/.tgz gives an archive, anything
    else a directory. Either is built under a temp name beside OUT and renamed into place at
    the end, so a failure leaves no half bundle; the only things ever removed are those temp
    paths, made here. OUT itself must not exist yet (or be an empty directory, for a folder).

    `nodes` (a multi-host bundle): folder -> that node's own manifest, written (masked the same
    way) as FOLDER/manifest.json beside the node's files.
    """
    archive = out.name.lower().endswith((".tar.gz", ".tgz"))
    target = Path(os.path.abspath(out))  # abspath: 'x/..' and 'dir/' name the folder they mean
    if target.name in ("", ".", ".."):
        raise InputError(f"{out}: not a bundle name; give a new directory or a file ending in .tar.gz")
    if target.is_dir() and not target.is_symlink() and not archive:
        if any(target.iterdir()):
            raise InputError(f"{out}: exists and is not empty; choose a new output path")
    elif target.exists() or target.is_symlink():
        raise InputError(f"{out}: already exists; choose a new output path (collect never overwrites)")
    data = manifest.to_json()
    node_data = {folder: node.to_json() for folder, node in (nodes or {}).items()}
    if not raw:
        from diagnose.evidence.redact import mask_bytes, mask_file, redact, scrub

        data = scrub(data)
        node_data = {folder: scrub(value) for folder, value in node_data.items()}
    umask = os.umask(0o022)
    os.umask(umask)
    made: list[Path] = []  # exactly the temp paths made here, removed on every way out
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # A hidden sibling on the same file system: the final rename cannot cross devices.
        stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        made.append(stage)
        for relative, source in copies.items():
            location = _inside(stage, relative if raw else redact(relative), f"{out}: bundle path")
            location.parent.mkdir(parents=True, exist_ok=True)
            try:
                if isinstance(source, bytes):
                    location.write_bytes(source if raw else mask_bytes(source))
                elif raw:
                    shutil.copyfile(source, location)
                else:
                    mask_file(source, location)
            except (EOFError, ValueError) as exc:  # a compressed log that is cut short or corrupt
                where = relative if isinstance(source, bytes) else source
                raise InputError(f"{where}: cannot copy into the bundle ({exc})") from None
        (stage / MANIFEST).write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        for folder, value in node_data.items():
            location = _inside(stage, folder, f"{out}: node folder") / MANIFEST
            location.parent.mkdir(parents=True, exist_ok=True)
            location.write_text(json.dumps(value, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        if archive:
            fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            made.append(Path(tmp_name))
            os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a bundle gets the mode any new file would
            with os.fdopen(fd, "wb") as handle, tarfile.open(fileobj=handle, mode="w:gz") as tar:
                _pack(tar, stage, _archive_root(target.name))
            os.replace(tmp_name, target)
            made.remove(Path(tmp_name))
        else:
            for folder, _dirs, _files in os.walk(stage):
                os.chmod(folder, 0o777 & ~umask)  # mkdtemp made it 0700
            os.replace(stage, target)  # onto nothing, or onto the empty directory checked above
            made.remove(stage)
    except OSError as exc:
        detail = f"{exc.strerror}: {exc.filename}" if exc.strerror and exc.filename else str(exc)
        raise InputError(f"{out}: cannot write the bundle ({detail})") from None
    finally:
        for path in made:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    return out


def _archive_root(name: str) -> str:
    """The folder inside the archive: the file name less .tar.gz, never empty, '.' or '..'."""
    lower = name.lower()
    stem = name[: -len(".tar.gz")] if lower.endswith(".tar.gz") else name[: -len(".tgz")]
    return stem.lstrip(".") or "bundle"


def _pack(tar: tarfile.TarFile, stage: Path, root: str) -> None:
    """The staged folder into the archive: manifest.json first (is_bundle stops reading there),
    with neutral owners and modes (a bundle says nothing of who collected it)."""

    def neutral(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755 if info.isdir() else 0o644
        return info

    tar.add(stage, arcname=root, recursive=False, filter=neutral)
    tar.add(stage / MANIFEST, arcname=f"{root}/{MANIFEST}", filter=neutral)
    for child in sorted(stage.iterdir()):
        if child.name != MANIFEST:
            tar.add(child, arcname=f"{root}/{child.name}", filter=neutral)
