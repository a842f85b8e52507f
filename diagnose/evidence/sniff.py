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


def skip_in_folder(path: Path) -> bool:
    name = base_name(path)
    if name.startswith("."):
        return True
    suffix = Path(name).suffix
    if suffix == ".json":
        return not (name.startswith(("nvml", "error")) or "error" in name)
    return suffix in SKIP_SUFFIXES


def kind_from_name(path: Path) -> FileKind | None:
    name = base_name(path)
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
    head = text[:4000]
    return bool(_NVIDIA_SMI_HEADER.search(head)) or "==============NVSMI LOG==============" in head or "<nvidia_smi_log>" in head or (
        head.startswith("index,") and "memory.used" in head.split("\n", 1)[0]
    )


def looks_like_elastic_error(text: str) -> bool:
    head = text[:4000]
    return head.lstrip().startswith("{") and '"message"' in head and ("extraInfo" in head or "py_callstack" in head or "errorTraits" in head)



def kind_from_content(text: str) -> FileKind:
    from diagnose.evidence.parsers.packages import looks_like_packages

    if looks_like_nvidia_smi(text):
        return FileKind.NVIDIA_SMI
    if looks_like_elastic_error(text):
        return FileKind.ELASTIC_ERROR
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
    text = head.decode("utf-8", errors="replace")
    if by_name is FileKind.NVML:
        return by_name
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
