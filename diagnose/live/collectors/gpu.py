"""GPU state: NVML through nvidia-ml-py (driver and CUDA version, per-GPU memory, utilisation,
processes, uncorrected ECC, retired pages / remapped rows, throttle reasons), read in a child
process that is killed if the driver hangs; `nvidia-smi -q -x` when NVML is unusable. No GPU
or no driver is a gap, never a crash.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from diagnose.evidence.model import FileKind
from diagnose.live.collectors.base import Captured, Context, Output

PROBE = Path(__file__).with_name("nvml_probe.py")


def collect(ctx: Context) -> Output:
    tried: list[str] = []
    # The probe runs with diagnose's own interpreter (nvidia-ml-py is our dependency) on this machine.
    if ctx.host.local and PROBE.is_file():
        result = ctx.run([sys.executable, "-I", str(PROBE)], cap=ctx.remaining() * 0.6)
        if result.ok:
            try:
                data = json.loads(result.out)
            except ValueError:
                data = None
            if isinstance(data, dict) and "gpus" in data:
                path = ctx.save("nvml.json", result.stdout)
                return Output(files=[Captured(FileKind.NVML, "gpu/nvml.json", path, "nvml.json", size=len(result.stdout))])
            tried.append("NVML: unreadable probe output")
        elif result.timed_out:
            tried.append(f"NVML {result.failure()}")
        else:
            try:
                why = json.loads(result.out).get("error") or result.failure()
            except (ValueError, AttributeError):
                why = result.failure()
            tried.append(f"NVML: {why}")
    result = ctx.run(["nvidia-smi", "-q", "-x"])
    if result.ok and b"<nvidia_smi_log" in result.stdout[:4096]:
        path = ctx.save("nvidia-smi-q.xml", result.stdout)
        return Output(files=[Captured(FileKind.NVIDIA_SMI, "gpu/nvidia-smi-q.xml", path, "nvidia-smi -q -x",
                                      size=len(result.stdout))], notes=["GPU state from nvidia-smi: " + "; ".join(tried)])
    tried.append(result.failure())
    if result.timed_out:
        return Output(status="timeout", reason="; ".join(tried))
    missing = result.error == "not found" and all("NVML" not in t or "LibraryNotFound" in t or "pynvml" in t for t in tried)
    head = "no NVIDIA GPU or driver" if missing or "NVIDIA-SMI has failed" in result.out else "GPU state unreadable"
    return Output(status="gap", reason=f"{head} ({'; '.join(tried)})")
