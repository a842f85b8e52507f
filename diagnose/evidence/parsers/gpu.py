"""GPU state from nvidia-smi output (the default table, --query-gpu CSV, -q text, -q -x XML)
and from the NVML readings the gpu collector stores as JSON.

Older drivers name things differently: "Clocks Throttle Reasons" (now "Clocks Event
Reasons"), ECC counts as "Single Bit"/"Double Bit" (now SRAM/DRAM correctable and
uncorrectable), "Pending Page Blacklist"/"pending_retirement" for retired pages. Every layout
maps onto the same Gpu fields; throttle reasons always use NVML's names in snake case
(gpu_idle, sw_power_cap, hw_slowdown, hw_thermal_slowdown, ...).

Captured output can be cut short, garbled or of the wrong shape: a parser then raises
ParseError (naming the format and where it broke) or keeps what it could read, never another
exception. Numbers are read only from ASCII digits of a sane length.
"""

from __future__ import annotations

import math
import re
from typing import Any

from diagnose.errors import ParseError
from diagnose.evidence.model import Gpu, GpuProcess, GpuState

# Python's int() refuses over 4300 digits and accepts "²" via isdigit(): read counts with this.
_INT = re.compile(r"-?[0-9]{1,18}")

_HEADER = re.compile(r"NVIDIA-SMI\s+(?P<smi>\S+)\s+Driver Version:\s*(?P<driver>\S+)\s+CUDA Version:\s*(?P<cuda>\S+)")
_GPU_ROW = re.compile(r"^\|\s+(?P<index>[0-9]{1,6})\s+(?P<name>.+?)\s+(?:On|Off)\s+\|\s+(?P<bus>[0-9A-Fa-f:.]+)\s+(?:On|Off)\s+\|\s+(?P<ecc>\S+)\s+\|")
_MEM_ROW = re.compile(
    r"^\|\s+\S+\s+(?P<temp>\d+|N/A)C?\s+\S+\s+.*?\|\s+(?P<used>\d+)MiB\s+/\s+(?P<total>\d+)MiB\s+\|\s+(?P<util>\d+|N/A)%?\s"
)
_PROC_ROW = re.compile(r"^\|\s+(?P<gpu>[0-9]{1,6})\s+\S+\s+\S+\s+(?P<pid>[0-9]{1,10})\s+\S+\s+(?P<name>.+?)\s+(?P<mem>[0-9]{1,18}|N/A)(?:MiB)?\s+\|$")


def _num(value: str | None) -> float | None:
    if value is None:
        return None
    match = re.search(r"-?[0-9]{1,18}(?:\.[0-9]{1,18})?", value)
    return float(match.group()) if match else None


def _int(value: str | None) -> int | None:
    """A whole number written in ASCII digits, else None."""
    if value is None:
        return None
    match = _INT.fullmatch(value.strip())
    return int(match.group()) if match else None


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
            gpus[current] = {"name": row.group("name").strip(), "bus": row.group("bus"), "ecc": _int(ecc)}
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
    """Any nvidia-smi output format, by its shape. Raises ParseError for output it cannot read."""
    try:
        return _parse_gpu_text(text, source)
    except ParseError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, RecursionError, OverflowError) as exc:
        # A layout this parser has never seen: a gap naming the source, not the end of the diagnosis.
        raise ParseError(f"nvidia-smi: unreadable output ({type(exc).__name__}: {exc})") from None


def _parse_gpu_text(text: str, source: str) -> GpuState:
    head = text[:4000]
    if "<nvidia_smi_log" in head:
        return parse_xml(text, source)
    if "NVSMI LOG" in head:
        return parse_query_text(text, source)
    first = head.lstrip().split("\n", 1)[0]
    if "," in first and not first.startswith(("|", "+")) and ("." in first or first.startswith("index")):
        return parse_csv(text, source)
    return parse_table(text, source)


# ---------------------------------------------------------------- throttle reasons

