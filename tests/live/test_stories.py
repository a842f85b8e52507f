"""The stories of docs/run-identity.md, each built from real machine state beside an unrelated
host event (another python3 job OOM-killed by the kernel in its own memory cgroup just before),
diagnosed with no config file and no flags through the real CLI (`--format json`), then again
through `diagnose collect RUN -o tmp/b.tar.gz` + `diagnose tmp/b.tar.gz`.

The assertions hold the tool to what the contract promises (state, the expected log, the
process, the top cause, the attribution of host events) and are loose only where it leaves room
(the wording of titles, whether an unrelated event is listed at all)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

DAY = 86400
SEVERE = ("critical", "error")
KILLED = re.compile(r"Killed process (\d+) \(")


def copy_log(src: Path, dst: Path, age: float) -> None:
    dst.write_bytes(src.read_bytes())
    then = time.time() - age
    os.utime(dst, (then, then))


def wait_after(event: float, gap: float) -> None:
    """Let `gap` seconds pass since `event`: the unrelated kill comes a few seconds before the story."""
    time.sleep(max(0.0, event + gap - time.time()))


def killed_pids(cause: dict[str, Any]) -> set[int]:
    return {int(m) for e in cause["evidence"] for m in KILLED.findall(e.get("text") or "")}


def assert_host_kills_not_blamed(d: Any, own: frozenset[int] = frozenset(), unrelated: Any = None) -> None:
    """Every kernel OOM kill that is not of the run's own processes (the planted one, and any
    other kill this shared machine's dmesg holds) is `elsewhere`, or a context cause: never
    attributed to the run, never ranked first, never a reason to fail."""
    causes = d.data["causes"]
    for index, cause in enumerate(causes):
        foreign = killed_pids(cause) - own
        if not foreign or (own and killed_pids(cause) & own):
            continue
        where = f"cause #{index} {cause['id']} names OOM-killed pid(s) {sorted(foreign)} that are not the run's"
        assert index > 0, where + " and is ranked first"
        assert cause.get("attribution") != "own", where + " and is attributed to the run"
        assert cause["role"] == "context", where + f" with role {cause['role']} (context at most)"
        assert cause["severity"] not in SEVERE, where + f" at severity {cause['severity']}"
    if unrelated is not None:
        for entry in d.data.get("elsewhere", []):
            if str(unrelated.pid) in json.dumps(entry):
                assert entry.get("attribution", "elsewhere") == "elsewhere", entry


def top(d: Any) -> dict[str, Any]:
    assert d.data["causes"], f"no cause at all; run: {json.dumps(d.data.get('run'))}"
    return d.data["causes"][0]


def expected_log(d: Any, path: Path) -> dict[str, Any]:
    logs = d.data["run"].get("logs") or []
    found = [entry for entry in logs if entry.get("path") == str(path)]
    assert found, f"{path} not among run.logs: {logs}"
    return found[0]


def assert_same_answer(live: Any, bundle: Any) -> None:
    assert bundle.code == live.code
    assert bundle.data["run"]["mode"] == "bundle"
    assert bundle.data["run"]["state"] == live.data["run"]["state"]
    assert (top(bundle)["id"], top(bundle)["title"]) == (top(live)["id"], top(live)["title"])


def test_tmux_server_died_before_the_shell_ran(story, seeds, python3, unrelated_oom_kill, tmpdir_tmux, diagnose,
                                               via_bundle):
    """(a) `tmux new-session -d -s train "... bash start_training.sh > train_flex7.log 2>&1"` on the
    default socket; the server is SIGKILLed before the pane's shell got to its redirect: no
    train_flex7.log, a stale socket; train_flex5.log and train_flex6.log of earlier launches beside."""
    logs = seeds / "seed-flex7-tmux-died" / "logs"
    copy_log(logs / "train_flex5.log", story / "train_flex5.log", age=2 * DAY)
    copy_log(logs / "train_flex6.log", story / "train_flex6.log", age=DAY)
    (story / "start_training.sh").write_text(f"#!/bin/bash\nsleep 2\nexec {python3} -c 'print(\"training\")'\n")
    # The pane's shell opens the log before it runs start_training.sh, so the wait that loses the
    # race with the server's death stands first in the pane's command (as a slow env setup would).
    tmux = tmpdir_tmux
    tmux.new_session("train", "sleep 2; bash start_training.sh > train_flex7.log 2>&1", cwd=story)
    tmux.kill_server_hard()
    assert tmux.panes_alive() == [], "the pane's shell outlived its server: it would still open the log"
    assert not (story / "train_flex7.log").exists(), "the pane's shell got to its redirect before the server died"
    assert tmux.socket.exists(), "tmux removed its socket: the server was not killed hard"
    assert tmux.tmux("list-sessions", check=False).stderr.startswith("no server running on")
    print(f"story: stale socket {tmux.socket}; unrelated kill: {unrelated_oom_kill.dmesg}")

    live = diagnose(["flex7"], cwd=story, env=tmux.env)
    assert live.code == 1
    assert top(live)["id"] == "launch.tmux-server-died"
    run = live.data["run"]
    assert run["id"] == "flex7" and run["mode"] == "live"
    assert run["state"] == "never-started"
    log = expected_log(live, story / "train_flex7.log")
    assert log["exists"] is False and log["source"] == "inferred"
    assert "train_flex6.log" in " ".join([log.get("basis") or "", *run.get("inferred", [])])
    assert run["launcher"]["kind"] == "tmux"
    assert run["launcher"]["tmux_server"] == "stale_socket"
    assert run["launcher"]["tmux_socket"] == str(tmux.socket)
    assert_host_kills_not_blamed(live, unrelated=unrelated_oom_kill)

    bundle = via_bundle("flex7", cwd=story, env=tmux.env)
    assert_same_answer(live, bundle)
    assert expected_log(bundle, story / "train_flex7.log")["exists"] is False
    assert_host_kills_not_blamed(bundle, unrelated=unrelated_oom_kill)


def processes_in(directory: Path) -> list[int]:
    """Live pids whose working directory is `directory`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(directory):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def reap_nohup_launch(story: Path, procs: Any, log: Path, attempts: int = 10) -> bool:
    """Run `nohup python3 train.py > LOG 2>&1 &` in a session (its own process group, as an exec
    session is) and SIGKILL the whole group as soon as the background child has forked, as when
    the exec session ends. Until a try leaves no log (about one in two does; the recipe of
    fixtures/seed-flex6-nohup-reaped does the same), else the last try's empty log stays.
    Returns whether the log is missing."""
    for _ in range(attempts):
        log.unlink(missing_ok=True)
        session = procs(["bash", "-c", f"nohup python3 train.py > {log.name} 2>&1 & sleep 30"], cwd=story,
                        start_new_session=True)
        children = Path(f"/proc/{session.pid}/task/{session.pid}/children")
        deadline = time.time() + 10
        while not children.read_text().split():
            assert time.time() < deadline, "the session never forked its background child"
        os.killpg(session.pid, signal.SIGKILL)
        assert session.wait(timeout=10) == -9
        time.sleep(0.2)
        if not log.exists():
            return True
    return False


