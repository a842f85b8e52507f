"""torchrun --max-restarts 2 whose rank 1 the kernel OOM-kills in every attempt (issue 24, item
5): real torchrun (torch 2.13, .torchvenv) in its own memory cgroup, an unrelated python3
OOM-killed just before. The OOM kill is the run's root, and its title names every attempt's
victim and says all attempts died that way, live and from the bundle."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.live.test_stories import assert_host_kills_not_blamed, assert_same_answer, top, wait_after
from tests.support.paths import REPO

TORCHRUN = REPO / ".torchvenv" / "bin" / "torchrun"
SCRIPT = REPO / "tests" / "data" / "ranks" / "grow_restarts.py"
FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: \d+ \(pid: (\d+)\)")

pytestmark = pytest.mark.skipif(not TORCHRUN.exists(), reason=f"needs torch in {TORCHRUN.parent.parent} "
                                "(python3 -m venv .torchvenv && .torchvenv/bin/pip install torch==2.13.0)")


def test_every_attempt_oom_killed(story, unrelated_oom_kill, memcg, procs, diagnose, via_bundle):
    group = memcg(600 << 20)  # two ranks' torch imports fit; rank 1's growth does not
    wait_after(unrelated_oom_kill.at, 2)
    log = story / "train_rst9.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    with open(log, "wb") as out:
        run = procs([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "--max-restarts", "2", str(SCRIPT),
                     "--run-name", "rst9"], cwd=story, env=env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, preexec_fn=group.join())
        assert run.wait(timeout=600) == 1
    attempts = FAILED.findall(log.read_text(errors="replace"))
    assert len(attempts) == 3 and all(code == "-9" for code, _pid in attempts), attempts
    victims = [int(pid) for _code, pid in attempts]

    live = diagnose(["rst9"], cwd=story)
    assert live.code == 1
    cause = top(live)
    assert cause["id"] == "memory.host-oom-kill" and cause.get("attribution") == "own", cause["id"]
    assert "the same in every one of torchrun's 3 attempts" in cause["title"], cause["title"]
    assert all(str(pid) in cause["title"] for pid in victims), (cause["title"], victims)
    assert str(unrelated_oom_kill.pid) not in cause["title"]
    assert_host_kills_not_blamed(live, own=frozenset(victims), unrelated=unrelated_oom_kill)

    bundle = via_bundle("rst9", cwd=story)
    assert_same_answer(live, bundle)
    assert_host_kills_not_blamed(bundle, own=frozenset(victims), unrelated=unrelated_oom_kill)