# NVML's nvmlClocksEventReason* / nvmlClocksThrottleReason* bits (nvml.h).
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}
_REASON_ALIASES = {
    "idle": "gpu_idle",
    "display_clock_setting": "display_clocks_setting",
    "power_brake_slowdown": "hw_power_brake_slowdown",
    "thermal_slowdown": "hw_thermal_slowdown",
}


def throttle_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in THROTTLE_BITS.items() if mask & bit)


def reason_name(label: str) -> str:
    """'HW Power Brake Slowdown' / 'clocks_event_reason_hw_power_brake_slowdown' -> 'hw_power_brake_slowdown'."""
    key = re.sub(r"[^a-z0-9]+", "_", label.strip().lower()).strip("_")
    for prefix in ("clocks_event_reason_", "clocks_throttle_reason_"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    return _REASON_ALIASES.get(key, key)


def _yes_no(value: str | None) -> bool | None:
    if value is None:
        return None
    word = value.strip().lower()
    if word in ("yes", "true", "1", "active"):
        return True
    if word in ("no", "false", "0", "not active"):
        return False
    return None


def _unit_cut(cell: str) -> str:
    """A CSV header without its trailing unit: "memory.used [MiB]" -> "memory.used". Done by
    hand: the regex it replaces (`\\s*\\[.*?\\]\\s*$`) was quadratic on a cell of many '['."""
    name = cell.strip()
    if name.endswith("]") and "[" in name:
        return name[: name.index("[")].rstrip()
    return name


def _count(value: str | None) -> int | None:
    if value is None:
        return None
    match = re.fullmatch(r"\s*([0-9]{1,18})\s*", value)
    return int(match.group(1)) if match else None


def _sum_known(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# ---------------------------------------------------------------- nvidia-smi -q (text)

_Q_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[^:]*?)\s*(?::\s*(?P<value>.*?))?\s*$")


def _q_blocks(text: str) -> tuple[dict[str, str], list[tuple[str, list[tuple[tuple[str, ...], str]]]]]:
    """The header fields, and per GPU block its (path, value) pairs, paths built from indentation."""
    header: dict[str, str] = {}
    gpus: list[tuple[str, list[tuple[tuple[str, ...], str]]]] = []
    stack: list[tuple[int, str]] = []
    current: list[tuple[tuple[str, ...], str]] | None = None
    for raw in text.splitlines():
        if not raw.strip() or raw.strip().startswith("="):
            continue
        line = raw.expandtabs(4).rstrip()
        if line.startswith("GPU ") and ":" not in line.split(None, 1)[0] and " : " not in line:
            current = []  # "GPU 00000000:00:06.0" opens a GPU's block
            gpus.append((line[4:].strip(), current))
            stack = []
            continue
        match = _Q_LINE.match(line)
        if not match:
            continue
        indent = len(match.group("indent"))
        key = match.group("key").strip()
        value = match.group("value")
        if current is None or indent == 0:
            if value is not None:
                header[key] = value
            current = None if indent == 0 else current
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(name for _, name in stack), key)
        if value is None:
            stack.append((indent, key))
        else:
            current.append((path, value))
    return header, gpus


