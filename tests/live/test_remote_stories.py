"""The stories of docs/run-identity.md built on a remote machine, behind a real exec hop, and
diagnosed from outside: `diagnose flex7` with a [host] table (target, the fake-pct prefix, the
ssh client config of the test's sshd), exactly as `diagnose flex7 --host root@10.1.2.6 --exec
'pct exec 200 --'` reaches a Proxmox container.

The run lives inside the container stand-in (its own pid namespace, /proc and /tmp: a tmux
socket there is invisible here): its tmux server, its processes, its workspace. Each story sits
beside an unrelated host event (another python3 OOM-killed in its own memory cgroup), as in
test_stories.py. The answer from outside must be the answer diagnose gives when run inside
the container (same causes, evidence lines and times), and the bundle of the remote run
(`diagnose collect --host`) must give it again."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.live.test_stories import DAY, assert_host_kills_not_blamed, copy_log, top, wait_after
from tests.support.cli import run_cli
from tests.support.remote import INSIDE, diagnose_remote, diagnose_there, own_causes, ssh_masters


def config(tmp_path: Path, sshd: object, container: object) -> Path:
    path = tmp_path / "diagnose.toml"
    path.write_text(sshd.toml(container.exec_prefix, f'[run]\ndir = "{INSIDE}"\n'))  # type: ignore[attr-defined]
    return path


def test_tmux_server_died_inside_the_container(tmp_path, sshd, container, seeds, unrelated_oom_kill):
    """(a) remotely: `tmux new-session -d -s train "sleep 2; bash start_training.sh > train_flex7.log"`
    in the container, its server SIGKILLed before the pane's shell got to its redirect."""
    work = container.workspace
    logs = seeds / "seed-flex7-tmux-died" / "logs"
    copy_log(logs / "train_flex5.log", work / "train_flex5.log", age=2 * DAY)
    copy_log(logs / "train_flex6.log", work / "train_flex6.log", age=DAY)
    (work / "start_training.sh").write_text("#!/bin/bash\nsleep 2\nexec python3 -c 'print(\"training\")'\n")
    container.run("sh", "-c", f"cd {INSIDE} && tmux -f /dev/null new-session -d -s train "
                  "'sleep 2; bash start_training.sh > train_flex7.log 2>&1'")
    server = container.run("tmux", "display-message", "-p", "#{pid}").stdout.strip()
    container.run("kill", "-9", server)
    time.sleep(0.3)
    assert not (work / "train_flex7.log").exists(), "the pane's shell got to its redirect before the server died"
    inside = container.run("stat", "-c", "%d:%i", "/tmp/tmux-0/default", check=False)
    assert inside.returncode == 0, "no stale socket inside the container"
    here = Path("/tmp/tmux-0/default")
    if here.exists():  # this machine's own root tmux, if any, is another file: the hop is crossed
        assert f"{here.stat().st_dev}:{here.stat().st_ino}" != inside.stdout.strip()

    toml = config(tmp_path, sshd, container)
    code, live, _err = diagnose_remote(["flex7", "--config", str(toml)], cwd=tmp_path)
    assert code == 1
    assert top(_D(live))["id"] == "launch.tmux-server-died"
    run = live["run"]
    assert run["state"] == "never-started"
    assert run["launcher"]["kind"] == "tmux" and run["launcher"]["tmux_server"] == "stale_socket"
    assert run["launcher"]["tmux_socket"] == "/tmp/tmux-0/default"  # the container's /tmp, through the hop
    expected = [log for log in run["logs"] if log["path"] == f"{INSIDE}/train_flex7.log"]
    assert expected and expected[0]["exists"] is False and expected[0]["source"] == "inferred"
    assert_host_kills_not_blamed(_D(live), unrelated=unrelated_oom_kill)
    remote = live["stats"]["remote"]
    assert remote["host"] == sshd.target and remote["exec"] == container.exec_prefix.split()
    assert ssh_masters(sshd.port) == [], "the ControlMaster outlived diagnose"

    there_code, there, _ = diagnose_there(container, ["flex7", "--dir", INSIDE])
    assert there_code == code
    assert there["run"]["state"] == run["state"]
    assert own_causes(there) == own_causes(live)

    bundle = tmp_path / "out" / "b.tar.gz"
    bundle.parent.mkdir()
    collected = run_cli(["collect", "flex7", "--config", str(toml), "-o", str(bundle)], cwd=tmp_path)
    assert collected.returncode == 0, collected.stderr
    again_code, again, _ = diagnose_remote([str(bundle)], cwd=bundle.parent)
    assert again_code == code and again["run"]["mode"] == "bundle"
    assert own_causes(again) == own_causes(live)
    assert again["stats"]["collect"]["remote"]["target"] == sshd.target  # the bundle says where it came from


