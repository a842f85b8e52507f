"""Structured condition kinds: package, tmux, file, checkpoint, gpu, exit, process, metric.

Each kind names its fields and their types (checked when rules load) and knows how to test a
condition against the evidence. The answer is three-valued: True, False, or None when the
evidence was not collected (the rule is then reported as skipped, never as "no match").
"""

from __future__ import annotations

import re
import signal as signal_module
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from diagnose.evidence.model import Evidence, EvidenceItem
from diagnose.rules import predicates as p

if TYPE_CHECKING:
    from diagnose.evidence.model import Gpu


@dataclass(frozen=True)
class FieldSpec:
    parse: Callable[[Any], p.Predicate]
    doc: str
    gpu_level: bool = False  # gpu kind: a per-GPU field (any one GPU must satisfy them all)


@dataclass(frozen=True)
class FactCondition:
    kind: str
    tests: Mapping[str, p.Predicate]
    line: int

    def describe(self) -> str:
        return f"{self.kind}: " + ", ".join(f"{k}={v.text}" for k, v in self.tests.items())


@dataclass(frozen=True)
class FactResult:
    truth: bool | None
    items: tuple[EvidenceItem, ...] = ()
    captures: Mapping[str, str] | None = None
    missing: str | None = None  # why the evidence is unknown


Evaluator = Callable[[FactCondition, Evidence], FactResult]


@dataclass(frozen=True)
class FactKind:
    name: str
    doc: str
    fields: Mapping[str, FieldSpec]
    evaluate: Evaluator
    required: frozenset[str] = frozenset()
    # Capture names the evaluator adds when true (package adds <name>_version besides these);
    # `rules lint` checks placeholders against them, a test checks them against the evaluators.
    captures: frozenset[str] = frozenset()


def human_bytes(value: float | None) -> str:
    if value is None:
        return "?"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def human_seconds(value: float | None) -> str:
    if value is None:
        return "?"
    seconds = int(value)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def signal_name(number: int | None) -> str:
    if number is None:
        return "?"
    try:
        return signal_module.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _all(tests: Mapping[str, p.Predicate], values: Mapping[str, Any]) -> bool:
    return all(pred(values.get(name)) for name, pred in tests.items())


# ---------------------------------------------------------------- package


def _package(cond: FactCondition, ev: Evidence) -> FactResult:
    if ev.packages is None:
        return FactResult(None, missing="package versions were not collected")
    name_pred = cond.tests["name"]
    names = [n for n in ev.packages.versions if name_pred(n)]
    wanted_installed = cond.tests.get("installed")
    if not names:
        if wanted_installed is not None and wanted_installed(False):
            return FactResult(True, (EvidenceItem(ev.packages.source, f"{name_pred.text} is not installed"),))
        return FactResult(False)
    for name in names:
        version = ev.packages.versions[name]
        version_pred = cond.tests.get("version")
        if version_pred is not None and not version_pred(version):
            continue
        if wanted_installed is not None and not wanted_installed(True):
            continue
        key = re.sub(r"\W", "_", name) + "_version"
        return FactResult(True, (EvidenceItem(ev.packages.source, f"{name}=={version}"),), {key: version, "version": version})
    return FactResult(False)


# ---------------------------------------------------------------- tmux


