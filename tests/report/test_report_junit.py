"""JUnit XML: parsed with a real XML parser, in the shape GitLab and Jenkins read
(testsuites > testsuite > testcase > failure with message and type)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from diagnose.report.junit import xml_text
from tests.support.report import CASES, invoke, junit_problems


def junit(args: list[str]) -> tuple[int, ET.Element]:
    result = invoke(["scan", *args, "--format", "junit"])
    root = ET.fromstring(result.stdout)  # raises on anything a parser would refuse
    assert junit_problems(root) == []
    return result.exit_code, root


def cases_by_name(root: ET.Element) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in root.iter("testcase")}


def write_rule(folder: Path, rule_id: str, severity: str, pattern: str, title: str) -> Path:
    """A rule file for a test (configuration, not a log line)."""
    folder.mkdir(parents=True, exist_ok=True)
    category = rule_id.split(".")[0]
    path = folder / f"{rule_id}.yaml"
    path.write_text(
        f"id: {rule_id}\ntitle: \"{title}\"\ncategory: {category}\nrole: root\nseverity: {severity}\n"
        f"confidence: 0.6\nwhen:\n  log: '{pattern}'\nexplanation: \"seen: {{where}}\"\nfix:\n  - \"look at {{where}}\"\n"
    )
    return path


def test_one_testcase_per_input_plus_the_run() -> None:
    code, root = junit(list(CASES["oom-cgroup"]))
    assert code == 1
    cases = cases_by_name(root)
    assert list(cases) == ["run", *CASES["oom-cgroup"]]
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "3" and suite.get("failures") == "2"
    assert root.get("tests") == "3" and root.get("failures") == "2"

    run_failure = cases["run"].find("failure")
    assert run_failure is not None
    assert run_failure.get("type") == "memory.host-oom-kill"
    message = run_failure.get("message", "")
    assert "6139" in message and message.endswith("[memory.host-oom-kill]")  # the rule's title names the pid
    assert "Fix:" in (run_failure.text or "")

    dmesg = cases["tests/data/ci/oom-cgroup/dmesg.txt"]
    assert dmesg.get("classname") == "diagnose.inputs" and dmesg.get("file") == "tests/data/ci/oom-cgroup/dmesg.txt"
    failure = dmesg.find("failure")
    assert failure is not None and "dmesg.txt:79" in (failure.text or "")
    # the training log only stops; the kill is not in it, so its test case passes
    assert cases["tests/data/ci/oom-cgroup/train.log"].find("failure") is None


def test_healthy_run_has_no_failure() -> None:
    code, root = junit(list(CASES["healthy"]))
    assert code == 0
    assert root.get("failures") == "0" and root.get("tests") == "2"
    assert not list(root.iter("failure"))


def test_message_names_the_top_causes(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    write_rule(rules, "testci.wandb-offline", "error", r"W&B syncing is set to `(?P<where>\w+)`", "wandb runs {where}")
    write_rule(rules, "testci.loss-line", "error", r"epoch (?P<where>\d) loss", "a loss line of epoch {where}")
    code, root = junit([*CASES["healthy"], "--rules", str(rules)])
    assert code == 1
    failure = cases_by_name(root)["run"].find("failure")
    assert failure is not None
    message = failure.get("message", "")
    assert "[testci.wandb-offline]" in message and "[testci.loss-line]" in message
    assert "\n" not in message


def test_failure_follows_fail_on(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    write_rule(rules, "testci.wandb-offline", "warning", r"W&B syncing is set to `(?P<where>\w+)`", "wandb runs {where}")
    args = [*CASES["healthy"], "--rules", str(rules)]
    _, below = junit(args)  # --fail-on error: a warning is listed, not failed
    run_case = cases_by_name(below)["run"]
    assert run_case.find("failure") is None
    out = run_case.find("system-out")
    assert out is not None and "testci.wandb-offline" in (out.text or "")
    code, at = junit([*args, "--fail-on", "warning"])
    assert code == 1
    failure = cases_by_name(at)["run"].find("failure")
    assert failure is not None and failure.get("type") == "testci.wandb-offline"


def test_colour_codes_from_a_real_log_stay_out_of_the_xml(tmp_path: Path) -> None:
    # wandb 0.31 colours "wandb" and the log folder in its last lines; make them evidence.
    rules = tmp_path / "rules"
    write_rule(rules, "testci.wandb-logs", "error", r"Find logs at: (?P<where>.+)", "wandb logs in {where}")
    log = CASES["wandb-fakekey"][0]
    assert "\x1b[" in Path(log).read_text()
    result = invoke(["scan", log, "--rules", str(rules), "--format", "junit"])
    assert "\x1b" not in result.stdout
    root = ET.fromstring(result.stdout)
    failure = cases_by_name(root)["run"].find("failure")
    assert failure is not None and "wandb/run-20261130_044148-1umz0pi6/logs" in (failure.text or "")


@pytest.mark.parametrize(("raw", "shown"), [
    ("a\x1b[1;34mwandb\x1b[0m: b", "awandb: b"),
    ("nul\x00here", "nul\\x00here"),
    ("bell\x07 and tab\tkept", "bell\\x07 and tab\tkept"),
])
def test_xml_text_makes_any_string_parseable(raw: str, shown: str) -> None:
    assert xml_text(raw) == shown
    element = ET.Element("failure", {"message": xml_text(raw)})
    element.text = xml_text(raw)
    assert ET.fromstring(ET.tostring(element, encoding="unicode")).get("message") == shown
