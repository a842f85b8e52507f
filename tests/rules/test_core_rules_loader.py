"""The rule loader reports every problem at once with file:line, and the CLI exits 2."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from diagnose.errors import RuleError
from diagnose.rules.load import load_rules
from tests.support.cli import run_cli

GOOD = """\
id: demo.good
title: A good rule
category: demo
role: root
severity: error
confidence: 0.8
when:
  any:
    - log: 'boom (?P<what>\\w+)'
explanation: "It went boom: {what}"
fix: ["Do not go boom."]
tests:
  match: [{log: "boom engine"}]
  no_match: [{log: "all fine"}]
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems_for(folder: Path) -> list[str]:
    with pytest.raises(RuleError) as info:
        load_rules([folder], builtin=False)
    return info.value.details


def test_good_rule_loads(tmp_path: Path) -> None:
    write(tmp_path, "demo.good.yaml", GOOD)
    ruleset = load_rules([tmp_path], builtin=False)
    assert [r.id for r in ruleset.rules] == ["demo.good"]
    assert ruleset.rules[0].builtin is False


def test_every_problem_reported_with_file_and_line(tmp_path: Path) -> None:
    bad = GOOD.replace("severity: error", "severity: fatal").replace("fix: [\"Do not go boom.\"]", "fix: []")
    bad = bad.replace("    - log: 'boom (?P<what>\\w+)'", "    - log: 'boom ('\n    - gpuu: {x: 1}\n    - package: {name: wandb, version: '>>0.19'}")
    bad += "whne: {}\n"
    path = write(tmp_path, "demo.good.yaml", bad)
    problems = problems_for(tmp_path)
    text = "\n".join(problems)
    assert all(p.startswith(f"{path}:") for p in problems)
    assert "'fatal' is not one of" in text
    assert "fix must not be empty" in text
    assert "bad regex" in text
    assert "unknown condition kind 'gpuu'" in text
    assert "invalid version specifier" in text
    assert "unknown field 'whne'" in text
    # line numbers point at the offending lines
    lines = bad.splitlines()
    severity_line = next(i for i, line in enumerate(lines, 1) if line.startswith("severity"))
    assert any(p.startswith(f"{path}:{severity_line}:") for p in problems)


def test_duplicate_keys_and_id_mismatch(tmp_path: Path) -> None:
    path = write(tmp_path, "demo.other.yaml", GOOD.replace("confidence: 0.8", "confidence: 0.8\nconfidence: 0.7"))
    problems = problems_for(tmp_path)
    assert any("duplicate key 'confidence'" in p and p.startswith(f"{path}:7:") for p in problems)
    assert any("must match the file name" in p for p in problems)


def test_bad_fact_fields_and_values(tmp_path: Path) -> None:
    text = GOOD.replace("    - log: 'boom (?P<what>\\w+)'",
                        "    - tmux: {server: exploded}\n    - checkpoint: {count: lots}\n    - file: {exist: false}")
    write(tmp_path, "demo.good.yaml", text)
    text_problems = "\n".join(problems_for(tmp_path))
    assert "expected one of running, stale_socket, no_socket, error" in text_problems
    assert "checkpoint.count: expected a number" in text_problems
    assert "unknown file field 'exist'" in text_problems


def test_regex_matching_empty_line_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "demo.good.yaml", GOOD.replace("'boom (?P<what>\\w+)'", "'x*'"))
    assert any("matches an empty line" in p for p in problems_for(tmp_path))


def test_user_regex_that_would_hang_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "demo.good.yaml", GOOD.replace("'boom (?P<what>\\w+)'", "'(\\w+\\s?)+$'"))
    assert any("backtrack" in p or "would hang" in p for p in problems_for(tmp_path))


def test_polynomial_regex_refused_by_torture_run(tmp_path: Path) -> None:
    # \s+$ is quadratic on a long run of spaces: the static check cannot see it, the torture run does.
    write(tmp_path, "demo.good.yaml", GOOD.replace("'boom (?P<what>\\w+)'", "'boom\\s+\\s+\\s+$'"))
    assert any("would hang" in p for p in problems_for(tmp_path))


def test_placeholder_braces_checked(tmp_path: Path) -> None:
    write(tmp_path, "demo.good.yaml", GOOD.replace("It went boom: {what}", "It went boom: {what"))
    assert any("placeholder braces" in p for p in problems_for(tmp_path))


def test_invalid_utf8_rule_file(tmp_path: Path) -> None:
    (tmp_path / "demo.good.yaml").write_bytes(GOOD.encode() + b"\nnote: \xff\xfe\n")
    assert any("not valid UTF-8" in p for p in problems_for(tmp_path))


def test_invalid_yaml_reports_line(tmp_path: Path) -> None:
    path = write(tmp_path, "demo.good.yaml", "id: demo.good\ntitle: [unclosed\n")
    problems = problems_for(tmp_path)
    assert problems[0].startswith(f"{path}:") and "invalid YAML" in problems[0]


def test_user_rule_overrides_builtin_and_says_so_with_v(tmp_path: Path) -> None:
    text = GOOD.replace("demo.good", "memory.host-oom-kill").replace("category: demo", "category: memory")
    write(tmp_path, "memory.host-oom-kill.yaml", text)
    ruleset = load_rules([tmp_path])
    rule = ruleset.by_id()["memory.host-oom-kill"]
    assert rule.title == "A good rule" and not rule.builtin
    assert [o[0] for o in ruleset.overridden] == ["memory.host-oom-kill"]
    log = tmp_path / "x.log"
    log.write_text("boom engine\n")
    result = run_cli(["scan", str(log), "--rules", str(tmp_path), "-v"])
    assert "overrides the built-in" in result.stderr


def test_cli_malformed_rule_exits_2_with_one_clear_line(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    path = write(rules, "demo.good.yaml", GOOD.replace("role: root", "role: boss"))
    log = tmp_path / "x.log"
    log.write_text("hello\n")
    result = run_cli(["scan", str(log), "--rules", str(rules)])
    assert result.returncode == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"diagnose: error: {path}:4:") and "'boss' is not one of" in first
    assert "Traceback" not in result.stderr


def test_tags_are_no_longer_part_of_the_format(tmp_path: Path) -> None:
    path = write(tmp_path, "demo.good.yaml", GOOD + "tags: [torch.compile]\n")
    line = GOOD.count("\n") + 1
    assert problems_for(tmp_path) == [
        f"{path}:{line}: 'tags' was removed from the rule format: the category and the role are what reports and "
        "SARIF group rules by; delete the line"]


def test_old_and_new_spelling_of_a_test_key_together_is_refused(tmp_path: Path) -> None:
    text = GOOD.replace('match: [{log: "boom engine"}]',
                        'match: [{log: "boom engine", exits: [{code: 1}], exit: {code: 1}}]')
    path = write(tmp_path, "demo.good.yaml", text)
    (problem,) = problems_for(tmp_path)
    assert problem.startswith(f"{path}:") and problem.endswith("test case gives both exits and exit; write exit only")
