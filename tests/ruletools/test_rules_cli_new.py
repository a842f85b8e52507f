"""`diagnose rules new`: the scaffold is named by its id, built from a real line, passes its own
tests and lint at once, and never overwrites."""

from __future__ import annotations

from pathlib import Path

import pytest
import regex

from diagnose.errors import DiagnoseError
from diagnose.rules.load import load_rule_file
from diagnose.rules.yamlnodes import Problems
from diagnose.ruletools.selftest import check_case
from diagnose.ruletools.tools import ERROR, lint_paths, lint_structure, pattern_from_line, scaffold_rule
from tests.support.cli import run_cli

# Real lines, copied from captures (path under /work/capture) or public reports.
INDUCTOR = ("torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found in "
            "torch._inductor.config.cpp.cxx: (None, '/nonexistent/g++')")  # torch-single/inductor-no-compiler/train.log
HUB_WARNING = ("2026-11-30 04:45:39,816 WARNING huggingface_hub.utils._http: '[Errno -2] Name or service not known' "
               "thrown while requesting HEAD https://huggingface.co/bert-base-uncased/resolve/main/config.json")  # libs/hf-hub-offline/train-online.log
GATED = ("huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: "
         "Root=1-66f4b037-1bf3d7d219afbc904ee05694;5601d2c9-8fd8-4ed8-b38d-d8a432e1fa59)")  # https://github.com/ToTheBeginning/PuLID/issues/97
GLOO = ("[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
        "Timed out waiting 20000ms for recv operation to complete")  # torch-multi/gloo-timeout/train.log
GLOG = ("W1130 04:40:45.894000 8069 torch/_dynamo/convert_frame.py:1994] [0/8] torch._dynamo hit "
        "config.recompile_limit (8)")  # torch-single/dynamo-recompile-limit/train.log
REAL_LINES = [INDUCTOR, HUB_WARNING, GATED, GLOO, GLOG]


def load(path: Path):  # type: ignore[no-untyped-def]
    problems = Problems()
    rule = load_rule_file(path, problems, check_hang=True)
    assert rule is not None, problems.items
    return rule


@pytest.mark.parametrize("line", REAL_LINES, ids=["inductor", "hub-warning", "gated-hex", "rank-prefix", "glog"])
def test_scaffold_passes_its_own_tests_and_lint(tmp_path: Path, line: str) -> None:
    path = scaffold_rule("compile.my-new-error", line, tmp_path)
    assert path == tmp_path / "compile" / "compile.my-new-error.yaml"
    rule = load(path)
    assert [check_case(rule, t) for t in rule.tests] == [None, None]
    assert any(t.should_match for t in rule.tests) and any(not t.should_match for t in rule.tests)
    issues = lint_structure(rule)
    assert not [i for i in issues if i.level == ERROR], [i.render() for i in issues]
    assert {i.code for i in issues} <= {"DL203", "DL302"}  # TODO text and no reference yet: warnings


def test_pattern_generalises_numbers_hex_and_prefixes() -> None:
    gated = pattern_from_line(GATED)
    assert "[0-9a-f]+" in gated and "66f4b037" not in gated and "401" not in gated
    assert regex.search(gated, GATED.replace("66f4b037", "0123abcd").replace("401", "403"))
    hub = pattern_from_line(HUB_WARNING)
    assert not hub.startswith(r"\d+-") and hub.startswith("WARNING huggingface_hub")
    gloo = pattern_from_line(GLOO)
    assert gloo.startswith("RuntimeError: ") and r"\d+ms" in gloo
    assert regex.search(gloo, GLOO.replace("[rank0]", "[rank7]").replace("20000ms", "1800000ms"))
    glog = pattern_from_line(GLOG)
    assert glog.startswith(r"\[\d+/\d+\] torch\._dynamo hit config\.recompile_limit \(\d+\)")
    inductor = pattern_from_line(INDUCTOR)
    assert r"C\+\+" in inductor and regex.search(inductor, INDUCTOR)
    assert regex.compile(inductor).search("") is None


def test_scaffold_without_a_line_loads_and_passes(tmp_path: Path) -> None:
    rule = load(scaffold_rule("service.my-thing", None, tmp_path))
    assert rule.category == "service"
    assert [check_case(rule, t) for t in rule.tests] == [None, None]
    assert {i.code for i in lint_structure(rule)} <= {"DL203", "DL302"}


def test_refuses_to_overwrite_and_bad_ids(tmp_path: Path) -> None:
    path = scaffold_rule("library.some-error", INDUCTOR, tmp_path)
    before = path.read_text()
    with pytest.raises(DiagnoseError, match="refusing to overwrite"):
        scaffold_rule("library.some-error", GATED, tmp_path)
    assert path.read_text() == before
    for bad in ("NoDots", "library", "Library.x", "library..x"):
        with pytest.raises(DiagnoseError, match="dotted lowercase"):
            scaffold_rule(bad, INDUCTOR, tmp_path)
    with pytest.raises(DiagnoseError, match="empty"):
        scaffold_rule("library.other", "   ", tmp_path)


def test_cli_new_then_lint_and_test(tmp_path: Path) -> None:
    result = run_cli(["rules", "new", "service.hub-retry", "--from-line", HUB_WARNING, "--dir", str(tmp_path)])
    assert result.returncode == 0, result.stderr
    path = tmp_path / "service" / "service.hub-retry.yaml"
    assert result.stdout.strip() == str(path)
    lint = run_cli(["rules", "lint", str(path), "--no-healthy"])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "DL203" in lint.stdout and "[error]" not in lint.stdout
    again = run_cli(["rules", "new", "service.hub-retry", "--from-line", GATED, "--dir", str(tmp_path)])
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    bad = run_cli(["rules", "new", "Bad_Id", "--dir", str(tmp_path)])
    assert bad.returncode == 2 and "dotted lowercase" in bad.stderr


def test_lint_of_scaffold_folder_has_no_errors(tmp_path: Path) -> None:
    for n, line in enumerate(REAL_LINES):
        scaffold_rule(f"data.scaffold-{n}", line, tmp_path)
    report = lint_paths([tmp_path], fixtures_root=tmp_path / "no-fixtures")
    assert report.rules == len(REAL_LINES) and report.errors == 0, [i.render() for i in report.issues]