def _tmux(cond: FactCondition, ev: Evidence) -> FactResult:
    state = ev.tmux
    if state is None:
        return FactResult(None, missing="tmux state was not collected")
    expected = state.expected_session
    session = next((s for s in state.sessions if s.name == expected), None) if expected else None
    panes = session.panes if session else tuple(pane for s in state.sessions for pane in s.panes)
    dead = [pane for pane in panes if pane.dead]
    values: dict[str, Any] = {
        "server": state.server.value,
        "launched": state.launched if state.launched is not None else expected is not None,
        "session": None if expected is None else ("present" if session else "absent"),
        "pane": None if not panes else ("dead" if dead else "alive"),
        "pane_status": dead[0].dead_status if dead else None,
    }
    for name, pred in cond.tests.items():
        if values[name] is None and name in ("session", "pane", "pane_status"):
            if name == "session":
                return FactResult(None, missing="the run's tmux session is not known (set tmux_session in the config)")
            return FactResult(False)
        if not pred(values[name]):
            return FactResult(False)
    text = f"tmux server {state.server.value.replace('_', ' ')} ({state.socket_path})"
    if state.message:
        text += f": {state.message}"
    if expected:
        text += f"; session '{expected}' {'present' if session else 'absent'}"
    if dead:
        text += f"; pane {dead[0].target} dead, status {dead[0].dead_status}"
    captures = {
        "tmux_socket": state.socket_path,
        "tmux_message": state.message,
        "tmux_session": expected or "",
        "pane_status": "" if not dead else str(dead[0].dead_status),
    }
    return FactResult(True, (EvidenceItem("tmux", text),), captures)


# ---------------------------------------------------------------- file


def _file(cond: FactCondition, ev: Evidence) -> FactResult:
    if ev.files is None:
        return FactResult(None, missing="the run's expected files were not checked (scan mode)")
    role_pred = cond.tests.get("role") or p.text("log")
    chosen = [f for f in ev.files if role_pred(f.role)]
    if not chosen:
        return FactResult(None, missing=f"the run has no expected file of role {role_pred.text}")
    for item in chosen:
        values = {"role": item.role, "exists": item.exists, "siblings": bool(item.siblings), "size": item.size}
        if not _all(cond.tests, values):
            continue
        if item.exists:
            text = f"{item.path} exists ({human_bytes(item.size)})"
        else:
            text = f"{item.path} does not exist"
            if item.siblings:
                text += "; other logs there: " + ", ".join(item.siblings[:3])
        captures = {
            "file_path": item.path,
            "file_siblings": ", ".join(item.siblings[:3]),
            "newest_sibling": item.siblings[0] if item.siblings else "",
        }
        return FactResult(True, (EvidenceItem("files", text),), captures)
    return FactResult(False)


# ---------------------------------------------------------------- checkpoint


def _checkpoint(cond: FactCondition, ev: Evidence) -> FactResult:
    state = ev.checkpoints
    if state is None:
        return FactResult(None, missing="the checkpoint directory was not checked")
    age = state.collected_at - state.newest.mtime if state.newest else None
    values = {
        "exists": state.exists,
        "count": state.file_count,
        "newest_age": age,
        "zero_byte": bool(state.zero_byte),
        "partial": bool(state.partial),
        "free_bytes": state.free_bytes,
        "total_bytes": state.total_bytes,
    }
    if not _all(cond.tests, values):
        return FactResult(False)
    parts = [f"{state.directory}: " + ("missing" if not state.exists else f"{state.file_count} files, {human_bytes(state.total_bytes)}")]
    if state.newest:
        parts.append(f"newest {state.newest.path} ({human_seconds(age)} old)")
    if state.zero_byte:
        parts.append("zero-byte: " + ", ".join(state.zero_byte[:3]))
    if state.partial:
        parts.append("partial: " + ", ".join(state.partial[:3]))
    if state.free_bytes is not None:
        parts.append(f"{human_bytes(state.free_bytes)} free")
    captures = {
        "checkpoint_dir": state.directory,
        "checkpoint_count": str(state.file_count),
        "newest_checkpoint": state.newest.path if state.newest else "",
        "newest_age": human_seconds(age),
        "free_space": human_bytes(state.free_bytes),
        "zero_byte_files": ", ".join(state.zero_byte[:3]),
        "partial_files": ", ".join(state.partial[:3]),
    }
    return FactResult(True, (EvidenceItem("checkpoints", "; ".join(parts)),), captures)


# ---------------------------------------------------------------- gpu