def parse_query_text(text: str, source: str) -> GpuState:
    header, blocks = _q_blocks(text)
    gpus: list[Gpu] = []
    for index, (bus, pairs) in enumerate(blocks):
        fields = {"/".join(path).lower(): value for path, value in pairs}

        def get(*names: str, fields: dict[str, str] = fields) -> str | None:
            for name in names:
                if name.lower() in fields:
                    return fields[name.lower()]
            return None

        uncorrected: list[int | None] = []
        reasons: list[str] = []
        for path, value in pairs:
            lowered = [part.lower() for part in path]
            in_volatile = len(lowered) >= 3 and lowered[0] == "ecc errors" and lowered[1] == "volatile"
            if in_volatile and ("uncorrectable" in lowered[2] or (lowered[2] == "double bit" and lowered[-1] == "total")):
                uncorrected.append(_count(value))
            if lowered[0] in ("clocks event reasons", "clocks throttle reasons") and value.strip().lower() == "active":
                reasons.append(reason_name(path[-1]))
        processes = _q_processes(pairs)
        gpus.append(Gpu(
            index=index,
            name=get("Product Name"),
            uuid=get("GPU UUID"),
            bus_id=get("PCI/Bus Id") or bus,
            memory_used_mib=_num(get("FB Memory Usage/Used")),
            memory_total_mib=_num(get("FB Memory Usage/Total")),
            utilization_pct=_num(get("Utilization/Gpu", "Utilization/GPU")),
            temperature_c=_num(get("Temperature/GPU Current Temp")),
            ecc_uncorrected=_sum_known(uncorrected),
            retired_pages_pending=_yes_no(get("Retired Pages/Pending Page Blacklist", "Retired Pages/Pending Page Retirement")),
            remapped_rows_pending=_yes_no(get("Remapped Rows/Pending")),
            remapped_rows_failure=_yes_no(get("Remapped Rows/Remapping Failure Occurred")),
            throttle_reasons=tuple(reasons),
            processes=processes,
        ))
    return GpuState(source, header.get("Driver Version"), _version_or_none(header.get("CUDA Version")), tuple(gpus))


def _q_processes(pairs: list[tuple[tuple[str, ...], str]]) -> tuple[GpuProcess, ...]:
    found: list[GpuProcess] = []
    pid: int | None = None
    name = ""
    for path, value in pairs:
        if not path or path[0].lower() != "processes":
            continue
        key = path[-1].lower()
        if key == "process id":
            if pid is not None:
                found.append(GpuProcess(pid, name, None))
            pid, name = _count(value), ""
        elif key == "name":
            name = value.strip()
        elif key == "used gpu memory" and pid is not None:
            found.append(GpuProcess(pid, name, _num(value)))
            pid = None
    if pid is not None:
        found.append(GpuProcess(pid, name, None))
    return tuple(found)


def _version_or_none(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return value if re.match(r"^\d+(\.\d+)*$", value) else None


# ---------------------------------------------------------------- nvidia-smi -q -x (XML)


def parse_xml(text: str, source: str) -> GpuState:
    import xml.etree.ElementTree as ET

    # The DOCTYPE names a DTD file nvidia-smi never ships; the parser does not fetch it. nvidia-smi
    # never declares entities: a file that does is not its output (and may be an entity bomb).
    if "<!ENTITY" in text:
        raise ParseError("nvidia-smi -q -x: entity declarations in the XML (not nvidia-smi output)")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, column = getattr(exc, "position", (0, 0))
        reason = re.sub(r": line \d+, column \d+$", "", str(exc))
        raise ParseError(f"nvidia-smi -q -x: malformed XML at line {line}, column {column} ({reason})") from None
    except UnicodeError:  # lone surrogates: text that was never decoded from bytes
        raise ParseError("nvidia-smi -q -x: not UTF-8 text") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"nvidia-smi -q -x: the XML root is <{root.tag[:40]}>, not <nvidia_smi_log>")

    def child_text(node: ET.Element, path: str) -> str | None:
        found = node.find(path)
        return found.text.strip() if found is not None and found.text is not None else None

    gpus: list[Gpu] = []
    for index, node in enumerate(root.findall("gpu")):
        uncorrected: list[int | None] = []
        volatile = node.find("ecc_errors/volatile")
        if volatile is not None:
            for item in volatile:
                if "uncorrectable" in item.tag:
                    uncorrected.append(_count(item.text))
                elif item.tag == "double_bit":
                    uncorrected.append(_count(child_text(item, "total")))
        reasons: list[str] = []
        for section in ("clocks_event_reasons", "clocks_throttle_reasons"):
            block = node.find(section)
            if block is not None:
                reasons.extend(reason_name(item.tag) for item in block if (item.text or "").strip().lower() == "active")
        processes = []
        for proc in node.findall("processes/process_info"):
            pid = _count(child_text(proc, "pid"))
            if pid is not None:
                processes.append(GpuProcess(pid, child_text(proc, "process_name") or "", _num(child_text(proc, "used_memory"))))
        retired = child_text(node, "retired_pages/pending_blacklist")
        if _yes_no(retired) is None:
            retired = child_text(node, "retired_pages/pending_retirement")
        gpus.append(Gpu(
            index=index,
            name=child_text(node, "product_name"),
            uuid=child_text(node, "uuid"),
            bus_id=child_text(node, "pci/pci_bus_id") or node.get("id"),
            memory_used_mib=_num(child_text(node, "fb_memory_usage/used")),
            memory_total_mib=_num(child_text(node, "fb_memory_usage/total")),
            utilization_pct=_num(child_text(node, "utilization/gpu_util")),
            temperature_c=_num(child_text(node, "temperature/gpu_temp")),
            ecc_uncorrected=_sum_known(uncorrected),
            retired_pages_pending=_yes_no(retired),
            remapped_rows_pending=_yes_no(child_text(node, "remapped_rows/remapped_row_pending")),
            remapped_rows_failure=_yes_no(child_text(node, "remapped_rows/remapped_row_failure")),
            throttle_reasons=tuple(reasons),
            processes=tuple(processes),
        ))
    return GpuState(source, child_text(root, "driver_version"), _version_or_none(child_text(root, "cuda_version")), tuple(gpus))


