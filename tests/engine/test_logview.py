"""Read each log once (issue 23): the scan leaves every log's head, tail and line count on its
view (evidence/logview.py), and every reader after it takes its window from there.

The view must give exactly what reading the file gave (read_head, read_tail: the same bytes,
the same line numbers), for a log read whole, one cut into many parts, a gzipped one, a UTF-16
one and one full of escapes; and a whole diagnosis must read no log's bytes again."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from diagnose.engine import tracebacks
from diagnose.engine.evaluate import run_rules
from diagnose.engine.rank import rank_all
from diagnose.engine.scan import BESIDE_CORES, PatternSet, Scanner, scan_files
from diagnose.evidence import logview
from diagnose.evidence.inputs import evidence_from_paths
from diagnose.evidence.model import TextFile, TextKind
from diagnose.evidence.textio import read_head, read_tail
from diagnose.rules.cache import load_rules_cached
from tests.support.scan import REPO

DATA = REPO / "bench" / "data"
REAL = DATA / "real"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Real output only: a healthy DDP run many times over then a real crash (6 MiB: its tail is a
    window); a real log full of ANSI escapes repeated past the window; a gzipped copy; the crash
    after a short healthy run (small: read whole); a real UTF-16 log of the corpus."""
    folder = tmp_path_factory.mktemp("views")
    healthy = (DATA / "ddp-healthy-train.log").read_bytes()
    crash = (DATA / "late-error-dataloader-worker-oom.log").read_bytes()
    big = folder / "rank0.log"
    big.write_bytes(healthy * 220 + crash)
    rich = folder / "rich.log"
    rich.write_bytes((REAL / "lightning-tmr-rich-500epochs.log").read_bytes() * 20 + crash)
    packed = folder / "console.log.gz"
    packed.write_bytes(gzip.compress(big.read_bytes(), compresslevel=1))
    small = folder / "rank1.log"
    small.write_bytes(healthy * 3 + crash)
    utf16 = REPO / "corpus" / "cases" / "h-lerobot-red-dot-utf16" / "training_log_red_dot.txt"
    assert big.stat().st_size > logview.TAIL_BYTES > small.stat().st_size
    assert b"\x1b[" in rich.read_bytes() and rich.stat().st_size > logview.TAIL_BYTES
    return [big, rich, packed, small, utf16]


@pytest.mark.parametrize("part", [None, 2 * 1024 * 1024])
def test_the_view_gives_what_reading_the_file_gave(logs: list[Path], part: int | None) -> None:
    scanner = Scanner(TextKind.LOG, PatternSet([r"DataLoader worker \(pid \d+\) is killed"]))
    for path in logs:
        source = TextFile(TextKind.LOG, path, path.name, mtime=path.stat().st_mtime)
        scanner.scan(source, chunk_bytes=part, workers=2 if part else None)
        assert source.view.lines is not None and source.view.reads == 0
        for limit in (None, 64 * 1024, 1024 * 1024, 10):
            assert logview.tail(source, limit) == read_tail(path, limit or logview.TAIL_BYTES), (path.name, limit)
        assert logview.head(source) == read_head(path)
        assert source.view.reads == 0  # every answer came from what the scan kept


def test_an_unscanned_log_is_read_once(logs: list[Path]) -> None:
    source = TextFile(TextKind.LOG, logs[0], "rank0.log")
    first = logview.tail(source, 64 * 1024)
    assert logview.tail(source, 64 * 1024) == first and logview.tail(source) == read_tail(logs[0], logview.TAIL_BYTES)
    assert source.view.reads == 1


def test_a_diagnosis_reads_no_log_again(logs: list[Path]) -> None:
    """The rules, the crash finder, the run view, the state, the timeline and the ranking: all
    from the views the scan filled."""
    evidence = evidence_from_paths([str(p) for p in logs])
    rules = load_rules_cached().rules
    engine = run_rules(rules, evidence)
    ranked = rank_all(engine.findings, evidence)
    assert ranked.causes, "the real crash is found"
    assert {t.display: t.view.reads for t in evidence.texts} == dict.fromkeys((t.display for t in evidence.texts), 0)


def test_what_readers_derive_is_kept_on_the_view_not_in_a_module(logs: list[Path]) -> None:
    source = TextFile(TextKind.LOG, logs[0], "rank0.log", rank=0)
    found = tracebacks.read_crashes(source)
    assert tracebacks.read_crashes(source) is found  # asked again: the same answer, kept on the view
    again = TextFile(TextKind.LOG, logs[0], "rank0.log", rank=0)
    assert tracebacks.read_crashes(again) is not found  # another diagnosis's log: read anew
    assert repr(tracebacks.read_crashes(again)) == repr(found)
    module_dicts = [name for name, value in vars(tracebacks).items() if isinstance(value, dict) and value and not name.startswith("__")]
    assert module_dicts == [], module_dicts  # no module-level store of answers


@pytest.mark.parametrize("part", [2 * 1024 * 1024, 16 * 1024 * 1024])
def test_the_crashes_found_beside_the_scan_are_those_read_after_it(logs: list[Path], part: int) -> None:
    """With cores to spare, a scan thread reads the tail it kept with the crash finder, numbered
    from the tail's start, renumbered when the parts merge: the same crashes, lines and progress
    as the crash finder reads after the scan."""
    scanner = Scanner(TextKind.LOG, PatternSet([r"DataLoader worker \(pid \d+\) is killed"]))
    sources = [TextFile(TextKind.LOG, path, path.name, mtime=path.stat().st_mtime, rank=rank)
               for rank, path in enumerate(logs)]
    scan_files([(source, scanner) for source in sources], BESIDE_CORES, part)
    for rank, (path, source) in enumerate(zip(logs, sources, strict=True)):
        beside = source.view.derived[("crashes", rank)]
        fresh = TextFile(TextKind.LOG, path, path.name, mtime=path.stat().st_mtime, rank=rank)
        assert repr(beside) == repr(tracebacks.read_crashes(fresh)), path.name
