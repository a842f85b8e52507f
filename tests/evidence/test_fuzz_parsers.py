"""Every parser of captured output, fed mutated real samples (tests/fuzz_support.py): nothing but
ParseError may come out, and ParseError becomes a gap. Kept short for CI (~150 inputs a target);
bench/fuzz_parsers.py runs the same targets for as long as asked."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnose.errors import ParseError
from diagnose.evidence.assemble import evidence_from_files
from diagnose.evidence.model import FileKind
from tests.support.fuzz import Target, targets

TARGETS = {target.name: target for target in targets()}
# derandomize: CI sees the same inputs on every run (a failure reproduces); the bench explores.
CI = settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_parser_survives_mutated_samples(name: str) -> None:
    target: Target = TARGETS[name]

    @CI
    @given(st.data())
    def check(data: st.DataObject) -> None:
        target.run(data.draw(target.strategy))

    check()


def test_every_parser_has_a_target() -> None:
    covered = " ".join(TARGETS)
    for word in ("nvidia-smi table", "-q", "XML", "CSV", "NVML", "tmux", "pip", "conda", "collect_env",
                 "error.json", "dmesg", "lineinfo", "sniff"):
        assert word in covered


@pytest.mark.parametrize(("kind", "name", "text", "reason"), [
    (FileKind.NVIDIA_SMI, "nvidia-smi-q.xml", "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<gpu id=\"1\">\n<x></y>",
     "gpu: nvidia-smi-q.xml: nvidia-smi -q -x: malformed XML at line 4, column 5 (mismatched tag)"),
    (FileKind.NVIDIA_SMI, "nvidia-smi.xml", "<!DOCTYPE x [<!ENTITY a \"aaaa\">]><nvidia_smi_log>&a;</nvidia_smi_log>",
     "gpu: nvidia-smi.xml: nvidia-smi -q -x: entity declarations in the XML (not nvidia-smi output)"),
    (FileKind.NVML, "nvml.json", "[" * 100_000, "gpu: nvml.json: NVML JSON: nested too deeply"),
    (FileKind.NVML, "nvml.json", "[1, 2]", "gpu: nvml.json: NVML JSON: expected an object, got list"),
    (FileKind.NVML, "nvml.json", "{\"gpus\": [{\"index\": \"x\", \"procs\": [{\"pid\": \"abc\"}], \"temp\": true}], \"driver\": 5}",
     None),
])
def test_a_parse_failure_is_a_gap_naming_the_source(tmp_path: Path, kind: FileKind, name: str, text: str,
                                                      reason: str | None) -> None:
    path = tmp_path / name
    path.write_text(text)
    evidence = evidence_from_files([(kind, path, name, None, None)])
    gaps = [f"{g.source}: {g.reason}" for g in evidence.gaps]
    if reason is None:  # wrong types read as unknown: a GPU with nothing known, no gap
        assert gaps == []
        assert evidence.gpu is not None and evidence.gpu.gpus[0].index == 0
        assert evidence.gpu.driver_version is None and evidence.gpu.gpus[0].temperature_c is None
    else:
        assert gaps == [reason]


def test_parse_error_is_a_value_error() -> None:
    # Callers that caught ValueError before ParseError existed still catch it.
    assert issubclass(ParseError, ValueError)