# ---------------------------------------------------------------- nvidia-smi --query-gpu=... --format=csv


def parse_csv(text: str, source: str) -> GpuState:
    import csv

    try:
        rows = [row for row in csv.reader(text.splitlines(), skipinitialspace=True) if row and any(c.strip() for c in row)]
    except csv.Error as exc:  # a NUL byte, a field over the csv module's size limit
        raise ParseError(f"nvidia-smi --query-gpu CSV: {exc}") from None
    if not rows:
        return GpuState(source)
    names = [_unit_cut(cell).lower() for cell in rows[0]]

    def clean(value: str) -> str | None:
        value = value.strip()
        return None if value.startswith("[") or value in ("N/A", "") else value

    gpus: list[Gpu] = []
    driver: str | None = None
    for number, row in enumerate(rows[1:]):
        values = {name: clean(cell) for name, cell in zip(names, row, strict=False)}
        driver = driver or values.get("driver_version")
        mask = values.get("clocks_event_reasons.active") or values.get("clocks_throttle_reasons.active")
        reasons: tuple[str, ...] = ()
        if mask:
            try:
                reasons = throttle_names(int(mask, 16) if mask.lower().startswith("0x") else int(mask))
            except ValueError:
                reasons = ()
        index = _count(values.get("index"))
        gpus.append(Gpu(
            index=index if index is not None else number,
            name=values.get("name"),
            uuid=values.get("uuid"),
            bus_id=values.get("pci.bus_id"),
            memory_used_mib=_num(values.get("memory.used")),
            memory_total_mib=_num(values.get("memory.total")),
            utilization_pct=_num(values.get("utilization.gpu")),
            temperature_c=_num(values.get("temperature.gpu")),
            ecc_uncorrected=_count(values.get("ecc.errors.uncorrected.volatile.total")),
            retired_pages_pending=_yes_no(values.get("retired_pages.pending")),
            throttle_reasons=reasons,
        ))
    return GpuState(source, driver, None, tuple(gpus))


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return None


