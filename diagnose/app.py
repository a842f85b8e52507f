"""The application layer: inputs -> Evidence -> findings -> ranked Diagnosis.

The CLI calls these; they know nothing of terminals or output formats.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diagnose.engine.findings import Diagnosis
from diagnose.errors import DiagnoseError
from diagnose.evidence.model import Evidence, Gap
from diagnose.rules.model import RuleSet

if TYPE_CHECKING:
    from diagnose.live.config import Config
    from diagnose.live.runs import RunSpec


def diagnose(evidence: Evidence, rules: RuleSet, engine: str = "auto", since: float | None = None,
             until: float | None = None, stall_after: float | None = None) -> Diagnosis:
    from diagnose.engine.checks import checks
    from diagnose.engine.evaluate import run_rules
    from diagnose.engine.rank import rank_all
    from diagnose.engine.runview import STALL_AFTER

    started = time.perf_counter()
    result = run_rules(rules.rules, evidence, engine=engine, since=since, until=until)
    ranked = rank_all(result.findings, evidence, stall_after=STALL_AFTER if stall_after is None else stall_after)
    # Engine and ranker gaps: budgets spent, logs that could not be read again (each said once).
    gaps = list(evidence.gaps) + list(dict.fromkeys(result.gaps + ranked.gaps))
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
    return Diagnosis(evidence, ranked.causes, result.skipped, gaps, stats, elsewhere=ranked.elsewhere,
                     checked=checks(evidence, ranked.view, ranked.events), state=ranked.state.state,
                     state_reason=ranked.state.reason,
                     window=(ranked.view.start, ranked.view.start_source, ranked.view.last_write, ranked.view.end_source))


# ---------------------------------------------------------------- live runs

def found_anything(spec: RunSpec, evidence: Evidence) -> bool:
    """Whether anything relates to the run id (without a config, a typo must not look like a
    crash). A run that was expected but left no trace (siblings, a known log path, a tmux
    socket of its launch) does: that absence is the finding."""
    from diagnose.live.identity import relates

    if evidence.identity is not None:
        return relates(spec, evidence.identity)
    if spec.configured or spec.logs or spec.error_files or spec.wandb_dirs or spec.checkpoint_dir:
        return True
    if evidence.process is not None and evidence.process.alive:
        return True
    tmux = evidence.tmux
    return tmux is not None and any(s.name == spec.id for s in tmux.sessions)


def nothing_found(spec: RunSpec, manifest: Any = None) -> DiagnoseError:
    """Exit 2: nothing relates to the id; name the closest ids that exist."""
    from diagnose.live.identity import did_you_mean

    close = did_you_mean(spec, manifest) if manifest is not None else []
    message = f"{spec.id}: no file, process, tmux session or launch record relates to this run id"
    if close:
        token, where = close[0]
        others = ", ".join(t for t, _w in close[1:])
        message += f"; did you mean {token}? {where}" + (f" (or {others})" if others else "")
    else:
        message += (f" (looked in: {'; '.join(spec.looked)}); check the run id, pass --dir, or say where its files "
                    "are in diagnose.toml")
    return DiagnoseError(message)


def evidence_for_run(run_id: str, config: Config, search_dirs: list[Path], progress: bool = False,
                     stall_after: float | None = None) -> Evidence:
    """Collect everything the machine can tell about the run, as Evidence (mode 'live')."""
    from diagnose.live.collectors.run import collect_run
    from diagnose.live.discovery import resolve

    spec = resolve(run_id, config, search_dirs, stall_after=stall_after)
    collection = collect_run(spec, progress=progress)
    evidence = collection.evidence()
    if not found_anything(spec, evidence):
        raise nothing_found(spec, collection.manifest)
    return evidence


class PendingRun:
    """evidence_for_run in a background thread, so collecting (mostly waiting on tmux, dmesg,
    the run's interpreter and the GPU driver) overlaps with loading and compiling the rules."""

    def __init__(self, run_id: str, config: Config, search_dirs: list[Path], progress: bool = False,
                 stall_after: float | None = None) -> None:
        import threading

        self._result: Evidence | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, args=(run_id, config, search_dirs, progress, stall_after),
                                        name="collect", daemon=True)
        self._thread.start()

    def _work(self, run_id: str, config: Config, search_dirs: list[Path], progress: bool, stall_after: float | None) -> None:
        try:
            self._result = evidence_for_run(run_id, config, search_dirs, progress, stall_after)
        except BaseException as exc:  # handed to the caller of evidence()
            self._error = exc

    def evidence(self) -> Evidence:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def start_run(run_id: str, config: Config, search_dirs: list[Path], progress: bool = False,
              stall_after: float | None = None) -> PendingRun:
    return PendingRun(run_id, config, search_dirs, progress, stall_after)


def collect_bundle(run_id: str, config: Config, search_dirs: list[Path], out: Path, progress: bool = False,
                   raw: bool = False, stall_after: float | None = None) -> tuple[Path, Any]:
    """`diagnose collect`: the run's evidence written as a bundle, secrets masked unless raw.
    Returns (path, manifest)."""
    from diagnose.evidence.bundle import write_bundle
    from diagnose.live.collectors.run import collect_run
    from diagnose.live.discovery import resolve

    spec = resolve(run_id, config, search_dirs, stall_after=stall_after)
    collection = collect_run(spec, progress=progress)
    if not found_anything(spec, collection.evidence()):
        raise nothing_found(spec, collection.manifest)
    return write_bundle(out, collection.manifest, collection.copies(), raw=raw), collection.manifest
