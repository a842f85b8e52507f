"""The scan spread over threads and parts of files gives what one thread in one pass gives:
line numbers, per-rank first and last hits, counts, times, captures, match spans, cut lines,
on several files and ranks at once, with both engines; launcher prefixes seen through
(`[default1]:[rank1]: Traceback`, `1: `, `worker-1: `) and year-less times (glog, ts) read with
the file's own clock in every part; newline counts with and without numpy; the confirmation
budget shared by a file's parts.

Inputs: bench/loggen.py's synthetic log (the shapes of real output, bench/data/README.md), and
real captures repeated to span several parts: fixtures/torchrun-rank-exception (torchrun --tee,
glog times without a year, full dates in its summary) and tests/data/shapes (moreutils ts,
srun --label, pdsh; their README says how each was produced)."""

from __future__ import annotations

import gzip
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diagnose.engine import bytecount, scan
from diagnose.evidence import textio
from diagnose.evidence.model import TextFile, TextKind
from tests.support.scan import REPO, SCAN_DATA, rule_pack_patterns, summary_of

SYNTHETIC = [line for line in (REPO / "bench" / "synthetic_patterns.txt").read_text().splitlines()
             if line and not line.startswith("#")]
CRASH = REPO / "bench" / "data" / "late-error-dataloader-worker-oom.log"
TEE = REPO / "fixtures" / "torchrun-rank-exception" / "logs" / "train-tee.log"
SHAPES = REPO / "tests" / "data" / "shapes"
# Anchored patterns that match a prefixed line only past its launcher prefixes (see-through),
# and torchrun's glog line with a year-less time.
ANCHORED = [r"^Traceback \(most recent call last\):$", r"^(?P<type>[A-Za-z_.]*Error): (?P<message>.+)$",
            r"Sending process (?P<pid>\d+) closing signal SIGTERM$"]
SIGTERM = len(ANCHORED) - 1


def _local(year: int, month: int, day: int, hh: int, mm: int, ss: int) -> float:
    return time.mktime((year, month, day, hh, mm, ss, 0, 0, -1))