def wandb_run_inside(container: Any, seeds: Path, unrelated_oom_kill: Any) -> Path:
    """A real python3 child inside the container prints the real log of wandb rejecting `_stats_*`
    settings into train_flex7.log in its workspace and exits 1; returns that log as seen here."""
    from tests.live.conftest import REPLAY

    work = container.workspace
    lines = (seeds / "seed-wandb-settings" / "logs" / "train.log").read_text().splitlines()
    (work / "train.py").write_text(REPLAY)
    (work / "replay-source.txt").write_text("\n".join(lines) + "\n")
    wait_after(unrelated_oom_kill.at, 3)
    child = container.run("env", f"REPLAY_SOURCE={INSIDE}/replay-source.txt", "REPLAY_SPEEDUP=10", "REPLAY_SHIFT=0",
                          "REPLAY_END=1", "sh", "-c", f"cd {INSIDE} && exec python3 train.py > train_flex7.log 2>&1",
                          check=False)
    assert child.returncode == 1, child.stderr
    (work / "replay-source.txt").unlink()
    return work / "train_flex7.log"


def test_wandb_settings_rejected_inside_the_container(tmp_path, sshd, container, seeds, unrelated_oom_kill):
    """(c) remotely: the run's own output is the real log of wandb rejecting `_stats_*` settings,
    printed by a real python3 child inside the container into train_flex7.log just now."""
    log = wandb_run_inside(container, seeds, unrelated_oom_kill)
    assert "extra_forbidden" in log.read_text() and time.time() - log.stat().st_mtime < 30

    toml = config(tmp_path, sshd, container)
    code, live, _err = diagnose_remote(["flex7", "--config", str(toml)], cwd=tmp_path)
    assert code == 1
    found = [c for c in live["causes"] if c["id"] == "library.wandb-settings-rejected"]
    assert found, [c["id"] for c in live["causes"]]
    above = live["causes"][: live["causes"].index(found[0])]
    # Only a python3 the kernel killed after the run's log stopped (another user's, on this
    # shared machine: tied to the run by name and time) may rank above; never the planted one.
    assert all(c["id"] == "memory.host-oom-kill" and str(unrelated_oom_kill.pid) not in c["title"] for c in above), above
    assert live["run"]["state"] == "crashed"
    evidence = found[0]["evidence"][0]
    assert evidence["source"] == f"{INSIDE}/train_flex7.log" and evidence["line"] >= 1
    rivals = python3_kills_between(log.stat().st_mtime - 2, "")  # other users' kills since the run's last line
    assert unrelated_oom_kill.pid not in rivals
    assert_host_kills_not_blamed(_D(live), own=frozenset(rivals), unrelated=unrelated_oom_kill)

    log_name = f"{INSIDE}/train_flex7.log"
    there_code, there, _ = diagnose_there(container, ["flex7", "--dir", INSIDE])
    assert there_code == code and there["run"]["state"] == "crashed"
    assert own_causes(there, log_name) == own_causes(live, log_name) != []

    bundle = tmp_path / "out" / "b.tar.gz"
    bundle.parent.mkdir()
    collected = run_cli(["collect", "flex7", "--config", str(toml), "-o", str(bundle)], cwd=tmp_path)
    assert collected.returncode == 0, collected.stderr
    again_code, again, _ = diagnose_remote([str(bundle)], cwd=bundle.parent)
    assert again_code == code
    assert own_causes(again, log_name) == own_causes(live, log_name)


