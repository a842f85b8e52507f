"""`diagnose rules lint`: every lint code fires on a rule made to have that problem, stays quiet
on a clean rule, the exit code follows the error level, and docs/rules.md documents every code."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from diagnose.rules import conditions as facts
from diagnose.rules.conditions import FACT_KINDS, FactCondition
from diagnose.ruletools.selftest import evidence_for_case
from diagnose.ruletools.tools import LINT_CODES, lint_paths
from tests.support.cli import run_cli
from tests.support.paths import FIXTURES, REPO

# A complete, clean rule; each case below breaks one thing. The log lines are real
# (torch-single/inductor-no-compiler/train.log and train-ok.log).
CLEAN = """\
id: compile.demo
title: No C++ compiler ({compiler})
category: compile
role: root
severity: error
confidence: 0.9
when:
  any:
    - log: 'InvalidCxxCompiler: No working C\\+\\+ compiler found in torch\\._inductor\\.config\\.cpp\\.cxx: \\((?P<compiler>[^)]*)\\)'
explanation: "Inductor tried {compiler}."
fix:
  - "Install g++."
relaunch: "no"
references:
  - https://github.com/pytorch/pytorch/issues/92745
tests:
  match:
    - log: "torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx: (None, 'g++')"
  no_match:
    - log: "2026-11-30 04:43:26,270 INFO train: Training complete"
"""
WHEN = """when:
  any:
    - log: 'InvalidCxxCompiler: No working C\\+\\+ compiler found in torch\\._inductor\\.config\\.cpp\\.cxx: \\((?P<compiler>[^)]*)\\)'
