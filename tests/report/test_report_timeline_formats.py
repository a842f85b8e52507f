"""The run's timeline is built only for the reports that draw it (report.render.DRAWS_TIMELINE:
the terminal's Ranks table, the HTML report; the CLI asks app.diagnose for it only then). Every
other format's report is the same without it, byte for byte, and the formats that draw it show
it. On real fixture bundles: two ranks that hung, a host OOM kill, a launch that never started."""

from __future__ import annotations

import io
import re

import pytest

from diagnose.app import diagnose
from diagnose.cli import wants_timeline
from diagnose.engine.findings import Diagnosis
from diagnose.evidence.bundle import evidence_from_bundle
from diagnose.report.render import DRAWS_TIMELINE, Format, render
from tests.support.paths import FIXTURES
from tests.support.report import load_rules_cached

CASES = ("nccl-hang-2gpu", "seed-host-oom", "seed-flex7-tmux-died")


def diagnosis_of(case: str, timeline: bool) -> Diagnosis:
    return diagnose(evidence_from_bundle(FIXTURES / case), load_rules_cached(), timeline=timeline)


def rendered(fmt: Format, diagnosis: Diagnosis) -> str:
    out = io.StringIO()
    render(fmt, diagnosis, out, True, rules=load_rules_cached().by_id(), fail_on="error")
    # The scan's own timing is the one thing that may differ between two runs (JSON, SARIF, JUnit,
    # the terminal's "in 0.004 s").
    text = re.sub(r'"seconds": [0-9.]+', '"seconds": 0', out.getvalue())
    text = re.sub(r'time="[0-9.]+"', 'time=""', text)
    return re.sub(r"in [0-9.]+ s", "in s", text)


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)  # the github format would append to it


@pytest.mark.parametrize("case", CASES)
def test_formats_that_do_not_draw_the_timeline_report_the_same_without_it(case: str) -> None:
    with_it, without = diagnosis_of(case, True), diagnosis_of(case, False)
    assert with_it.timeline is not None and without.timeline is None
    for fmt in Format:
        if fmt not in DRAWS_TIMELINE:
            assert rendered(fmt, without) == rendered(fmt, with_it), fmt


def test_the_formats_that_draw_it_show_it() -> None:
    with_it, without = diagnosis_of("nccl-hang-2gpu", True), diagnosis_of("nccl-hang-2gpu", False)
    assert "\nRanks\n" in rendered(Format.TERMINAL, with_it)
    assert "\nRanks\n" not in rendered(Format.TERMINAL, without)
    assert 'id="timeline-svg"' in rendered(Format.HTML, with_it)
    assert 'id="timeline-svg"' not in rendered(Format.HTML, without)


def test_the_cli_asks_for_it_when_a_chosen_format_draws_it() -> None:
    assert wants_timeline([("terminal", None)]) and wants_timeline([("json", None), ("html", None)])
    assert not wants_timeline([("json", None), ("sarif", None), ("junit", None), ("markdown", None), ("github", None)])
