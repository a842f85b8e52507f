"""What kind of evidence a file holds, from its name and its first bytes."""

from __future__ import annotations

import re
from pathlib import Path

from diagnose.evidence.model import FileKind

KIND_NAMES = {kind.value: kind for kind in FileKind}

# Never evidence when met inside a scanned folder (a path given by name is still read).
SKIP_SUFFIXES = {
    ".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npy", ".npz", ".pkl", ".pickle", ".h5", ".onnx",
    ".png", ".jpg", ".jpeg", ".gif", ".svg", ".pdf", ".so", ".o", ".a", ".whl", ".zip", ".tar", ".tgz",
    ".py", ".pyc", ".sh", ".yaml", ".yml", ".toml", ".md", ".cfg", ".ini", ".ipynb", ".csv", ".parquet",
    ".arrow", ".wandb", ".lock", ".db", ".sqlite",
}
_DMESG_LINE = re.compile(r"^\s*(?:<\d+>)?\[\s*\d+\.\d+\]|^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3}\s+\d+ \d\d:\d\d:\d\d \d{4}\]")
_SYSLOG_KERNEL = re.compile(r"^(?:\w{3}\s+\d+ \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+)\s+\S+\s+kernel:")
# At most 9 digits: a rank, not a number int() refuses (over 4300 digits in a hostile name).
_RANK_NAME = re.compile(r"(?:^|[^a-z])rank[_-]?([0-9]{1,9})(?:\D|$)", re.IGNORECASE)


def split_kind(arg: str) -> tuple[FileKind | None, str]:
    """`KIND:PATH` forces a kind; anything else is a plain path."""
    head, sep, rest = arg.partition(":")
    if sep and head in KIND_NAMES and rest:
        return KIND_NAMES[head], rest
    return None, arg