def _gpu_values(gpu: Gpu) -> dict[str, Any]:
    used_pct = None
    if gpu.memory_used_mib is not None and gpu.memory_total_mib:
        used_pct = 100.0 * gpu.memory_used_mib / gpu.memory_total_mib
    return {
        "ecc_uncorrected": gpu.ecc_uncorrected,
        "retired_pages_pending": gpu.retired_pages_pending,
        "remapped_rows_pending": gpu.remapped_rows_pending,
        "remapped_rows_failure": gpu.remapped_rows_failure,
        "memory_used_mib": gpu.memory_used_mib,
        "memory_used_pct": used_pct,
        "utilization": gpu.utilization_pct,
        "processes": len(gpu.processes),
        "throttle": gpu.throttle_reasons,
    }


def _gpu(cond: FactCondition, ev: Evidence) -> FactResult:
    state = ev.gpu
    if state is None:
        return FactResult(None, missing="GPU state was not collected")
    machine = {"count": len(state.gpus), "driver": state.driver_version, "cuda": state.cuda_version}
    machine_tests = {k: v for k, v in cond.tests.items() if not GPU_FIELDS[k].gpu_level}
    gpu_tests = {k: v for k, v in cond.tests.items() if GPU_FIELDS[k].gpu_level}
    if not _all(machine_tests, machine):
        return FactResult(False)
    captures = {"driver_version": state.driver_version or "?", "cuda_version": state.cuda_version or "?"}
    if not gpu_tests:
        text = f"{len(state.gpus)} GPU(s), driver {state.driver_version or '?'}, CUDA {state.cuda_version or '?'}"
        return FactResult(True, (EvidenceItem("gpu", text),), captures)
    for gpu in state.gpus:
        values = _gpu_values(gpu)
        if _all(gpu_tests, values):
            shown = ", ".join(f"{k}={values[k]}" for k in gpu_tests)
            text = f"GPU {gpu.index} ({gpu.name or '?'}, {gpu.bus_id or gpu.uuid or '?'}): {shown}"
            captures.update({"gpu_index": str(gpu.index), "gpu_name": gpu.name or "?", "gpu_uuid": gpu.uuid or "?"})
            return FactResult(True, (EvidenceItem("gpu", text),), captures)
    return FactResult(False)


# ---------------------------------------------------------------- exit


def _exit(cond: FactCondition, ev: Evidence) -> FactResult:
    if ev.exits is None:
        return FactResult(None, missing="no exit status was recorded")
    for record in ev.exits:
        values = {"code": record.code, "signal": record.signal, "rank": record.rank}
        if not _all(cond.tests, values):
            continue
        how = f"exit code {record.code}" if record.code is not None else ""
        if record.signal is not None:
            how = (how + ", " if how else "") + f"killed by {signal_name(record.signal)}"
        who = f"rank {record.rank}" if record.rank is not None else (f"pid {record.pid}" if record.pid else "process")
        text = f"{who}: {how}" + (f" ({record.message})" if record.message else "")
        captures = {
            "exit_code": "" if record.code is None else str(record.code),
            "exit_signal": signal_name(record.signal) if record.signal is not None else "",
            "exit_rank": "" if record.rank is None else str(record.rank),
        }
        return FactResult(True, (EvidenceItem(record.source, text, rank=record.rank),), captures)
    return FactResult(False)


# ---------------------------------------------------------------- metric


def _words(name: str) -> tuple[str, ...]:
    """train/loss -> (train, loss); eval_loss -> (eval, loss): `name: loss` matches them all."""
    return tuple(w for w in re.split(r"[^A-Za-z0-9]+", name.lower()) if w)


