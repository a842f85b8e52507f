"""The stall threshold follows the run's own cadence when --stall-after is not given (issue 24):
10 x the usual gap between its progress lines, from their timestamps or, with none, from its
tqdm bar's time per iteration; bounded; said in the report. The logs are real runs' output that
their repositories committed (bench/data/real/SOURCES.md) and fixtures of real runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.engine.runview import CADENCE_TIMES, STALL_AFTER, STALL_MAX, STALL_MIN, cadence, stall_threshold
from diagnose.evidence.lines import log_clock
from tests.support.scan import REPO

REAL = REPO / "bench" / "data" / "real"


def _cadence(path: Path) -> float | None:
    text = path.read_text(encoding="utf-8", errors="replace")
    clock = log_clock(text[:65536], text[-65536:], path.stat().st_mtime)
    return cadence(text.splitlines(), clock.year, clock.not_after)


def test_timestamped_step_lines_give_their_median_gap() -> None:
    # DeepSpeed-Chat's SFT: a timestamped loss line every ~7 s.
    gap = _cadence(REAL / "deepspeed-chat-opt1.3b-sft.log")
    assert gap is not None and 4.0 < gap < 12.0


def test_a_tqdm_bar_without_timestamps_gives_its_time_per_iteration() -> None:
    # HF Trainer's tqdm bar, "[..<.., 2.15s/it]", and no timestamp on its steps.
    gap = _cadence(REAL / "hf-trainer-deepspeed-mobilevlm-tqdm-4rank.log")
    assert gap is not None and 1.0 < gap < 5.0


def test_a_log_without_progress_gives_no_cadence() -> None:
    assert _cadence(REPO / "fixtures" / "ambiguous-truth-value" / "logs" / "tensor_truth.log") is None


@pytest.mark.parametrize(("asked", "gap", "want"), [
    (600.0, 1.0, 600.0),  # --stall-after wins
    (None, None, STALL_AFTER),  # no cadence: the old default
    (None, 1.0, STALL_MIN),  # a step a second: not 10 s, an eval may be silent longer
    (None, 30.0, 30.0 * CADENCE_TIMES),
    (None, 3600.0, STALL_MAX),
])
def test_the_threshold_and_what_it_says(asked: float | None, gap: float | None, want: float) -> None:
    threshold, basis = stall_threshold(asked, gap)
    assert threshold == want
    assert ("--stall-after" in basis) == (asked is not None)
    assert ("usual" in basis) == (asked is None and gap is not None)