def test_nohup_child_reaped_with_its_session(story, seeds, unrelated_oom_kill, tmpdir_tmux, procs, diagnose,
                                             via_bundle):
    """(b) `nohup python3 train.py > train_stdout_flex7.log 2>&1 &` in a session whose whole process
    group is SIGKILLed right after: no log (or an empty one), no process; train_stdout_flex6.log of
    the earlier launch beside; and a stale tmux socket of another user at the default location,
    older than all of it."""
    tmux = tmpdir_tmux
    tmux.new_session("scratch", "sleep 600", cwd=Path("/"))  # someone else's server, dead earlier
    tmux.kill_server_hard()
    assert tmux.socket.exists()
    time.sleep(1.1)  # the earlier launch's log is newer than that socket
    copy_log(seeds / "seed-flex6-nohup-reaped" / "logs" / "train_flex5.log", story / "train_stdout_flex6.log", age=0)
    (story / "train.py").write_text("import time\ntime.sleep(5)\nprint('step 0 loss 2.30', flush=True)\n")
    log = story / "train_stdout_flex7.log"
    missing = reap_nohup_launch(story, procs, log)
    assert missing or log.stat().st_size == 0
    print(f"story: {log.name} {'missing' if missing else 'empty'}; unrelated kill: {unrelated_oom_kill.dmesg}")
    assert processes_in(story) == [], "something of the launch is left"

    live = diagnose(["flex7"], cwd=story, env=tmux.env)
    assert live.code == 1
    assert top(live)["id"] == "launch.nohup-reaped"
    run = live.data["run"]
    assert run["state"] == "never-started"
    entry = expected_log(live, log)
    assert entry["exists"] is (not missing)
    assert not [p for p in run.get("processes", []) if p.get("alive")]
    assert run["launcher"]["kind"] != "tmux", "another user's stale socket, older than the run, is not its launcher"
    for cause in live.data["causes"]:
        if cause["id"] == "launch.tmux-server-died":
            assert cause["role"] == "context" and cause["severity"] not in SEVERE, cause
    assert_host_kills_not_blamed(live, unrelated=unrelated_oom_kill)

    bundle = via_bundle("flex7", cwd=story, env=tmux.env)
    assert_same_answer(live, bundle)
    assert_host_kills_not_blamed(bundle, unrelated=unrelated_oom_kill)


