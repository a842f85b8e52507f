"""GPU state from nvidia-smi output (the default table, --query-gpu CSV, -q text, -q -x XML)
and from the NVML readings the gpu collector stores as JSON."""

from __future__ import annotations

import re

from diagnose.evidence import Gpu, GpuProcess, GpuState

_HEADER = re.compile(r"NVIDIA-SMI\s+(?P<smi>\S+)\s+Driver Version:\s*(?P<driver>\S+)\s+CUDA Version:\s*(?P<cuda>\S+)")
_GPU_ROW = re.compile(r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?:On|Off)\s+\|\s+(?P<bus>[0-9A-Fa-f:.]+)\s+(?:On|Off)\s+\|\s+(?P<ecc>\S+)\s+\|")
_MEM_ROW = re.compile(
    r"^\|\s+\S+\s+(?P<temp>\d+|N/A)C?\s+\S+\s+.*?\|\s+(?P<used>\d+)MiB\s+/\s+(?P<total>\d+)MiB\s+\|\s+(?P<util>\d+|N/A)%?\s"
)
_PROC_ROW = re.compile(r"^\|\s+(?P<gpu>\d+)\s+\S+\s+\S+\s+(?P<pid>\d+)\s+\S+\s+(?P<name>.+?)\s+(?P<mem>\d+|N/A)(?:MiB)?\s+\|$")


def looks_like_nvidia_smi(text: str) -> bool:
    head = text[:4000]
    return bool(_HEADER.search(head)) or "==============NVSMI LOG==============" in head or "<nvidia_smi_log>" in head or (
        head.startswith("index,") and "memory.used" in head.split("\n", 1)[0]
    )


def _num(value: str | None) -> float | None:
    if value is None:
        return None
    match = re.search(r"-?\d+(?:\.\d+)?", value)
    return float(match.group()) if match else None


def parse_table(text: str, source: str) -> GpuState:
    header = _HEADER.search(text)
    gpus: dict[int, dict[str, object]] = {}
    procs: dict[int, list[GpuProcess]] = {}
    current: int | None = None
    in_processes = False
    for line in text.splitlines():
        if "Processes:" in line:
            in_processes = True
            continue
        if in_processes:
            match = _PROC_ROW.match(line.rstrip())
            if match:
                procs.setdefault(int(match.group("gpu")), []).append(
                    GpuProcess(int(match.group("pid")), match.group("name").strip(), _num(match.group("mem")))
                )
            continue
        row = _GPU_ROW.match(line)
        if row:
            current = int(row.group("index"))
            ecc = row.group("ecc")
            gpus[current] = {"name": row.group("name").strip(), "bus": row.group("bus"),
                             "ecc": int(ecc) if ecc.isdigit() else None}
            continue
        mem = _MEM_ROW.match(line)
        if mem and current is not None and "used" not in gpus[current]:
            gpus[current].update(used=_num(mem.group("used")), total=_num(mem.group("total")),
                                 util=_num(mem.group("util")), temp=_num(mem.group("temp")))
    out = []
    for index, info in sorted(gpus.items()):
        out.append(Gpu(
            index=index, name=str(info.get("name")), bus_id=str(info.get("bus")),
            memory_used_mib=info.get("used"), memory_total_mib=info.get("total"),  # type: ignore[arg-type]
            utilization_pct=info.get("util"), temperature_c=info.get("temp"),  # type: ignore[arg-type]
            ecc_uncorrected=info.get("ecc"),  # type: ignore[arg-type]
            processes=tuple(procs.get(index, ())),
        ))
    return GpuState(source, header.group("driver") if header else None, header.group("cuda") if header else None, tuple(out))


def parse_gpu_text(text: str, source: str) -> GpuState:
    """Any nvidia-smi output format, by its shape."""
    return parse_table(text, source)


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return None


def _cuda_from_int(value: object) -> str | None:
    number = _int_or_none(value)
    if number is None:
        return str(value) if isinstance(value, str) else None
    return f"{number // 1000}.{(number % 1000) // 10}"


def parse_nvml_json(data: object, source: str) -> GpuState:
    """The NVML readings the gpu collector stores (one field per call, errors kept as text)."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    gpus: list[Gpu] = []
    for raw in data.get("gpus") or []:
        if not isinstance(raw, dict):
            continue
        mem = raw.get("mem") if isinstance(raw.get("mem"), dict) else {}
        used = mem.get("used") if mem else None
        total = mem.get("total") if mem else None
        util = raw.get("util")
        util_pct = None
        if isinstance(util, dict):
            util_pct = util.get("gpu")
        elif isinstance(util, str):
            found = re.search(r"gpu:\s*(\d+)", util)
            util_pct = float(found.group(1)) if found else None
        elif isinstance(util, (int, float)):
            util_pct = util
        remapped = raw.get("remapped_rows")
        pending = failure = None
        if isinstance(remapped, list) and len(remapped) >= 4:
            pending, failure = bool(remapped[2]), bool(remapped[3])
        elif isinstance(remapped, dict):
            pending, failure = remapped.get("pending"), remapped.get("failure")
        retired = raw.get("retired_pages_pending")
        procs = []
        for proc in raw.get("procs") or []:
            if isinstance(proc, dict):
                procs.append(GpuProcess(int(proc.get("pid", 0)), str(proc.get("name", "")), _mib(proc.get("usedGpuMemory"))))
            elif isinstance(proc, str):
                pid = re.search(r"'pid':\s*(\d+)", proc)
                mem_used = re.search(r"'usedGpuMemory':\s*(\d+)", proc)
                if pid:
                    procs.append(GpuProcess(int(pid.group(1)), "", _mib(int(mem_used.group(1))) if mem_used else None))
        reasons = raw.get("throttle_reasons")
        gpus.append(Gpu(
            index=int(raw.get("index", len(gpus))), name=raw.get("name"), uuid=raw.get("uuid"), bus_id=raw.get("pci"),
            memory_used_mib=_mib(used), memory_total_mib=_mib(total),
            utilization_pct=float(util_pct) if isinstance(util_pct, (int, float)) else None,
            temperature_c=raw.get("temp") if isinstance(raw.get("temp"), (int, float)) else None,
            ecc_uncorrected=_int_or_none(raw.get("ecc_uncorrected_volatile")),
            retired_pages_pending=bool(retired) if isinstance(retired, (bool, int)) else None,
            remapped_rows_pending=pending, remapped_rows_failure=failure,
            throttle_reasons=tuple(reasons) if isinstance(reasons, list) else (),
            processes=tuple(procs),
        ))
    return GpuState(source, data.get("driver"), _cuda_from_int(data.get("cuda_driver")), tuple(gpus))


def _mib(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) / (1024 * 1024)
    return None
