"""An OOM kill is never tied by name and time to a run whose every log ends in an exception its
own program raised: a SIGKILLed process prints no traceback; nor is any kill or fault tied so to
a run that said how it ended: the trainer's words for done, exit status 0, the shell's error for
a launch that never started the program (issue 24). A pid or a cgroup still ties. The logs here
are what real processes printed, run by the test (a main-thread exception, another thread's, a
process that just stops, one that caught an error and finished, bash failing to start one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from diagnose.engine.attribution import OWN, UNATTRIBUTED, attribute
from diagnose.engine.kernel_events import KernelEvent
from diagnose.engine.runview import LogEnd, _ends_in_exception, _read_log, run_view
from diagnose.engine.state import FINISHED, NEVER_STARTED, RUNNING, STALLED, STOPPED, derive_state
from diagnose.evidence.facts import RunIdentity, RunProcess
from diagnose.evidence.model import Evidence, ExitRecord, RunInfo, TextFile, TextKind

MAIN = "import time\nfor i in range(3):\n    print(f'step {i} loss 0.5', flush=True)\nraise ValueError('bad batch at step 3')\n"
THREAD = ("import threading\nprint('step 1 loss 0.5', flush=True)\n"
          "def upload():\n    raise ConnectionError('upload failed')\n"
          "t = threading.Thread(target=upload, name='uploader'); t.start(); t.join()\n")
STOPS = "for i in range(3):\n    print(f'step {i} loss 0.5', flush=True)\n"
# Catches its error, logs it, and finishes with exit 0.
FINISHES = ("import logging, sys\nlogging.basicConfig(level=logging.INFO)\n"
            "for i in range(3):\n    print(f'step {i} loss 0.5', flush=True)\n"
            "try:\n    raise RuntimeError('eval batch failed')\n"
            "except RuntimeError:\n    logging.exception('eval failed, skipped')\n"
            "print('Training completed.', flush=True)\n")


def _log(tmp_path: Path, name: str, program: str) -> TextFile:
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    path = tmp_path / f"{name}.log"
    path.write_text(done.stdout + done.stderr)
    return TextFile(path=path, kind=TextKind.LOG, display=path.name, mtime=path.stat().st_mtime)


def _ends(text: TextFile) -> bool:
    return _ends_in_exception(text, _read_log(text)[4])


def test_which_logs_end_in_their_programs_own_exception(tmp_path: Path) -> None:
    assert _ends(_log(tmp_path, "main", MAIN))
    assert not _ends(_log(tmp_path, "thread", THREAD))  # another thread's exception ends no process
    assert not _ends(_log(tmp_path, "stops", STOPS))


def _merged(tmp_path: Path, name: str, program: str) -> TextFile:
    """A real Python process's stdout and stderr in one log, in the order it wrote them."""
    path = tmp_path / f"{name}.log"
    with path.open("wb") as out:
        subprocess.run([sys.executable, "-c", program], stdout=out, stderr=subprocess.STDOUT, timeout=60)
    return TextFile(path=path, kind=TextKind.LOG, display=path.name, mtime=path.stat().st_mtime)


