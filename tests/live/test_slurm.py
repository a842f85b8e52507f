"""`--slurm-job`: a real single-node Slurm cluster (tests/support/slurm.py), real jobs.

One job is OOM-killed by its memory limit (task/cgroup), one is cancelled with scancel (and,
while it still runs, collected through srun on its node), one completes, one is preempted by a
job of a higher-priority partition, one loses its node (NODE_FAIL), and one (slow: Slurm's time
limits are in minutes) runs into its time limit. Each is diagnosed from its accounting record
(sacct, slurmdbd on MariaDB) and its output file.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.report import JSON_SCHEMA
from tests.support.slurm import SlurmCluster

LONG = "#!/bin/bash\necho 'training started'\nfor i in $(seq 1 600); do echo \"step $i\"; sleep 1; done\n"
OOM = ("#!/bin/bash\necho allocating\npython3 -c \"\nimport time\nblocks = []\nfor i in range(400):\n"
       "    blocks.append(bytearray(10 * 1024 * 1024))\n    print('allocated', (i + 1) * 10, 'MiB', flush=True)\n"
       "    time.sleep(0.01)\n\"\n")
OK = "#!/bin/bash\necho 'step 1'\nsleep 1\necho finished\n"


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    base = Path(f"/tmp/diagnose-slurm-test-{os.getpid()}")  # short: a unix socket path lives in it
    cluster = SlurmCluster(base)
    reason = cluster.start()
    if reason is not None:
        cluster.stop()
        pytest.skip(reason)
    try:
        yield cluster
    finally:
        cluster.stop()


def diagnose_job(cluster: SlurmCluster, job: str, *extra: str, path: str | None = None) -> tuple[int, dict[str, Any]]:
    env = dict(cluster.env)
    if path is not None:
        env["PATH"] = path
    result = run_cli(["--slurm-job", job, "--format", "json", *extra], cwd=cluster.base / "jobs", env=env)
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    import jsonschema

    jsonschema.validate(data, JSON_SCHEMA)
    return result.returncode, data


def terminal(cluster: SlurmCluster, job: str) -> str:
    result = run_cli(["--slurm-job", job], cwd=cluster.base / "jobs", env=cluster.env)
    return result.stdout


def _wait_running(cluster: SlurmCluster, job: str, seconds: float = 60) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cluster.state(job) == "RUNNING" and (cluster.base / "jobs" / f"slurm-{job}.out").exists():
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job} did not start: {cluster.state(job)}")


@pytest.fixture(scope="session")
def finished(slurm: SlurmCluster) -> dict[str, str]:
    """The jobs that end quickly, each waited for."""
    jobs = {"oom": slurm.sbatch(OOM, "--mem=100M", "-J", "oomjob"), "ok": slurm.sbatch(OK, "--mem=100M", "-J", "okjob")}
    for job in jobs.values():
        slurm.wait_done(job)
    return jobs


def test_out_of_memory_from_the_accounting_record(slurm: SlurmCluster, finished: dict[str, str]) -> None:
    job = finished["oom"]
    assert slurm.state(job) == "OUT_OF_MEMORY"
    code, data = diagnose_job(slurm, job)
    assert code == 1
    ids = [c["id"] for c in data["causes"]]
    # The accounting record leads, beside the kernel's own OOM kill in the job's memory cgroup
    # (the run's: its cgroup is the job's) when the kept kernel lines hold it (other processes'
    # kills on a shared machine may crowd it out of them): the same cause either way.
    assert "memory.slurm-job-out-of-memory" in ids[:2], ids
    top = next(c for c in data["causes"] if c["id"] == "memory.slurm-job-out-of-memory")
    assert f"job {job}" in top["title"] and "100M" in top["title"]
    assert any(e["source"] == f"sacct -j {job}" for e in top["evidence"])
    kernel = next((c for c in data["causes"] if c["id"] == "memory.host-oom-kill"), None)
    if kernel is not None:
        # Tied to the job by its memory cgroup, or by the killed pid the job's output printed.
        assert kernel["attribution"] == "own", kernel
        assert f"/job_{job}" in kernel["basis"] or "is the run's" in kernel["basis"], kernel["basis"]
    # slurmstepd's own line in the job's output file tells the same event: folded into the
    # first memory cause as its evidence, not a second (or third) critical root (issue 24).
    memory = [c for c in data["causes"] if c["id"].startswith("memory.") and c["role"] == "root"
              and c["severity"] in ("critical", "error")]
    assert len(memory) == 1, [(c["id"], c["severity"]) for c in memory]
    told = " ".join([memory[0]["explanation"], *(e["text"] for e in memory[0]["evidence"])])
    assert "memory.slurm-oom-kill" in told or memory[0]["id"] == "memory.slurm-oom-kill", told
    assert "oom" in told.lower()
    assert data["run"]["launcher"]["kind"] == "slurm" and data["run"]["state"] == "crashed"
    node = data["nodes"][0]
    assert node["name"] == slurm.node and node["clock_offset"] is not None


def test_completed_job_has_no_cause(slurm: SlurmCluster, finished: dict[str, str]) -> None:
    job = finished["ok"]
    code, data = diagnose_job(slurm, job)
    assert code == 0, [c["id"] for c in data["causes"]]
    assert not [c for c in data["causes"] if c["id"].startswith(("scheduler.slurm", "memory.slurm"))]
    assert data["nodes"][0]["ranks"][0]["last_line"] == "finished"


def test_running_job_is_collected_through_srun_then_cancelled(slurm: SlurmCluster, finished: dict[str, str]) -> None:
    job = slurm.sbatch(LONG, "--mem=100M", "-J", "canceljob")
    _wait_running(slurm, job)
    time.sleep(2)
    # diagnose "installed on the nodes": the venv the tests run from (its bin/diagnose) on PATH.
    bin_dir = str(Path(sys.executable).parent)
    assert (Path(bin_dir) / "diagnose").exists()
    code, data = diagnose_job(slurm, job, path=f"{bin_dir}:{os.environ.get('PATH', '')}")
    assert any("by srun --overlap" in n for n in data["notes"]), data["notes"]
    node = data["nodes"][0]
    assert node["status"] == "ok" and node["clock_offset"] is not None
    assert node["ranks"] and node["ranks"][0]["last_line"].startswith("step ")
    assert data["run"]["state"] in ("running", "stalled"), data["run"]["state"]
    slurm.run("scancel", job, check=True)
    assert slurm.wait_done(job).startswith("CANCELLED")
    code, data = diagnose_job(slurm, job)
    assert code == 1
    ids = [c["id"] for c in data["causes"]]
    assert set(ids[:2]) == {"scheduler.slurm-job-cancelled", "scheduler.slurm-cancelled"}, (
        ids, [(c["id"], c["basis"]) for c in data["causes"]], data["run"].get("cgroups"))
    cancelled = next(c for c in data["causes"] if c["id"] == "scheduler.slurm-job-cancelled")
    assert "by UID 0" in cancelled["title"]


def test_preempted_by_a_higher_priority_partition(slurm: SlurmCluster, finished: dict[str, str]) -> None:
    low = slurm.sbatch(LONG, "-c", "2", "--mem=100M", "-p", "debug", "-J", "lowprio")
    _wait_running(slurm, low)
    slurm.sbatch(OK, "-c", "2", "--mem=100M", "-p", "urgent", "-J", "urgent")
    assert slurm.wait_done(low) == "PREEMPTED"
    code, data = diagnose_job(slurm, low)
    ids = [c["id"] for c in data["causes"]]
    assert code == 1 and "scheduler.slurm-job-preempted" in ids[:2], ids
    assert "scheduler.slurm-preempted" in ids  # "*** JOB N ON node CANCELLED AT ... DUE TO PREEMPTION ***"


def test_node_failure(slurm: SlurmCluster, finished: dict[str, str]) -> None:
    job = slurm.sbatch(LONG, "--mem=100M", "--no-requeue", "-J", "nodefail")
    _wait_running(slurm, job)
    slurm.run("scontrol", "update", f"nodename={slurm.node}", "state=down", "reason=diagnose-test", check=True)
    try:
        assert slurm.wait_done(job) == "NODE_FAIL"
    finally:
        slurm.run("scontrol", "update", f"nodename={slurm.node}", "state=resume")
    code, data = diagnose_job(slurm, job)
    assert code == 1 and data["causes"][0]["id"] == "scheduler.slurm-job-node-fail", [c["id"] for c in data["causes"]]


def test_not_a_job_id_is_a_usage_error(slurm: SlurmCluster) -> None:
    result = run_cli(["--slurm-job", "12;rm -rf /"], env=slurm.env)
    assert result.returncode == 2 and "not a Slurm job id" in result.stderr
    result = run_cli(["--slurm-job", "999999"], env=slurm.env)
    assert result.returncode == 2 and "Slurm knows no such job" in result.stderr


@pytest.mark.slow
def test_time_limit(slurm: SlurmCluster, finished: dict[str, str]) -> None:
    job = slurm.sbatch(LONG, "--mem=100M", "--time=1", "-J", "timejob")
    assert slurm.wait_done(job, 180) == "TIMEOUT"
    code, data = diagnose_job(slurm, job)
    ids = [c["id"] for c in data["causes"]]
    assert code == 1 and "scheduler.slurm-job-timeout" in ids[:2], ids
    assert "scheduler.slurm-time-limit" in ids


def _watch(cluster: SlurmCluster, job: str) -> tuple[int, list[dict[str, Any]]]:
    result = run_cli(["watch", "--slurm-job", job, "--every", "0.3s", "--format", "json"], cwd=cluster.base / "jobs",
                     env=cluster.env, timeout=180)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_watch_follows_a_job_from_submission_to_its_end(slurm: SlurmCluster, finished: dict[str, str]) -> None:
    """Watched from right after sbatch: its state changes, its output's first step, COMPLETED, exit 0."""
    job = slurm.sbatch("#!/bin/bash\necho 'step 1'\nsleep 2\necho 'step 2'\necho finished\n", "--mem=100M", "-J", "watched")
    code, events = _watch(slurm, job)
    states = [e["state"] for e in events if e["event"] == "state"]
    assert states[-1] == "COMPLETED" and len(states) >= 2 and states[-2] in ("RUNNING", "COMPLETING", "PENDING"), states
    assert any(e["event"] == "step" and e["line"] == "step 1" for e in events), events
    assert events[-1]["event"] == "diagnosis" and code == 0 and events[-1]["report"]["run"]["state"] == "finished"


def test_watch_ends_with_the_out_of_memory_diagnosis(slurm: SlurmCluster, finished: dict[str, str]) -> None:
    job = slurm.sbatch(OOM, "--mem=100M", "-J", "oomwatched")
    code, events = _watch(slurm, job)
    assert [e["state"] for e in events if e["event"] == "state"][-1] == "OUT_OF_MEMORY"
    assert code == 1 and events[-1]["report"]["causes"][0]["id"] in ("memory.slurm-job-out-of-memory", "memory.host-oom-kill")
    assert "memory.slurm-job-out-of-memory" in [c["id"] for c in events[-1]["report"]["causes"][:2]]


def test_watch_of_a_job_slurm_does_not_know_is_one_line_and_exit_2(slurm: SlurmCluster) -> None:
    result = run_cli(["watch", "--slurm-job", "987654"], cwd=slurm.base / "jobs", env=slurm.env, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("diagnose: error: --slurm-job 987654: Slurm knows no such job"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
