"""The run's timeline (engine/timeline.py) on real fixtures: lanes per rank, each rank's last line
and first error, watchdog timeouts, exits, kernel events tied to the run, the first failure;
file times used only where they can be a file's last write."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from diagnose.app import diagnose
from diagnose.engine.findings import Diagnosis, Timeline
from diagnose.evidence.bundle import evidence_from_bundle
from diagnose.evidence.inputs import evidence_from_paths
from tests.conftest import FIXTURES
from tests.report_support import load_rules_cached, working_dir


@functools.cache
def bundle(case: str) -> Diagnosis:
    return diagnose(evidence_from_bundle(FIXTURES / case), load_rules_cached())


def timeline_of(diagnosis: Diagnosis) -> Timeline:
    assert diagnosis.timeline is not None
    return diagnosis.timeline


def test_a_hang_rank_by_rank() -> None:
    timeline = timeline_of(bundle("nccl-hang-2gpu"))
    lanes = {lane.key: lane for lane in timeline.lanes}
    assert list(lanes) == ["launcher", "rank 0", "rank 1"]
    rank0, rank1 = lanes["rank 0"], lanes["rank 1"]
    assert rank0.state == "watchdog timeout; SIGABRT (-6)"
    assert rank1.state == "behind (hung); SIGTERM (-15)"
    assert rank1.last_line is not None and rank1.last_line.label == "step 5: waiting on slow storage ..."
    # rank 1's own file has no timestamps: the time is its last write (the bundle keeps the mtime)
    assert rank1.last_line.approx and rank1.last_line.time == 1796015256.0
    assert rank0.last_line is not None and rank0.last_line.time is not None and rank0.last_line.time > rank1.last_line.time
    assert rank0.first_error is not None and rank0.first_error.kind == "timeout"
    assert rank0.first_error.label == "watchdog timeout (ALLREDUCE #11)"
    first = timeline.first_failure
    assert first is not None and (first.lane, first.kind) == ("rank 0", "timeout") and not first.approx
    assert timeline.blamed == "rank 1"
    exits = {(m.lane, m.label) for m in timeline.marks if m.kind == "exit"}
    assert {("rank 0", "SIGABRT (-6)"), ("rank 1", "SIGTERM (-15)"), ("launcher", "exit 1")} <= exits
    assert timeline.start is not None and timeline.end is not None
    assert all(timeline.start <= m.time <= timeline.end for m in timeline.marks if m.time is not None)
    assert timeline.multi()


def test_a_host_oom_is_the_kernel_lanes_and_the_run_own() -> None:
    timeline = timeline_of(bundle("seed-host-oom"))
    assert [lane.key for lane in timeline.lanes] == ["main", "kernel"]
    kills = [m for m in timeline.marks if m.kind == "oom-kill"]
    assert len(kills) == 1 and kills[0].own and kills[0].label == "python3 pid 6139 was OOM-killed"
    assert timeline.first_failure == kills[0]
    main = timeline.lanes[0]
    assert main.state == "SIGKILL (exit 137)" and not timeline.multi()


def test_a_launch_that_never_started_has_nothing_in_time() -> None:
    timeline = timeline_of(bundle("seed-flex7-tmux-died"))
    assert timeline.lanes == () and timeline.first_failure is None  # the siblings' lines are another run's


def test_a_copied_log_does_not_stretch_the_timeline_to_its_copy_time(tmp_path: Path) -> None:
    """Logs copied out of CI carry the copy's mtime (now): a scan places nothing there."""
    logs = tmp_path / "logs"
    shutil.copytree(FIXTURES / "nccl-hang-2gpu" / "logs", logs)  # mtimes: now, a year after the run
    with working_dir(tmp_path):
        diagnosis = diagnose(evidence_from_paths(["logs"]), load_rules_cached())
    timeline = timeline_of(diagnosis)
    assert timeline.end is not None and timeline.end < 1796015338.0 + 3600
    lanes = {lane.key: lane for lane in timeline.lanes}
    rank1 = lanes["rank 1"].last_line
    # untimed, and the copy's mtime is not its last write: at most the time of a line before it
    assert rank1 is not None and rank1.approx and rank1.time is not None and rank1.time <= 1796015276.0
    assert timeline.first_failure is not None and timeline.first_failure.lane == "rank 0"
