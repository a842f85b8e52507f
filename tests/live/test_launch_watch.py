"""`diagnose launch` and `diagnose watch` on real processes: a missing script, a tmux server
SIGKILLed under a running run, an exec session killed as a whole, a silent sleeping run, a
crash after a few lines, a run that finishes. Each asserts what launch printed within its wait,
the launch record, and what watch printed; short waits keep the file well under a minute and a
half. Everything started is killed in teardown (launch_support.Launches.close)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tarfile
import textwrap
import time
from pathlib import Path

import jsonschema
import pytest

from diagnose.live import records
from tests.live.launch_support import PYTHON3, Launches, events, make_session
from tests.report_support import JSON_SCHEMA

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs the tmux program (apt-get install tmux)")

# A training script: a few steps, then what argv says (crash / wait for a file / finish).
TRAIN = textwrap.dedent('''\
    import os, sys, time
    for step in range(1, 4):
        print(f"step {step} loss {2.5 - step * 0.1:.2f}", flush=True)
        time.sleep(0.2)
    if sys.argv[1] == "crash":
        raise ValueError("bad batch shape (3, 224)")
    while sys.argv[1] == "until" and not os.path.exists(sys.argv[2]):
        time.sleep(0.1)
    print("training complete", flush=True)
    sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
''')


def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    return work


@needs_tmux
def test_missing_script_did_not_start(launches: Launches, tmp_path: Path) -> None:
    work = workdir(tmp_path)
    done = launches.run(["launch", "nope1", "--wait", "3s", "--", "bash", "nope.sh"], work)
    assert done.code == 1, done.err
    assert "nope1: did not start: bash exited with status 127" in done.out
    assert "| bash: nope.sh: No such file or directory" in done.out  # the run's own words
    assert "[launch.script-not-found]" in done.out
    rec = launches.record("nope1")
    assert rec["command"] == ["bash", "nope.sh"] and rec["via"] == "tmux" and rec["cwd"] == str(work)
    assert rec["exit"]["code"] == 127 and rec["exit"]["signal"] is None
    assert rec["log"] == str(work / "nope1.log") and rec["launcher"]["tmux_session"] == "nope1"
    assert rec["check"]["started"] is False
    path = launches.state / "diagnose" / "runs" / "nope1.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700

    watched = launches.run(["watch", "nope1", "--every", "0.3s", "--format", "json"], work)
    assert watched.code == 1, watched.err
    seen = events(watched.out)
    assert [e["event"] for e in seen[:2]] == ["started", "output"] and seen[-2]["event"] == "exit"
    assert seen[-2]["code"] == 127
    report = seen[-1]["report"]
    jsonschema.validate(report, JSON_SCHEMA)  # watch's diagnosis is the normal JSON report
    assert seen[-1]["event"] == "diagnosis" and seen[-1]["exit_code"] == 1
    assert report["causes"][0]["id"] == "launch.script-not-found"
    run = report["run"]  # the record's parts are facts, and the report says where they come from
    assert run["logs"][0]["source"] == "launch-record" and run["launcher"]["kind"] == "diagnose-launch"
    assert run["launcher"]["tmux_session"] == "nope1" and run["window"]["start_source"] == "launch record"
    assert any(p["pid"] == rec["pid"] and p["source"].startswith("launch record") for p in run["processes"])


@needs_tmux
def test_tmux_server_sigkilled_run_still_supervised(launches: Launches, tmp_path: Path) -> None:
    work = workdir(tmp_path)
    flag = work / "go"
    proc = launches.popen(["launch", "tk1", "--wait", "4s", "--", PYTHON3, "train.py", "until", str(flag), "5"], work)
    rec = launches.wait_record("tk1", lambda r: isinstance(r.get("pid"), int))
    server = launches.wait_record("tk1", lambda r: "tmux_server_pid" in r["launcher"])["launcher"]["tmux_server_pid"]
    os.kill(server, signal.SIGKILL)  # the server cannot even remove its socket
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"the tmux server (pid {server}) is gone; the run goes on under its supervisor" in out
    assert f"tk1: started: pid {rec['pid']} is running" in out
    assert launches.tmux("has-session", "-t", "tk1").returncode != 0  # the server (and the pane) are gone
    assert records.alive(rec["pid"], rec["pid_start_ticks"])
    flag.touch()
    rec = launches.wait_record("tk1", lambda r: r.get("exit") is not None)
    assert rec["exit"]["code"] == 5  # seen by the supervisor, not by tmux
    watched = launches.run(["watch", "tk1", "--every", "0.3s"], work)
    assert watched.code == 1, watched.err
    assert "tk1 exit: exit status 5" in watched.out
    data = json.loads(launches.run(["tk1", "--format", "json"], work).out)
    jsonschema.validate(data, JSON_SCHEMA)
    assert data["causes"][0]["id"] == "run.exited-with-error" and data["run"]["launcher"]["tmux_server"] == "stale_socket"
    assert "The run exited with status 5, and its log does not say why" in watched.out
    assert re.search(r"tmux\s+stale socket", watched.out)  # the report shows the dead server, and does not blame it


def test_exec_session_killed_as_a_whole(launches: Launches, tmp_path: Path) -> None:
    if launches.session is None or launches.session.freezer is None:
        pytest.skip("needs root and the cgroup v1 freezer (an exec session frozen and killed as a whole)")
    work = workdir(tmp_path)
    flag = work / "go"
    session = launches.session
    # The exec session: a shell that stays, a plain background child (the control), and the launch.
    shell = subprocess.Popen(["sleep", "60"], preexec_fn=session.join, start_new_session=True)
    control = subprocess.Popen(["setsid", PYTHON3, "-c", "import time; time.sleep(60)"], preexec_fn=session.join)
    done = launches.run(["launch", "ex1", "--via", "setsid", "--wait", "1s", "--", PYTHON3, "train.py", "until", str(flag)],
                        work)
    assert done.code == 0, done.err
    assert "ex1: started: pid" in done.out and "left freezer /" in done.out
    rec = launches.record("ex1")
    moved = {m["hierarchy"]: m for m in rec["supervisor"]["escaped"]}
    assert moved["freezer"]["from"] == "/" + session.freezer.name and moved["freezer"]["to"] == "/"
    assert rec["launch"]["cgroups"]["freezer"] == "/" + session.freezer.name  # where launch itself ran
    assert rec["sid"] == rec["pid"] == rec["pgid"] and rec["launcher"]["setsid_pid"] == rec["supervisor"]["sid"]

    killed = session.end()
    assert shell.pid in killed and control.pid not in session.pids()
    shell.wait(timeout=10)
    control.wait(timeout=10)  # the control, setsid but in the session's cgroup, died with it
    assert records.alive(rec["pid"], rec["pid_start_ticks"]), "the run died with the exec session"
    assert records.alive(rec["supervisor"]["pid"], rec["supervisor"]["start_ticks"])
    own = Path(f"/proc/{rec['pid']}/cgroup").read_text()
    assert f"freezer:/{session.freezer.name}" not in own
    flag.touch()
    watched = launches.run(["watch", "ex1", "--every", "0.3s"], work)
    assert watched.code == 0, watched.out + watched.err
    assert "ex1 exit: exit status 0" in watched.out and re.search(r"^ex1\s+finished", watched.out, re.M)
    assert launches.record("ex1")["exit"]["code"] == 0


def test_silent_sleeping_run(launches: Launches, tmp_path: Path) -> None:
    work = workdir(tmp_path)
    done = launches.run(["launch", "sl1", "--via", "setsid", "--wait", "3s", "--",
                         PYTHON3, "-c", "import time; time.sleep(60)"], work)
    assert done.code == 1, done.err
    rec = launches.record("sl1")
    assert re.search(rf"sl1: no output after 3\.\d s while pid {rec['pid']} sleeps \(S, \d+\.\d % CPU\)", done.out), done.out
    # The stack py-spy took, or the gap saying why there is none.
    assert "(idle)" in done.out or "no stack: " in done.out, done.out
    assert rec["interpreter"]["path"] == PYTHON3 and rec["exit"] is None
    watched = launches.run(["watch", "sl1", "--every", "0.3s", "--stall-after", "2s", "--format", "json"], work)
    assert watched.code == 1, watched.err
    kinds = [e["event"] for e in events(watched.out)]
    assert kinds[0] == "started" and "silent" in kinds and kinds[-2:] == ["stalled", "diagnosis"]
    assert events(watched.out)[-1]["report"]["causes"][0]["id"] == "run.stalled"
    os.kill(rec["supervisor"]["pid"], signal.SIGTERM)  # the supervisor passes it on to the run's process group
    rec = launches.wait_record("sl1", lambda r: r.get("exit") is not None)
    assert rec["exit"]["signal"] == signal.SIGTERM and rec["exit"]["how"] == "killed by SIGTERM"
    listed = launches.run(["runs", "--format", "json"], work)
    assert [(e["run"], e["status"]) for e in events(listed.out)] == [("sl1", "killed by SIGTERM")]


def test_crash_after_a_few_lines(launches: Launches, tmp_path: Path) -> None:
    work = workdir(tmp_path)
    done = launches.run(["launch", "cr1", "--via", "setsid", "--wait", "5s", "--", PYTHON3, "train.py", "crash"], work)
    assert done.code == 1, done.err
    assert "cr1: started, then failed: python3" in done.out and "exited with status 1" in done.out
    assert "| step 1 loss 2.40" in done.out
    assert "cause: Unrecognised exception: ValueError: bad batch shape (3, 224) [unrecognised.crash]" in done.out
    assert launches.record("cr1")["exit"]["code"] == 1
    watched = launches.run(["watch", "cr1", "--every", "0.3s"], work)
    assert watched.code == 1
    assert "cr1 exit: exit status 1" in watched.out
    assert "1. Unrecognised exception: ValueError: bad batch shape (3, 224)" in watched.out
    # The record goes into the bundle; the bundle gives the same answer elsewhere.
    bundle = tmp_path / "cr1.tar.gz"
    collected = launches.run(["collect", "cr1", "-o", str(bundle)], work)
    assert collected.code == 0, collected.err
    again = launches.run([str(bundle), "--format", "json"], tmp_path)
    data = json.loads(again.out)
    assert again.code == 1 and data["causes"][0]["id"] == "unrecognised.crash"
    assert data["run"]["launcher"]["kind"] == "diagnose-launch" and data["run"]["logs"][0]["source"] == "launch-record"
    with tarfile.open(bundle) as archive:
        manifest = json.load(archive.extractfile(next(m for m in archive if m.name.endswith("manifest.json"))))
    assert manifest["launch"]["run_id"] == "cr1" and manifest["launch"]["exit"]["code"] == 1
    assert any(e["source"] == "launch record" and e["code"] == 1 for e in manifest["exits"])


@needs_tmux
def test_run_that_finishes(launches: Launches, tmp_path: Path) -> None:
    work = workdir(tmp_path)
    flag = work / "go"
    done = launches.run(["launch", "ok1", "--wait", "1s", "--", PYTHON3, "train.py", "until", str(flag)], work)
    assert done.code == 0, done.err
    assert "ok1: started: pid" in done.out and "| step 1 loss 2.40" in done.out
    again = launches.run(["launch", "ok1", "--", "true"], work)  # its log exists, and it runs
    assert again.code == 2 and "the log exists" in again.err
    watcher = launches.popen(["watch", "ok1", "--every", "0.3s"], work)
    time.sleep(1.0)
    flag.touch()
    out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, out + err
    lines = [line.split(" ", 1)[1] for line in out.splitlines() if line[:2].isdigit()]
    assert lines[0].startswith("ok1 started: pid") and lines[1].startswith("ok1 output: output so far begins: step 1")
    assert lines[2] == "ok1 step: first step: step 1 loss 2.40" and lines[-1].startswith("ok1 exit: exit status 0")
    assert "No cause found at warning or above." in out
    rec = launches.record("ok1")
    assert rec["exit"]["code"] == 0 and rec["exit"]["how"] == "exit status 0"
    listed = launches.run(["runs"], work)
    assert listed.code == 0 and any(line.startswith("ok1 ") and "exited 0" in line for line in listed.out.splitlines())
    forced = launches.run(["launch", "ok1", "--force", "--wait", "2s", "--", "true"], work)  # ended: may go again
    assert forced.code == 0 and "ok1: started and finished: exit status 0" in forced.out, forced.out + forced.err
    assert (work / "ok1.log").read_bytes() == b""  # --force emptied it


def test_interpreter_missing(launches: Launches, tmp_path: Path) -> None:
    work = workdir(tmp_path)
    done = launches.run(["launch", "np1", "--via", "setsid", "--wait", "2s", "--", "python3.99", "train.py"], work)
    assert done.code == 1
    assert "np1: did not start: the interpreter is missing: python3.99: not found on PATH" in done.out
    rec = launches.record("np1")
    assert rec["pid"] is None and rec["exit"]["code"] is None and "never ran" in rec["exit"]["how"]
    assert rec["interpreter"] is None


def test_records_folder_must_be_ours(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    made = records.ensure_folder(folder)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    path = records.record_path("r1", folder)
    records.write(path, {"schema_version": records.SCHEMA_VERSION, "run_id": "r1"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and records.read(path) == {"schema_version": 1, "run_id": "r1"}
    os.chmod(folder, 0o777)
    with pytest.raises(records.RecordError, match="writable by others"):
        records.ensure_folder(folder)
    assert records.recent(folder) == []  # not read either
    with pytest.raises(records.RecordError):
        records.record_path("../x", folder)


def test_session_cgroups_come_and_go() -> None:
    session = make_session("probe")
    if session is None:
        pytest.skip("needs root and cgroups this test may make")
    try:
        child = subprocess.Popen(["sleep", "30"], preexec_fn=session.join)
        assert child.pid in session.pids()
        assert child.pid in session.end()
        child.wait(timeout=10)
    finally:
        session.remove()
    assert not any(folder.exists() for folder in session.dirs)


def test_root_cgroup_ties_no_kernel_event_to_the_run() -> None:
    """A run the supervisor moved to the root cgroup shares it with the whole host: an OOM kill in
    another cgroup is elsewhere, one in the root itself is not tied by cgroup either way."""
    from diagnose.engine.attribution import ELSEWHERE, OWN, attribute
    from diagnose.engine.kernel_events import KernelEvent
    from diagnose.engine.runview import RunView

    def oom(memcg: str) -> KernelEvent:
        return KernelEvent("oom_kill", 4242, "python3", None, "dmesg", 1, "Killed process 4242 (python3)", memcg, memcg)

    in_root = RunView(known=True, pids={1000: "launch record"}, cgroups=frozenset({"/"}), comms=frozenset({"python3"}))
    assert attribute(oom("/diagnose-test-1"), in_root).verdict == ELSEWHERE
    assert "memory cgroup" not in attribute(oom("/"), in_root).basis
    in_own = RunView(known=True, pids={1000: "launch record"}, cgroups=frozenset({"/job7"}), comms=frozenset({"python3"}))
    assert attribute(oom("/job7/step0"), in_own).verdict == OWN
    assert attribute(oom("/"), in_own).verdict == ELSEWHERE


def test_watch_a_run_not_launched_by_diagnose(launches: Launches, tmp_path: Path) -> None:
    """Found as `diagnose RUN_ID` finds it: its log named after the run, its command line."""
    work = workdir(tmp_path)
    flag = work / "nl1.go"
    with open(work / "nl1.log", "wb") as log:
        run = subprocess.Popen([PYTHON3, "train.py", "until", str(flag)], cwd=work, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        watcher = launches.popen(["watch", "nl1", "--every", "0.3s", "--format", "json"], work)
        time.sleep(1.5)
        flag.touch()
        out, err = watcher.communicate(timeout=60)
        assert watcher.returncode == 0, out + err
        seen = events(out)
        assert seen[0]["event"] == "started" and seen[0]["pid"] == run.pid
        assert [e["event"] for e in seen[1:]] == ["output", "step", "gone", "diagnosis"]
        assert seen[-1]["report"]["run"]["state"] == "finished"
    finally:
        run.kill()
        run.wait()


def test_bad_launches_are_usage_errors(launches: Launches, tmp_path: Path) -> None:
    work = workdir(tmp_path)
    for args, said in [
        (["launch", "a/b", "--", "true"], "not a run id"),
        (["launch", "ok", "--cwd", str(work / "nowhere"), "--", "true"], "not a folder"),
        (["launch", "ok", "--log", str(work / "no" / "x.log"), "--", "true"], "does not exist"),
        (["launch", "ok", "--wait", "soon", "--", "true"], "expected a duration"),
        (["launch", "ok"], "Missing argument"),
    ]:
        done = launches.run(args, work)
        assert done.code == 2 and said in done.err and "Traceback" not in done.err, (args, done.err)
    assert not list(work.glob("*.log"))  # nothing was started, no log made
    if not os.path.isdir("/run/systemd/system"):
        done = launches.run(["launch", "sd1", "--via", "systemd-run", "--", "true"], work)
        assert done.code == 2 and "systemd is not running on this machine" in done.err
        assert not (work / "sd1.log").exists()


@pytest.mark.skipif(not os.path.isdir("/run/systemd/system") or shutil.which("systemd-run") is None,
                    reason="needs a running systemd and systemd-run")
def test_systemd_run(launches: Launches, tmp_path: Path) -> None:
    work = workdir(tmp_path)
    done = launches.run(["launch", "sd2", "--via", "systemd-run", "--wait", "5s", "--", PYTHON3, "train.py", "x"], work)
    assert done.code == 0 and "sd2: started and finished: exit status 0" in done.out, done.out + done.err
    rec = launches.record("sd2")
    assert rec["launcher"]["unit"].startswith("diagnose-sd2-") and rec["exit"]["code"] == 0
