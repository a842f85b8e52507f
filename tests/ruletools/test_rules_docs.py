"""Per-rule pages (`diagnose rules docs`), the JSON Schema of rule files, and SARIF's helpUri
pointing at the pages."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from diagnose import HOMEPAGE
from diagnose.rules.load import builtin_rules_dir, rule_files
from diagnose.ruletools.docs import rule_docs
from diagnose.ruletools.schema import rule_schema
from tests.support.paths import REPO
from tests.support.report import CASES, invoke, load_rules_cached

DOCS = REPO / "docs" / "rules"
SCHEMA_FILE = REPO / "diagnose" / "schema" / "rule.schema.json"
BUILTIN_FILES = sorted(rule_files(builtin_rules_dir()))


def builtin_rules() -> list[Any]:
    return [r for r in load_rules_cached().rules if r.builtin]


def test_committed_pages_are_what_the_rules_give() -> None:
    pages = rule_docs(builtin_rules())
    stale = sorted(name for name, text in pages.items()
                   if not (DOCS / name).is_file() or (DOCS / name).read_text(encoding="utf-8") != text)
    assert not stale, f"docs/rules is out of date for {stale[:5]}...: run `diagnose rules docs docs/rules --builtin-only`"
    extra = sorted(p.name for p in DOCS.glob("*.md") if p.name not in pages)
    assert not extra, f"pages of rules that are gone: {extra}"


def test_a_page_holds_the_explanation_fix_examples_and_references() -> None:
    rule = next(r for r in builtin_rules() if r.id == "memory.slurm-oom-kill")
    page = (DOCS / "memory.slurm-oom-kill.md").read_text()
    assert "## Fix" in page and "## Examples" in page and "## References" in page
    for ref in rule.references:
        assert f"<{ref}>" in page
    for test in rule.tests:
        for line in [test.case["log"]] if isinstance(test.case["log"], str) else test.case["log"]:
            assert line in page  # the real lines of its tests, as they are (in fenced blocks)
        assert test.case["note"].rsplit("(", 1)[-1].rstrip(")") in page  # the note's source
    assert "Ask for more memory" in page
    index = (DOCS / "README.md").read_text()
    assert "[memory.slurm-oom-kill](memory.slurm-oom-kill.md)" in index
    assert f"{len(builtin_rules())} built-in rules" in index


def test_the_command_writes_pages_for_user_rules_too(tmp_path: Path) -> None:
    out = tmp_path / "pages"
    result = invoke(["rules", "docs", str(out), "--rules", "tests/data/ci/rules"])
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert "testsecrets.echoed-credentials.md" in names and "README.md" in names and "unrecognised.crash.md" in names
    assert "Rule file: `tests/data/ci/rules/" in (out / "testsecrets.echoed-credentials.md").read_text()
    blocked = tmp_path / "file"
    blocked.write_text("")
    bad = invoke(["rules", "docs", str(blocked / "sub")])
    assert bad.exit_code == 2 and "cannot write the rule pages" in bad.stderr


def test_sarif_help_links_open_a_page_of_the_project() -> None:
    doc = json.loads(invoke(["scan", *CASES["oom-cgroup"], "--format", "sarif"]).stdout)
    prefix = f"{HOMEPAGE}/blob/main/docs/rules/"
    for descriptor in doc["runs"][0]["tool"]["driver"]["rules"]:
        assert descriptor["helpUri"].startswith(prefix), descriptor["id"]
        assert (DOCS / descriptor["helpUri"].removeprefix(prefix)).is_file(), descriptor["helpUri"]


# ---------------------------------------------------------------- the JSON Schema

@functools.cache
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_the_shipped_schema_is_the_generated_one() -> None:
    assert json.loads(SCHEMA_FILE.read_text()) == rule_schema(), "run `diagnose rules schema > diagnose/schema/rule.schema.json`"
    shown = invoke(["rules", "schema"])
    assert shown.exit_code == 0 and json.loads(shown.stdout) == rule_schema()


@pytest.mark.parametrize("path", BUILTIN_FILES, ids=lambda p: p.stem)
def test_every_builtin_rule_file_is_valid(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(data)]
    assert errors == []


def _rule() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((builtin_rules_dir() / "memory" / "memory.slurm-oom-kill.yaml").read_text())
    return data


def _broken(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(_rule())
    change(data)
    return data


@pytest.mark.parametrize(("what", "data"), [
    ("no fix", _broken(lambda d: d.pop("fix"))),
    ("an unknown field", _broken(lambda d: d.update(severty="error"))),
    ("a severity that is none", _broken(lambda d: d.update(severity="fatal"))),
    ("confidence above 1", _broken(lambda d: d.update(confidence=1.5))),
    ("an id that is no <category>.<name>", _broken(lambda d: d.update(id="SlurmOOM"))),
    ("an unknown condition kind", _broken(lambda d: d.update(when={"any": [{"logs": "x"}]}))),
    ("two kinds in one condition", _broken(lambda d: d.update(when={"any": [{"log": "x", "dmesg": "y"}]}))),
    ("an unknown field of a fact", _broken(lambda d: d.update(when={"all": [{"package": {"name": "torch", "ver": "2"}}]}))),
    ("a fact without its required field", _broken(lambda d: d.update(when={"all": [{"package": {"version": ">=2"}}]}))),
    ("a boolean fact field given a word", _broken(lambda d: d.update(when={"all": [{"tmux": {"launched": "yes"}}]}))),
    ("a choice outside its options", _broken(lambda d: d.update(when={"all": [{"tmux": {"server": "gone"}}]}))),
    ("an unknown analyzer", _broken(lambda d: d.update(analyze="guess"))),
    ("an unknown test case key", _broken(lambda d: d["tests"]["match"].append({"logs": "x"}))),
    ("a reference that is no URL", _broken(lambda d: d.update(references=["see the wiki"]))),
])
def test_invalid_rule_files_fail(what: str, data: dict[str, Any]) -> None:
    assert list(validator().iter_errors(data)), what
