"""Sniffed files -> Evidence, and several Evidence into one."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diagnose.errors import ParseError
from diagnose.evidence.model import (
    Evidence,
    ExitRecord,
    FileKind,
    Gap,
    HostInfo,
    MetricSeries,
    Packages,
    RunInfo,
    TextFile,
    TextKind,
)
from diagnose.evidence.textio import read_text

if TYPE_CHECKING:
    from diagnose.evidence.facts import GpuState

FileEntry = tuple[FileKind, Path, str, "int | None", "float | None"]  # kind, location, display, rank, mtime


def display_path(path: str | os.PathLike[str]) -> str:
    """How reports name a file: relative to the current folder when inside it, else as given."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return os.fspath(path)
    return relative if not relative.startswith("..") else os.fspath(path)


def evidence_from_files(entries: Sequence[FileEntry], boot_time: float | None = None, run: RunInfo | None = None,
                        notes: Sequence[str] = ()) -> Evidence:
    """Turn sniffed files into Evidence: text files to scan, package lists, GPU state, exit records."""
    texts: list[TextFile] = []
    versions: dict[str, str] = {}
    package_sources: list[str] = []
    gpu: GpuState | None = None
    exits: list[ExitRecord] = []
    gaps: list[Gap] = []
    metrics: list[MetricSeries] = []
    read_metrics = False
    file_notes: list[str] = []
    flight: list[Any] = []  # flight-recorder records of the ranks, compared below
    for kind, location, display, rank, mtime in entries:
        text_kind = kind.text_kind
        if text_kind is not None:
            year = time.localtime(mtime).tm_year if mtime else None
            texts.append(TextFile(text_kind, location, display, rank, mtime, boot_time if text_kind.value == "dmesg" else None, year,
                                  host_prefixed=text_kind is TextKind.LOG and _pdsh(location)))
            continue
        if kind.also_scanned:  # its lines are evidence too (rules quote them with line numbers)
            year = time.localtime(mtime).tm_year if mtime else None
            # Slurm's accounting is the job's record, not a log of the run: `slurm:` conditions read it.
            as_text = TextKind.SLURM if kind is FileKind.SACCT else TextKind.LOG
            texts.append(TextFile(as_text, location, display, rank, mtime, None, year))
        if kind is FileKind.NCCL_TRACE:
            from diagnose.evidence.parsers.flightrec import read_flight_record

            said, gap, record = read_flight_record(location, display)
            file_notes.extend(said)
            if gap is not None:
                gaps.append(Gap("nccl-trace", gap))
            if record is not None:
                flight.append(record)
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
        if kind in _METRIC_KINDS:
            read_metrics = True
        if isinstance(parsed, str):
            file_notes.append(parsed)
        elif isinstance(parsed, list):
            for item in parsed:
                if isinstance(item, MetricSeries):
                    metrics.append(item)
                elif isinstance(item, ExitRecord):
                    exits.append(item)
            if kind in _METRIC_KINDS:
                from diagnose.evidence.parsers.metrics import describe

                file_notes.extend(describe([m for m in parsed if isinstance(m, MetricSeries)]))
        elif isinstance(parsed, Packages):
            for name, version in parsed.versions.items():
                versions.setdefault(name, version)
            package_sources.append(display)
        elif isinstance(parsed, ExitRecord):
            exits.append(parsed)
        elif parsed is not None and kind is FileKind.NVML:
            gpu = parsed  # not isinstance: the fact classes load only when a GPU file is here
        elif parsed is not None:
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
    if flight:
        from diagnose.evidence.parsers.flightrec import compare_ranks

        file_notes.extend(compare_ranks(flight))
    packages = Packages(versions, ", ".join(package_sources)) if package_sources else None
    info = run or RunInfo(id="scan", mode="scan", inputs=tuple(str(e[1]) for e in entries))
    return Evidence(run=info, texts=tuple(texts), packages=packages, gpu=gpu, exits=tuple(exits) if exits else None,
                    gaps=tuple(gaps), notes=tuple(notes) + tuple(file_notes), metrics=tuple(metrics) if read_metrics else None)


_GAP_SOURCE = {FileKind.PACKAGES: "packages", FileKind.NVIDIA_SMI: "gpu", FileKind.NVML: "gpu", FileKind.ELASTIC_ERROR: "exit",
               FileKind.K8S_POD: "exit", FileKind.SACCT: "exit", FileKind.TRAINER_STATE: "metrics",
               FileKind.LIGHTNING_METRICS: "metrics", FileKind.WANDB_SUMMARY: "metrics", FileKind.LIGHTNING_HPARAMS: "metrics"}
_METRIC_KINDS = (FileKind.TRAINER_STATE, FileKind.LIGHTNING_METRICS, FileKind.WANDB_SUMMARY)

if TYPE_CHECKING:
    Parsed = Packages | GpuState | ExitRecord | str | list[MetricSeries] | list[ExitRecord] | None


