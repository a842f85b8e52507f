"""Every output format over every real input (tests/data/ci cases and the fixture bundles), and
the proof that the Format enum, the reporter registry and the CLI's --format choices agree."""

from __future__ import annotations

import functools
import importlib
import inspect
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import click
import jsonschema
import pytest

from diagnose import cli
from diagnose.app import diagnose
from diagnose.engine.findings import Diagnosis
from diagnose.evidence.inputs import evidence_from_paths
from diagnose.report.render import MODULES, OPTIONS, Format, module_reporter, reporter
from diagnose.rules.model import RuleSet
from tests.support.paths import REPO
from tests.support.report import (
    CASES,
    FORMATS,
    JSON_SCHEMA,
    all_inputs,
    invoke,
    junit_problems,
    load_rules_cached,
    markdown_fences,
    parse_command,
    sarif_problems,
    sarif_schema,
    sarif_schema_errors,
    working_dir,
)

REPORT_DIR = Path(__file__).resolve().parents[2] / "diagnose" / "report"
INPUTS = all_inputs()


def test_format_enum_registry_and_cli_choices_are_one_list() -> None:
    assert [f.value for f in Format] == list(cli.FORMATS) == list(FORMATS)
    assert set(MODULES) == set(Format), "a Format without a reporter module (or the reverse)"
    assert len(set(MODULES.values())) == len(MODULES), "two formats share a module"
    # render (the Format table) and redact (masking) serve every format; "_" modules are helpers
    on_disk = {p.stem for p in REPORT_DIR.glob("*.py") if not p.stem.startswith("_")} - {"render", "redact"}
    assert on_disk == set(MODULES.values()), f"reporter modules not registered: {on_disk - set(MODULES.values())}"
    for command_name in ("scan", "run"):
        command = cli.main.commands[command_name]
        option = next(p for p in command.params if p.name == "formats")
        assert option.multiple, command_name
        for name in cli.FORMATS:
            assert cli.parse_formats([f"{name}=out.{name}"], None) == [(name, Path(f"out.{name}"))]
    with pytest.raises(click.BadParameter):
        cli.parse_formats(["nope"], None)
    with pytest.raises(click.BadParameter):  # two reports cannot share stdout
        cli.parse_formats(["json", "sarif"], None)