def _metric(cond: FactCondition, ev: Evidence) -> FactResult:
    if ev.metrics is None:
        return FactResult(None, missing="no training-metrics file (trainer_state.json, metrics.csv, wandb-summary.json) was read")
    for series in ev.metrics:
        bad = series.first_nonfinite()
        grown = series.divergence()
        values = {"name": _words(series.name), "nonfinite": bad is not None, "diverged": grown is not None}
        if not _all(cond.tests, values):
            continue
        items: list[EvidenceItem] = []
        captures = {"metric_name": series.name, "metric_file": series.source}
        if "diverged" in cond.tests and grown is not None:
            (low_step, low, low_line), (high_step, high, high_line) = grown
            items.append(EvidenceItem(series.source, f"{series.name} {low:.4g} at step {low_step} (its lowest)", low_line))
            items.append(EvidenceItem(series.source, f"{series.name} {high:.4g} at step {high_step}", high_line))
            captures.update(metric_growth=f"{high / low:.1e}", metric_low_step=str(low_step), metric_high_step=str(high_step))
        if bad is not None and ("nonfinite" in cond.tests or not items):
            step, value, line = bad
            items.append(EvidenceItem(series.source, f"{series.name} {value} at step {step}", line))
            captures.update(loss_value=str(value), metric_step=str(step))
        if not items:
            last = series.points[-1]
            items.append(EvidenceItem(series.source, f"{series.name} {last[1]:.4g} at step {last[0]}", last[2]))
        return FactResult(True, tuple(items), captures)
    return FactResult(False)


# ---------------------------------------------------------------- process


def _process(cond: FactCondition, ev: Evidence) -> FactResult:
    state = ev.process
    if state is None:
        return FactResult(None, missing="the run's processes were not looked up")
    if not _all(cond.tests, {"alive": state.alive}):
        return FactResult(False)
    text = ("running: pid " + ", ".join(map(str, state.pids))) if state.alive else "no process of the run is running"
    if state.command:
        text += f" ({state.command})"
    return FactResult(True, (EvidenceItem("process", text),), {"pids": ", ".join(map(str, state.pids))})


PACKAGE_FIELDS = {
    "name": FieldSpec(p.text, "package name (normalised: wandb, torch, flash-attn)"),
    "version": FieldSpec(p.version_spec, "PEP 440 specifier the installed version must satisfy, e.g. '>=0.19'"),
    "installed": FieldSpec(p.boolean, "true: installed (default); false: must be absent"),
}
TMUX_FIELDS = {
    "server": FieldSpec(p.choice(["running", "stale_socket", "no_socket", "error"]), "state of the tmux server"),
    "launched": FieldSpec(p.boolean, "the run was launched in tmux (config, launch record, a session named like the run, "
                                   "or a socket made inside the launch window; never a stale socket alone)"),
    "session": FieldSpec(p.choice(["present", "absent"]), "the run's session exists"),
    "pane": FieldSpec(p.choice(["alive", "dead"]), "a pane of the run's session is dead (remain-on-exit)"),
    "pane_status": FieldSpec(p.number, "exit status of the dead pane"),
}
FILE_FIELDS = {
    "role": FieldSpec(p.text, "which expected file: log (default)"),
    "exists": FieldSpec(p.boolean, "the file exists"),
    "siblings": FieldSpec(p.boolean, "files of the same shape exist beside it (e.g. older runs' logs)"),
    "size": FieldSpec(p.number, "size in bytes"),
}
CHECKPOINT_FIELDS = {
    "exists": FieldSpec(p.boolean, "the checkpoint directory exists"),
    "count": FieldSpec(p.number, "number of files in it"),
    "newest_age": FieldSpec(p.number, "seconds since the newest file was written"),
    "zero_byte": FieldSpec(p.boolean, "some file is empty"),
    "partial": FieldSpec(p.boolean, "some file looks like an interrupted save (*.tmp, *.partial, *.incomplete)"),
    "free_bytes": FieldSpec(p.number, "free space on its filesystem, bytes"),
    "total_bytes": FieldSpec(p.number, "bytes in the directory"),
}
GPU_FIELDS = {
    "count": FieldSpec(p.number, "number of GPUs seen"),
    "driver": FieldSpec(p.version_spec, "driver version specifier"),
    "cuda": FieldSpec(p.version_spec, "CUDA version the driver supports"),
    "ecc_uncorrected": FieldSpec(p.number, "volatile uncorrected ECC errors", gpu_level=True),
    "retired_pages_pending": FieldSpec(p.boolean, "a retired page waits for a reset", gpu_level=True),
    "remapped_rows_pending": FieldSpec(p.boolean, "a remapped row waits for a reset", gpu_level=True),
    "remapped_rows_failure": FieldSpec(p.boolean, "row remapping failed", gpu_level=True),
    "memory_used_mib": FieldSpec(p.number, "memory in use, MiB", gpu_level=True),
    "memory_used_pct": FieldSpec(p.number, "memory in use, percent", gpu_level=True),
    "utilization": FieldSpec(p.number, "utilisation, percent", gpu_level=True),
    "processes": FieldSpec(p.number, "number of compute processes", gpu_level=True),
    "throttle": FieldSpec(p.contains, "active throttle reasons include any of these", gpu_level=True),
}
EXIT_FIELDS = {
    "code": FieldSpec(p.number, "exit code (137 = 128 + SIGKILL as shells report it; -9 as Python reports it)"),
    "signal": FieldSpec(p.signal_number, "killing signal, by number or name"),
    "rank": FieldSpec(p.number, "rank of the process"),
}
PROCESS_FIELDS = {"alive": FieldSpec(p.boolean, "a process of the run is still running")}
METRIC_FIELDS = {
    "name": FieldSpec(p.contains, "a word of the metric's name: loss matches loss, train_loss, eval_loss, train/loss"),
    "nonfinite": FieldSpec(p.boolean, "the metric became NaN or inf"),
    "diverged": FieldSpec(p.boolean, "it grew at least 1000-fold after its lowest value (a loss that ran away)"),
}

