"""A pattern that slips past the rule checks costs a bounded time per file, never a hang: slow
confirmations are charged to a budget per pattern and file, and a pattern that spends it is
stopped on that file and named in the report. Times are CPU time: the budget is charged in CPU
time, so a busy machine neither stops a pattern early nor makes these checks flaky."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from diagnose.app import diagnose
from diagnose.engine import scan
from diagnose.evidence.model import Evidence, RunInfo, TextFile, TextKind
from diagnose.patterns.hangcheck import static_problem
from diagnose.rules.model import Group, Rule, RuleSet, TextCondition
from tests.scan_support import ENGINES, cache_dir, run_scan  # noqa: F401

# Exponential in the run of a (two ways into each "aa"), and the lookahead that fails is
# dropped from the superset, so both engines nominate every line and `regex` must confirm it:
# ~0.1 s a line, ~15 minutes for the file below without the budget. The loader refuses it;
# these tests build the rule in code, past the guard.
SLOW = r"(a|aa)+(?=c)"
LINES = 10_000
SLACK = 6.0  # seconds beyond the budget: reading the file, a line in flight, a busy machine


@pytest.fixture
def slow_log(tmp_path: Path) -> Path:
    path = tmp_path / "slow.log"
    path.write_text("step 1 NCCL version 2.21.5\n" + ("a" * 26 + "\n") * LINES + "NCCL version 2.21.5\n")
    return path


def test_the_slow_pattern_is_one_the_guard_refuses() -> None:
    assert static_problem(SLOW) is not None


@pytest.mark.parametrize("engine", ENGINES)
def test_a_catastrophic_pattern_stops_within_its_budget(engine: str, slow_log: Path, cache_dir: Path) -> None:  # noqa: F811
    started = time.process_time()
    result = run_scan(slow_log, [SLOW, r"NCCL version (?P<version>\S+)"], engine)
    seconds = time.process_time() - started
    assert seconds < scan.CONFIRM_BUDGET + SLACK, seconds
    assert 0 in result.stopped and 1 not in result.stopped
    lines, line_no = result.stopped[0]
    assert 1 <= lines < LINES and 2 <= line_no < LINES
    assert result.count(1) == 2  # the other pattern went on to the end of the file


@pytest.mark.parametrize("engine", ENGINES)
def test_a_pattern_searched_line_by_line_stops_too(engine: str, slow_log: Path, cache_dir: Path) -> None:  # noqa: F811
    # `regex`-only syntax has no superset: the finder searches it line by line, under the
    # same budget, before the confirmation does.
    from diagnose.patterns import prefilter
    pattern = r"(?:\p{L}|\p{L})+(?=c)"
    with pytest.raises(prefilter.Unsupported):
        prefilter.prefilter(pattern, prefilter.FOR_REGEX)
    started = time.process_time()
    result = run_scan(slow_log, [pattern], engine)
    assert time.process_time() - started < 2 * scan.CONFIRM_BUDGET + SLACK
    assert 0 in result.stopped


def test_fast_confirmations_are_never_charged(tmp_path: Path, cache_dir: Path) -> None:  # noqa: F811
    # A pattern that fires on every line of a big log is reading, not backtracking.
    log = tmp_path / "busy.log"
    log.write_text("step 1 loss 2.0 lr 0.1\n" * 200_000)
    result = run_scan(log, [r"step (?P<step>\d+) loss (?P<loss>[\d.]+)"], "pure")
    assert result.count(0) == 200_000 and result.stopped == {}
    assert result.budget[0] > scan.CONFIRM_BUDGET - 0.5


def test_the_report_names_the_spent_budget(slow_log: Path, cache_dir: Path) -> None:  # noqa: F811
    from diagnose.report.json_report import to_json
    from diagnose.report.terminal import report

    rule = Rule(id="test.slow", title="t", category="test", role="root", severity="error", confidence=0.5,
                when=Group("all", (TextCondition(TextKind.LOG, SLOW, 9),), 1), explanation="e", fix=("f",),
                builtin=False)
    evidence = Evidence(RunInfo(id="t", mode="scan"), (TextFile(TextKind.LOG, slow_log, "slow.log"),))
    started = time.process_time()
    diagnosis = diagnose(evidence, RuleSet([rule]))
    assert time.process_time() - started < scan.CONFIRM_BUDGET + SLACK
    gaps = [g for g in diagnosis.gaps if "budget" in g.reason]
    assert len(gaps) == 1 and gaps[0].source == "slow.log"
    reason = gaps[0].reason
    assert reason.startswith("rule test.slow: regex confirmation budget spent on slow.log after ")
    assert reason.endswith("(pattern may be catastrophic)")
    assert not [s for s in diagnosis.skipped if s.rule_id == "test.slow"]  # said once, as the gap
    assert {"source": "slow.log", "reason": reason} in json.loads(json.dumps(to_json(diagnosis)))["gaps"]
    out = io.StringIO()
    report(diagnosis, out)
    # The terminal wraps the gap to its width with a hanging indent: compare the words.
    assert " ".join(f"slow.log: {reason}".split()) in " ".join(out.getvalue().split())
