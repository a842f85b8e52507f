"""A live two-rank hang before any timeout names its rank (issue 24, item 3).

`torchrun --standalone --nproc-per-node 2` runs tests/data/ranks/hang_gloo.py (real torch, gloo,
CPU): at step 5 rank 1 stops in its own `next_batch` (a sleep standing for a reader that never
returns) and rank 0 goes on into the step's all_reduce and waits there; the process group's
timeout is 30 minutes, so nothing is printed. An unrelated python3 is OOM-killed in its own memory
cgroup right after the run's last line. `diagnose RUN --stall-after 5s` must map the processes
to ranks (RANK in their environment), take each rank's stack (py-spy) and name rank 1, live and
from the bundle `diagnose collect` writes. The torch program needs .torchvenv (made by .ci/run).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.live.test_stories import assert_host_kills_not_blamed, top
from tests.support.cli import run_cli
from tests.support.paths import REPO

TORCHRUN = REPO / ".torchvenv" / "bin" / "torchrun"
SCRIPT = REPO / "tests" / "data" / "ranks" / "hang_gloo.py"
RUN = "hang7r"
SILENT = 5  # --stall-after, seconds


def _reason() -> str | None:
    from diagnose.live.collectors.procscan import py_spy

    if not TORCHRUN.exists():
        return f"needs torch in {TORCHRUN.parent.parent} (python3 -m venv .torchvenv && .torchvenv/bin/pip install torch==2.13.0)"
    if py_spy() is None:
        return "needs py-spy (pip install py-spy) to take the ranks' stacks"
    return None


pytestmark = pytest.mark.skipif(_reason() is not None, reason=_reason() or "")


def _wait_for_hang(log: Path, child: Any) -> None:
    """Both ranks past step 4 (rank 1 then stops in its own code, rank 0 in all_reduce), and the
    log silent for longer than --stall-after. Bounded by the log's own progress, not by a clock
    that a busy machine could outrun: torch's start-up is given minutes."""
    started = time.monotonic()
    while not all(f"[rank{r}] step 4 " in log.read_text(errors="replace") for r in (0, 1)):
        assert child.poll() is None, f"torchrun ended with {child.returncode}: {log.read_text(errors='replace')[-2000:]}"
        assert time.monotonic() - started < 600, "the ranks did not reach step 4: " + log.read_text(errors="replace")[-2000:]
        time.sleep(0.5)
    while time.time() - log.stat().st_mtime <= SILENT + 1:
        time.sleep(0.5)


def skip_if_py_spy_cannot_attach(run: dict[str, Any], gaps: list[dict[str, Any]]) -> None:
    """No stack at all because py-spy could not read these processes (a missing capability: its
    0.4 releases cannot tell some interpreters' version); any other reason fails below."""
    if any(p.get("stack") for p in run["processes"]):
        return
    reasons = [g["reason"] for g in gaps if g["source"] == "process"]
    if reasons and all("cannot attach" in r for r in reasons):
        pytest.skip(f"py-spy cannot read this interpreter's processes here: {reasons}")


def _kill_all_in(folder: Path) -> None:
    """Every process working in `folder`: torchrun starts each rank in a session of its own, so
    killing torchrun's group leaves the ranks running."""
    for _ in range(10):
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "cwd") == str(folder):
                        found.append(int(entry.name))
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


@pytest.fixture
def hang_dir(story: Path) -> Iterator[Path]:
    yield story
    _kill_all_in(story)