FACT_KINDS: dict[str, FactKind] = {
    "package": FactKind("package", "an installed package and its version", PACKAGE_FIELDS, _package, frozenset({"name"}),
                        frozenset({"version"})),
    "tmux": FactKind("tmux", "the tmux server and the run's session", TMUX_FIELDS, _tmux,
                     captures=frozenset({"tmux_socket", "tmux_message", "tmux_session", "pane_status"})),
    "file": FactKind("file", "a file the run should have written", FILE_FIELDS, _file,
                     captures=frozenset({"file_path", "file_siblings", "newest_sibling"})),
    "checkpoint": FactKind("checkpoint", "the checkpoint directory", CHECKPOINT_FIELDS, _checkpoint,
                           captures=frozenset({"checkpoint_dir", "checkpoint_count", "newest_checkpoint", "newest_age",
                                               "free_space", "zero_byte_files", "partial_files"})),
    "gpu": FactKind("gpu", "GPU state from NVML or nvidia-smi", GPU_FIELDS, _gpu,
                    captures=frozenset({"driver_version", "cuda_version", "gpu_index", "gpu_name", "gpu_uuid"})),
    "exit": FactKind("exit", "how a process of the run ended", EXIT_FIELDS, _exit,
                     captures=frozenset({"exit_code", "exit_signal", "exit_rank"})),
    "process": FactKind("process", "whether the run is still running", PROCESS_FIELDS, _process,
                        captures=frozenset({"pids"})),
    "metric": FactKind("metric", "a training metric from trainer_state.json, metrics.csv or wandb-summary.json",
                       METRIC_FIELDS, _metric, frozenset({"name"}),
                       captures=frozenset({"metric_name", "metric_file", "metric_step", "loss_value", "metric_growth",
                                           "metric_low_step", "metric_high_step"})),
}


def evaluate(cond: FactCondition, evidence: Evidence) -> FactResult:
    return FACT_KINDS[cond.kind].evaluate(cond, evidence)
