"""engine/tailwork: crash tails read in a forked child while the scan runs, renumbered once the
scan has counted the lines ahead of them, give the crash finder exactly what it reads itself."""

from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from diagnose.engine import scan, tailwork, tracebacks
from diagnose.evidence.model import TextFile, TextKind
from tests.support.scan import REPO, rule_pack_patterns

DATA = REPO / "bench" / "data"


@pytest.fixture
def logs(tmp_path: Path) -> list[Path]:
    """Real lines: a healthy DDP run many times over then a real crash (6 MiB: its tail is a
    window), the same crash after a short healthy run (small: read whole), a gzipped copy."""
    healthy = (DATA / "ddp-healthy-train.log").read_bytes()
    crash = (DATA / "late-error-dataloader-worker-oom.log").read_bytes()
    early = (DATA / "early-error-fx-trace-race.log").read_bytes()
    big = tmp_path / "rank0.log"
    big.write_bytes(healthy * 100 + early + healthy * 120 + crash)
    small = tmp_path / "rank1.log"
    small.write_bytes(healthy * 3 + crash)
    packed = tmp_path / "console.log.gz"
    packed.write_bytes(gzip.compress(big.read_bytes(), compresslevel=1))
    assert big.stat().st_size > tracebacks.TAIL_BYTES > small.stat().st_size
    return [big, small, packed]


def _evidence(paths: list[Path]) -> Any:
    texts = [TextFile(TextKind.LOG, p, p.name, mtime=p.stat().st_mtime, rank=n) for n, p in enumerate(paths)]
    return SimpleNamespace(texts_of=lambda kind: texts, texts=texts)


def _scan(evidence: Any) -> None:
    scanner = scan.Scanner(TextKind.LOG, scan.PatternSet(rule_pack_patterns(TextKind.LOG)))
    scan.scan_files([(text, scanner) for text in evidence.texts], 1)  # counts each file's newlines


def _fresh(path: Path, rank: int) -> str:
    tracebacks._CACHE.clear()
    return repr(tracebacks.read_crashes(path, rank))


@pytest.fixture(autouse=True)
def _beside_for_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DIAGNOSE_TAIL_PROCESSES", raising=False)
    monkeypatch.setattr(tailwork, "BESIDE_MIN", 0)
    tracebacks._CACHE.clear()


def test_tails_read_beside_the_scan_are_what_the_crash_finder_reads(logs: list[Path],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    evidence = _evidence(logs)
    want = {p: _fresh(p, n) for n, p in enumerate(logs[:2])}
    assert "DataLoader worker" in want[logs[0]]  # the real crash is found, at its true line numbers
    tracebacks._CACHE.clear()
    beside = tailwork.read_beside_scan(evidence)
    assert beside is not None and [t.path for t in beside.logs] == logs[:2]  # the gz tail stays with textio
    _scan(evidence)
    assert tailwork.collect_beside_scan(beside) == 2
    with pytest.raises(ChildProcessError):
        os.waitpid(beside.pid, os.WNOHANG)  # reaped
    monkeypatch.setattr(tracebacks, "read_text", lambda *a, **k: pytest.fail("read again, not from the cache"))
    assert {p: repr(tracebacks.read_crashes(p, n)) for n, p in enumerate(logs[:2])} == want


def test_a_tail_written_to_meanwhile_or_not_counted_is_left_to_its_readers(logs: list[Path]) -> None:
    evidence = _evidence(logs[:2])
    beside = tailwork.read_beside_scan(evidence)
    assert beside is not None
    _scan(_evidence(logs[1:2]))  # the big log is not counted by this scan
    with open(logs[1], "ab") as out:
        out.write(b"[rank1] step 99 loss 0.1\n")  # the small one grows after its tail was read
    assert tailwork.collect_beside_scan(beside) == 0
    assert not tracebacks._CACHE


def test_no_fork_with_other_threads_alive_or_a_pool_asked_for(logs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert tailwork.read_beside_scan(_evidence(logs)) is None  # a fork could inherit its locks
    finally:
        stop.set()
        other.join()
    monkeypatch.setenv("DIAGNOSE_TAIL_PROCESSES", "0")
    assert tailwork.read_beside_scan(_evidence(logs)) is None
    monkeypatch.setenv("DIAGNOSE_TAIL_PROCESSES", "")
    monkeypatch.setattr(tailwork, "BESIDE_MIN", 1 << 40)
    assert tailwork.read_beside_scan(_evidence(logs)) is None  # small logs: the scan is over too soon to pay


def test_shifted_moves_every_line_number(logs: list[Path]) -> None:
    found = tracebacks.read_crashes(logs[0], 0)
    moved = tracebacks.shifted(found, 1000)
    assert [c.line_no + 1000 for c in found.every] == [c.line_no for c in moved.every]
    assert [[n + 1000 for n, _t in c.lines] for c in found.every] == [[n for n, _t in c.lines] for c in moved.every]
    assert all(any(m is e for e in moved.every) for m in moved.crashes)  # the last ones are the same objects
    assert {k: [n + 1000 for n, _m in v] for k, v in found.progress.items()} == \
        {k: [n for n, _m in v] for k, v in moved.progress.items()}
    assert tracebacks.shifted(found, 0) is found
