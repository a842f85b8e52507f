"""`diagnose rules show ID`: every field of the rule, rendered, with the file it comes from; the
causes the engine makes itself, listed and shown the same way."""

from __future__ import annotations

from pathlib import Path

from diagnose.engine.causes import ENGINE_CAUSES
from diagnose.rules.load import load_rule_file
from diagnose.rules.model import TextCondition
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
    assert lines[1:3] == ["  - all:", "      - log: " + next(rule.conditions(TextCondition)).pattern] or any(
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


def test_show_lists_an_analyzer_rules_extra_captures() -> None:
    # distributed.hung-rank's explanation uses {hang_detail}, {hung_end}: its analyzer adds them.
    text = show_rule(load(REPO / "rules" / "distributed" / "distributed.hung-rank.yaml"))
    captures = " ".join(line.strip() for line in text.splitlines() if line.startswith(("  captures:", " " * 14)))
    assert "from the analyzer hung_rank:" in captures
    assert all(name in captures for name in ("hang_detail", "hung_end", "hung_last_line", "hung_ranks_word"))
    plain = show_rule(load(RULE_FILE))
    assert "  captures:   " in plain and "numpy_version" in plain and "from the analyzer" not in plain


def test_engine_made_causes_are_listed_and_shown() -> None:
    listed = run_cli(["rules", "list", "--category", "run"])
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()
    assert [row.split()[0] for row in rows] == sorted(c for c in ENGINE_CAUSES if c.startswith("run."))
    assert all(row.endswith("(engine)") for row in rows)
    made = sum(c.startswith("run.") for c in ENGINE_CAUSES)
    assert listed.stderr.strip() == f"0 rule(s), {made} cause(s) made by the engine"
    shown = run_cli(["rules", "show", "unrecognised.crash"])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("unrecognised.crash  (made by the engine)")
    assert "  file:       diagnose/engine/rank.py" in shown.stdout
    assert ENGINE_CAUSES["unrecognised.crash"].fix[0].split()[0] in shown.stdout
    close = run_cli(["rules", "show", "run.staled"])
    assert close.returncode == 2 and "did you mean: run.stalled" in close.stderr
