"""One JSON form per fact (evidence/facts.py): the bundle stores it, rule test cases give it,
from_json reads it back; test cases are strict, manifests lenient; older test spellings still read."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from diagnose.evidence.bundle import Manifest, evidence_from_bundle, evidence_from_manifest
from diagnose.evidence.facts import (
    CheckpointState,
    ExpectedFile,
    GpuState,
    ProcessState,
    TmuxState,
)
from diagnose.evidence.model import Evidence, ExitRecord, Packages, RunInfo
from diagnose.evidence.parsers.gpu import parse_nvml_text
from diagnose.evidence.parsers.tmux import parse_tmux
from diagnose.rules.load import load_rules
from diagnose.rules.testcase import modernise, old_spellings
from diagnose.ruletools.selftest import check_case, evidence_for_case
from tests.support.cli import run_cli
from tests.support.paths import FIXTURES

# Fixtures whose manifests hold every stored fact section between them (real collections).
STORED = ("seed-flex7-tmux-died", "seed-flex6-nohup-reaped", "seed-wandb-settings", "ckpt-disk-full")


def manifest_of(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name / "manifest.json").read_text())
    return data


@pytest.mark.parametrize("name", STORED)
def test_stored_sections_are_the_facts_json_form(name: str) -> None:
    # What the collectors wrote is exactly what to_json writes for the fact read back from it.
    data = manifest_of(name)
    evidence = evidence_from_bundle(FIXTURES / name)
    if data.get("expected_files") is not None:
        assert evidence.files is not None
        assert [f.to_json() for f in evidence.files] == data["expected_files"]
    if data.get("checkpoints") is not None:
        assert evidence.checkpoints is not None and evidence.checkpoints.to_json() == data["checkpoints"]
    if data.get("process") is not None:
        assert evidence.process is not None and evidence.process.to_json() == data["process"]
    for record in data.get("exits") or ():
        assert ExitRecord.from_json(record).to_json() == {**ExitRecord("x").to_json(), **record}


def test_every_fact_reads_back_what_it_writes() -> None:
    evidence = evidence_from_bundle(FIXTURES / "seed-flex7-tmux-died")
    tmux = parse_tmux(manifest_of("seed-flex7-tmux-died")["tmux"], "train")
    # The real NVML readings of the GPU fixture: GPUs with processes, throttle reasons, ECC.
    gpu = parse_nvml_text((FIXTURES / "gpu-device-assert-live" / "gpu" / "nvml.json").read_text(), "nvml.json")
    assert gpu.gpus
    facts: list[Any] = [tmux, gpu, evidence.checkpoints, evidence.process, *(evidence.files or ())]
    for fact in facts:
        assert fact is not None
        assert type(fact).from_json(json.loads(json.dumps(fact.to_json())), strict=True) == fact, type(fact).__name__
    packages = Packages({"torch": "2.13.0+cpu", "flash-attn": "2.7.4"}, "pip freeze")
    assert Packages.from_json(packages.to_json(), "pip freeze") == packages


@pytest.mark.parametrize(("fact", "data", "message"), [
    (TmuxState, {"server": "gone"}, "tmux.server: 'gone' is not one of running, stale_socket, no_socket, error"),
    (TmuxState, {"server": "running", "sessions": [{"name": "t", "panes": [{"dead": "yes"}]}]},
     "tmux.sessions[0].panes[0].dead: expected true or false, got str"),
    (CheckpointState, {"directory": "/c", "newest": {"path": "a", "size": 1, "mtime": 2.0}},
     "checkpoints.collected_at: missing"),
    (ExpectedFile, {"path": "/w/train.log", "exists": True, "siblings": "train_1.log"},
     "expected_files[].siblings: expected a list, got str"),
    (GpuState, {"gpus": [{"ecc_uncorrected": 1.5}]}, "gpu.gpus[0].ecc_uncorrected: expected an integer or null, got float"),
    (ProcessState, {"alive": True, "pids": ["42"]}, "process.pids: expected a list of integers"),
    (ExitRecord, {"signal": "SIGNOPE"}, "exits[].signal: 'SIGNOPE' is not a signal name or number"),
])
def test_a_field_of_the_wrong_type_is_named(fact: Any, data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        fact.from_json(data)
    assert str(info.value).startswith(message)


def test_strict_refuses_unknown_keys_lenient_keeps_reading() -> None:
    data = {"server": "running", "socket": "/tmp/tmux-0/default", "sesion": "train"}
    assert TmuxState.from_json(data).expected_session is None  # a later version's field: read past
    with pytest.raises(ValueError, match=r"tmux: unknown key\(s\) sesion"):
        TmuxState.from_json(data, strict=True)


def test_a_live_manifest_section_of_the_wrong_shape_is_a_gap(tmp_path: Path) -> None:
    # A live collection goes through evidence_from_manifest without the bundle's schema check.
    manifest = Manifest(run={"id": "flex7"}, checkpoints={"directory": "/ckpt", "exists": True, "collected_at": 1.0,
                                                          "zero_byte": "ckpt.pt"})
    evidence = evidence_from_manifest(manifest, [], mode="live")
    assert evidence.checkpoints is None
    assert [(g.source, g.reason) for g in evidence.gaps] == [
        ("checkpoints", "manifest.json: checkpoints.zero_byte: expected a list, got str; left out")]


def test_evidence_is_built_by_keyword() -> None:
    with pytest.raises(TypeError):
        Evidence(RunInfo("r", "scan"))  # type: ignore[misc]


# ---------------------------------------------------------------- rule test cases


def test_test_case_keys_are_the_condition_keys() -> None:
    rules = load_rules().rules
    keys = {key for rule in rules for test in rule.tests for key in test.case}
    assert keys <= {"log", "dmesg", "slurm", "package", "tmux", "file", "checkpoint", "gpu", "exit", "process", "metric", "captures", "note"}
    assert {"package", "tmux", "file", "checkpoint", "gpu", "exit", "process"} <= keys
    assert not [(rule.id, test.line) for rule in rules for test in rule.tests if old_spellings(test.case)]


def test_old_spellings_read_the_same_evidence(tmp_path: Path) -> None:
    old = {"packages": {"torch": "2.4.1"}, "files": [{"path": "/w/train_flex7.log", "exists": False}],
           "exits": [{"code": 137, "signal": "SIGKILL"}],
           "tmux": {"server": "stale_socket", "message": "no server running on /tmp/tmux-0/default", "expected_session": "train"},
           "checkpoint": {"directory": "/ckpt", "file_count": 1, "newest": "ckpt_step3.pt", "newest_age": 30},
           "gpu": {"gpus": [{"utilization_pct": 97.0, "throttle_reasons": ["sw_thermal_slowdown"]}]}}
    new = {"package": {"torch": "2.4.1"}, "file": {"path": "/w/train_flex7.log", "exists": False},
           "exit": {"code": 137, "signal": 9},
           "tmux": {"server": "stale_socket", "message": "no server running on /tmp/tmux-0/default", "session": "train"},
           "checkpoint": {"directory": "/ckpt", "file_count": 1, "collected_at": 1_000_000_000.0,
                          "newest": {"path": "ckpt_step3.pt", "size": 1, "mtime": 999_999_970.0}},
           "gpu": {"gpus": [{"utilization": 97.0, "throttle": ["sw_thermal_slowdown"]}]}}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert evidence_for_case(old, tmp_path / "a") == evidence_for_case(new, tmp_path / "b")
    assert [spelt for spelt, _ in old_spellings(old)] == [
        "packages", "files", "exits", "tmux.expected_session", "checkpoint.newest_age",
        "gpu.gpus[].utilization_pct", "gpu.gpus[].throttle_reasons"]
    assert old_spellings(new) == [] and modernise(new) == new


def test_a_misspelt_fact_key_fails_the_test_case() -> None:
    rule = next(r for r in load_rules().rules if r.id == "launch.tmux-server-died")
    case = next(t for t in rule.tests if t.should_match)
    broken = type(case)(True, {**case.case, "tmux": {**case.case["tmux"], "sesion": "train"}}, case.line)
    assert check_case(rule, case) is None
    problem = check_case(rule, broken)
    assert problem is not None and problem.startswith("malformed test case: tmux: unknown key(s) sesion")


USER_RULE = """\
id: demo.old-tests
title: numpy 2 broke an extension built for numpy 1 ({numpy_version})
category: demo
role: context
severity: info
confidence: 0.9
when:
  all:
    - log: 'A module that was compiled using NumPy 1\\.x cannot be run in'
    - package: {name: numpy, version: ">=2"}