"""


def variant(old: str, new: str) -> str:
    assert old in CLEAN, old
    return CLEAN.replace(old, new)


CASES: dict[str, tuple[str, str]] = {
    # code: (file text, text expected in the message)
    "DL001": (variant("fix:\n  - \"Install g++.\"\n", ""), "missing required field 'fix'"),
    "DL101": (variant(WHEN, "when:\n  any:\n    - log: '(?P<compiler>x)(a+)+b'\n"), "nested repeats"),
    "DL102": (variant(WHEN, "when:\n  any:\n    - log: '.*InvalidCxxCompiler: (?P<compiler>.+)'\n"), "starts with a wildcard"),
    "DL201": (variant("  match:\n    - log: \"torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx: (None, 'g++')\"\n", ""), "tests.match"),
    "DL202": (variant("  no_match:\n    - log: \"2026-11-30 04:43:26,270 INFO train: Training complete\"\n", ""), "tests.no_match"),
    "DL203": (variant("title: No C++ compiler ({compiler})", "title: TODO name it ({compiler})"), "TODO"),
    "DL301": (variant("relaunch: \"no\"\n", ""), "relaunch"),
    "DL302": (variant("references:\n  - https://github.com/pytorch/pytorch/issues/92745\n", ""), "references"),
    "DL401": (variant(WHEN, WHEN + "  none:\n    - log: 'InvalidCxxCompiler: No working C\\+\\+ compiler found in torch\\._inductor\\.config\\.cpp\\.cxx: \\((?P<compiler>[^)]*)\\)'\n"),
              "must match"),
    "DL402": (variant(WHEN, WHEN + "    - log: 'InvalidCxxCompiler: No working C\\+\\+ compiler found in torch\\._inductor\\.config\\.cpp\\.cxx: \\((?P<compiler>[^)]*)\\)'\n"),
              "appears twice"),
    "DL403": (variant('explanation: "Inductor tried {compiler}."', 'explanation: "Inductor tried {compiler} with {cxx_flags}."'), "{cxx_flags}"),
}


def write(folder: Path, text: str, category: str = "compile", name: str = "compile.demo.yaml") -> Path:
    path = folder / category / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def codes(report: Any) -> set[str]:
    return {i.code for i in report.issues}


def test_clean_rule_has_no_issue(tmp_path: Path) -> None:
    report = lint_paths([write(tmp_path, CLEAN)], fixtures_root=FIXTURES)
    assert report.issues == [] and report.rules == 1


@pytest.mark.parametrize("code", sorted(CASES))
def test_each_code_fires_on_a_rule_made_for_it(tmp_path: Path, code: str) -> None:
    text, message = CASES[code]
    report = lint_paths([write(tmp_path, text)], healthy=False)
    found = [i for i in report.issues if i.code == code]
    assert found, [i.render() for i in report.issues]
    assert message in found[0].message
    assert found[0].level == LINT_CODES[code].severity
    # The other checks stay quiet: each bad rule has exactly the problem it was made with
    # (DL101 on a nested repeat may also be reported by the torture run: same code).
    assert codes(report) == {code}, [i.render() for i in report.issues]


def test_torture_check_catches_what_the_static_check_misses(tmp_path: Path) -> None:
    # \p{L} is `regex`-only syntax, which the static check cannot parse; two ways to match
    # each letter: exponential on 'aaaa...!'.
    text = variant(WHEN, "when:\n  any:\n    - log: '(?P<compiler>x)|(?:\\p{L}|\\p{L})*b'\n")
    report = lint_paths([write(tmp_path, text)], healthy=False)
    hangs = [i for i in report.issues if i.code == "DL101"]
    assert hangs and "16 KiB" in hangs[0].message


def test_unreachable_any_and_none_over_groups(tmp_path: Path) -> None:
    # Every child of the `any` is excluded: never matches.
    both = "    - log: 'alpha (?P<compiler>\\w+)'\n    - log: 'beta (?P<compiler>\\w+)'\n"
    text = variant(WHEN, "when:\n  any:\n" + both + "  none:\n" + both)
    report = lint_paths([write(tmp_path, text)], healthy=False)
    assert "every child of this `any`" in " ".join(i.message for i in report.issues if i.code == "DL401")
    # none(all(A, B)) does not exclude A alone: reachable.
    text = variant(WHEN, WHEN + "  none:\n    - all:\n" + "".join("    " + line + "\n" for line in WHEN.splitlines()[2:]) +
                   "        - log: 'Training complete'\n")
    report = lint_paths([write(tmp_path, text)], healthy=False)
    assert "DL401" not in codes(report), [i.render() for i in report.issues]


def test_placeholders_from_facts_count_and_from_none_do_not(tmp_path: Path) -> None:
    text = variant('explanation: "Inductor tried {compiler}."', 'explanation: "Inductor tried {compiler} under torch {torch_version}."')
    text = text.replace(WHEN, "when:\n  all:\n    - log: 'InvalidCxxCompiler: (?P<compiler>.+)'\n    - any:\n"
                              "        - package: {name: torch}\n        - log: 'InvalidCxxCompiler'\n")
    assert "DL403" not in codes(lint_paths([write(tmp_path, text)], healthy=False))
    text = variant(WHEN, WHEN + "  none:\n    - log: 'flags (?P<cxx_flags>\\S+)'\n")
    text = text.replace('explanation: "Inductor tried {compiler}."', 'explanation: "Inductor tried {compiler} with {cxx_flags}."')
    report = lint_paths([write(tmp_path, text)], healthy=False)
    assert [i.code for i in report.issues] == ["DL403"]


def test_wrong_folder(tmp_path: Path) -> None:
    report = lint_paths([write(tmp_path, CLEAN, category="library")], healthy=False)
    assert codes(report) == {"DL501"}


def test_healthy_fixture_match_is_an_error_for_serious_roots_only(tmp_path: Path) -> None:
    # "Training complete in 45.8s" is a line of the real healthy run fixtures/healthy-cpu-train.
    generic = variant(WHEN, "when:\n  any:\n    - log: 'Training complete in (?P<compiler>\\S+)'\n")
    report = lint_paths([write(tmp_path, generic)], fixtures_root=FIXTURES)
    hits = [i for i in report.issues if i.code == "DL110"]
    assert hits and hits[0].level == "error" and "healthy-cpu-train" in hits[0].message
    as_warning = generic.replace("severity: error", "severity: warning")
    report = lint_paths([write(tmp_path, as_warning)], fixtures_root=FIXTURES)
    assert [i.level for i in report.issues if i.code == "DL110"] == ["warning"]
    assert report.errors == 0


def test_cli_exit_codes(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad", CASES["DL201"][0])
    result = run_cli(["rules", "lint", str(bad), "--no-healthy"])
    assert result.returncode == 1
    assert re.search(r"compile\.demo\.yaml:\d+: DL201 missing-positive-test \[error\] compile\.demo: ", result.stdout)
    assert "1 error(s)" in result.stderr
    warn = write(tmp_path / "warn", CASES["DL302"][0])
    result = run_cli(["rules", "lint", str(warn), "--no-healthy"])
    assert result.returncode == 0 and "DL302" in result.stdout and "0 error(s), 1 warning(s)" in result.stderr
    missing = run_cli(["rules", "lint", str(tmp_path / "nope")])
    assert missing.returncode == 2


@pytest.mark.parametrize("category", ["compile", "library", "service", "launch"])
def test_rule_pack_categories_lint_clean(category: str) -> None:
    report = lint_paths([REPO / "rules" / category], fixtures_root=FIXTURES)
    assert report.errors == 0, [i.render() for i in report.issues if i.level == "error"]


def test_docs_list_every_code() -> None:
    doc = (REPO / "docs" / "rules.md").read_text()
    rows = dict(re.findall(r"^\| (DL\d{3}) \| ([a-z-]+) \|", doc, flags=re.M))
    assert rows == {code: c.name for code, c in LINT_CODES.items()}
    for code, lint_code in LINT_CODES.items():
        row = re.search(rf"^\| {code} \| [a-z-]+ \| ([a-z /]+) \|", doc, flags=re.M)
        assert row and lint_code.severity in row.group(1)


FACT_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "package": ({"name": "torch"}, {"package": {"torch": "2.13.0"}}),
    "tmux": ({"server": "stale_socket"}, {"tmux": {"server": "stale_socket", "session": "train"}}),
    "file": ({"exists": False}, {"file": {"path": "/w/train.log", "exists": False, "siblings": ["train_1.log"]}}),
    "checkpoint": ({"exists": True}, {"checkpoint": {"directory": "/ckpt", "file_count": 1, "collected_at": 1000.0,
                                                     "newest": {"path": "a.pt", "size": 1, "mtime": 940.0}}}),
    "gpu": ({"ecc_uncorrected": ">0"}, {"gpu": {"driver": "550.54", "gpus": [{"name": "H200", "ecc_uncorrected": 3}]}}),
    "exit": ({"code": 1}, {"exit": {"code": 1, "rank": 0}}),
    "process": ({"alive": False}, {"process": {"alive": False}}),
    # trainer_state.json log_history of tests/data/mlfiles/hf-trainer-nan: runs away, then NaN
    "metric": ({"name": "loss", "nonfinite": True, "diverged": True},
               {"metrics": {"loss": [[1, 3.9030723571777344], [2, 31211.59765625], [3, 283893497856.0], [4, "nan"]]}}),
}


@pytest.mark.parametrize("kind", sorted(FACT_KINDS))
def test_fact_capture_table_matches_facts_py(tmp_path: Path, kind: str) -> None:
    fields, case = FACT_CASES[kind]
    spec = FACT_KINDS[kind]
    cond = FactCondition(kind, {name: spec.fields[name].parse(value) for name, value in fields.items()}, 1)
    result = facts.evaluate(cond, evidence_for_case(case, tmp_path))
    assert result.truth is True
    expected = set(spec.captures) | ({"torch_version"} if kind == "package" else set())
    assert set(result.captures or {}) == expected


def test_lint_default_is_the_builtin_pack(tmp_path: Path) -> None:
    # Copy two built-in rules to see PATH handling of a folder tree and a single file agree.
    folder = tmp_path / "pack"
    for rule_id in ("compile.no-c-compiler", "library.module-not-found"):
        category = rule_id.split(".")[0]
        (folder / category).mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "rules" / category / f"{rule_id}.yaml", folder / category)
    report = lint_paths([folder], fixtures_root=FIXTURES)
    assert report.rules == 2 and report.errors == 0
