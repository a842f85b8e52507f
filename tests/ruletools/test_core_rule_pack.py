"""Meta-tests over the built-in rule pack: every rule is complete, its own tests pass on both
scan engines, its patterns cannot hang, and it stays silent on every healthy fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.patterns.hangcheck import static_problem, torture_problem
from diagnose.rules.load import load_rules
from diagnose.rules.model import Rule, TextCondition
from diagnose.ruletools.selftest import check_case, fixture_dirs, ranked_ids
from tests.support.paths import FIXTURES

RULES = load_rules()
IDS = [r.id for r in RULES.rules]
HEALTHY = [f for f in fixture_dirs(FIXTURES) if f.name.startswith("healthy-")]


def fixture_mentions(rule: Rule) -> bool:
    return any(rule.id in (f / "expect.yaml").read_text() for f in fixture_dirs(FIXTURES))


@pytest.mark.parametrize("rule", RULES.rules, ids=IDS)
def test_rule_is_complete(rule: Rule) -> None:
    assert rule.fix, "a rule says what to do"
    assert any(t.should_match for t in rule.tests), "a rule has a positive test"
    assert any(not t.should_match for t in rule.tests), "a rule has a negative test"
    assert rule.references or fixture_mentions(rule), "a rule cites a public report or a real fixture"
    assert rule.relaunch is not None, "a rule says whether a plain relaunch can help"


@pytest.mark.parametrize("rule", RULES.rules, ids=IDS)
@pytest.mark.parametrize("engine", ["hyperscan", "pure"])
def test_rule_own_tests(rule: Rule, engine: str) -> None:
    failures = [f"line {t.line}: {problem}" for t in rule.tests if (problem := check_case(rule, t, engine))]
    assert not failures, failures


@pytest.mark.parametrize("rule", RULES.rules, ids=IDS)
def test_rule_patterns_cannot_hang(rule: Rule) -> None:
    for cond in rule.conditions(TextCondition):
        assert static_problem(cond.pattern) is None, cond.pattern
        assert torture_problem(cond.pattern) is None, cond.pattern


def test_rule_files_live_in_their_category_folder() -> None:
    for rule in RULES.rules:
        assert rule.path.parent.name == rule.category, rule.path
        assert rule.path.name == f"{rule.id}.yaml"


@pytest.mark.parametrize("fixture", HEALTHY, ids=[f.name for f in HEALTHY])
def test_healthy_fixtures_have_no_cause_at_error_or_above(fixture: Path) -> None:
    from diagnose.app import diagnose
    from diagnose.evidence.bundle import evidence_from_bundle

    causes = diagnose(evidence_from_bundle(fixture), RULES).causes
    serious = [(c.id, [e.text for e in c.evidence[:2]]) for c in causes if c.severity in ("critical", "error")]
    assert not serious
    assert ranked_ids(fixture, RULES) == []
