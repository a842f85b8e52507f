"""A pattern that fires often and cannot backtrack badly (hangcheck.is_tame) is confirmed on short
lines without regex's time limit, which costs as much as the search itself; a long line still gets
the limit, and a slow wall-clock reading (a wait for the GIL or a core) charges nothing unless the
CPU clock agrees. Work is bounded by CPU time, never by the wall clock."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from diagnose.engine import scan
from diagnose.engine.finders import TAME_AFTER, UNTIMED_CHARS, PatternSet
from diagnose.patterns.hangcheck import is_tame, static_problem
from tests.support.scan import ENGINES, run_scan

# A real DeepSpeed fp16 line (bench/data/real, loss_scaler.py) and the pack's pattern for it.
OVERFLOW = r"\[deepspeed\] OVERFLOW! Rank \d+ Skipping step\.(?: Attempted loss scale: (?P<attempted_scale>[\d.]+), reducing to (?P<loss_scale>[\d.]+))?"
LINE = ("[2023-04-18 01:46:53,259] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 "
        "Skipping step. Attempted loss scale: 65536, reducing to 32768")
# Tame to the static check (one repeat, nothing nested), yet quadratic in a search: every start in
# a long run of letters eats the run and backs out of it (~18 s on 64 KiB without a limit).
QUADRATIC = r"[a-z]+\d"


def test_tameness_is_the_static_checks_verdict() -> None:
    assert is_tame(OVERFLOW) and static_problem(OVERFLOW) is None
    assert not is_tame(r"(a|aa)+(?=c)")  # catastrophic: the loader refuses it
    assert not is_tame(r"(?:\p{L})+x")  # regex-only syntax: not known to be tame


def test_a_pattern_is_asked_only_once_it_fires_often() -> None:
    patterns = PatternSet([OVERFLOW, r"(a|aa)+(?=c)"])
    asked = [patterns.is_tame(0) for _ in range(TAME_AFTER - 1)]
    assert not any(asked) and patterns.tame[0] is None
    assert patterns.is_tame(0) and patterns.tame[0] is True
    for _ in range(TAME_AFTER):
        patterns.is_tame(1)
    assert patterns.tame[1] is False


@pytest.mark.parametrize("engine", ENGINES)
def test_a_long_line_still_has_the_time_limit(engine: str, tmp_path: Path, cache_dir: Path) -> None:
    path = tmp_path / "quadratic.log"
    short = [f"shard{n} step{n}" for n in range(TAME_AFTER + 10)]  # each a short hit: tame from here on
    long = "a" * (64 * 1024 - 8) + " b1"
    assert len(long) > UNTIMED_CHARS
    path.write_text("\n".join([*short, long, "tail x9"]) + "\n")
    started = time.process_time()
    result = run_scan(path, [QUADRATIC], engine)
    assert time.process_time() - started < scan.LINE_TIMEOUT + scan.CONFIRM_BUDGET + 6.0
    assert result.timeouts.get(0, 0) >= 1  # the long line was cut off, not searched for ~18 s
    assert result.count(0) == len(short) + 1  # every short line and the last one


@pytest.mark.parametrize("engine", ENGINES)
def test_one_slow_wall_reading_makes_no_suspect(engine: str, tmp_path: Path, cache_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # The 20th wall reading comes 50 ms after the one before, as when the thread waited for the
    # GIL or a core. The confirmation is done again on the CPU clock, which finds it fast: the
    # pattern is not made a suspect (timed on the CPU clock, a syscall each, for the rest of the
    # file) and nothing is charged.
    path = tmp_path / "overflow.log"
    lines = 2_000
    path.write_text((LINE + "\n") * lines)
    readings = itertools.count()
    monkeypatch.setattr(scan.time, "perf_counter", lambda: next(readings) * 1e-6 + (0.05 if next(readings) > 40 else 0.0))
    cpu_readings = itertools.count()
    thread_time = time.thread_time
    monkeypatch.setattr(scan.time, "thread_time", lambda: (next(cpu_readings), thread_time())[1])
    result = run_scan(path, [OVERFLOW], engine)
    assert result.count(0) == lines
    assert not result.stopped and not result.timeouts and not result.slow
    assert next(cpu_readings) <= 4  # two readings around the one search done again