def _shell(tmp_path: Path, name: str, command: str) -> TextFile:
    """What bash itself writes to a launch's log when it cannot start the program."""
    path = tmp_path / f"{name}.log"
    with path.open("wb") as out:
        subprocess.run(["bash", "-c", command], stdout=out, stderr=subprocess.STDOUT, timeout=60, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    return TextFile(path=path, kind=TextKind.LOG, display=path.name, mtime=path.stat().st_mtime)


def _kill_after(text: TextFile, exits: tuple[ExitRecord, ...] = (), kind: str = "oom_kill",
                pid: int = 4242) -> tuple[str, str]:
    evidence = Evidence(run=RunInfo(id="r", mode="live"), texts=(text,), exits=exits)
    view = run_view(evidence)
    assert view.last_write is not None
    # The same second as the log's last write: the closest a neighbour's kill can come.
    event = KernelEvent(kind, pid, "python3", view.last_write + 0.5, "dmesg", 1, f"Killed process {pid} (python3)")
    verdict = attribute(event, view)
    return verdict.verdict, verdict.basis


def test_a_kill_after_the_run_raised_is_not_tied_to_it_by_name_and_time(tmp_path: Path) -> None:
    verdict, basis = _kill_after(_log(tmp_path, "main", MAIN))
    assert verdict == UNATTRIBUTED and "end in its own exceptions" in basis
    verdict, basis = _kill_after(_log(tmp_path, "stops", STOPS))  # a log that just stops: the kill may be how
    assert verdict == OWN and "after the run's log last moved" in basis


def test_a_kill_beside_a_run_that_said_it_finished_is_not_its_own(tmp_path: Path) -> None:
    finished = _merged(tmp_path, "finished", FINISHES)
    assert "Training completed." in finished.path.read_text() and "RuntimeError" in finished.path.read_text()
    verdict, basis = _kill_after(finished)
    assert verdict == UNATTRIBUTED and "words for done" in basis
    # A GPU fault or segfault of a python3 beside it is no more its own.
    assert _kill_after(finished, kind="xid")[0] == UNATTRIBUTED
    # Exit status 0 in the run's exit records says the same, whatever the log's last words.
    stops = _log(tmp_path, "stops", STOPS)
    verdict, basis = _kill_after(stops, exits=(ExitRecord("tmux pane", code=0),))
    assert verdict == UNATTRIBUTED and "status 0" in basis
    # What ties a process to the run still does: its pid (an exit record names it).
    verdict, _basis = _kill_after(finished, exits=(ExitRecord("launch record", code=0, pid=4242),))
    assert verdict == OWN


def test_the_state_of_a_finished_run_beside_a_kill_is_finished(tmp_path: Path) -> None:
    finished = _merged(tmp_path, "finished", FINISHES)
    evidence = Evidence(run=RunInfo(id="r", mode="live"), texts=(finished,))
    view = run_view(evidence)
    assert view.ended_by_itself is LogEnd.FINISHED
    assert view.last_write is not None
    event = KernelEvent("oom_kill", 4242, "python3", view.last_write + 0.5, "dmesg", 1, "Killed process 4242 (python3)")
    assert derive_state(evidence, view, [event]).state == FINISHED
    stops = _log(tmp_path, "stops", STOPS)  # no words for done: the kill may be how it ended
    stopped = run_view(Evidence(run=RunInfo(id="r", mode="live"), texts=(stops,)))
    assert stopped.ended_by_itself is LogEnd.NOT_SAID
    assert derive_state(Evidence(run=RunInfo(id="r", mode="live"), texts=(stops,)), stopped, []).state == STOPPED


def test_a_launch_that_bash_could_not_start_was_not_oom_killed(tmp_path: Path) -> None:
    launches = {
        "not-on-path": "torchrun --nproc_per_node 2 train.py",  # bash: line 1: torchrun: command not found
        "no-folder": "cd /nonexistent-run-dir && python3 train.py",  # bash: cd: ...: No such file or directory
        "no-script": "python3 /nonexistent-run-dir/train.py",  # python3: can't open file ...
        "no-venv": "source /nonexistent-run-dir/venv/bin/activate && python train.py",
    }
    for name, command in launches.items():
        log = _shell(tmp_path, name, command)
        text = log.path.read_text()
        assert text.strip(), name
        evidence = Evidence(run=RunInfo(id="r", mode="live"), texts=(log,))
        view = run_view(evidence)
        assert view.ended_by_itself is LogEnd.LAUNCH_FAILED, (name, text)
        verdict, basis = _kill_after(log)
        assert verdict == UNATTRIBUTED and "launch failed" in basis, (name, basis)
        assert derive_state(evidence, view, []).state == NEVER_STARTED, name


def test_a_shell_error_after_a_run_that_trained_is_no_launch_failure(tmp_path: Path) -> None:
    # The run trained, then the script's next command failed: the run did start (its state is
    # not never-started), and the script went on after it, so no kill ended it.
    trained = _log(tmp_path, "trained", STOPS)
    log = tmp_path / "script.log"
    with log.open("wb") as out:
        out.write(trained.path.read_bytes())
        out.flush()
        subprocess.run(["bash", "-c", "cp /nonexistent-run-dir/model.bin /tmp/"], stdout=out, stderr=subprocess.STDOUT,
                       timeout=60)
    text = TextFile(path=log, kind=TextKind.LOG, display=log.name, mtime=os.stat(log).st_mtime)
    view = run_view(Evidence(run=RunInfo(id="r", mode="live"), texts=(text,)))
    assert view.ended_by_itself is LogEnd.SHELL_ERROR, log.read_text()
    assert _kill_after(text)[0] == UNATTRIBUTED


def test_a_silent_run_of_many_idle_processes_is_stalled_and_one_busy_process_keeps_it_running(tmp_path: Path) -> None:
    """The CPU test is per process: a launcher and ranks that each wake now and then (a clock tick or
    two in the collector's 0.5 s sample: 2-4 %) add up past 5 % without any of them computing; CI
    caught the summed reading calling a two-rank hang 'running'."""
    log = _log(tmp_path, "ranks", "print('step 4 loss 0.07', flush=True)")
    old = log.path.stat().st_mtime - 120
    os.utime(log.path, (old, old))
    text = TextFile(path=log.path, kind=TextKind.LOG, display=log.display, mtime=old)

    def state(*cpu: float) -> str:
        procs = tuple(RunProcess(100 + i, 1, "python3", "train.py", True, "works in the run's directory", cpu_pct=c,
                                 rank=i) for i, c in enumerate(cpu))
        identity = RunIdentity(id="r", collected_at=old + 120, processes=procs)
        evidence = Evidence(run=RunInfo(id="r", mode="live"), texts=(text,), identity=identity)
        return derive_state(evidence, run_view(evidence, stall_after=60.0), []).state

    assert state(2.0, 4.0, 2.0, 4.0) == STALLED  # 12 % summed: idle wake-ups of four processes
    assert state(0.0, 96.0, 0.0) == RUNNING  # one of them computes