def _repeated(folder: Path, name: str, source: Path, size: int, mtime: float) -> Path:
    """`source` (a real capture) written over and over to about `size` bytes, with `mtime`."""
    data = source.read_bytes()
    path = folder / name
    path.write_bytes(data * max(1, size // len(data)))
    os.utime(path, (mtime, mtime))
    return path


def _loggen() -> object:
    spec = importlib.util.spec_from_file_location("loggen", REPO / "bench" / "loggen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run_logs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A run's logs: the console log of 8 ranks ([rankN]: prefixes, tqdm '\\r' bars, two real
    crashes), three one-rank logs, the console log gzipped, a real crash log, a long line, and
    the prefixed, year-less real captures (plain and gzipped)."""
    folder = tmp_path_factory.mktemp("run")
    gen = _loggen()
    console = folder / "console.log"
    gen.generate(console, 3 * 2**20)  # type: ignore[attr-defined]
    ranks = []
    for rank in (0, 3, 7):
        path = folder / f"rank{rank}.log"
        gen.generate(path, 2**20, seed=rank, only_rank=rank)  # type: ignore[attr-defined]
        ranks.append(path)
    packed = folder / "console.log.gz"
    packed.write_bytes(gzip.compress(console.read_bytes(), compresslevel=1))
    long = folder / "long.log"
    long.write_bytes(CRASH.read_bytes() + b"x" * (200 * 1024) + b" Killed\n" + CRASH.read_bytes())
    # Copied years later (mtime 2030): the glog lines take 2026 from the log's own full dates.
    tee = _repeated(folder, "train-tee.log", TEE, 400_000, _local(2030, 6, 1, 12, 0, 0))
    # No full date in it: "Dec 01" takes its year from the mtime, a January after it.
    ts = _repeated(folder, "ts-dataloader.log", SHAPES / "ts-dataloader.log", 300_000, _local(2027, 1, 2, 10, 0, 0))
    srun = _repeated(folder, "srun.log", SHAPES / "srun-label-dataloader.log", 200_000, _local(2026, 12, 2, 0, 0, 0))
    pdsh = _repeated(folder, "pdsh.log", SHAPES / "pdsh-workers-dataloader.log", 200_000, _local(2026, 12, 2, 0, 0, 0))
    tee_gz = folder / "train-tee.log.gz"
    tee_gz.write_bytes(gzip.compress(tee.read_bytes(), compresslevel=1))
    os.utime(tee_gz, (_local(2030, 6, 1, 12, 0, 0),) * 2)
    # The tee log's lines first come ~250 KB in, in a later part than the first: their times
    # (first hits are timed in their part) need the clock of the whole file there too.
    late = folder / "late.log"
    late.write_bytes((SHAPES / "ts-dataloader.log").read_bytes() * 100 + TEE.read_bytes() * 10)
    return [console, *ranks, packed, CRASH, long, tee, ts, srun, pdsh, tee_gz, late]


def _sources(paths: list[Path]) -> list[TextFile]:
    return [TextFile(TextKind.LOG, p, p.name, mtime=p.stat().st_mtime) for p in paths]


def _scan(paths: list[Path], engine: str, workers: int, chunk: int | None = None) -> list[dict[str, object]]:
    patterns = scan.PatternSet(ANCHORED + rule_pack_patterns(TextKind.LOG) + SYNTHETIC)
    scanner = scan.Scanner(TextKind.LOG, patterns, engine)
    return [summary_of(r) for r in scan.scan_files([(s, scanner) for s in _sources(paths)], workers, chunk)]


def _hits(found: dict[str, object], index: int) -> list[tuple[object, ...]]:
    return [hit for (i, _rank), (_count, hits) in found["hits"].items() if i == index for hit in hits]  # type: ignore[attr-defined]


def test_threads_and_parts_give_the_one_pass_result(run_logs: list[Path], cache_dir: Path) -> None:
    pytest.importorskip("hyperscan", reason="hyperscan is not installed on this platform")
    serial = _scan(run_logs, "hyperscan", 1)
    by_name = dict(zip((p.name for p in run_logs), serial, strict=True))
    assert any(s["hits"] for s in serial) and by_name["long.log"]["cut"] == 1
    ranks = {rank for s in serial for (_index, rank) in s["hits"]}  # type: ignore[attr-defined]
    assert {0, 1, 3, 7} <= ranks
    # What the parallel runs below must keep: prefixes seen through, with the rank they name
    # and the span past them; year-less times placed in the log's own year, in every copy.
    tee, ts = by_name["train-tee.log"], by_name["ts-dataloader.log"]
    tracebacks = _hits(tee, 0)
    assert {h[3] for h in tracebacks} >= {0, 1}
    prefix, line = "[default1]:[rank1]: ", "Traceback (most recent call last):"
    assert (prefix + line, 1, (len(prefix), len(prefix) + len(line))) in {(h[1], h[3], h[5]) for h in tracebacks}
    sigterm = _hits(tee, SIGTERM)
    assert len(sigterm) == 6 and [h[2] for h in sigterm] == [pytest.approx(_local(2026, 11, 30, 4, 51, 7) + 0.4, abs=1e-3)] * 6
    assert by_name["train-tee.log.gz"]["hits"] == tee["hits"]
    ts_times = {h[2] for h in _hits(ts, 0)}
    assert ts_times and all(t is not None and time.localtime(t).tm_year == 2026 for t in ts_times)
    late = by_name["late.log"]
    first_sigterm = min(_hits(late, SIGTERM), key=lambda h: h[0])  # type: ignore[arg-type, return-value]
    assert first_sigterm[0] > 2500 and first_sigterm[2] == pytest.approx(_local(2026, 11, 30, 4, 51, 7) + 0.4, abs=1e-3)
    # Parts of ~100 KB, read 64 KiB at a time: look-backs, first and last hits, lines across
    # part and piece edges, every file in several parts on 4 threads.
    for workers, chunk in ((4, 100_000), (3, 65_536), (4, None)):
        assert _scan(run_logs, "hyperscan", workers, chunk) == serial, (workers, chunk)


def test_the_pure_engine_in_parallel_gives_the_same(run_logs: list[Path], cache_dir: Path) -> None:
    pytest.importorskip("hyperscan", reason="hyperscan is not installed on this platform")
    # a one-rank log, the real crash, the long line, and the prefixed, year-less captures
    logs = [run_logs[1], *run_logs[5:]]
    assert _scan(logs, "pure", 4, 50_000) == _scan(logs, "hyperscan", 1)


def test_the_cli_report_is_the_same_on_one_thread_and_many(run_logs: list[Path], cache_dir: Path) -> None:
    def report(threads: int, part: int | None, engine: str = "auto") -> dict[str, object]:
        env = dict(os.environ, DIAGNOSE_SCAN_THREADS=str(threads))
        if part:
            env["DIAGNOSE_SCAN_PART"] = str(part)
        done = subprocess.run([sys.executable, "-m", "diagnose", "scan", *map(str, run_logs), "--format", "json",
                               "--fail-on", "never", "--engine", engine], capture_output=True, text=True, env=env,
                              timeout=300, check=True)
        found = json.loads(done.stdout)
        found["stats"].pop("seconds")
        found["stats"].pop("engine")
        return found

    one = report(1, None)
    assert one["causes"] and one["stats"]["files_scanned"] == len(run_logs)
    evidence = [e for cause in one["causes"] for e in cause["evidence"]]  # type: ignore[attr-defined]
    # The tee log's errors are read through their "[default0]:[rank0]: " prefixes, at the time of
    # the glog line above them, whose year is the log's own (2026), not its mtime's (2030).
    assert any(e["source"].endswith("train-tee.log") and e["rank"] == 0 and e["text"].startswith("[default0]:[rank0]: ")
               and (e["time"] or "").startswith("2026-11-30T04:50:55") for e in evidence)
    assert report(4, 200_000) == one
    if scan.hyperscan_available():
        assert report(3, 120_000, "pure") == one


def test_plain_and_numpy_newline_counts_agree() -> None:
    pytest.importorskip("numpy", reason="numpy is not installed")
    data = bytearray((SCAN_DATA / "ddp-healthy-train.log").read_bytes() * 40)
    data[-1:] = b"\x1b"
    ends = [0, 1, 255 * 1024, 256 * 1024, len(data) // 2 + 3, len(data)]
    bytecount.reset()
    plain = [bytecount.newlines_and_escape(data, n) for n in ends] + [bytecount.count_newlines(data, 7, n) for n in ends[2:]]
    try:
        bytecount.prepare(bytecount.NUMPY_WORTH)  # imported on a thread of its own
        assert bytecount.using_numpy()
        fast = [bytecount.newlines_and_escape(data, n) for n in ends] + [bytecount.count_newlines(data, 7, n) for n in ends[2:]]
    finally:
        bytecount.reset()
    assert fast == plain
    assert plain[-1] == data.count(b"\n", 7) and plain[5] == (data.count(b"\n"), True) and not plain[4][1]
    data.extend(b"x")  # the buffer is free again: nothing still holds an export of it


def test_ranges_end_at_newlines_and_add_up(tmp_path: Path) -> None:
    data = (SCAN_DATA / "ddp-healthy-train.log").read_bytes()
    log = tmp_path / "a.log"
    log.write_bytes(data + b"y" * 300_000 + b"\n" + data + b"no newline at the end")
    for piece in (1, 100, 4096, 250_000, 10**9):
        ranges = textio.plan_ranges(log, log.stat().st_size, piece)
        assert ranges[0][0] == 0 and ranges[-1][1] == log.stat().st_size
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        content = log.read_bytes()
        assert all(content[end - 1 : end] == b"\n" for _start, end in ranges[:-1])


def test_a_catastrophic_pattern_in_parts_on_threads_stops_within_its_budget(tmp_path: Path, cache_dir: Path) -> None:
    log = tmp_path / "slow.log"
    log.write_text("step 1 NCCL version 2.21.5\n" + ("a" * 26 + "\n") * 10_000 + "NCCL version 2.21.5\n")
    scanner = scan.Scanner(TextKind.LOG, scan.PatternSet([r"(a|aa)+(?=c)", r"NCCL version (?P<version>\S+)"]), "pure")
    started = time.perf_counter()
    result = scan.scan_files([(_sources([log])[0], scanner)], 4, 20_000)[0]
    # The budget is shared by the file's parts: spent once, not once per part or thread.
    assert time.perf_counter() - started < scan.CONFIRM_BUDGET + 6.0
    assert 0 in result.stopped and 1 not in result.stopped and result.count(1) == 2
    lines, line_no = result.stopped[0]
    assert lines >= 1 and 2 <= line_no < 10_000


def test_a_pattern_on_every_line_is_never_stopped_on_threads(tmp_path: Path, cache_dir: Path) -> None:
    # Four threads confirm at once and wait for each other's GIL: wall time that is waiting,
    # not backtracking, is never charged.
    log = tmp_path / "busy.log"
    log.write_text("[rank3]: step 1 loss 2.0 lr 0.1\n" * 300_000)
    scanner = scan.Scanner(TextKind.LOG, scan.PatternSet([r"\[rank(?P<rank>\d+)\]: step (?P<step>\d+) loss"]), "pure")
    result = scan.scan_files([(_sources([log])[0], scanner)], 4, 256 * 1024)[0]
    assert result.count(0) == 300_000 and result.stopped == {}
    assert [h.line_no for h in result.summaries(0)[3].hits()] == [1, 2, 3, 299_998, 299_999, 300_000]


def test_a_files_clock_offset_moves_every_time_alike_in_parts(run_logs: list[Path], cache_dir: Path) -> None:
    # A node's clock runs 90 s ahead (issue 15): every time read from its file, by its own line
    # or by the look-back, first or last hit, in whichever part, is moved back by the offset.
    tee = next(p for p in run_logs if p.name == "late.log")
    scanner = scan.Scanner(TextKind.LOG, scan.PatternSet(ANCHORED), "pure")
    plain = TextFile(TextKind.LOG, tee, tee.name, mtime=tee.stat().st_mtime)
    ahead = TextFile(TextKind.LOG, tee, tee.name, mtime=tee.stat().st_mtime, clock_offset=90.0)
    want = summary_of(scan.scan_files([(plain, scanner)], 1)[0])
    for workers, chunk in ((1, None), (3, 40_000)):
        got = summary_of(scan.scan_files([(ahead, scanner)], workers, chunk)[0])
        assert got["hits"].keys() == want["hits"].keys()  # type: ignore[attr-defined]
        times = [(h[2], w[2]) for key, (_n, hits) in got["hits"].items()  # type: ignore[attr-defined]
                 for h, w in zip(hits, want["hits"][key][1], strict=True)]  # type: ignore[index]
        assert any(t is not None for t, _ in times)
        assert all((t is None and w is None) or t == pytest.approx(w - 90.0, abs=1e-3) for t, w in times)


def test_the_logs_tails_read_in_worker_processes_give_the_same_report(run_logs: list[Path], cache_dir: Path) -> None:
    """engine/tailwork: the crash finder's and the run-log analyzer's reading of every log's tail
    done in worker processes gives the report one process gives (terminal, with its Ranks table
    and timeline, and JSON)."""
    import re

    def report(processes: int, fmt: str) -> str:
        env = dict(os.environ, DIAGNOSE_TAIL_PROCESSES=str(processes), COLUMNS="120")
        done = subprocess.run([sys.executable, "-m", "diagnose", "scan", *map(str, run_logs), "--format", fmt,
                               "--fail-on", "never", "--color", "never"], capture_output=True, text=True, env=env,
                              timeout=300, check=True)
        if fmt == "json":
            found = json.loads(done.stdout)
            found["stats"].pop("seconds")
            return json.dumps(found, sort_keys=True)
        return re.sub(r"lines in [0-9.]+ s", "lines in ? s", done.stdout)

    for fmt in ("json", "terminal"):
        alone = report(0, fmt)
        assert report(2, fmt) == alone, fmt
    assert "Ranks" in alone  # the run-log analyzer's answer is in it


def test_tail_workers_are_used_only_where_they_pay(run_logs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from diagnose.engine import tailwork

    texts = _sources(run_logs)
    monkeypatch.setenv("DIAGNOSE_TAIL_PROCESSES", "0")
    assert tailwork.worth_it(texts) == []
    monkeypatch.setenv("DIAGNOSE_TAIL_PROCESSES", "2")
    chosen = tailwork.worth_it(texts)
    assert chosen and all(not str(t.path).endswith(".gz") for t in chosen)  # a gz tail would cost a decompression
    assert tailwork.worth_it(texts[:1]) == []  # one log: nothing to spread




# ---------------------------------------------------------------- parts in forked worker processes


def count_forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per fork_map call from now on; fails at once if the scan could not fork (another
    thread alive in this process would make it use threads, and the test prove nothing)."""
    from diagnose.engine import forkmap

    assert forkmap.available(), "a thread other than the main one is alive: the scan would not fork"
    forks: list[int] = []
    original = forkmap.fork_map

    def counted(*args: object, **kwargs: object) -> object:
        forks.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(forkmap, "fork_map", counted)
    return forks


def _forked(paths: list[Path], engine: str, workers: int, chunk: int | None,
            monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """_scan in `workers` forked processes; fails if the scan did not fork (another thread
    alive in this process would make it use threads, and this test prove nothing)."""
    forks = count_forks(monkeypatch)
    patterns = scan.PatternSet(ANCHORED + rule_pack_patterns(TextKind.LOG) + SYNTHETIC)
    scanner = scan.Scanner(TextKind.LOG, patterns, engine)
    found = [summary_of(r) for r in scan.scan_files([(s, scanner) for s in _sources(paths)], workers, chunk,
                                                    processes=True)]
    assert forks, "the scan did not use worker processes"
    return found


def test_parts_in_worker_processes_give_the_one_pass_result(run_logs: list[Path], cache_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Matches come back from a worker as plain captures and spans, the crash finder reads each
    # tail there, and the parent merges: the same hits, times, captures and spans as one thread.
    pytest.importorskip("hyperscan", reason="hyperscan is not installed on this platform")
    serial = _scan(run_logs, "hyperscan", 1)
    assert _forked(run_logs, "hyperscan", 3, 100_000, monkeypatch) == serial
    logs = [run_logs[1], *run_logs[5:]]
    assert _forked(logs, "pure", 2, 50_000, monkeypatch) == _scan(logs, "hyperscan", 1)


def test_when_workers_cannot_be_forked_the_threads_scan_it_all(run_logs: list[Path], cache_dir: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # A sandbox that refuses fork: the scan says nothing of it and gives the one-pass result.
    def refused() -> int:
        raise OSError(1, "Operation not permitted")

    logs = [run_logs[1], *run_logs[5:]]
    serial = _scan(logs, "pure", 1)
    monkeypatch.setattr(os, "fork", refused)
    assert _forked(logs, "pure", 3, 60_000, monkeypatch) == serial


def test_a_catastrophic_pattern_in_worker_processes_is_stopped(tmp_path: Path, cache_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Each worker charges its own copy of the budget and tells the parent; the parent stops the
    # pattern for the parts still to come: spent at most once per worker, not once per part.
    log = tmp_path / "slow.log"
    # Past the 4 MiB tail that the last part holds whole, so the file is cut into several parts.
    log.write_text("step 1 NCCL version 2.21.5\n" + ("a" * 26 + "\n") * 200_000 + "NCCL version 2.21.5\n")
    scanner = scan.Scanner(TextKind.LOG, scan.PatternSet([r"(a|aa)+(?=c)", r"NCCL version (?P<version>\S+)"]), "pure")
    forks = count_forks(monkeypatch)
    started, reaped = time.process_time(), os.times().children_user
    result = scan.scan_files([(_sources([log])[0], scanner)], 2, 300_000, processes=True)[0]
    assert forks, "the scan did not use worker processes"
    assert 0 in result.stopped and 1 not in result.stopped and result.count(1) == 2
    lines, line_no = result.stopped[0]
    assert lines >= 1 and 2 <= line_no <= 200_002
    # The parent confirmed nothing itself, and the workers together spent no more than a
    # budget each (CPU time of the reaped workers; a pattern unstopped would cost ~100 s).
    assert time.process_time() - started < 2.0
    assert os.times().children_user - reaped < 2 * scan.CONFIRM_BUDGET + 10.0


def test_fork_only_beside_threads_known_to_be_safe() -> None:
    # The terminal's spinner (and rich's refresh thread that draws it) may be alive at the fork;
    # any other thread, which may hold a lock a worker needs, makes the scan use threads.
    import threading

    from diagnose.engine import forkmap
    from diagnose.report._progress import DelayedStatus

    assert forkmap.available()
    with DelayedStatus("scanning", 0.0, enabled=True):
        for _ in range(600):  # until the spinner's threads are up
            if len(threading.enumerate()) > 1:
                break
            time.sleep(0.05)
        assert "progress" in [thread.name for thread in threading.enumerate()]
        assert forkmap.available(), [thread.name for thread in threading.enumerate()]
    release = threading.Event()
    other = threading.Thread(target=release.wait, name="some-collector")
    other.start()
    try:
        assert not forkmap.available()
    finally:
        release.set()
        other.join()
    assert forkmap.available()