def test_wandb_settings_rejected(story, seeds, unrelated_oom_kill, replay, diagnose, via_bundle):
    """(c) The run's own output is the real log of wandb rejecting `_stats_*` settings, printed by a
    real child into train_flex7.log right now; the unrelated OOM kill came a few seconds before."""
    lines = (seeds / "seed-wandb-settings" / "logs" / "train.log").read_text().splitlines()
    wait_after(unrelated_oom_kill.at, 3)
    log = story / "train_flex7.log"
    child = replay(story, lines, log, end="1")
    assert child.wait(timeout=30) == 1
    assert "extra_forbidden" in log.read_text() and time.time() - log.stat().st_mtime < 10
    print(f"story: log last written {log.stat().st_mtime - unrelated_oom_kill.at:.1f} s after the unrelated kill: "
          f"{unrelated_oom_kill.dmesg}")

    live = diagnose(["flex7"], cwd=story)
    assert live.code == 1
    assert top(live)["id"] == "library.wandb-settings-rejected"
    assert live.data["run"]["state"] == "crashed"
    assert expected_log(live, log)["exists"] is True
    for cause in live.data["causes"][1:]:
        if cause["id"] == "memory.host-oom-kill":
            assert cause["severity"] not in SEVERE, cause
    assert_host_kills_not_blamed(live, unrelated=unrelated_oom_kill)

    bundle = via_bundle("flex7", cwd=story)
    assert_same_answer(live, bundle)
    assert_host_kills_not_blamed(bundle, unrelated=unrelated_oom_kill)


LOADING = '''\
import sys, time
def say(text):
    t = time.time()
    print(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + ",%03d INFO train: " % (int(t * 1000) % 1000) + text,
          flush=True)
say("run " + sys.argv[-1] + ": loading dataset shards into memory")
shards = []
for shard in range(1, 9):
    say(f"loading shard {shard}/8 (data/shard-{shard:05d}.bin)")
    time.sleep(0.3)
    shards.append(b"\\x01" * (40 << 20))
    say(f"loaded shard {shard}/8: {40 * shard} MB in memory")
say("dataset loaded")
'''


def test_run_oom_killed_in_its_memcg_while_loading(story, python3, unrelated_oom_kill, memcg, dmesg_kill, procs,
                                                   diagnose, via_bundle):
    """(d) `python3 train.py --run flex7`, in its own memory cgroup, logs while it loads shards into
    memory until the kernel kills it; the unrelated python3 was OOM-killed a few seconds before."""
    (story / "train.py").write_text(LOADING)
    group = memcg(96 << 20)
    wait_after(unrelated_oom_kill.at, 3)
    log = story / "train_flex7.log"
    with open(log, "wb") as out:
        run = procs(["python3", "train.py", "--run", "flex7"], executable=python3, cwd=story, stdout=out,
                    stderr=subprocess.STDOUT, preexec_fn=group.join())
    assert run.wait(timeout=60) == -9
    line = dmesg_kill(run.pid)
    assert f"task_memcg={group.name}" in subprocess.run(["dmesg"], capture_output=True, text=True).stdout
    assert "loading shard" in log.read_text() and "dataset loaded" not in log.read_text()
    assert unrelated_oom_kill.pid != run.pid and "(python3)" in line and "(python3)" in unrelated_oom_kill.dmesg
    print(f"story: the run's kill: {line}\nthe unrelated kill: {unrelated_oom_kill.dmesg}")

    live = diagnose(["flex7"], cwd=story)
    assert live.code == 1
    cause = top(live)
    assert cause["id"] == "memory.host-oom-kill"
    assert str(run.pid) in cause["title"] and str(unrelated_oom_kill.pid) not in cause["title"]
    assert any(f"Killed process {run.pid} (" in e["text"] for e in cause["evidence"])
    assert not any(f"Killed process {unrelated_oom_kill.pid} (" in e["text"] for e in cause["evidence"])
    assert cause.get("attribution") == "own"
    assert cause["severity"] == "critical"
    assert live.data["run"]["state"] == "crashed"
    assert_host_kills_not_blamed(live, own=frozenset({run.pid}), unrelated=unrelated_oom_kill)

    bundle = via_bundle("flex7", cwd=story)
    assert_same_answer(live, bundle)
    assert any(f"Killed process {run.pid} (" in e["text"] for e in top(bundle)["evidence"])
    assert_host_kills_not_blamed(bundle, own=frozenset({run.pid}), unrelated=unrelated_oom_kill)


