"""GPU parsers on every real sample: the H200 captures (driver 580) in each nvidia-smi format and
NVML JSON, older drivers' layouts (375, 369, 535), and the other H200 samples beside them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnose.errors import ParseError
from diagnose.evidence.model import FileKind, GpuState
from diagnose.evidence.parsers.gpu import (
    THROTTLE_BITS,
    parse_csv,
    parse_gpu_text,
    parse_nvml_json,
    parse_query_text,
    parse_table,
    parse_xml,
    reason_name,
    throttle_names,
)
from diagnose.evidence.parsers.packages import parse_packages
from diagnose.evidence.sniff import sniff
from tests.support.paths import DATA

H200 = DATA / "samples" / "h200"
OLDER = DATA / "samples" / "older"
UUIDS = ("GPU-89894070-9f5f-ab49-0791-65bf75d4885c", "GPU-52e27814-b51c-3b55-5af4-3239d4757d8d")


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_every_h200_sample_is_sniffed_as_its_kind() -> None:
    expected = {
        "collect_env.txt": FileKind.PACKAGES, "pip-freeze.txt": FileKind.PACKAGES, "dmesg-nvrm-tail.txt": FileKind.DMESG,
        "nvidia-smi.txt": FileKind.NVIDIA_SMI, "nvidia-smi-busy.txt": FileKind.NVIDIA_SMI,
        "nvidia-smi-q.txt": FileKind.NVIDIA_SMI, "nvidia-smi-q.xml": FileKind.NVIDIA_SMI,
        "nvidia-smi-query.csv": FileKind.NVIDIA_SMI, "nvml.json": FileKind.NVML, "nvml-busy.json": FileKind.NVML,
    }
    found = {p.name: sniff(p, p.read_bytes()[:4096]) for p in H200.iterdir() if p.name != "README.md"}
    assert found == expected


@pytest.mark.parametrize("name, parser", [
    ("nvidia-smi-q.txt", parse_query_text), ("nvidia-smi-q.xml", parse_xml),
])
def test_full_query_formats(name: str, parser: object) -> None:
    state = parse_gpu_text(read(H200 / name), name)
    assert state == parser(read(H200 / name), name)  # type: ignore[operator]
    assert (state.driver_version, state.cuda_version) == ("580.159.04", "13.0")
    assert [g.uuid for g in state.gpus] == list(UUIDS)
    assert [g.bus_id for g in state.gpus] == ["00000000:00:06.0", "00000000:00:07.0"]
    for gpu in state.gpus:
        assert gpu.name == "NVIDIA H200"
        assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.utilization_pct) == (0.0, 143771.0, 0.0)
        assert gpu.ecc_uncorrected == 0  # SRAM parity + SRAM SEC-DED + DRAM uncorrectable, all 0
        assert gpu.retired_pages_pending is None  # N/A on H200 (row remapping instead)
        assert (gpu.remapped_rows_pending, gpu.remapped_rows_failure) == (False, False)
        assert gpu.throttle_reasons == ("gpu_idle",)
        assert gpu.processes == ()
    assert [g.temperature_c for g in state.gpus] == ([36.0, 39.0] if name.endswith(".txt") else [36.0, 38.0])


def test_query_gpu_csv() -> None:
    state = parse_gpu_text(read(H200 / "nvidia-smi-query.csv"), "csv")
    assert state == parse_csv(read(H200 / "nvidia-smi-query.csv"), "csv")
    assert [(g.index, g.uuid, g.memory_used_mib, g.memory_total_mib, g.temperature_c, g.ecc_uncorrected)
            for g in state.gpus] == [(0, UUIDS[0], 0.0, 143771.0, 35.0, 0), (1, UUIDS[1], 0.0, 143771.0, 38.0, 0)]


def test_default_table_idle_and_busy() -> None:
    idle = parse_gpu_text(read(H200 / "nvidia-smi.txt"), "t")
    assert idle == parse_table(read(H200 / "nvidia-smi.txt"), "t")
    assert (idle.driver_version, idle.cuda_version, len(idle.gpus)) == ("580.159.04", "13.0", 2)
    busy = parse_gpu_text(read(H200 / "nvidia-smi-busy.txt"), "t")
    first = busy.gpus[0]
    assert (first.memory_used_mib, first.memory_total_mib) == (41487.0, 143771.0)
    assert [(p.pid, p.name, p.used_mib) for p in first.processes] == [(572, "python3", 41478.0)]
    assert busy.gpus[1].processes == ()


def test_nvml_json_readings_with_errors_kept_as_text() -> None:
    idle = parse_nvml_json(json.loads(read(H200 / "nvml.json")), "nvml.json")
    assert (idle.driver_version, idle.cuda_version) == ("580.159.04", "13.0")
    assert [g.uuid for g in idle.gpus] == list(UUIDS)
    for gpu in idle.gpus:
        assert gpu.retired_pages_pending is None  # "ERROR NVMLError_NotSupported: Not Supported"
        assert (gpu.remapped_rows_pending, gpu.remapped_rows_failure) == (False, False)
        assert gpu.throttle_reasons == ("gpu_idle",)  # "throttle": 1
        assert gpu.memory_used_mib is None  # the capture's "mem" is empty: unknown, not zero
        assert gpu.ecc_uncorrected == 0
    busy = parse_nvml_json(json.loads(read(H200 / "nvml-busy.json")), "nvml-busy.json")
    assert busy.gpus[0].throttle_reasons == ()  # "throttle": 0 while busy
    (proc,) = busy.gpus[0].processes
    assert proc.pid == 572 and proc.used_mib == pytest.approx(43492835328 / 2**20)


def test_nvml_json_from_the_probe_format() -> None:
    """The probe writes mem/util as objects and proc names; errors per field stay text."""
    data = {"driver": "580.159.04", "cuda_driver": 13000, "gpus": [{
        "index": 0, "name": "NVIDIA H200", "uuid": UUIDS[0], "pci": "00000000:00:06.0",
        "mem": {"total": 150754820096, "used": 43502469120, "free": 107252350976},
        "util": {"gpu": 97, "memory": 41}, "temp": 41, "ecc_uncorrected_volatile": 2,
        "retired_pages_pending": "ERROR NVMLError_NotSupported: Not Supported", "remapped_rows": [0, 1, 1, 0],
        "throttle": 0x44, "procs": [{"pid": 572, "usedGpuMemory": 43492835328, "name": "python3"}],
        "name_error": "ignored"}]}
    (gpu,) = parse_nvml_json(data, "probe").gpus
    assert gpu.memory_total_mib == pytest.approx(143771.0, abs=1)
    assert (gpu.utilization_pct, gpu.ecc_uncorrected, gpu.remapped_rows_pending, gpu.remapped_rows_failure) == (97.0, 2, True, False)
    assert gpu.throttle_reasons == ("sw_power_cap", "hw_thermal_slowdown")
    assert gpu.processes[0].name == "python3"
    errors = {"index": 1, "name": "ERROR NVMLError_GpuIsLost: GPU is lost", "procs": "ERROR NVMLError_GpuIsLost: GPU is lost"}
    (lost,) = parse_nvml_json({"gpus": [errors]}, "probe").gpus
    assert lost.name is None and lost.processes == ()


def test_throttle_bits_are_nvmls() -> None:
    pynvml = pytest.importorskip("pynvml")
    for bit, name in THROTTLE_BITS.items():
        constant = "".join(part.capitalize() for part in name.split("_"))
        constant = constant.replace("ClocksSetting", "ClocksSetting").replace("DisplayClocksSetting", "DisplayClockSetting")
        assert getattr(pynvml, f"nvmlClocksThrottleReason{constant}") == bit, name
    assert throttle_names(0) == () and throttle_names(0x1 | 0x8) == ("gpu_idle", "hw_slowdown")
    assert reason_name("HW Power Brake Slowdown") == "hw_power_brake_slowdown"
    assert reason_name("clocks_throttle_reason_gpu_idle") == reason_name("Idle") == "gpu_idle"
    assert reason_name("Display Clock Setting") == reason_name("clocks_event_reason_display_clocks_setting")


def test_older_xml_throttle_reasons_and_double_bit_ecc() -> None:
    state = parse_gpu_text(read(OLDER / "nvidia-smi-q-x-375.66-p100.xml"), "xml")
    assert (state.driver_version, state.cuda_version) == ("375.66", None)
    first, second = state.gpus
    assert (first.name, first.uuid, first.bus_id) == ("Tesla P100-PCIE-12GB", "GPU-28604e81-21ec-cc48-6759-bf2648b22e16",
                                                      "0000:04:00.0")
    assert (first.memory_used_mib, first.memory_total_mib, first.utilization_pct, first.temperature_c) == (11400.0, 11567.0, 33.4, 31.0)
    assert first.ecc_uncorrected == 0  # volatile double_bit total
    assert first.retired_pages_pending is False  # <pending_retirement>No
    assert first.throttle_reasons == ("gpu_idle",)  # <clocks_throttle_reasons>
    assert (second.memory_used_mib, second.utilization_pct) == (11800.0, 10.3)


def test_older_query_text_throttle_reasons() -> None:
    state = parse_gpu_text(read(OLDER / "nvidia-smi-q-369.30-titanz.txt"), "q")
    assert (state.driver_version, state.cuda_version, len(state.gpus)) == ("369.30", None, 2)
    for gpu in state.gpus:
        assert gpu.name == "GeForce GTX TITAN Z"
        assert gpu.throttle_reasons == ("applications_clocks_setting",)  # "Clocks Throttle Reasons"
        assert (gpu.memory_used_mib, gpu.memory_total_mib) == (854.0, 6144.0)
        assert gpu.ecc_uncorrected is None  # not in this capture: unknown, not zero
    assert [g.utilization_pct for g in state.gpus] == [1.0, 0.0]  # "Utilization / Gpu"


def test_page_retirement_layout() -> None:
    state = parse_gpu_text(read(OLDER / "nvidia-smi-q-d-page-retirement-535.86.10.txt"), "q")
    assert (state.driver_version, state.cuda_version) == ("535.86.10", "12.2")
    assert len(state.gpus) == 8
    assert {g.retired_pages_pending for g in state.gpus} == {False}  # "Pending Page Blacklist : No"
    assert state.gpus[7].bus_id == "00000008:00:00.0"


def test_non_gpu_h200_samples() -> None:
    collect_env = parse_packages(read(H200 / "collect_env.txt"), "collect_env.txt")
    assert collect_env.versions["torch"] == "2.11.0" and collect_env.versions["numpy"] == "2.5.2"  # its [pip3] lines
    freeze = parse_packages(read(H200 / "pip-freeze.txt"), "pip-freeze.txt")
    assert freeze.versions["torch"] == "2.11.0" and freeze.versions["nvidia-ml-py"] == "13.610.43"
    assert len(freeze.versions) == len([line for line in read(H200 / "pip-freeze.txt").splitlines() if "==" in line])


def test_dmesg_sample_on_the_wall_clock(tmp_path: Path) -> None:
    """The Xid line of the H200 dmesg tail, with a boot time, lands at boot + seconds."""
    from diagnose.engine.finders import PatternSet
    from diagnose.engine.scan import Scanner
    from diagnose.evidence.model import TextFile, TextKind

    boot = 1_796_000_000.0
    source = TextFile(TextKind.DMESG, H200 / "dmesg-nvrm-tail.txt", "dmesg", boot_time=boot)
    scan = Scanner(TextKind.DMESG, PatternSet([r"NVRM: Xid \(PCI:(?P<bus>[^)]+)\): (?P<xid>\d+)"]), "pure").scan(source)
    (summary,) = scan.summaries(0).values()
    (hit,) = summary.hits()
    assert hit.captures == {"bus": "0000:00:06", "xid": "43"}
    assert hit.time == pytest.approx(boot + 66.599372)


def test_unparseable_xml_is_an_error_not_a_crash() -> None:
    with pytest.raises(ParseError, match=r"^nvidia-smi -q -x: malformed XML at line 1, column 21 \(no element found\)$"):
        parse_xml("<nvidia_smi_log><gpu>", "x")
    assert isinstance(parse_csv("", "x"), GpuState)
