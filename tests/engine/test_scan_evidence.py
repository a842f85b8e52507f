"""Bounded evidence, per pattern and rank; timestamps for lines that carry none; the per-line
time limit on confirming a match."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diagnose.engine import scan
from diagnose.engine.scan import KEEP
from tests.support.scan import ENGINES, REPO, SCAN_DATA, run_scan, summary_of

PLAIN = SCAN_DATA / "healthy-torchrun-plain.log"
DDP = SCAN_DATA / "ddp-healthy-train.log"


_MILLION = """
import json, resource, sys
from pathlib import Path
from tests.support.scan import run_scan

def peak_mb():
    # This process's own high-water mark (VmHWM): ru_maxrss also counts the pages of the process
    # that spawned it, which a long pytest run makes large.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
result = run_scan(Path(sys.argv[1]), [sys.argv[2]], sys.argv[3])
print(json.dumps({
    "count": result.count(0),
    "ranks": {str(rank): [s.count, [(h.line_no, h.captures) for h in s.hits()]] for rank, s in result.summaries(0).items()},
    "peak_mb": peak_mb(),
}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_a_pattern_firing_a_million_times_keeps_a_count_and_a_few_hits(engine: str, cache_dir: Path,
                                                                        tmp_path: Path) -> None:
    # Mechanical: two real rank prints of the healthy run, alternated 500,000 times each.
    data = PLAIN.read_bytes()
    rank1, rank0 = (data[data.index(prefix) : data.index(b"\n", data.index(prefix))]
                    for prefix in (b"[rank1] step 0/20", b"[rank0] step 0/20"))
    log = tmp_path / "million.log"
    log.write_bytes((rank1 + b"\n" + rank0 + b"\n") * 500_000)
    pattern = r"\[rank(?P<rank>\d+)\] step (?P<step>\d+)/\d+ loss (?P<loss>[\d.]+)"
    # In a fresh process, so that its peak memory is this scan's.
    done = subprocess.run([sys.executable, "-c", _MILLION, str(log), pattern, engine], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ), timeout=600, check=True)
    found = json.loads(done.stdout)
    assert found["count"] == 1_000_000
    assert sorted(found["ranks"]) == ["0", "1"]
    assert [line for line, _ in found["ranks"]["1"][1]] == [1, 3, 5, 999_995, 999_997, 999_999]
    assert [line for line, _ in found["ranks"]["0"][1]] == [2, 4, 6, 999_996, 999_998, 1_000_000]
    assert all(count == 500_000 and len(hits) == 2 * KEEP for count, hits in found["ranks"].values())
    assert found["ranks"]["0"][1][-1][1] == {"rank": "0", "step": "0", "loss": "1.2961"}
    # Memory does not grow with the hits: 16 MiB pieces, a few buffers, compact candidates.
    assert found["peak_mb"] < 200


@pytest.mark.parametrize("engine", ENGINES)
def test_lines_without_a_timestamp_take_the_one_before(engine: str, cache_dir: Path, tmp_path: Path) -> None:
    # The real crash: a traceback (no timestamps) after timestamped log lines.
    crash = (SCAN_DATA.parent.parent.parent / "bench" / "data" / "late-error-dataloader-worker-oom.log")
    patterns = [r"RuntimeError: DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: (?P<signal>\w+)"]
    result = run_scan(crash, patterns, engine)
    hit = next(iter(result.summaries(0).values())).first[0]
    step_6 = run_scan(crash, [r"epoch 1 step 6 loss"], engine)
    assert hit.time is not None
    assert hit.time == next(iter(step_6.summaries(0).values())).first[0].time  # the last line with a time
    # The same across piece edges: the look-back reaches into earlier pieces.
    assert summary_of(run_scan(crash, patterns, engine, chunk_bytes=128)) == summary_of(result)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_pattern_that_backtracks_forever_gives_up_per_line(engine: str, cache_dir: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # A pattern the rule loader would refuse (a repeat of overlapping choices), met by a line
    # built to make it backtrack: every split of the run of a is tried before `(?=c)` fails.
    # The superset (lookaround dropped) nominates the line, so both engines try to confirm it.
    monkeypatch.setattr(scan, "LINE_TIMEOUT", 0.2)
    log = tmp_path / "hang.log"
    log.write_bytes(DDP.read_bytes() + b"a" * 40 + b"\n" + DDP.read_bytes())
    patterns = [r"(a|aa)+(?=c)", r"NCCL version (?P<version>\S+)"]
    result = run_scan(log, patterns, engine)
    assert result.timeouts == {0: 1}
    assert result.count(1) == 2 * DDP.read_bytes().count(b"NCCL version")  # the rest of the scan went on


def test_the_engine_reports_a_pattern_that_gave_up(tmp_path: Path, cache_dir: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from diagnose.engine.evaluate import evaluate_scanned
    from diagnose.evidence.model import Evidence, RunInfo, TextFile, TextKind
    from diagnose.rules.model import Group, Rule, TextCondition

    monkeypatch.setattr(scan, "LINE_TIMEOUT", 0.2)
    log = tmp_path / "hang.log"
    log.write_bytes(b"a" * 40 + b"\n")
    pattern = r"(a|aa)+(?=c)"
    rule = Rule(id="test.hang", title="t", category="test", role="root", severity="error", confidence=0.5,
                when=Group("all", (TextCondition(TextKind.LOG, pattern, 1),), 1), explanation="e", fix=("f",))
    source = TextFile(TextKind.LOG, log, "hang.log")
    sets = {TextKind.LOG: scan.PatternSet([pattern]), TextKind.DMESG: scan.PatternSet([])}
    scans = scan.scan_texts([source], sets)
    evidence = Evidence(run=RunInfo(id="t", mode="scan"), texts=(source,))
    result = evaluate_scanned([rule], evidence, scans, sets)
    assert [(s.rule_id, s.reason) for s in result.skipped] == [("test.hang", "pattern gave up on 1 long line(s) of hang.log")]
