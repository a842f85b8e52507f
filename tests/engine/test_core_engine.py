"""Three-valued rule evaluation, captures, skipped rules, and ranking."""

from __future__ import annotations

import dataclasses
import shutil
import textwrap
from pathlib import Path
from typing import Any

from diagnose.engine.causes import ENGINE_CAUSES
from diagnose.engine.evaluate import evaluate_scanned, pattern_sets, run_rules
from diagnose.engine.rank import rank, rank_all, render
from diagnose.engine.scan import scan_texts
from diagnose.evidence.inputs import evidence_from_paths
from diagnose.rules.load import load_rules
from diagnose.rules.model import Rule
from diagnose.ruletools.selftest import evidence_for_case
from tests.support.paths import DATA, FIXTURES


def make_rule(tmp_path: Path, rule_id: str, when: str, role: str = "root", severity: str = "error",
              confidence: float = 0.8, explanation: str = "x") -> Rule:
    category = rule_id.split(".")[0]
    folder = tmp_path / f"rules-{rule_id}"
    folder.mkdir()
    when_block = textwrap.indent(textwrap.dedent(when), "  ")
    body = (
        f"id: {rule_id}\ntitle: {rule_id}\ncategory: {category}\nrole: {role}\nseverity: {severity}\n"
        f"confidence: {confidence}\nwhen:\n{when_block}\nexplanation: \"{explanation}\"\nfix: [fix it]\n"
    )
    (folder / f"{rule_id}.yaml").write_text(body)
    return load_rules([folder], builtin=False).rules[0]


def evaluate(tmp_path: Path, rules: list[Rule], case: dict[str, Any]) -> tuple[list[str], list[str]]:
    work = tmp_path / f"case-{len(list(tmp_path.iterdir()))}"
    work.mkdir()
    result = run_rules(rules, evidence_for_case(case, work))
    return [f.rule.id for f in result.findings], [s.rule_id for s in result.skipped]


def test_missing_evidence_skips_rule_instead_of_no_match(tmp_path: Path) -> None:
    rule = make_rule(tmp_path, "t.dmesg", "any:\n  - dmesg: 'Killed process'")
    assert evaluate(tmp_path, [rule], {"log": "hello"}) == ([], ["t.dmesg"])
    assert evaluate(tmp_path, [rule], {"dmesg": "nothing here"}) == ([], [])
    assert evaluate(tmp_path, [rule], {"dmesg": "Out of memory: Killed process 1 (x)"}) == (["t.dmesg"], [])


def test_all_any_none_three_valued(tmp_path: Path) -> None:
    rule = make_rule(tmp_path, "t.combo", """\
        all:
          - log: 'boom'
        any:
          - package: {name: wandb, version: '>=0.19'}
          - log: 'wandb'
        none:
          - dmesg: 'excuse'
        """)
    # package unknown but the log alternative is true: any() is true
    assert evaluate(tmp_path, [rule], {"log": ["boom", "wandb here"]})[0] == ["t.combo"]
    # package unknown, log alternative false: unknown -> skipped
    assert evaluate(tmp_path, [rule], {"log": ["boom"]}) == ([], ["t.combo"])
    # package known and old: false
    assert evaluate(tmp_path, [rule], {"log": ["boom"], "package": {"wandb": "0.18.7"}}) == ([], [])
    # exclusion present in dmesg: false; dmesg missing: the exclusion does not exclude
    assert evaluate(tmp_path, [rule], {"log": ["boom"], "package": {"wandb": "0.19.1"}, "dmesg": "an excuse"}) == ([], [])
    assert evaluate(tmp_path, [rule], {"log": ["boom"], "package": {"wandb": "0.19.1"}})[0] == ["t.combo"]


def test_nested_groups(tmp_path: Path) -> None:
    rule = make_rule(tmp_path, "t.nested", """\
        any:
          - all:
              - log: 'alpha'
              - log: 'beta'
          - none:
              - log: 'gamma'
        """)
    assert evaluate(tmp_path, [rule], {"log": ["alpha", "beta", "gamma"]})[0] == ["t.nested"]
    assert evaluate(tmp_path, [rule], {"log": ["alpha", "gamma"]})[0] == []
    assert evaluate(tmp_path, [rule], {"log": ["delta"]})[0] == ["t.nested"]


def test_captures_flow_into_explanation(tmp_path: Path) -> None:
    rule = make_rule(tmp_path, "t.cap", "any:\n  - dmesg: 'Killed process (?P<pid>\\d+) \\((?P<comm>[^)]+)\\)'",
                     explanation="{comm} ({pid}) died; {missing} unknown")
    work = tmp_path / "w"
    work.mkdir()
    # Real kernel lines of the memcg OOM kill in fixtures/seed-host-oom.
    dmesg = (FIXTURES / "seed-host-oom" / "kernel" / "dmesg.txt").read_text().splitlines()[-3:]
    evidence = evidence_for_case({"dmesg": dmesg}, work)
    result = run_rules([rule], evidence)
    finding = result.findings[0]
    assert finding.captures == {"pid": "6139", "comm": "python3"}
    assert render(rule.explanation, finding.captures) == "python3 (6139) died; ? unknown"
    assert "Killed process 6139 (python3)" in finding.evidence[0].text