LOADING = (Path(__file__).parent / "test_stories.py").read_text().split("LOADING = '''\\\n", 1)[1].split("'''", 1)[0]


def test_run_oom_killed_inside_the_container(tmp_path, sshd, container, unrelated_oom_kill, memcg, dmesg_kill):
    """(d) remotely: `python3 train.py --run flex7` inside the container, in its own memory cgroup,
    loads shards until the kernel kills it; the unrelated python3 was OOM-killed just before.
    The kernel names the victim by this machine's pid, not the container's."""
    work = container.workspace
    (work / "train.py").write_text(LOADING)
    group = memcg(96 << 20)
    wait_after(unrelated_oom_kill.at, 3)
    hop = container.start("sh", "-c", f"cd {INSIDE} && exec python3 train.py --run flex7 > train_flex7.log 2>&1",
                          preexec_fn=group.join())
    victim = _child(hop.pid, container.namespace)
    assert hop.wait(timeout=60) != 0
    line = dmesg_kill(victim)
    assert "loading shard" in (work / "train_flex7.log").read_text()
    assert "dataset loaded" not in (work / "train_flex7.log").read_text()

    toml = config(tmp_path, sshd, container)
    code, live, _err = diagnose_remote(["flex7", "--config", str(toml)], cwd=tmp_path)
    assert code == 1
    cause = top(_D(live))
    assert cause["id"] == "memory.host-oom-kill", [c["id"] for c in live["causes"]]
    # The run's own kill; or, on this shared machine, another user's python3 the kernel killed
    # between the run's last line and its kill (the earliest kill after the last line is taken,
    # tied by name and time: nothing else can tell them apart once the run is gone).
    rivals = python3_kills_between((work / "train_flex7.log").stat().st_mtime - 2, line) - {victim}
    named = {victim} | rivals
    assert any(f"pid {pid})" in cause["title"] for pid in named), (cause["title"], victim, rivals)
    assert str(unrelated_oom_kill.pid) not in cause["title"]
    assert cause.get("attribution") == "own" and cause["severity"] == "critical"
    if not rivals:
        assert any(f"Killed process {victim} (" in e["text"] for e in cause["evidence"]), line
    assert live["run"]["state"] == "crashed"
    assert_host_kills_not_blamed(_D(live), own=frozenset(named), unrelated=unrelated_oom_kill)

    there_code, there, _ = diagnose_there(container, ["flex7", "--dir", INSIDE])
    assert there_code == code
    assert (top(_D(there))["id"], top(_D(there))["title"]) == (cause["id"], cause["title"])
    assert own_causes(there, f"{INSIDE}/train_flex7.log") == own_causes(live, f"{INSIDE}/train_flex7.log")


def python3_kills_between(since: float, ours: str) -> set[int]:
    """Pids of python3 processes the kernel OOM-killed from `since` (wall clock) up to the line
    `ours` (the run's own kill), as this machine's dmesg has them."""
    import re
    import subprocess

    boot = float(next(line.split()[1] for line in Path("/proc/stat").read_text().splitlines()
                      if line.startswith("btime ")))
    stamp = re.compile(r"^\[\s*(\d+\.\d+)\] .*Killed process (\d+) \(python3\)")
    until = stamp.match(ours)
    end = boot + float(until.group(1)) if until else float("inf")
    found = set()
    for text in subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30).stdout.splitlines():
        hit = stamp.match(text)
        if hit and since <= boot + float(hit.group(1)) <= end + 0.001:
            found.add(int(hit.group(2)))
    return found