explanation: numpy {numpy_version}
fix: [pin numpy<2]
relaunch: "no"
references: [https://numpy.org/devdocs/numpy_2_0_migration_guide.html]
tests:
  match:
    - note: the numpy2-abi fixture's log line and package list
      log: "A module that was compiled using NumPy 1.x cannot be run in"
      packages: {numpy: 2.0.2}
  no_match:
    - note: numpy 1.26.4 (capture libs/transformers-api-change/numpy-abi-pandas-2.1.4-numpy-1.26.4.log)
      log: "A module that was compiled using NumPy 1.x cannot be run in"
      package: {numpy: 1.26.4}
"""


def test_user_rule_with_old_test_keys_tests_and_lints_with_a_hint(tmp_path: Path) -> None:
    folder = tmp_path / "rules" / "demo"
    folder.mkdir(parents=True)
    (folder / "demo.old-tests.yaml").write_text(USER_RULE)
    # (info: below the fixtures' expected rankings, which hold with it loaded too)
    tested = run_cli(["rules", "test", str(tmp_path / "rules")], cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    linted = run_cli(["rules", "lint", str(tmp_path / "rules"), "--no-healthy"], cwd=tmp_path)
    assert linted.returncode == 0, linted.stdout
    line = USER_RULE.splitlines().index("    - note: the numpy2-abi fixture's log line and package list") + 1
    assert f"{folder / 'demo.old-tests.yaml'}:{line}: DL204 old-test-key [warning] demo.old-tests: test case key packages: " \
           "write package" in linted.stdout
    (folder / "demo.old-tests.yaml").write_text(USER_RULE.replace("packages: {numpy: 2.0.2}",
                                                                  "packages: {numpy: 2.0.2}\n      package: {numpy: 2.0.2}"))
    both = run_cli(["rules", "test", str(tmp_path / "rules")], cwd=tmp_path)
    assert both.returncode == 2
    assert "test case gives both packages and package; write package only" in both.stderr


def test_the_numpy_fixture_the_user_rule_cites_is_real() -> None:
    # The user rule above copies its line and version from fixtures/numpy2-abi: keep them true to it.
    log = (FIXTURES / "numpy2-abi" / "logs" / "numpy-abi-scipy-1.11.4-numpy-2.0.2.log").read_text()
    assert "A module that was compiled using NumPy 1.x cannot be run in" in log
    assert re.search(r"^numpy\s+2\.0\.2$", (FIXTURES / "numpy2-abi" / "env" / "pip-list.txt").read_text(), re.M)