def test_fact_conditions(tmp_path: Path) -> None:
    rule = make_rule(tmp_path, "t.ckpt", "all:\n  - checkpoint: {count: 0}\n  - exit: {signal: SIGKILL}")
    assert evaluate(tmp_path, [rule], {"checkpoint": {"directory": "/ckpt", "file_count": 0}, "exit": {"signal": 9}})[0] == ["t.ckpt"]
    assert evaluate(tmp_path, [rule], {"checkpoint": {"directory": "/ckpt", "file_count": 3}, "exit": {"signal": 9}})[0] == []
    assert evaluate(tmp_path, [rule], {"checkpoint": {"directory": "/ckpt", "file_count": 0}}) == ([], ["t.ckpt"])
    gpu = make_rule(tmp_path, "t.gpu", "all:\n  - gpu: {ecc_uncorrected: '>0', driver: '>=500'}")
    healthy = {"gpu": {"driver": "580.159.04", "gpus": [{"ecc_uncorrected": 0}, {"ecc_uncorrected": 0}]}}
    broken = {"gpu": {"driver": "580.159.04", "gpus": [{"ecc_uncorrected": 0}, {"ecc_uncorrected": 2}]}}
    assert evaluate(tmp_path, [gpu], healthy)[0] == []
    assert evaluate(tmp_path, [gpu], broken)[0] == ["t.gpu"]


def test_symptom_never_outranks_root_and_context_last(tmp_path: Path) -> None:
    root = make_rule(tmp_path, "t.root", "any:\n  - log: 'root cause'", role="root", severity="error", confidence=0.5)
    symptom = make_rule(tmp_path, "t.symptom", "any:\n  - log: 'watchdog'", role="symptom", severity="critical", confidence=1.0)
    context = make_rule(tmp_path, "t.context", "any:\n  - log: 'wandb'", role="context", severity="critical", confidence=1.0)
    work = tmp_path / "w"
    work.mkdir()
    evidence = evidence_for_case({"log": ["wandb", "watchdog", "root cause"]}, work)
    result = run_rules([symptom, context, root], evidence)
    causes = rank(result.findings, evidence)
    assert [c.id for c in causes] == ["t.root", "t.symptom", "t.context"]
    assert causes[0].explains == ("t.symptom",)


def test_earliest_root_wins_ties(tmp_path: Path) -> None:
    first = make_rule(tmp_path, "t.first", "any:\n  - log: 'first'", confidence=0.8)
    second = make_rule(tmp_path, "t.second", "any:\n  - log: 'second'", confidence=0.81)
    stronger = make_rule(tmp_path, "t.stronger", "any:\n  - log: 'late but sure'", confidence=1.0, severity="critical")
    work = tmp_path / "w"
    work.mkdir()
    lines = ["2026-11-30 10:00:05,000 second", "2026-11-30 10:00:01,000 first", "2026-11-30 10:00:09,000 late but sure"]
    evidence = evidence_for_case({"log": lines}, work)
    causes = rank(run_rules([second, first, stronger], evidence).findings, evidence)
    # stronger score wins outright; first and second tie on score, so the earlier one leads
    assert [c.id for c in causes] == ["t.stronger", "t.first", "t.second"]


def test_unrecognised_crash_reported_when_no_rule_matches(tmp_path: Path) -> None:
    rule = make_rule(tmp_path, "t.never", "any:\n  - log: 'never matches'")
    work = tmp_path / "w"
    work.mkdir()
    # The real wandb log: its pydantic ValidationError is the last exception.
    evidence = evidence_for_case({"log": (DATA / "logs" / "wandb-settings-rejected.log").read_text().splitlines()}, work)
    causes = rank(run_rules([rule], evidence).findings, evidence)
    assert [c.id for c in causes] == ["unrecognised.crash"]
    assert "ValidationError: 2 validation errors for Settings" in causes[0].title
    assert any(e.line == 13 for e in causes[0].evidence)


def test_no_unrecognised_cause_when_a_root_explains_it(tmp_path: Path) -> None:
    rule = make_rule(tmp_path, "t.key", "any:\n  - log: 'validation errors? for Settings'")
    work = tmp_path / "w"
    work.mkdir()
    evidence = evidence_for_case({"log": (DATA / "logs" / "wandb-settings-rejected.log").read_text().splitlines()}, work)
    causes = rank(run_rules([rule], evidence).findings, evidence)
    assert [c.id for c in causes] == ["t.key"]


