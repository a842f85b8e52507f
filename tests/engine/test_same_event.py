"""One event several sources report is one cause (issue 24): a Slurm job's OOM kill told by
sacct, by slurmstepd's line in the job's output and by the kernel is one critical root whose
evidence holds the others' lines; unrelated causes and context are not folded. The lines are
the real captures of tests/data/slurm (HOW.md) and of fixtures."""

from __future__ import annotations

from diagnose.engine.findings import Cause
from diagnose.engine.sameevent import fold_same_event
from diagnose.evidence.model import EvidenceItem
from tests.support.scan import REPO


def _line(path: str, needle: str) -> str:
    return next(line for line in (REPO / path).read_text().splitlines() if needle in line)


KILLED = _line("tests/data/ci/oom-cgroup/dmesg.txt", "Killed process")
WORKER = _line("fixtures/dataloader-worker-oom/logs/train.log", "is killed by signal")


def _cause(rule: str, source: str, text: str, role: str = "root", severity: str = "critical",
           attribution: str = "n/a") -> Cause:
    return Cause(rule, f"title of {rule}", "memory", role, severity, 0.9, 0.9,
                 (EvidenceItem(source, text, 1, None, None, None),), f"explains {rule}.", (), (),
                 attribution=attribution)


def test_three_reports_of_one_oom_kill_are_one_cause() -> None:
    sacct = _line("tests/data/slurm/sacct-1.txt", "OUT_OF_MEMORY")
    kernel = _cause("memory.host-oom-kill", "dmesg", KILLED, attribution="own")
    stepd = _cause("memory.slurm-oom-kill", "slurm-1.out", _line("tests/data/slurm/slurm-1.out", "oom"))
    account = _cause("memory.slurm-job-out-of-memory", "sacct -j 1", sacct)
    other = _cause("data.worker-killed", "train.log", WORKER, severity="error")
    folded = fold_same_event([kernel, other, stepd, account])
    # The accounting record (it names the job and its request) at the place of the first report.
    assert [c.id for c in folded] == ["memory.slurm-job-out-of-memory", "data.worker-killed"]
    kept = folded[0]
    assert [e.source for e in kept.evidence] == ["sacct -j 1", "dmesg", "slurm-1.out"]
    assert "memory.host-oom-kill" in kept.explanation and "memory.slurm-oom-kill" in kept.explanation


def test_context_and_other_runs_are_not_folded() -> None:
    own = _cause("memory.slurm-oom-kill", "slurm-1.out", _line("tests/data/slurm/slurm-1.out", "oom"))
    neighbour = _cause("memory.host-oom-kill", "dmesg", KILLED, role="context", severity="warning",
                       attribution="unattributed")
    assert fold_same_event([own, neighbour]) == [own, neighbour]
    alone = _cause("memory.host-oom-kill", "dmesg", KILLED, attribution="own")
    assert fold_same_event([alone]) == [alone]
