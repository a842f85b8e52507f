"""The crash finder's quiet runs (issue 18): before the first crash, lines that hold none of the
words a crash line holds are kept as runs and read only if asked for. Held to reading every line
one by one, which is what the reader did before, on every real log the repository holds."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from diagnose.engine import tracebacks
from diagnose.engine.tracebacks import LogCrashes, _read_lines, _Reader, read_text
from diagnose.evidence.lines import LogClock, log_clock, strip_ansi
from tests.support.paths import DATA, FIXTURES

ROOT = Path(__file__).resolve().parents[2]
REAL_LOGS = sorted(
    path for folder in (FIXTURES, DATA / "logs", DATA / "shapes", DATA / "samples", ROOT / "bench" / "data")
    for path in folder.rglob("*")
    if path.is_file() and path.suffix in (".log", ".txt", ".out", ".err") and path.stat().st_size < 8 << 20
)


def one_by_one(text: str, first_line: int, file_rank: int | None, clock: LogClock) -> LogCrashes:
    """Every line through _Reader.line, no quiet runs."""
    reader = _Reader(file_rank, clock)
    _read_lines(reader, text, first_line)
    return reader.finish()


def same(found: LogCrashes) -> tuple[str, str, str]:
    return repr(found.crashes), repr(found.every), repr(sorted(found.progress.items(), key=repr))


def text_of(path: Path) -> str:
    return strip_ansi(path.read_bytes()).decode("utf-8", errors="replace")


def test_there_are_real_logs_to_compare() -> None:
    assert len(REAL_LOGS) > 80
    assert sum(bool(read_text(text_of(p)).every) for p in REAL_LOGS) > 40  # many of them crash


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_quiet_runs_find_what_reading_every_line_finds(path: Path) -> None:
    text = text_of(path)
    clock = log_clock("", text[-64 * 1024:], path.stat().st_mtime)
    for file_rank in (None, 1):
        assert same(read_text(text, 11, file_rank, clock)) == same(one_by_one(text, 11, file_rank, clock))


def test_quiet_runs_on_real_lines_in_any_order() -> None:
    """Crash lines, frames and progress lines of real logs, shuffled and rotated into orders no
    log was written in (tracebacks cut open, crashes early and late, progress between them)."""
    rng = random.Random(18)
    compared = 0
    for path in REAL_LOGS:
        lines = text_of(path).split("\n")
        if not 5 < len(lines) < 5000:
            continue
        for _ in range(2):
            shuffled = lines[:]
            rng.shuffle(shuffled)
            cut = rng.randrange(len(lines))
            for text in ("\n".join(shuffled), "\n".join(lines[cut:] + lines[:cut])):
                clock = log_clock("", text[-64 * 1024:], 1.7e9)
                assert same(read_text(text, 1, None, clock)) == same(one_by_one(text, 1, None, clock)), path
                compared += 1
    assert compared > 200


def test_a_long_healthy_run_before_its_crash_is_kept_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real healthy DDP run's lines many times over, then a real crash: the reader reads the
    crash's lines and the progress just before it, not the thousands of healthy lines."""
    healthy = text_of(ROOT / "bench" / "data" / "ddp-healthy-train.log")
    crash = text_of(ROOT / "bench" / "data" / "late-error-dataloader-worker-oom.log")
    text = healthy * 60 + crash
    read: list[int] = []
    original = _Reader.line

    def counting(self: _Reader, line_no: int, segment: str) -> None:
        read.append(line_no)
        original(self, line_no, segment)

    monkeypatch.setattr(_Reader, "line", counting)
    clock = log_clock("", text[-64 * 1024:], 1.7e9)
    quick = read_text(text, 1, None, clock)
    quick_reads = len(read)
    read.clear()
    slow = one_by_one(text, 1, None, clock)
    assert same(quick) == same(slow)
    assert slow.every and slow.progress  # the crash, and the progress it interrupted
    assert quick_reads < len(read) / 20, (quick_reads, len(read))


def test_the_words_cover_every_shape_the_reader_knows() -> None:
    """Each shape's opening line in the shape captures holds a word of _ASKS (else it would be
    kept unread and its crash lost)."""
    for path in sorted((DATA / "shapes").glob("*.log")):
        for crash in read_text(text_of(path)).every:
            assert tracebacks._ASKS.search(crash.lines[0][1]), (path, crash)
