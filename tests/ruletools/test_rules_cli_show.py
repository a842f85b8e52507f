"""`diagnose rules show ID`: every field of the rule, rendered, with the file it comes from."""

from __future__ import annotations

from pathlib import Path

from diagnose.rules.load import load_rule_file
from diagnose.rules.yamlnodes import Problems
from diagnose.ruletools.tools import describe_condition, show_rule
from tests.support.cli import run_cli
from tests.support.paths import REPO

RULE_FILE = REPO / "rules" / "library" / "library.numpy2-abi.yaml"


def load(path: Path):  # type: ignore[no-untyped-def]
    problems = Problems()
    rule = load_rule_file(path, problems)
    assert rule is not None, problems.items
    return rule


def test_show_renders_every_field() -> None:
    rule = load(RULE_FILE)
    text = show_rule(rule)
    for label in ("title:", "category:", "role:", "severity:", "confidence:", "relaunch:", "when:", "explanation:",
                  "fix:", "references:", "tests:", "file:"):
        assert f"  {label}" in text, label
    assert rule.title in text and "library" in text and "0.9" in text
    assert str(RULE_FILE) in text
    assert "https://numpy.org/devdocs/numpy_2_0_migration_guide.html" in text
    matches = sum(t.should_match for t in rule.tests)
    assert f"tests:      {len(rule.tests)} ({matches} match, {len(rule.tests) - matches} no_match)" in text
    # Every fix item appears (wrapping may split it over lines, so compare the start).
    for item in rule.fix:
        assert item.split()[0] in text


def test_conditions_are_pretty_printed_as_a_tree() -> None:
    rule = load(REPO / "rules" / "library" / "library.undefined-symbol.yaml")
    lines = describe_condition(rule.when)
    assert lines[0] == "all:"
    assert lines[1:3] == ["  - all:", "      - log: " + next(rule.text_conditions()).pattern] or any(
        line.startswith("      - log: ") for line in lines)
    assert "  - none:" in lines and "      - all:" in lines and "          - none:" in lines
    pack = load(REPO / "rules" / "library" / "library.numpy-removed-alias.yaml")
    assert any(line.strip() == "- package: {name: numpy}" for line in describe_condition(pack.when))


def test_cli_show_and_unknown_id() -> None:
    result = run_cli(["rules", "show", "library.numpy2-abi"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("library.numpy2-abi  (built-in rule)")
    assert "file:       " in result.stdout and "library.numpy2-abi.yaml" in result.stdout
    unknown = run_cli(["rules", "show", "library.numpy2-ab"])
    assert unknown.returncode == 2
    assert "no rule with id 'library.numpy2-ab'" in unknown.stderr and "library.numpy2-abi" in unknown.stderr