def silent_after_steps(replay: Any, story: Path, steps: list[str], log: Path, speedup: float,
                       silent: float, wait: float) -> Any:
    """`python3 train.py flex7` replays `steps` into `log` and then sleeps; once every step is
    printed (within `wait` s), the log's mtime (and the stamps, shifted alike) say it has been
    silent `silent` s."""
    child = replay(story, steps, log, argv=["train.py", "flex7"], speedup=speedup, shift=-silent, end="hang")
    deadline = time.time() + wait
    while log.read_text().count("step ") < len(steps):
        assert time.time() < deadline and child.poll() is None, "the run did not print its steps"
        time.sleep(0.05)
    time.sleep(0.2)
    then = time.time() - silent
    os.utime(log, (then, then))
    return child


def test_alive_but_silent_for_15_minutes(story, unrelated_oom_kill, replay, diagnose, via_bundle):
    """(e) `python3 train.py flex7` printed a few steps into train_flex7.log and then sleeps: its
    log was last written 15 minutes ago (os.utime; the lines' stamps say the same)."""
    wait_after(unrelated_oom_kill.at, 1)
    steps = [f"2026-11-30 04:59:{20 + i:02d},{100 + i:03d} INFO train: step {i}/300 loss {2.3 - i / 20:.4f}"
             for i in range(1, 6)]
    log = story / "train_flex7.log"
    child = silent_after_steps(replay, story, steps, log, speedup=50, silent=900, wait=20)
    assert child.poll() is None
    print(f"story: run pid {child.pid}; unrelated kill: {unrelated_oom_kill.dmesg}")

    live = diagnose(["flex7"], cwd=story)
    cause = top(live)
    assert cause["id"] == "run.stalled"
    assert cause["severity"] in ("error", "warning")
    assert live.code == (1 if cause["severity"] == "error" else 0)
    assert str(child.pid) in " ".join([cause["title"], cause["explanation"], *(e["text"] for e in cause["evidence"])])
    run = live.data["run"]
    assert run["state"] == "stalled"
    assert [p["alive"] for p in run["processes"] if p["pid"] == child.pid] == [True]
    assert expected_log(live, log)["exists"] is True
    assert_host_kills_not_blamed(live, unrelated=unrelated_oom_kill)

    bundle = via_bundle("flex7", cwd=story)
    assert_same_answer(live, bundle)
    assert_host_kills_not_blamed(bundle, unrelated=unrelated_oom_kill)


def test_silent_for_3_minutes_after_a_step_every_second(story, unrelated_oom_kill, replay, diagnose, via_bundle):
    """(e') The run printed a step a second, then went silent while alive: 3 minutes later it is
    stalled by its own cadence (issue 24: the fixed 10 minutes called it running), and the
    report says which threshold it used."""
    wait_after(unrelated_oom_kill.at, 1)
    steps = [f"2026-11-30 04:59:{20 + 2 * i:02d},{100 + i:03d} INFO train: step {i}/300 loss {2.3 - i / 20:.4f}"
             for i in range(1, 9)]
    log = story / "train_flex7.log"
    # speedup 1: the replayer sleeps 1 s between lines (its cap), so the stamps are ~1 s apart.
    silent_after_steps(replay, story, steps, log, speedup=1, silent=180, wait=60)

    live = diagnose(["flex7"], cwd=story)
    run = live.data["run"]
    assert run["state"] == "stalled", run
    assert "usual" in run["state_reason"] and "progress lines" in run["state_reason"], run["state_reason"]
    assert top(live)["id"] == "run.stalled"
    assert_host_kills_not_blamed(live, unrelated=unrelated_oom_kill)
    # Told otherwise, it is told otherwise: --stall-after 10m keeps the run "running".
    assert diagnose(["flex7", "--stall-after", "10m"], cwd=story).data["run"]["state"] == "running"

    bundle = via_bundle("flex7", cwd=story)
    assert_same_answer(live, bundle)