def test_one_diagnosis_written_in_several_formats_at_once(tmp_path: Path) -> None:
    """`--format sarif=F --format junit=G --format json`: files and stdout from one scan."""
    case = INPUTS["oom-cgroup"] if "oom-cgroup" in INPUTS else next(iter(INPUTS.values()))
    sarif, junit = tmp_path / "out.sarif", tmp_path / "out.xml"
    result = invoke(["scan", *case, "--format", f"sarif={sarif}", "--format", f"junit={junit}", "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    assert json.loads(sarif.read_text())["version"] == "2.1.0"
    assert junit.read_text().lstrip().startswith("<?xml")
    assert json.loads(result.stdout)["schema_version"]


@pytest.mark.parametrize("fmt", list(Format), ids=lambda f: f.value)
def test_every_reporter_has_the_one_interface(fmt: Format) -> None:
    module = importlib.import_module(f"diagnose.report.{MODULES[fmt]}")
    assert module_reporter(fmt) is module.report
    params = inspect.signature(module.report).parameters
    # the common interface, then the options only this format takes (render.OPTIONS), keyword-only
    own = sorted(OPTIONS.get(fmt, ()))
    assert list(params)[:5] == ["diagnosis", "out", "verbose", "rules", "fail_on"], fmt
    assert sorted(list(params)[5:]) == own, fmt
    for name in own:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, (fmt, name)
    assert params["verbose"].default is False
    for name, default in (("rules", None), ("fail_on", "error")):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY and params[name].default == default, (fmt, name)


@functools.cache
def ruleset() -> RuleSet:
    return load_rules_cached()


@functools.cache
def diagnosis_of(case: str) -> Diagnosis:
    with working_dir(REPO):
        return diagnose(evidence_from_paths(INPUTS[case]), ruleset())


def causes_of(case: str) -> tuple[tuple[str, str], ...]:
    """(id, severity) of each cause, ranked."""
    return tuple((c.id, c.severity) for c in diagnosis_of(case).causes)


def check_terminal(out: str, ids: list[str]) -> None:
    for cause_id in ids:
        assert cause_id in out
    if not ids:
        assert "No cause found" in out


def check_json(out: str, ids: list[str]) -> None:
    data = json.loads(out)
    jsonschema.validate(data, JSON_SCHEMA)
    assert [c["id"] for c in data["causes"]] == ids


def check_sarif(out: str, ids: list[str]) -> None:
    doc = json.loads(out)
    assert sarif_problems(doc) == []
    schema = sarif_schema()
    if schema is not None:
        assert sarif_schema_errors(doc, schema) == []
    assert [r["ruleId"] for r in doc["runs"][0]["results"]] == ids


def check_junit(out: str, ids: list[str], severities: list[str]) -> None:
    assert out.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    root = ET.fromstring(out)
    assert junit_problems(root) == []
    cases = root.findall("./testsuite/testcase")
    run_case = cases[0]
    failing = [i for i, s in zip(ids, severities, strict=True) if s in ("critical", "error")]
    failure = run_case.find("failure")
    if failing:
        assert failure is not None and failure.get("type") == failing[0]
        assert all(cause_id in (failure.text or "") for cause_id in failing)
    else:
        assert failure is None


def check_markdown(out: str, ids: list[str], severities: list[str]) -> None:
    assert out.startswith("## diagnose: ")
    markdown_fences(out)  # every fence closes
    for cause_id in ids:
        assert f"`{cause_id}`" in out
    if not any(s in ("critical", "error", "warning") for s in severities):
        assert "no cause found" in out


def check_github(out: str, ids: list[str]) -> None:
    lines = out.splitlines()
    assert lines, "no output"
    for line in lines:
        assert line.startswith(("::error", "::warning", "::notice", "diagnose: ")), line
    annotated = {parse_command(line)[2].rsplit("[", 1)[-1].split(" ", 1)[0] for line in lines if line.startswith("::")}
    assert annotated == set(ids)


def check_html(out: str, ids: list[str]) -> None:
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    assert "<script" not in out
    for cause_id in ids:
        assert f"<code>{cause_id}</code>" in out
    if not ids:
        assert "No cause found" in out


def render(case: str, fmt: str, fail_on: str = "error") -> str:
    out = io.StringIO()
    with working_dir(REPO):
        reporter(Format(fmt))(diagnosis_of(case), out, False, rules=ruleset().by_id(), fail_on=fail_on)
    return out.getvalue()


def check(fmt: str, out: str, ids: list[str], severities: list[str]) -> None:
    if fmt == "terminal":
        check_terminal(out, ids)
    elif fmt == "json":
        check_json(out, ids)
    elif fmt == "sarif":
        check_sarif(out, ids)
    elif fmt == "junit":
        check_junit(out, ids, severities)
    elif fmt == "markdown":
        check_markdown(out, ids, severities)
    elif fmt == "html":
        check_html(out, ids)
    else:
        check_github(out, ids)


@pytest.mark.parametrize("case", sorted(INPUTS))
def test_every_format_on_every_input(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every input (the CI cases and every fixture bundle), rendered in every format: one rule load
    and one diagnosis per input, each format checked with a parser of its own."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pairs = causes_of(case)
    ids = [cause_id for cause_id, _ in pairs]
    severities = [severity for _, severity in pairs]
    for fmt in FORMATS:
        check(fmt, render(case, fmt), ids, severities)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_format_through_the_cli(case: str, fmt: str) -> None:
    """The same through the command line, whose exit code says whether a cause at or above
    --fail-on error was found."""
    pairs = causes_of(case)
    ids = [cause_id for cause_id, _ in pairs]
    severities = [severity for _, severity in pairs]
    result = invoke(["scan", *CASES[case], "--format", fmt])
    assert result.exit_code == (1 if any(s in ("critical", "error") for s in severities) else 0), result.output
    assert result.stderr == ""
    check(fmt, result.stdout, ids, severities)


def test_inputs_cover_a_crash_a_healthy_run_and_an_unrecognised_crash() -> None:
    assert not any(severity in ("critical", "error") for _, severity in causes_of("healthy"))
    assert ("memory.host-oom-kill", "critical") in causes_of("oom-cgroup")
    assert any(severity in ("critical", "error") for _, severity in causes_of("shape-mismatch"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_output_file_holds_the_same_report(fmt: str, tmp_path: Path) -> None:
    case = INPUTS["oom-cgroup"]
    to_stdout = invoke(["scan", *case, "--format", fmt])
    target = tmp_path / f"report.{fmt}"
    to_file = invoke(["scan", *case, "--format", fmt, "-o", str(target)])
    assert to_file.exit_code == to_stdout.exit_code == 1
    assert to_file.stdout == ""
    if fmt in ("json", "sarif"):  # timing figures differ between two runs
        first, second = json.loads(to_stdout.stdout), json.loads(target.read_text())
        assert _without_seconds(first) == _without_seconds(second)
    elif fmt == "terminal":
        assert "memory.host-oom-kill" in target.read_text()
    else:
        assert _drop_time(target.read_text()) == _drop_time(to_stdout.stdout)


def _without_seconds(doc: object) -> object:
    if isinstance(doc, dict):
        return {k: _without_seconds(v) for k, v in doc.items() if k != "seconds"}
    if isinstance(doc, list):
        return [_without_seconds(v) for v in doc]
    return doc


def _drop_time(text: str) -> str:
    import re

    return re.sub(r"in [0-9.]+ s\b", "in 0 s", re.sub(r'time="[^"]*"', "", text))
