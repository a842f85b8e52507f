"""Everything collected about one run, as frozen dataclasses.

A field that is None means "not collected" (rules needing it are skipped); an empty tuple
means "collected, and there was nothing". Gaps say why something could not be collected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from diagnose.evidence.logview import KERNEL_TAIL_BYTES, LogView


class TextKind(str, Enum):
    """Kinds of line-oriented text that rules search with regexes."""

    LOG = "log"
    DMESG = "dmesg"
    SLURM = "slurm"  # Slurm's own record of a job: sacct --parsable2 lines, `scontrol show job`


class FileKind(str, Enum):
    """What a file handed to `diagnose scan` (or stored in a bundle) contains."""

    LOG = "log"
    DMESG = "dmesg"
    NVIDIA_SMI = "nvidia-smi"
    NVML = "nvml"
    PACKAGES = "packages"
    ELASTIC_ERROR = "elastic-error"
    SLURM = "slurm"
    # Files ML runs and their schedulers leave (read when named and inside scanned folders):
    K8S_POD = "k8s-pod"  # kubectl get pod -o json: container states, exit codes, OOMKilled
    SACCT = "sacct"  # Slurm accounting: State, ExitCode per job and step
    TRAINER_STATE = "trainer-state"  # HF Trainer trainer_state.json: log_history (step, loss)
    LIGHTNING_METRICS = "lightning-metrics"  # Lightning CSVLogger metrics.csv
    LIGHTNING_HPARAMS = "lightning-hparams"  # Lightning hparams.yaml
    WANDB_SUMMARY = "wandb-summary"  # wandb-summary.json: the last value of each metric
    NCCL_TRACE = "nccl-trace"  # NCCL flight recorder dump (pickle): read with a restricted unpickler

    @property
    def text_kind(self) -> TextKind | None:
        if self is FileKind.LOG:
            return TextKind.LOG
        if self is FileKind.DMESG:
            return TextKind.DMESG
        if self is FileKind.SLURM:
            return TextKind.SLURM
        return None

    @property
    def also_scanned(self) -> bool:
        """Parsed for its facts, and its lines scanned like a log's as well: rules quote them
        (`"reason": "OOMKilled"`, `"loss": NaN`) with their line numbers."""
        return self in (FileKind.K8S_POD, FileKind.SACCT, FileKind.TRAINER_STATE, FileKind.WANDB_SUMMARY)


@dataclass(frozen=True)
class TextFile:
    """A file of lines (a training log or a kernel log) to be scanned."""

    kind: TextKind
    path: Path  # where the bytes are read from
    display: str  # how reports name it (relative path, or the original path on the run's host)
    rank: int | None = None  # rank of the process that wrote it, when the file is per rank
    mtime: float | None = None
    boot_time: float | None = None  # dmesg only: wall time of boot, to place [secs] on the clock
    year: int | None = None  # syslog-style kernel logs carry no year
    host: str | None = None  # the node it came from (several hosts merged); None: the run's host
    # Seconds that host's clock was ahead of the collecting machine's (measured at collection):
    # every time read from this file (its lines, mtime, boot time) is moved back by it.
    clock_offset: float = 0.0

    def on_clock(self, moment: float | None) -> float | None:
        """A time read from this file (on its host's clock), on the one clock of the report."""
        return moment - self.clock_offset if moment is not None and self.clock_offset else moment
    # Read from a bundle: the bundle (as given) and the file's path inside it; reports that link
    # to files (SARIF) name the file by these, the host path (display) kept beside.
    bundle: str | None = None
    member: str | None = None
    # pdsh output (DeepSpeed's multi-node runner): every line names its host ("worker-1: ...")
    host_prefixed: bool = False
    # What the scan read of it, for every reader after (evidence/logview.py): one per object.
    view: LogView = field(default_factory=LogView, init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind is TextKind.DMESG:
            self.view.window = KERNEL_TAIL_BYTES


def normalise_package(name: str) -> str:
    """PEP 503 normalisation: `Torch_Vision` and `torch.vision` are `torch-vision`."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Packages:
    versions: Mapping[str, str]  # normalised name -> version
    source: str

    def to_json(self) -> dict[str, str]:
        """{name: version}: the JSON form of a package list (rule test cases give theirs so)."""
        return dict(self.versions)

    @classmethod
    def from_json(cls, data: object, source: str, what: str = "package") -> Packages:
        if not isinstance(data, dict):
            raise ValueError(f"{what}: expected an object of name: version, got {type(data).__name__}")
        versions: dict[str, str] = {}
        for name, version in data.items():
            # YAML reads `numpy: 2.0` as a number; the version is its text either way.
            if isinstance(version, bool) or not isinstance(version, (str, int, float)) or not isinstance(name, str):
                raise ValueError(f"{what}.{name}: expected a version, got {type(version).__name__}")
            versions[normalise_package(name)] = str(version)
        return cls(versions, source)


@dataclass(frozen=True)
class ExitRecord:
    """How a process of the run ended: from a process table, a tmux pane or an error file."""

    source: str
    code: int | None = None
    signal: int | None = None
    rank: int | None = None
    pid: int | None = None
    message: str = ""
    time: float | None = None  # when it failed, where the record says (torchelastic error files do)
    host: str | None = None  # the node it was recorded on (several hosts merged)

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("source", "code", "signal", "rank", "pid", "message", "time")

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "code": self.code, "signal": self.signal, "rank": self.rank, "pid": self.pid,
                "message": self.message, "time": self.time}

    @classmethod
    def from_json(cls, data: object, what: str = "exits[]", strict: bool = False) -> ExitRecord:
        """`signal` may also be a name (SIGKILL, KILL): rule test cases write it so."""
        from diagnose.evidence.jsonread import obj, opt_int, opt_number, opt_string

        d = obj(data, what, cls.JSON_KEYS if strict else None)
        named = d.get("signal")
        signal = _signal_number(named, f"{what}.signal") if isinstance(named, str) else opt_int(d, "signal", what)
        return cls(opt_string(d, "source", what) or "exit", opt_int(d, "code", what), signal,
                   opt_int(d, "rank", what), opt_int(d, "pid", what), opt_string(d, "message", what) or "",
                   opt_number(d, "time", what))


def _signal_number(name: str, what: str) -> int:
    import signal as signal_module

    text = name.strip().upper()
    if text.isdigit():
        return int(text)
    try:
        return int(signal_module.Signals[text if text.startswith("SIG") else "SIG" + text])
    except KeyError:
        raise ValueError(f"{what}: {name!r} is not a signal name or number") from None


@dataclass(frozen=True)
class MetricSeries:
    """One logged training metric (loss, train_loss, eval_loss) from a file a run wrote
    (trainer_state.json, metrics.csv, wandb-summary.json): its values by step, and what they say."""

    source: str
    name: str
    points: tuple[tuple[int | None, float, int | None], ...]  # (step, value, line of the file)
    last_step: int | None = None  # the run's last logged step (of any metric)
    max_steps: int | None = None  # what the run was set to reach, where the file says

    def first_nonfinite(self) -> tuple[int | None, float, int | None] | None:
        return next((p for p in self.points if p[1] != p[1] or p[1] in (float("inf"), float("-inf"))), None)

    def divergence(self) -> tuple[tuple[int | None, float, int | None], tuple[int | None, float, int | None]] | None:
        """(lowest point, the later point it grew from) when the metric grew at least 1000-fold
        after its lowest finite value: a loss that ran away (even before it became inf/NaN)."""
        finite = [p for p in self.points if p[1] == p[1] and abs(p[1]) != float("inf")]
        if len(finite) < 3:
            return None
        low_index = min(range(len(finite)), key=lambda i: finite[i][1])
        low = finite[low_index]
        later = finite[low_index + 1:]
        if not later or low[1] <= 0:
            return None
        high = max(later, key=lambda p: p[1])
        return (low, high) if high[1] >= low[1] * 1000 else None


@dataclass(frozen=True)
class Gap:
    """Evidence that could not be collected, and why. Never silently 'healthy'."""

    source: str
    reason: str


@dataclass(frozen=True)
class HostInfo:
    """One node of a multi-host collection: whether it answered, and how far its clock was off."""

    name: str
    status: str = "ok"  # ok | gap | timeout | error
    reason: str | None = None
    clock_offset: float | None = None  # seconds its clock was ahead of the collector's; None: not measured
    clock_rtt: float | None = None  # round trip of the measurement: the offset is good to half of it
    collected_at: float | None = None
    seconds: float | None = None
    gpu: GpuState | None = None  # that node's GPU state (Evidence.gpu holds the first node's)


@dataclass(frozen=True)
class RunInfo:
    id: str
    mode: str  # "scan" | "bundle" | "live"
    host: str | None = None
    collected_at: float | None = None
    launcher: str | None = None  # "tmux" | "nohup" | "torchrun" | ...
    inputs: tuple[str, ...] = ()
    # --stall-after as given at collection (a bundle keeps it: read without one, the run is judged
    # by the threshold its collection used, and its stacks were taken by)
    stall_after: float | None = None


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """Built by keyword (a dozen fields, most optional); copied with dataclasses.replace."""

    run: RunInfo
    texts: tuple[TextFile, ...] = ()
    packages: Packages | None = None
    gpu: GpuState | None = None
    tmux: TmuxState | None = None
    files: tuple[ExpectedFile, ...] | None = None
    checkpoints: CheckpointState | None = None
    process: ProcessState | None = None
    exits: tuple[ExitRecord, ...] | None = None
    gaps: tuple[Gap, ...] = ()
    notes: tuple[str, ...] = field(default=())  # e.g. "skipped binary file x.pt"
    # How the evidence was gathered (per collector: status, seconds, bytes); shown in JSON stats.
    stats: Mapping[str, object] = field(default_factory=dict)
    # Which run this is (live collection or a bundle's manifest `identity`); None for a scan.
    identity: RunIdentity | None = None
    # Training metrics from files the run wrote; None: no such file was read (metric rules skip).
    metrics: tuple[MetricSeries, ...] | None = None
    # The nodes of a multi-host collection or of several bundles merged; () for one host.
    hosts: tuple[HostInfo, ...] = ()
    # What readers derived from all the logs at once (the run log across ranks), kept for this
    # object's diagnosis: a copy (dataclasses.replace) starts anew.
    derived: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def texts_of(self, kind: TextKind) -> tuple[TextFile, ...]:
        return tuple(t for t in self.texts if t.kind is kind)


if TYPE_CHECKING:
    from diagnose.evidence.facts import (
        CheckpointFile as CheckpointFile,
    )
    from diagnose.evidence.facts import (
        CheckpointState as CheckpointState,
    )
    from diagnose.evidence.facts import (
        ExpectedFile as ExpectedFile,
    )
    from diagnose.evidence.facts import (
        Gpu as Gpu,
    )
    from diagnose.evidence.facts import (
        GpuProcess as GpuProcess,
    )
    from diagnose.evidence.facts import (
        GpuState as GpuState,
    )
    from diagnose.evidence.facts import (
        ProcessState as ProcessState,
    )
    from diagnose.evidence.facts import (
        RunIdentity as RunIdentity,
    )
    from diagnose.evidence.facts import (
        TmuxPane as TmuxPane,
    )
    from diagnose.evidence.facts import (
        TmuxServer as TmuxServer,
    )
    from diagnose.evidence.facts import (
        TmuxSession as TmuxSession,
    )
    from diagnose.evidence.facts import (
        TmuxState as TmuxState,
    )

_FACT_CLASSES = frozenset({"GpuProcess", "Gpu", "GpuState", "TmuxServer", "TmuxPane", "TmuxSession", "TmuxState", "ExpectedFile", "CheckpointFile", "CheckpointState", "ProcessState",
                            "RunIdentity", "ExpectedLog", "RunProcess", "RunLauncher", "RunWindow", "Interpreter",
                            "LastOutput"})


def __getattr__(name: str) -> Any:
    """The fact classes load on first use (scanning a log never needs them)."""
    if name in _FACT_CLASSES:
        from diagnose.evidence import facts as evidence_facts
        return getattr(evidence_facts, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class EvidenceItem:
    """One line (or one fact) a cause rests on."""

    source: str  # file as reports name it, or a collector name ("tmux", "gpu") for facts
    text: str
    line: int | None = None
    time: float | None = None
    rank: int | None = None
    host: str | None = None
    count: int = 1  # how many lines matched this pattern here; only the first/last few are kept
    # The part of text a rule's pattern matched ("": not known, or a fact): reports highlight it
    # and cut a long line around it. Kept as text, not a span, so that masking a secret in the
    # line (which changes its length) cannot make it point at the wrong characters.
    match: str = ""

    def location(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else self.source