def test_finished_fine(story, seeds, unrelated_oom_kill, replay, diagnose, via_bundle):
    """(f) A run that printed its last steps, saved its checkpoint and "Training complete", exit 0
    (the head and tail of fixtures/healthy-cpu-train's real log, replayed by a real child)."""
    real = (seeds / "healthy-cpu-train" / "logs" / "train.log").read_text().splitlines()
    lines = [line.replace("/tmp/healthy-cpu-train", str(story)) for line in real[:4] + real[-22:]]
    assert lines[-1].endswith("Training complete in 45.8s")
    wait_after(unrelated_oom_kill.at, 3)
    (story / "ckpt_final.pt").write_bytes(b"\0" * 250433)
    log = story / "train_flex7.log"
    assert replay(story, lines, log, speedup=1, end="0").wait(timeout=30) == 0

    live = diagnose(["flex7"], cwd=story)
    assert live.code == 0
    assert live.data["run"]["state"] == "finished"
    severe = [(c["id"], c["severity"]) for c in live.data["causes"] if c["severity"] in SEVERE]
    assert severe == []
    assert_host_kills_not_blamed(live, unrelated=unrelated_oom_kill)

    bundle = via_bundle("flex7", cwd=story)
    assert bundle.code == 0 and bundle.data["run"]["state"] == "finished"
    assert [c["id"] for c in bundle.data["causes"][:1]] == [c["id"] for c in live.data["causes"][:1]]
    assert_host_kills_not_blamed(bundle, unrelated=unrelated_oom_kill)


def test_finished_run_beside_a_kill_in_the_same_second(story, seeds, oom_kill_now, replay, diagnose, via_bundle):
    """(f') The finished run of (f), and another user's python3 OOM-killed right after its last
    write (issue 24: name and time had tied it to the run, which was then "crashed")."""
    real = (seeds / "healthy-cpu-train" / "logs" / "train.log").read_text().splitlines()
    lines = [line.replace("/tmp/healthy-cpu-train", str(story)) for line in real[:4] + real[-22:]]
    (story / "ckpt_final.pt").write_bytes(b"\0" * 250433)
    log = story / "train_flex7.log"
    assert replay(story, lines, log, speedup=1, end="0").wait(timeout=30) == 0
    kill = oom_kill_now()
    after = kill.at - log.stat().st_mtime
    assert 0 <= after < 600, f"the kill came {after:.1f} s after the run's last write: not the story"

    live = diagnose(["flex7"], cwd=story)
    assert live.code == 0, [(c["id"], c["severity"]) for c in live.data["causes"]]
    assert live.data["run"]["state"] == "finished"
    assert [c["id"] for c in live.data["causes"] if c["severity"] in SEVERE] == []
    assert_host_kills_not_blamed(live, unrelated=kill)

    bundle = via_bundle("flex7", cwd=story)
    assert bundle.code == 0 and bundle.data["run"]["state"] == "finished"
    assert_host_kills_not_blamed(bundle, unrelated=kill)


def test_launch_that_bash_could_not_start_beside_a_kill_in_the_same_second(story, oom_kill_now, procs, diagnose,
                                                                          via_bundle):
    """(h) `torchrun ... > train_flex8.log 2>&1` from a shell whose PATH lacks the venv: bash writes
    its error and no program starts; another user's python3 is OOM-killed right after. The
    launch failure is the cause, never the kill."""
    log = story / "train_flex8.log"
    with log.open("wb") as out:
        shell = procs(["bash", "-c", "torchrun --nproc_per_node 2 train.py --run flex8"], stdout=out,
                      stderr=subprocess.STDOUT, cwd=story, env={"PATH": "/usr/bin:/bin", "HOME": str(story)})
        assert shell.wait(timeout=60) == 127
    assert "torchrun: command not found" in log.read_text()
    kill = oom_kill_now()
    assert 0 <= kill.at - log.stat().st_mtime < 600

    live = diagnose(["flex8"], cwd=story)
    assert live.code == 1
    assert live.data["run"]["state"] == "never-started", live.data["run"]
    assert top(live)["id"] == "launch.command-not-found"
    assert_host_kills_not_blamed(live, unrelated=kill)

    bundle = via_bundle("flex8", cwd=story)
    assert_same_answer(live, bundle)
    assert_host_kills_not_blamed(bundle, unrelated=kill)


def test_typo_in_the_run_id(story, seeds, unrelated_oom_kill, cli, tmp_path):
    """(g) `diagnose flx11` beside train_flex11.log: a usage error that names the run it meant."""
    copy_log(seeds / "seed-flex7-tmux-died" / "logs" / "train_flex6.log", story / "train_flex11.log", age=600)
    result = cli(["flx11", "--format", "json"], cwd=story)
    assert result.returncode == 2, result.stdout[:2000]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "did you mean flex11" in lines[0] and "train_flex11.log" in lines[0]

    out = tmp_path / "tmp" / "b.tar.gz"
    collected = cli(["collect", "flx11", "-o", str(out)], cwd=story)
    assert collected.returncode == 2
    assert "did you mean flex11" in collected.stderr
    assert not out.exists()
