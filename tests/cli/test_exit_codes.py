"""The exit-code contract (docs/ci.md), case by case and for every format:
0 ran and found nothing at or above --fail-on; 1 found causes at or above it; 2 usage, config,
rule-load or tool error. A tool error never looks like a finding, a finding never like success,
and `--fail-on never` turns findings (only findings) into 0."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.paths import REPO
from tests.support.report import CASES, FORMATS, TEST_RULES, invoke

CRASH = list(CASES["oom-cgroup"])  # a critical cause
HEALTHY = list(CASES["healthy"])
# a finding of severity exactly "error", from a test rule over the healthy log
ERROR_CRASH = [*HEALTHY, "--rules", "tests/data/ci/rules-error"]


def exit_of(args: list[str], fmt: str) -> tuple[int, str, str]:
    result = invoke(["scan", *args, "--format", fmt])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("args", "expected"), [
    (HEALTHY, 0),
    (CRASH, 1),
    ([*CRASH, "--fail-on", "error"], 1),
    ([*CRASH, "--fail-on", "critical"], 1),
    ([*CRASH, "--fail-on", "never"], 0),
    ([*ERROR_CRASH, "--fail-on", "error"], 1),
    ([*ERROR_CRASH, "--fail-on", "critical"], 0),  # found, but below the threshold asked for
    ([*ERROR_CRASH, "--fail-on", "never"], 0),
    ([*ERROR_CRASH, "--fail-on", "warning"], 1),  # thresholds are inclusive
], ids=["healthy", "crash", "crash-error", "crash-critical", "crash-never",
        "error-crash", "error-crash-critical", "error-crash-never", "error-crash-warning"])
def test_findings_and_thresholds(fmt: str, args: list[str], expected: int) -> None:
    code, out, err = exit_of(args, fmt)
    assert code == expected, (code, err)
    assert out, "a report is written whatever the exit code"
    assert err == ""


def broken_rules(tmp_path: Path, kind: str) -> Path:
    """Rule folders that must not load (configuration files written for the test)."""
    folder = tmp_path / f"rules-{kind}"
    folder.mkdir()
    good = (TEST_RULES / "testsecrets.echoed-credentials.yaml").read_text()
    if kind == "yaml-syntax":
        (folder / "testsecrets.echoed-credentials.yaml").write_text(good.replace("fix:\n", "fix: [unclosed\n", 1))
    elif kind == "missing-field":
        (folder / "testsecrets.echoed-credentials.yaml").write_text(good.split("fix:")[0])
    elif kind == "bad-regex":
        (folder / "testsecrets.echoed-credentials.yaml").write_text(good.replace("(?P<name>", "(?P<name", 1))
    return folder


# Broken YAML in every format; the other ways a rule file can be wrong in one (the format plays no
# part before the rules load, and each run re-reads the whole rule pack).
@pytest.mark.parametrize(("kind", "fmt"), [("yaml-syntax", f) for f in FORMATS]
                         + [("missing-field", "json"), ("bad-regex", "sarif")])
def test_malformed_rule_is_a_tool_error(fmt: str, kind: str, tmp_path: Path) -> None:
    # --fail-on never: even when findings may not fail the job, a tool error does.
    rules = broken_rules(tmp_path, kind)
    code, out, err = exit_of([*CRASH, "--rules", str(rules), "--fail-on", "never"], fmt)
    assert code == 2
    assert out == "", "no report (not even an empty one) when the rules did not load"
    assert err.startswith("diagnose: error: ") and "testsecrets.echoed-credentials.yaml" in err
    assert "Traceback" not in err


def unreadable(case: str, tmp_path: Path) -> list[str]:
    if case == "missing":
        return [str(tmp_path / "no-such.log")]
    if case == "binary":
        binary = tmp_path / "python3"
        shutil.copy(sys.executable, binary)  # a real binary, not a log
        return [str(binary)]
    if case == "empty-dir":
        (tmp_path / "empty").mkdir()
        return [str(tmp_path / "empty")]
    return [*CRASH, "--rules", str(tmp_path / "no-rules-here")]


UNREADABLE = ["missing", "binary", "empty-dir", "missing-rules-dir"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", UNREADABLE)
def test_unreadable_input_is_a_tool_error(fmt: str, case: str, tmp_path: Path) -> None:
    code, out, err = exit_of([*unreadable(case, tmp_path), "--fail-on", "never"], fmt)
    assert code == 2, (case, err)
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("diagnose: error: ")


@pytest.mark.parametrize("fail_on", ["critical", "error", "warning"])
@pytest.mark.parametrize("case", ["yaml-syntax", *UNREADABLE])
def test_tool_errors_at_every_threshold(case: str, fail_on: str, tmp_path: Path) -> None:
    args = [*CRASH, "--rules", str(broken_rules(tmp_path, case))] if case == "yaml-syntax" else unreadable(case, tmp_path)
    code, out, _ = exit_of([*args, "--fail-on", fail_on], "json")
    assert (code, out) == (2, "")


@pytest.mark.parametrize("fmt", FORMATS)
def test_report_that_cannot_be_written_is_a_tool_error_even_with_findings(fmt: str, tmp_path: Path) -> None:
    target = tmp_path / "no-such-dir" / f"report.{fmt}"
    code, out, err = exit_of([*CRASH, "-o", str(target)], fmt)
    assert code == 2 and out == "" and "cannot write report" in err
    assert not target.exists()


@pytest.mark.parametrize("bad", [["--format", "yaml"], ["--fail-on", "sometimes"]])
def test_usage_errors_exit_2(bad: list[str]) -> None:
    result = invoke(["scan", *HEALTHY, *bad])
    assert result.exit_code == 2 and result.stdout == ""


def test_the_real_entry_point_keeps_the_contract(tmp_path: Path) -> None:
    """The same, through `python -m diagnose` in a subprocess, as CI runs it."""
    assert run_cli(["scan", *HEALTHY, "--format", "sarif"], cwd=REPO).returncode == 0
    crash = run_cli(["scan", *CRASH, "--format", "sarif"], cwd=REPO)
    assert crash.returncode == 1 and '"ruleId": "memory.host-oom-kill"' in crash.stdout
    assert run_cli(["scan", *CRASH, "--format", "junit", "--fail-on", "never"], cwd=REPO).returncode == 0
    broken = run_cli(["scan", *CRASH, "--format", "sarif", "--rules", str(broken_rules(tmp_path, "yaml-syntax"))], cwd=REPO)
    assert broken.returncode == 2 and broken.stdout == ""
    missing = run_cli(["scan", str(tmp_path / "gone.log"), "--format", "github", "--fail-on", "never"], cwd=REPO)
    assert missing.returncode == 2 and missing.stdout == ""