def base_name(path: Path) -> str:
    name = path.name.lower()
    for suffix in (".gz", ".bz2", ".xz"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


_SKIP_WHY = {
    **dict.fromkeys((".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npy", ".npz", ".h5", ".onnx", ".arrow",
                     ".parquet", ".pkl", ".pickle", ".wandb"), "model, tensor or data file"),
    **dict.fromkeys((".png", ".jpg", ".jpeg", ".gif", ".svg", ".pdf"), "image or document"),
    **dict.fromkeys((".so", ".o", ".a", ".whl", ".zip", ".tar", ".tgz", ".pyc", ".lock", ".db", ".sqlite"),
                    "binary or archive"),
    **dict.fromkeys((".py", ".sh", ".ipynb"), "source code"),
    **dict.fromkeys((".yaml", ".yml", ".toml", ".cfg", ".ini"), "configuration"),
    ".md": "documentation",
    ".csv": "CSV that is no Lightning metrics.csv",
}


def skip_in_folder(path: Path) -> bool:
    return folder_skip_reason(path) is not None


def folder_skip_reason(path: Path) -> str | None:
    """Why a file met inside a scanned folder is no evidence (None: read it). JSON files are
    decided by their content (kind_from_content), not here."""
    name = base_name(path)
    if name.startswith("."):
        return "hidden file"
    if kind_from_name(path) is not None:
        return None  # a name diagnose knows (trainer_state.json, metrics.csv, hparams.yaml, nccl_trace_rank_0)
    suffix = Path(name).suffix
    if suffix in SKIP_SUFFIXES:
        return f"{_SKIP_WHY.get(suffix, 'not evidence')} ({suffix})"
    return None


# TORCH_NCCL_DEBUG_INFO_TEMP_FILE's default prefix is /tmp/nccl_trace_rank_ (the rank is appended)
_NCCL_TRACE_NAME = re.compile(r"^(?:nccl_trace_rank_|fr_trace_rank_|nccl_trace_)[0-9]{1,9}(?:\.pkl|\.pickle)?$")


def kind_from_name(path: Path) -> FileKind | None:
    name = base_name(path)
    if name == "trainer_state.json":
        return FileKind.TRAINER_STATE
    if name == "wandb-summary.json":
        return FileKind.WANDB_SUMMARY
    if name == "metrics.csv":
        return FileKind.LIGHTNING_METRICS
    if name == "hparams.yaml":
        return FileKind.LIGHTNING_HPARAMS
    if _NCCL_TRACE_NAME.match(name):
        return FileKind.NCCL_TRACE
    if name.startswith(("dmesg", "kern.log", "kernel")) or name.endswith(".dmesg") or "journalctl-k" in name:
        return FileKind.DMESG
    if name.startswith(("nvidia-smi", "nvidia_smi")):
        return FileKind.NVIDIA_SMI
    if name.startswith("nvml") and name.endswith(".json"):
        return FileKind.NVML
    if name.startswith(("requirements", "pip-freeze", "pip_freeze", "pip-list", "pip_list", "conda-list", "conda_list",
                        "collect_env", "collect-env", "packages")):
        return FileKind.PACKAGES
    return None


_NVIDIA_SMI_HEADER = re.compile(r"NVIDIA-SMI\s+\S+\s+Driver Version:\s*\S+\s+CUDA Version:\s*\S+")


def looks_like_nvidia_smi(text: str) -> bool:
    """nvidia-smi's output, and nothing else: a job log that prints the GPU table first and then
    trains is a log (its lines must be scanned)."""
    head = text[:4000]
    table = bool(_NVIDIA_SMI_HEADER.search(head))
    if not (table or "==============NVSMI LOG==============" in head or "<nvidia_smi_log>" in head or (
            head.startswith("index,") and "memory.used" in head.split("\n", 1)[0])):
        return False
    return not (table and _goes_on_after_the_table(text))


_TABLE_LINE = re.compile(r"^\s*(?:[|+]|$)")  # the table's rows and rules, or a blank line


def _goes_on_after_the_table(text: str) -> bool:
    """Lines of something else after nvidia-smi's table (its rows start with '|' or '+'), or
    before it beyond a line or two (a job script's own echo, a date)."""
    lines = text.splitlines()
    rows = [n for n, line in enumerate(lines) if line.lstrip().startswith(("|", "+"))]
    if not rows:
        return False
    after = [line for line in lines[rows[-1] + 1 :] if not _TABLE_LINE.match(line)]
    before = [line for line in lines[: rows[0]] if line.strip() and not _NVIDIA_SMI_HEADER.search(line)]
    # nvidia-smi's own first line is a date ("Mon Dec  7 04:38:10 2026"): one line before is its own.
    return len(after) >= 2 or len(before) >= 2


def looks_like_elastic_error(text: str) -> bool:
    head = text[:4000]
    return head.lstrip().startswith("{") and '"message"' in head and ("extraInfo" in head or "py_callstack" in head or "errorTraits" in head)



def json_kind(text: str) -> FileKind | None:
    """The kind of a JSON document by what it holds (a name can be anything: pod.json, status.json)."""
    head = text[:64 * 1024]
    if not head.lstrip().startswith("{"):
        return None
    if looks_like_elastic_error(head):
        return FileKind.ELASTIC_ERROR
    if re.search(r'"kind"\s*:\s*"(?:Pod|List|PodList)"', head) and ('"containerStatuses"' in head or '"phase"' in head
                                                                     or '"spec"' in head):
        return FileKind.K8S_POD
    if '"log_history"' in head and ('"global_step"' in head or '"max_steps"' in head):
        return FileKind.TRAINER_STATE
    if re.search(r'"_runtime"\s*:|"_step"\s*:|"_wandb"\s*:', head):
        return FileKind.WANDB_SUMMARY
    return None


_SACCT_HEADER = re.compile(r"^\s*JobID(?:\s+|\|)(?:.*(?:\s|\|))?(?:State|ExitCode)(?:\s|\||$)")


def looks_like_sacct(text: str) -> bool:
    """sacct's table (header, dashes) or --parsable output: a JobID column and State or ExitCode."""
    first = next((line for line in text[:8000].splitlines() if line.strip()), "")
    return bool(_SACCT_HEADER.match(first))


def kind_from_content(text: str) -> FileKind:
    from diagnose.evidence.parsers.packages import looks_like_packages

    if looks_like_nvidia_smi(text):
        return FileKind.NVIDIA_SMI
    by_json = json_kind(text)
    if by_json is not None:
        return by_json
    if looks_like_sacct(text):  # before the package lists: its dashes line reads like pip list's
        return FileKind.SACCT
    head = text[:4000].lstrip()
    if head.startswith("JobId=") and "JobState=" in head:
        return FileKind.SLURM  # scontrol show job (evidence/parsers/slurm.py)
    lines = [line for line in text.splitlines()[:80] if line.strip()]
    if lines:
        kernel = sum(1 for line in lines if _DMESG_LINE.match(line) or _SYSLOG_KERNEL.match(line))
        if kernel >= max(2, int(len(lines) * 0.6)):
            return FileKind.DMESG
    if looks_like_packages(text):
        return FileKind.PACKAGES
    return FileKind.LOG


def sniff(path: Path, head: bytes) -> FileKind:
    by_name = kind_from_name(path)
    if by_name is FileKind.NCCL_TRACE:  # a pickle: never decoded as text
        return by_name
    text = head.decode("utf-8", errors="replace")
    if by_name in (FileKind.NVML, FileKind.LIGHTNING_METRICS, FileKind.LIGHTNING_HPARAMS):
        return by_name
    if by_name in (FileKind.TRAINER_STATE, FileKind.WANDB_SUMMARY):
        return by_name if json_kind(text) in (by_name, None) and text.lstrip().startswith("{") else kind_from_content(text)
    if by_name is not None:
        # A name is only a hint: a "requirements.txt" full of tracebacks is a log.
        content = kind_from_content(text)
        if by_name is FileKind.PACKAGES and content is FileKind.LOG and text.strip():
            return FileKind.LOG
        return by_name
    return kind_from_content(text)


def rank_from_path(path: Path) -> int | None:
    """Rank of a per-rank log: train_rank3.log, rank-3/out.log, torchelastic's attempt_0/3/stderr.log."""
    match = _RANK_NAME.search(path.name)
    if match:
        return int(match.group(1))
    parent = path.parent.name
    if re.fullmatch(r"[0-9]{1,9}", parent) and path.parent.parent.name.startswith("attempt_"):
        return int(parent)
    match = _RANK_NAME.search(parent)
    return int(match.group(1)) if match else None
