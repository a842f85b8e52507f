"""Run every collector of a run concurrently, each under its own limit, and assemble the
bundle Manifest they add up to. A collector that fails (a bug) or outlives its limit is a gap.

Everything a live run is diagnosed from passes through a bundle Manifest, so `diagnose
collect` then `diagnose BUNDLE` gives the answer `diagnose RUN_ID` gave."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diagnose.evidence.bundle import BundleFile, CollectorStatus, Manifest, evidence_from_manifest
from diagnose.evidence.model import Evidence, ExitRecord, FileKind
from diagnose.live.collectors.base import Captured, CollectorInfo, Context, Output, gap

if TYPE_CHECKING:
    from diagnose.live.runs import RunSpec


GRACE = 0.5  # seconds past its limit before a collector is given up on


PROGRESS_AFTER = 0.7  # seconds before progress is shown (only on a terminal)


def registry() -> list[CollectorInfo]:
    from diagnose.live.collectors.checkpoints import collect as checkpoints
    from diagnose.live.collectors.dmesg import collect as dmesg
    from diagnose.live.collectors.gpu import collect as gpu
    from diagnose.live.collectors.logs import collect as logs
    from diagnose.live.collectors.packages import collect as packages
    from diagnose.live.collectors.process import collect as process
    from diagnose.live.collectors.tmux import collect as tmux

    return [
        CollectorInfo("logs", logs, 10.0),
        CollectorInfo("dmesg", dmesg, 10.0),
        CollectorInfo("checkpoints", checkpoints, 10.0),
        CollectorInfo("tmux", tmux, 5.0),
        CollectorInfo("packages", packages, 20.0),
        CollectorInfo("gpu", gpu, 20.0),
        CollectorInfo("process", process, 15.0)  # a CPU sample, py-spy of a stalled run,
    ]


@dataclass
class Collection:
    """What the collectors found, as a bundle manifest plus the files it lists."""

    manifest: Manifest
    files: list[Captured]
    seconds: float

    def entries(self) -> list[tuple[FileKind, Path, str, int | None, float | None]]:
        return [(c.kind, c.source, c.origin, c.rank, c.mtime) for c in self.files]

    def copies(self) -> dict[str, Path | bytes]:
        return {c.bundle_path: c.source for c in self.files}

    def evidence(self) -> Evidence:
        return evidence_from_manifest(self.manifest, self.entries(), mode="live", inputs=())


def _scratch() -> Path:
    from diagnose.evidence.tempdirs import private_tempdir

    return private_tempdir("diagnose-live-")  # removed at exit, SIGTERM too


class _Progress:
    """`collecting flex7: waiting for gpu, packages (2.1 s)` as a rich spinner on stderr, only on a
    terminal (the caller decides) and only once collection is slow; rich loads only then."""

    def __init__(self, enabled: bool, run_id: str) -> None:
        self.enabled = enabled
        self.run_id = run_id
        self.status: Any = None

    def update(self, elapsed: float, pending: Sequence[str]) -> None:
        if not self.enabled or elapsed < PROGRESS_AFTER or not pending:
            return
        from rich.text import Text

        # A Text, not markup: a run id or collector name with [brackets] is shown as it is.
        text = Text(f"diagnose: collecting {self.run_id}: waiting for {', '.join(pending)} ({elapsed:.1f} s)"[:200])
        if self.status is None:
            from rich.console import Console

            self.status = Console(stderr=True, highlight=False, emoji=False).status(text, spinner="dots")
            self.status.start()
        else:
            self.status.update(text)

    def done(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def _run_one(info: CollectorInfo, ctx: Context, results: dict[str, Output], done: threading.Event) -> None:
    try:
        results[info.name] = info.collect(ctx)
    except (ConnectionError, TimeoutError) as exc:  # a remote host that dropped or stopped answering
        results[info.name] = gap(exc.strerror or str(exc), status="timeout" if isinstance(exc, TimeoutError) else "gap")
    except Exception as exc:  # a collector bug must cost only its own evidence
        results[info.name] = gap(f"failed: {type(exc).__name__}: {exc}", status="error")
    finally:
        done.set()


def collect_run(spec: RunSpec, progress: bool = False, collectors: Sequence[CollectorInfo] | None = None,
                scratch: Path | None = None) -> Collection:
    """Run every collector concurrently (threads), each under its limit; never hangs past the budget."""
    started_wall = time.time()
    started = time.monotonic()
    scratch = scratch or _scratch()
    chosen = list(collectors if collectors is not None else registry())
    statuses: dict[str, CollectorStatus] = {}
    results: dict[str, Output] = {}
    running: list[tuple[CollectorInfo, Context, threading.Event, float]] = []
    for info in chosen:
        if info.name in spec.skip:
            statuses[info.name] = CollectorStatus("skipped", reason="skipped by the config ([collect] skip)")
            continue
        limit = min(spec.timeout or info.timeout, spec.budget)
        if info.name == "logs" and not spec.host.local:
            # A remote log is searched where it lives (grep over gigabytes), not read here.
            limit = max(limit, spec.remote_scan_timeout)
        ctx = Context(info.name, spec, scratch, limit)
        event = threading.Event()
        thread = threading.Thread(target=_run_one, args=(info, ctx, results, event), name=f"collect-{info.name}", daemon=True)
        running.append((info, ctx, event, time.monotonic()))
        thread.start()
    shower = _Progress(progress, spec.id)
    finished: dict[str, float] = {}
    try:
        while len(finished) < len(running):
            now = time.monotonic()
            pending = []
            for info, ctx, event, began in running:
                if info.name in finished:
                    continue
                if event.is_set():
                    finished[info.name] = now - began
                elif now > ctx.deadline + GRACE:
                    # Abandon it (a daemon thread stuck in a syscall); its evidence is a gap.
                    finished[info.name] = now - began
                    results.setdefault(info.name, gap(f"timed out after {ctx.limit:.0f} s", status="timeout"))
                else:
                    pending.append(info.name)
            shower.update(now - started, pending)
            if pending:
                next_event = next(e for i, _c, e, _b in running if i.name in pending)
                next_event.wait(0.05)
    finally:
        shower.done()

    files: list[Captured] = []
    manifest = Manifest(run={})
    run_info: dict[str, Any] = {}
    notes: list[str] = list(spec.notes)
    for info, _ctx, _event, _began in running:
        output = results[info.name]
        size = sum(c.size for c in output.files)
        statuses[info.name] = CollectorStatus(output.status, round(finished.get(info.name, 0.0), 3), size, output.reason)
        files.extend(output.files)
        for key, value in output.facts.items():
            setattr(manifest, key, value)
        run_info.update(output.run)
        manifest.gaps.extend({"source": g.source, "reason": g.reason} for g in output.gaps)
        if output.status in ("gap", "timeout", "error") and output.reason and not any(g.source == info.name for g in output.gaps):
            manifest.gaps.append({"source": info.name, "reason": output.reason})
        notes.extend(output.notes)
    manifest.collectors = {info.name: statuses[info.name] for info in chosen}
    manifest.exits = _exits(manifest, spec)
    if spec.launch_record is not None:
        manifest.launch = {key: value for key, value in spec.launch_record.items() if not key.startswith("_")}
    seconds = time.monotonic() - started
    manifest.run = {
        "id": spec.id,
        "host": spec.host.name,
        "collected_at": started_wall,
        "collect_seconds": round(seconds, 3),
        "launcher": spec.launcher or _launcher(manifest),
        "workdir": spec.workdir,
        "config": spec.config_path,
        "config_section": spec.section,
        **({"stall_after": spec.stall_after} if spec.stall_after is not None else {}),
        **run_info,
        "notes": notes,
    }
    remote_files = manifest.run.pop("remote_files", None)
    describe = getattr(spec.host, "describe", None)
    if not spec.host.local and callable(describe):
        # Where the run was and how it was reached: a bundle of it says so, and the report's
        # stats show what was read there against what crossed the connection.
        manifest.run["remote"] = {**describe(), "files": remote_files or {}}
    from diagnose.live.identity import build_identity

    identity = build_identity(spec, manifest, started_wall)
    manifest.identity = identity.to_json()
    if identity.launcher.kind != "unknown":
        manifest.run["launcher"] = identity.launcher.kind
    unique: dict[str, Captured] = {}
    for item in files:
        unique.setdefault(item.bundle_path, item)
    manifest.files = [BundleFile(c.bundle_path, c.kind.value, c.origin, c.rank, c.mtime) for c in unique.values()]
    return Collection(manifest, list(unique.values()), seconds)


def _launcher(manifest: Manifest) -> str | None:
    if manifest.tmux and manifest.tmux.get("expected_session"):
        return "tmux"
    if any(f.kind == FileKind.ELASTIC_ERROR.value for f in manifest.files):
        return "torchrun"
    return None


def _exits(manifest: Manifest, spec: RunSpec) -> list[dict[str, Any]] | None:
    """Exit statuses the tmux capture recorded (dead panes of the run's session) join the
    process collector's records; torchelastic error files add theirs when read."""
    from diagnose.evidence.parsers.tmux import parse_tmux

    records: list[dict[str, Any]] = list(manifest.exits or [])
    ended = (spec.launch_record or {}).get("exit")
    if isinstance(ended, dict):
        code, sig, when = ended.get("code"), ended.get("signal"), ended.get("time")
        pid = (spec.launch_record or {}).get("pid")
        records.append(ExitRecord(
            "launch record", code if isinstance(code, int) and not isinstance(code, bool) else None,
            sig if isinstance(sig, int) and not isinstance(sig, bool) else None, None,
            pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
            f"{ended.get('how') or 'ended'} (launch record {spec.launch_record_path})",
            float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None).to_json())
    if manifest.tmux is not None:
        state = parse_tmux(manifest.tmux, manifest.tmux.get("expected_session"))
        wanted = state.expected_session
        for session in state.sessions:
            if session.name != wanted:  # a dead pane of another session says nothing of this run
                continue
            for pane in session.panes:
                if pane.dead:
                    how = f"tmux pane {pane.target} ({pane.command}) is dead" if pane.command else f"tmux pane {pane.target} is dead"
                    records.append(ExitRecord("tmux", pane.dead_status, pane.dead_signal, None, pane.pid, how).to_json())
    return records or None
