"""The gpu collector for real. On a machine with NVIDIA GPUs (`pytest -m gpu -s`) it reads
them through NVML, cross-checks with `nvidia-smi -q -x`, and prints what it collected (also
written to $OUT when set); on one without, it reports a gap instead of failing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from diagnose.evidence.parsers.gpu import parse_gpu_text
from diagnose.live.collectors.gpu import PROBE
from tests.support.live import collect, empty_config


def nvml_works() -> bool:
    try:
        result = subprocess.run([sys.executable, "-I", str(PROBE)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


@pytest.mark.gpu
def test_gpu_collector_on_real_gpus(tmp_path: Path) -> None:
    if not nvml_works():
        pytest.skip("needs an NVIDIA GPU with a working driver (NVML could not be initialised)")
    collection = collect("gputest", empty_config(), [tmp_path], only=("gpu",))
    status = collection.manifest.collectors["gpu"]
    state = collection.evidence().gpu
    print(f"\ngpu collector: {status.status} in {status.duration_s:.2f} s, {status.bytes} bytes")
    (captured,) = collection.files
    raw = json.loads(captured.source.read_text())
    print(json.dumps(raw, indent=1))
    out = os.environ.get("OUT")  # the device machine's folder that comes back: keep what was read
    if out:
        Path(out, "gpu-collector-nvml.json").write_text(json.dumps(raw, indent=1))
        Path(out, "gpu-collector-state.txt").write_text(f"{status}\n{collection.evidence().gpu}\n")
    assert status.status == "ok" and captured.bundle_path == "gpu/nvml.json"
    assert state is not None
    print(f"driver {state.driver_version}, CUDA {state.cuda_version}, {len(state.gpus)} GPU(s)")
    for gpu in state.gpus:
        print(f"  {gpu}")
    assert state.driver_version and state.cuda_version and state.gpus
    for gpu in state.gpus:
        assert gpu.name and gpu.uuid and gpu.uuid.startswith("GPU-")
        assert gpu.memory_total_mib and gpu.memory_total_mib > 1000
        assert gpu.memory_used_mib is not None and gpu.utilization_pct is not None
        assert gpu.temperature_c is not None
    # Every field was one call: an unsupported one is an error string, never a missing GPU.
    assert all(isinstance(g, dict) and "uuid" in g for g in raw["gpus"])
    if shutil.which("nvidia-smi"):
        xml = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, timeout=60, check=True).stdout
        smi = parse_gpu_text(xml, "nvidia-smi -q -x")
        print(f"nvidia-smi -q -x: driver {smi.driver_version}, CUDA {smi.cuda_version}, "
              f"{[(g.uuid, g.ecc_uncorrected, g.throttle_reasons) for g in smi.gpus]}")
        assert smi.driver_version == state.driver_version
        assert [g.uuid for g in smi.gpus] == [g.uuid for g in state.gpus]
        for by_smi, by_nvml in zip(smi.gpus, state.gpus, strict=True):  # NVML may count reserved memory differently
            assert by_smi.memory_total_mib == pytest.approx(by_nvml.memory_total_mib, abs=2048)
        for name, args in (("-q", ["-q"]), ("query", ["--query-gpu=index,uuid,memory.total", "--format=csv"]),
                           ("table", [])):
            text = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60, check=True).stdout
            parsed = parse_gpu_text(text, name)
            assert len(parsed.gpus) == len(state.gpus), name
            print(f"nvidia-smi {name}: parsed {len(parsed.gpus)} GPU(s)")


def test_no_gpu_or_driver_is_a_gap(tmp_path: Path) -> None:
    if nvml_works() or shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver; the no-GPU gap needs a machine without one")
    collection = collect("gputest", empty_config(), [tmp_path], only=("gpu",))
    status = collection.manifest.collectors["gpu"]
    assert status.status == "gap"
    assert status.reason is not None and status.reason.startswith("no NVIDIA GPU or driver (NVML: ")
    assert "nvidia-smi: not found" in status.reason
    assert collection.evidence().gpu is None


@pytest.mark.gpu
def test_gpu_collector_sees_a_process_holding_gpu_memory(tmp_path: Path) -> None:
    """A real CUDA process holding 2 GiB shows up in the collected GPU state (pid and memory)."""
    if not nvml_works():
        pytest.skip("needs an NVIDIA GPU with a working driver (NVML could not be initialised)")
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("needs torch with CUDA to start a process that holds GPU memory")
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time, torch, pathlib; x = torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda'); "
        f"torch.cuda.synchronize(); pathlib.Path({str(ready)!r}).touch(); time.sleep(60)")])
    try:
        for _ in range(600):
            if ready.exists():
                break
            if holder.poll() is not None:
                pytest.fail(f"the GPU memory holder exited early with {holder.returncode}")
            import time

            time.sleep(0.1)
        collection = collect("gputest", empty_config(), [tmp_path], only=("gpu",))
        state = collection.evidence().gpu
        assert state is not None
        procs = [(gpu.index, proc) for gpu in state.gpus for proc in gpu.processes]
        print(f"\nGPU processes while holding 2 GiB: {procs}")
        mine = [proc for _, proc in procs if proc.pid == holder.pid]
        assert mine, f"pid {holder.pid} not among {procs}"
        assert mine[0].used_mib is not None and mine[0].used_mib >= 2048
    finally:
        holder.kill()
        holder.wait()