def test_maybe_adds_captures_without_deciding(tmp_path: Path) -> None:
    rule = make_rule(tmp_path, "t.maybe", """\
        all:
          - log: 'Error\\(s\\) in loading state_dict for (?P<model>\\w+)'
        maybe:
          - log: 'size mismatch for (?P<param>[\\w.]+)'
        """)
    work = tmp_path / "w"
    work.mkdir()
    with_param = evidence_for_case({"log": [
        "RuntimeError: Error(s) in loading state_dict for MLP:",
        "\tsize mismatch for encoder.0.weight: copying a param with shape torch.Size([128, 32]) from checkpoint, the shape in current model is torch.Size([256, 32]).",
    ]}, work)
    finding = run_rules([rule], with_param).findings[0]
    assert finding.captures == {"model": "MLP", "param": "encoder.0.weight"}
    assert len(finding.evidence) == 2
    assert evaluate(tmp_path, [rule], {"log": ["RuntimeError: Error(s) in loading state_dict for MLP:"]})[0] == ["t.maybe"]
    assert evaluate(tmp_path, [rule], {"log": ["\tsize mismatch for encoder.0.weight"]})[0] == []


def test_maybe_is_refused_under_any(tmp_path: Path) -> None:
    import pytest

    from diagnose.errors import RuleError

    with pytest.raises(RuleError) as info:
        make_rule(tmp_path, "t.badmaybe", "any:\n  - log: 'a'\n  - maybe:\n      - log: 'b'")
    assert "'maybe' can only appear under 'all'" in "\n".join(info.value.details)


def test_kernel_lines_inside_a_training_log_count_for_dmesg_conditions(tmp_path: Path) -> None:
    rule = make_rule(tmp_path, "t.kern", "any:\n  - dmesg: 'Memory cgroup out of memory: Killed process (?P<pid>\\d+)'")
    kernel_line = (FIXTURES / "seed-host-oom" / "kernel" / "dmesg.txt").read_text().splitlines()[-1]
    training = (DATA / "logs" / "wandb-settings-rejected.log").read_text().splitlines()[:5]
    assert evaluate(tmp_path, [rule], {"log": [*training, kernel_line]})[0] == ["t.kern"]
    # No kernel log and no kernel line in the logs: unknown, not "no match".
    assert evaluate(tmp_path, [rule], {"log": training}) == ([], ["t.kern"])
    # A kernel log without it: a real "no".
    assert evaluate(tmp_path, [rule], {"log": training, "dmesg": training[:1]}) == ([], [])


def test_engine_made_causes_carry_their_table_entry(tmp_path: Path) -> None:
    # engine/causes.py holds each engine-made cause once; a cause of a run words only its title and explanation.
    crashed = evidence_from_paths([str(DATA / "ci" / "shape-mismatch" / "train.log")])
    stopped_log = tmp_path / "train.log"  # the real wandb log up to its crash: INFO lines only, then nothing
    stopped_log.write_text("\n".join((DATA / "logs" / "wandb-settings-rejected.log").read_text().splitlines()[:5]) + "\n")
    loose = evidence_from_paths([str(stopped_log)])
    # A run diagnosed where it ran (its processes looked for): a log that just stops is a warning.
    # The same log scanned alone ended without an error as far as anything can tell: no cause.
    stopped = dataclasses.replace(loose, run=dataclasses.replace(loose.run, mode="live"))
    assert rank_all([], loose).causes == []
    made = {c.id: c for evidence in (crashed, stopped) for c in rank_all([], evidence).causes}
    assert {"unrecognised.crash", "run.stopped-without-error"} <= set(made)
    for cause_id, cause in made.items():
        entry = ENGINE_CAUSES[cause_id]
        assert (cause.category, cause.role, cause.severity, cause.confidence, cause.relaunch) == (
            entry.category, entry.role, entry.severity, entry.confidence, entry.relaunch)
        # the unrecognised crash's first step names the user's own frame when it has one (issue 12)
        assert cause.fix[1:] == entry.fix[1:] and len(cause.fix) == len(entry.fix)
    assert "RuntimeError: Error(s) in loading state_dict for MLP" in made["unrecognised.crash"].title


def test_a_log_gone_after_the_scan_is_still_read_whole(tmp_path: Path) -> None:
    # Scanned, then gone before the ranker and the analyzers look at it (rotated, removed): they
    # take what the scan kept of it (its view, issue 23), so nothing is lost and nothing is a gap.
    log = tmp_path / "train.log"
    shutil.copy(FIXTURES / "torchrun-rank-exception" / "logs" / "train-tee.log", log)
    rules = [r for r in load_rules().rules if r.analyze == "torchelastic"]
    sets = pattern_sets(rules)

    def diagnosed(remove: bool) -> tuple[list[str], list[tuple[str, str]]]:
        evidence = evidence_from_paths([str(log)])
        scans = scan_texts(evidence.texts, sets)
        if remove:
            kept = log.read_bytes()
            log.unlink()
        result = evaluate_scanned(rules, evidence, scans, sets)
        ranked = rank_all(result.findings, evidence)
        if remove:
            log.write_bytes(kept)
        return [c.id for c in ranked.causes], [(g.source, g.reason) for g in result.gaps + ranked.gaps]

    present, gone = diagnosed(False), diagnosed(True)
    assert gone == present and present[0] and not present[1]