def test_two_rank_hang_names_the_rank_outside_the_collective(hang_dir, oom_kill_now, procs, diagnose, tmp_path):
    story = hang_dir
    log = story / f"train_{RUN}.log"
    env = {**os.environ, "HANG_RANK": "1", "HANG_STEP": "5", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    with open(log, "wb") as out:
        child = procs([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", str(SCRIPT), "--run-name", RUN],
                      cwd=story, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
    _wait_for_hang(log, child)
    unrelated = oom_kill_now()  # seconds after the run's last line, as close as a neighbour's kill comes

    live = diagnose([RUN, "--stall-after", f"{SILENT}s"], cwd=story)
    run = live.data["run"]
    assert run["state"] == "stalled", run["state_reason"]
    ranks = {p["rank"]: p["pid"] for p in run["processes"] if p.get("rank") is not None and p["alive"]}
    assert set(ranks) == {0, 1}, run["processes"]
    skip_if_py_spy_cannot_attach(run, live.data["gaps"])
    cause = top(live)
    assert cause["id"] == "run.stalled"
    assert "rank 1 is in next_batch (hang_gloo.py:" in cause["title"], cause["title"]
    assert "rank 0 waits in all_reduce" in cause["title"], cause["title"]
    # The evidence starts with rank 1's own stack, its frame in the user's code.
    first = cause["evidence"][0]
    assert first["rank"] == 1 and first["source"] == f"py-spy dump --pid {ranks[1]}", first
    assert any(e["rank"] == 1 and e["text"].strip().startswith("next_batch (hang_gloo.py:") for e in cause["evidence"])
    assert any(e["rank"] == 0 and e["text"].strip().startswith("all_reduce (torch/distributed/") for e in cause["evidence"])
    assert_host_kills_not_blamed(live, unrelated=unrelated)

    # The bundle: the same ranks, stacks and answer, read elsewhere without the processes.
    bundle_path = tmp_path / "out" / "b.tar.gz"
    bundle_path.parent.mkdir()
    collected = run_cli(["collect", RUN, "--stall-after", f"{SILENT}s", "-o", str(bundle_path)], cwd=story)
    assert collected.returncode == 0, collected.stderr
    bundle = diagnose([str(bundle_path)], cwd=bundle_path.parent)  # the collection's --stall-after, kept in it
    assert bundle.data["run"]["state"] == "stalled"
    assert top(bundle)["title"] == cause["title"]
    assert_host_kills_not_blamed(bundle, unrelated=unrelated)


def test_a_hang_behind_the_exec_hop_names_its_rank(tmp_path, sshd, container, unrelated_oom_kill):
    """The same hang inside the container stand-in, diagnosed from outside through ssh and the
    exec prefix: the ranks are mapped from the environments the remote /proc gives, and their
    stacks come from the py-spy on the remote PATH (the prefix puts the test venv's bin there)."""
    import sys

    from tests.support.remote import INSIDE, diagnose_remote

    work = container.workspace / "hang"
    work.mkdir()
    log = work / "train_hang8r.log"
    command = (f"cd {INSIDE}/hang && HANG_RANK=1 HANG_STEP=5 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 exec {TORCHRUN} "
               f"--standalone --nproc-per-node 2 {SCRIPT} --run-name hang8r > train_hang8r.log 2>&1")
    starter = container.start("sh", "-c", command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        while not log.exists():
            assert starter.poll() is None or log.exists(), "torchrun did not start inside the container"
            time.sleep(0.2)
        _wait_for_hang(log, starter)
        path = f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin"
        toml = tmp_path / "diagnose.toml"
        toml.write_text(sshd.toml(f"{container.exec_prefix} env PATH={path}", f'[run]\ndir = "{INSIDE}/hang"\n'))
        code, live, _err = diagnose_remote(["hang8r", "--config", str(toml), "--stall-after", f"{SILENT}s"], cwd=tmp_path)
        run = live["run"]
        assert run["state"] == "stalled", run["state_reason"]
        assert {p["rank"] for p in run["processes"] if p.get("rank") is not None} == {0, 1}, run["processes"]
        skip_if_py_spy_cannot_attach(run, live["gaps"])
        cause = live["causes"][0]
        assert code == 1 and cause["id"] == "run.stalled"
        assert "rank 1 is in next_batch (hang_gloo.py:" in cause["title"], cause["title"]
        assert "rank 0 waits in all_reduce" in cause["title"], cause["title"]
    finally:
        container.run("pkill", "-9", "-f", "run-name hang8r", check=False)