class _D:
    """A parsed JSON answer where the story assertions of test_stories.py expect `.data`."""

    def __init__(self, data: dict[str, object]) -> None:
        self.data = data

    def __getitem__(self, key: str) -> object:
        return self.data[key]


def _child(pid: int, namespace: str, timeout: float = 10) -> int:
    """The process nsenter started inside the container (the run, as this machine numbers it):
    a child of the hop that lives in the container's pid namespace (not the `cat` of fake-pct's
    own command substitution, which comes first)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            try:
                if os.readlink(f"/proc/{child}/ns/pid") == namespace:
                    return int(child)
            except OSError:
                continue
        time.sleep(0.01)
    raise AssertionError("the hop never started the run")


def test_dir_is_a_folder_inside_the_container(tmp_path, sshd, container, seeds, unrelated_oom_kill):
    """`--dir /mnt/workspace` with a [host] table that names no folder (issue 24): the folder
    exists only behind the exec hop, and is looked for there: the run is found, its real log's
    cause named. A folder that is not there is one line and exit 2."""
    wandb_run_inside(container, seeds, unrelated_oom_kill)
    assert not Path(INSIDE).exists()  # here, the folder is not there: only inside the container
    toml = tmp_path / "diagnose.toml"
    toml.write_text(sshd.toml(container.exec_prefix))

    code, live, _err = diagnose_remote(["flex7", "--config", str(toml), "--dir", INSIDE], cwd=tmp_path)
    assert code == 1
    assert "library.wandb-settings-rejected" in [c["id"] for c in live["causes"]]
    assert any(entry.get("path") == f"{INSIDE}/train_flex7.log" for entry in live["run"]["logs"])

    missing = run_cli(["flex7", "--config", str(toml), "--dir", f"{INSIDE}/nope", "--format", "json"], cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "no such directory on" in missing.stderr, missing.stderr
    assert "Traceback" not in missing.stderr


def test_a_live_run_is_found_where_it_works_without_dir(tmp_path, sshd, container, unrelated_oom_kill):
    """No --dir, a [host] table that names no folder (issue 24): the run works in a folder of the
    container that is neither the login home nor /workspace. Its live process names the run, so
    its working directory is searched, through the hop, and its log is found there."""
    work = container.workspace / "runs" / "exp3"
    work.mkdir(parents=True)
    program = ("import sys, time\n"
               "for step in range(3):\n"
               "    print(f'step {step} loss {2.0 - step / 10:.3f}', flush=True)\n"
               "time.sleep(600)\n")
    wait_after(unrelated_oom_kill.at, 1)
    run = container.start("sh", "-c", f"cd {INSIDE}/runs/exp3 && exec python3 -c {shlex.quote(program)} --run-name flex9 "
                          "> train_flex9.log 2>&1", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while "step 2" not in ((work / "train_flex9.log").read_text() if (work / "train_flex9.log").exists() else ""):
            assert time.monotonic() < deadline, "the run inside the container did not print its steps"
            time.sleep(0.2)
        toml = tmp_path / "diagnose.toml"
        toml.write_text(sshd.toml(container.exec_prefix))
        code, live, _err = diagnose_remote(["flex9", "--config", str(toml)], cwd=tmp_path)
        assert code in (0, 1)
        found = [entry for entry in live["run"]["logs"] if entry["path"] == f"{INSIDE}/runs/exp3/train_flex9.log"]
        assert found and found[0]["exists"] is True, live["run"]["logs"]
        assert live["run"]["state"] == "running", live["run"]["state_reason"]
        assert_host_kills_not_blamed(_D(live), unrelated=unrelated_oom_kill)
    finally:
        container.run("pkill", "-f", "run-name flex9", check=False)
        run.kill()
        run.wait(timeout=10)
