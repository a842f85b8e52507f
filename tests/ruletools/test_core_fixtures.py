"""Every fixture ranks exactly its expected causes, through `diagnose BUNDLE` and `diagnose scan`,
and the JSON output holds to the schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from diagnose.rules.load import load_rules
from diagnose.ruletools.selftest import fixture_dirs, ranked_ids
from tests.support.cli import run_cli
from tests.support.paths import FIXTURES, REPO

SCHEMA = json.loads((REPO / "diagnose" / "schema" / "diagnosis.schema.json").read_text())
CASES = fixture_dirs(FIXTURES)
RULES = load_rules()


def expected(fixture: Path) -> list[str]:
    return list(yaml.safe_load((fixture / "expect.yaml").read_text())["causes"])


def test_there_are_seed_and_healthy_fixtures() -> None:
    names = {case.name for case in CASES}
    assert {"seed-flex7-tmux-died", "seed-wandb-settings", "seed-fx-trace-race", "seed-host-oom"} <= names
    assert all((case / "HOW.md").is_file() for case in CASES), "every fixture records how it was produced"


@pytest.mark.parametrize("fixture", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("engine", ["hyperscan", "pure"])
def test_fixture_ranking(fixture: Path, engine: str) -> None:
    assert ranked_ids(fixture, RULES, engine=engine) == expected(fixture)
    assert ranked_ids(fixture, RULES, engine=engine, via_scan=True) == expected(fixture)


@pytest.mark.parametrize("fixture", CASES, ids=[c.name for c in CASES])
def test_fixture_cli_json_and_exit_code(fixture: Path) -> None:
    result = run_cli([str(fixture), "--format", "json"])
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    ids = [c["id"] for c in data["causes"] if c["severity"] in ("critical", "error", "warning")]
    assert ids == expected(fixture)
    serious = any(c["severity"] in ("critical", "error") for c in data["causes"])
    assert result.returncode == (1 if serious else 0), result.stderr
    if ids:
        top = data["causes"][0]
        assert top["evidence"], "the top cause shows the lines (or facts) that prove it"
        assert top["fix"]


def test_scan_and_bundle_agree_on_terminal_output() -> None:
    fixture = FIXTURES / "seed-host-oom"
    direct = run_cli([str(fixture)])
    scanned = run_cli(["scan", str(fixture)])
    assert direct.returncode == scanned.returncode == 1
    assert "memory.host-oom-kill" in direct.stdout and "memory.host-oom-kill" in scanned.stdout
    assert "Killed process 6139 (python3)" in direct.stdout