def _float_or_none(value: object) -> float | None:
    """A JSON number as a float (not a bool, not NaN/inf, not a number too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _bool_or_none(value: object) -> bool | None:
    return bool(value) if isinstance(value, (bool, int)) and not isinstance(value, float) else None


def _cuda_from_int(value: object) -> str | None:
    number = _int_or_none(value)
    if number is None:
        return str(value) if isinstance(value, str) else None
    return f"{number // 1000}.{(number % 1000) // 10}"


def parse_nvml_text(text: str, source: str) -> GpuState:
    """The NVML JSON file as stored; ParseError when it is not JSON of that shape."""
    import json

    try:
        data = json.loads(text)
    except RecursionError:  # nesting deeper than the interpreter's stack
        raise ParseError("NVML JSON: nested too deeply") from None
    except ValueError as exc:
        raise ParseError(f"NVML JSON: not valid JSON ({exc})") from None
    return parse_nvml_json(data, source)


def parse_nvml_json(data: object, source: str) -> GpuState:
    """The NVML readings the gpu collector stores (one field per call, errors kept as text).

    Each field is read by its type: a field of another type (a hand-edited or truncated file,
    an NVML binding that changed) reads as unknown, never as an exception."""
    if not isinstance(data, dict):
        raise ParseError(f"NVML JSON: expected an object, got {type(data).__name__}")
    gpus: list[Gpu] = []
    listed_gpus = data.get("gpus")
    for raw in listed_gpus if isinstance(listed_gpus, list) else []:
        if isinstance(raw, dict):
            gpus.append(_nvml_gpu(raw, len(gpus)))
    driver = data.get("driver")
    return GpuState(source, driver if isinstance(driver, str) else None, _cuda_from_int(data.get("cuda_driver")), tuple(gpus))


def _nvml_gpu(raw: dict[str, Any], position: int) -> Gpu:
    mem = raw.get("mem") if isinstance(raw.get("mem"), dict) else {}
    used = mem.get("used") if mem else None
    total = mem.get("total") if mem else None
    util = raw.get("util")
    util_pct: object = None
    if isinstance(util, dict):
        util_pct = util.get("gpu")
    elif isinstance(util, str):
        found = re.search(r"gpu:\s*([0-9]{1,18})", util)
        util_pct = float(found.group(1)) if found else None
    elif isinstance(util, (int, float)):
        util_pct = util
    remapped = raw.get("remapped_rows")
    pending = failure = None
    if isinstance(remapped, list) and len(remapped) >= 4:
        pending, failure = bool(remapped[2]), bool(remapped[3])
    elif isinstance(remapped, dict):
        pending, failure = _bool_or_none(remapped.get("pending")), _bool_or_none(remapped.get("failure"))
    procs = []
    listed = raw.get("procs")
    for proc in listed if isinstance(listed, list) else []:
        if isinstance(proc, dict):
            pid = _int_or_none(proc.get("pid", 0))
            if pid is not None:
                procs.append(GpuProcess(pid, _reading(proc.get("name")) or "", _mib(proc.get("usedGpuMemory"))))
        elif isinstance(proc, str):
            found_pid = re.search(r"'pid':\s*([0-9]{1,10})", proc)
            mem_used = re.search(r"'usedGpuMemory':\s*([0-9]{1,18})", proc)
            if found_pid:
                procs.append(GpuProcess(int(found_pid.group(1)), "", _mib(int(mem_used.group(1))) if mem_used else None))
    reasons = raw.get("throttle_reasons")
    if isinstance(reasons, list):
        names = tuple(item for item in reasons if isinstance(item, str))
    else:
        mask = raw.get("throttle")
        names = throttle_names(mask) if isinstance(mask, int) and not isinstance(mask, bool) else ()
    index = _int_or_none(raw.get("index", position))
    return Gpu(
        index=index if index is not None else position, name=_reading(raw.get("name")), uuid=_reading(raw.get("uuid")),
        bus_id=_reading(raw.get("pci")),
        memory_used_mib=_mib(used), memory_total_mib=_mib(total),
        utilization_pct=_float_or_none(util_pct),
        temperature_c=_float_or_none(raw.get("temp")),
        ecc_uncorrected=_int_or_none(raw.get("ecc_uncorrected_volatile")),
        retired_pages_pending=_bool_or_none(raw.get("retired_pages_pending")),
        remapped_rows_pending=pending, remapped_rows_failure=failure,
        throttle_reasons=names,
        processes=tuple(procs),
    )


def _reading(value: object) -> str | None:
    """A text reading, or None where NVML answered with an error (kept as 'ERROR ...')."""
    if not isinstance(value, str) or value.startswith("ERROR "):
        return None
    return value


def _mib(value: object) -> float | None:
    number = _float_or_none(value)
    return number / (1024 * 1024) if number is not None else None
