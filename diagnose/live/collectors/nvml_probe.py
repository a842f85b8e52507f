"""Read GPU state through NVML (nvidia-ml-py, imported as pynvml) and print it as JSON.

Run as its own process by the gpu collector (`python -I nvml_probe.py`) so a driver call that
hangs can be killed with its process group. One NVML call per field: a field the GPU does not
support (retired pages on H200, remapped rows on older boards) is kept as its error text
("ERROR NVMLError_NotSupported: Not Supported") and never costs the other fields.
Imports nothing of diagnose, to start fast. Exit 0 with readings; 3 when NVML is unusable.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from functools import partial
from typing import Any


def _err(exc: BaseException) -> str:
    return f"ERROR {type(exc).__name__}: {exc}"


def _text(value: Any) -> Any:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def _same(value: Any) -> Any:
    return value


def _bus_id(info: Any) -> Any:
    return _text(info.busId)


def _memory(info: Any) -> dict[str, Any]:
    return {"total": info.total, "used": info.used, "free": info.free}


def _utilization(rates: Any) -> dict[str, Any]:
    return {"gpu": rates.gpu, "memory": rates.memory}


def read(call: Callable[[], Any], convert: Callable[[Any], Any] = _text) -> Any:
    try:
        return convert(call())
    except Exception as exc:  # NVMLError_* of every kind, and ctypes surprises
        return _err(exc)


def main() -> int:
    try:
        import pynvml
    except Exception as exc:
        print(json.dumps({"error": f"cannot import pynvml (nvidia-ml-py): {_err(exc)}"}))
        return 3
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        print(json.dumps({"error": _err(exc)}))
        return 3
    nv = pynvml
    out: dict[str, Any] = {
        "driver": read(nv.nvmlSystemGetDriverVersion),
        "nvml": read(nv.nvmlSystemGetNVMLVersion),
        "cuda_driver": read(nv.nvmlSystemGetCudaDriverVersion),
        "gpus": [],
    }
    count = read(nv.nvmlDeviceGetCount)
    if not isinstance(count, int):
        out["error"] = count
        count = 0
    events = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    for index in range(count):
        handle = read(partial(nv.nvmlDeviceGetHandleByIndex, index), _same)
        if isinstance(handle, str):
            out["gpus"].append({"index": index, "error": handle})
            continue

        def procs(h: Any = handle) -> list[dict[str, Any]]:
            found = []
            # nvidia-ml-py names it nvmlDeviceGetComputeRunningProcesses (seen on driver 580 / H200).
            running = getattr(nv, "nvmlDeviceGetComputeRunningProcesses", None) or nv.nvmlDeviceGetComputeProcesses
            for proc in running(h):
                found.append({"pid": proc.pid, "usedGpuMemory": proc.usedGpuMemory,
                              "name": read(partial(nv.nvmlSystemGetProcessName, proc.pid))})
            return found

        out["gpus"].append({
            "index": index,
            "name": read(partial(nv.nvmlDeviceGetName, handle)),
            "uuid": read(partial(nv.nvmlDeviceGetUUID, handle)),
            "pci": read(partial(nv.nvmlDeviceGetPciInfo, handle), _bus_id),
            "mem": read(partial(nv.nvmlDeviceGetMemoryInfo, handle), _memory),
            "util": read(partial(nv.nvmlDeviceGetUtilizationRates, handle), _utilization),
            "temp": read(partial(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)),
            "power_mw": read(partial(nv.nvmlDeviceGetPowerUsage, handle)),
            "ecc_mode": read(partial(nv.nvmlDeviceGetEccMode, handle), list),
            "ecc_uncorrected_volatile": read(partial(nv.nvmlDeviceGetTotalEccErrors, handle,
                                                     nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)),
            "retired_pages_pending": read(partial(nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)),
            "remapped_rows": read(partial(nv.nvmlDeviceGetRemappedRows, handle), list),
            "throttle": read(partial(events, handle)),
            "procs": read(procs, _same),
            "persistence": read(partial(nv.nvmlDeviceGetPersistenceMode, handle)),
        })
    with contextlib.suppress(Exception):
        nv.nvmlShutdown()
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