def _pdsh(location: Path) -> bool:
    """Whether a log is pdsh output (each line "<host>: ..."), from its first 16 KiB."""
    from diagnose.evidence.lines import host_prefixed
    from diagnose.evidence.textio import read_head

    try:
        head = read_head(location, 16 * 1024)
    except Exception:  # unreadable here: the scanner says why
        return False
    if b": " not in head:
        return False
    return host_prefixed(head.decode("utf-8", "replace").splitlines()[:-1] or [head.decode("utf-8", "replace")])


def _parse_one(kind: FileKind, content: str, display: str, rank: int | None) -> Parsed:
    """The parsed content of a non-text evidence file; ParseError when it cannot be read."""
    # Each parser loads only when a file of its kind is there.
    if kind is FileKind.PACKAGES:
        from diagnose.evidence.parsers.packages import parse_packages

        return parse_packages(content, display)
    if kind is FileKind.NVIDIA_SMI:
        from diagnose.evidence.parsers.gpu import parse_gpu_text

        return parse_gpu_text(content, display)
    if kind is FileKind.NVML:
        from diagnose.evidence.parsers.gpu import parse_nvml_text

        return parse_nvml_text(content, display)
    if kind is FileKind.ELASTIC_ERROR:
        from diagnose.evidence.parsers.elastic import parse_elastic_error

        return parse_elastic_error(content, display, rank)[0]
    if kind is FileKind.K8S_POD:
        from diagnose.evidence.parsers.kube import parse_pod_json

        return parse_pod_json(content, display)
    if kind is FileKind.SACCT:
        from diagnose.evidence.parsers.sacct import parse_sacct

        return parse_sacct(content, display)
    from diagnose.evidence.parsers import metrics as metric_files

    if kind is FileKind.TRAINER_STATE:
        return metric_files.parse_trainer_state(content, display)
    if kind is FileKind.LIGHTNING_METRICS:
        return metric_files.parse_lightning_metrics(content, display)
    if kind is FileKind.WANDB_SUMMARY:
        return metric_files.parse_wandb_summary(content, display)
    if kind is FileKind.LIGHTNING_HPARAMS:
        return metric_files.parse_hparams(content, display)
    return None


def on_host(evidence: Evidence, info: HostInfo) -> Evidence:
    """One node's evidence, tagged for a merge with other nodes': every text, exit record and gap
    names the node, texts are named `node:path` (two nodes' logs/train.log stay apart), and the
    node's clock offset goes with each text so its times land on the one clock of the report."""
    offset = info.clock_offset or 0.0
    texts = tuple(replace(t, host=info.name, clock_offset=offset, display=f"{info.name}:{t.display}") for t in evidence.texts)
    exits = None
    if evidence.exits is not None:
        exits = tuple(replace(e, host=e.host or info.name, time=e.time - offset if e.time is not None else None)
                      for e in evidence.exits)
    gaps = tuple(Gap(g.source, f"{info.name}: {g.reason}") for g in evidence.gaps)
    notes = tuple(f"{info.name}: {n}" for n in evidence.notes)
    return replace(evidence, texts=texts, exits=exits, gaps=gaps, notes=notes, hosts=(replace(info, gpu=evidence.gpu),))


def merge_hosts(parts: Sequence[tuple[HostInfo, Evidence | None]], run: RunInfo) -> Evidence:
    """The nodes of one run as one Evidence: texts, exits and gaps of every node that answered
    (tagged by on_host); a node that did not is a gap naming it. Single-valued facts (identity,
    tmux, process) are the first node's that has them; each node's GPU state stays in `hosts`."""
    merged: Evidence | None = None
    infos: list[HostInfo] = []
    gaps: list[Gap] = []
    for info, evidence in parts:
        if evidence is None:
            infos.append(info)
            gaps.append(Gap("host", f"{info.name}: {info.reason or info.status}"))
            continue
        tagged = on_host(evidence, info)
        infos.append(tagged.hosts[0])
        merged = tagged if merged is None else merge(merged, tagged)
    base = merged or Evidence(run=run)
    return replace(base, run=run, gaps=base.gaps + tuple(gaps), hosts=tuple(infos))


def merge(first: Evidence, second: Evidence) -> Evidence:
    """Evidence from several inputs: texts add up; for single-valued facts the first wins."""
    packages = first.packages
    if second.packages is not None:
        versions = dict(second.packages.versions)
        versions.update(first.packages.versions if first.packages else {})
        sources = (first.packages.source if first.packages else "", second.packages.source)
        # two nodes of one job read the same environment: say where once
        packages = Packages(versions, ", ".join(dict.fromkeys(s for s in sources if s)))
    exits = None if first.exits is None and second.exits is None else (first.exits or ()) + (second.exits or ())
    metrics = None if first.metrics is None and second.metrics is None else (first.metrics or ()) + (second.metrics or ())
    return replace(
        first, texts=first.texts + second.texts, packages=packages, gpu=first.gpu or second.gpu,
        tmux=first.tmux or second.tmux, files=first.files if first.files is not None else second.files,
        checkpoints=first.checkpoints or second.checkpoints, process=first.process or second.process, exits=exits,
        gaps=first.gaps + second.gaps, notes=first.notes + second.notes, metrics=metrics,
        stats=dict(first.stats) or dict(second.stats), identity=first.identity or second.identity,
        hosts=first.hosts + second.hosts,
    )
