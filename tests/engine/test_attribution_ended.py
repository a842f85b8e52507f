"""An OOM kill is never tied by name and time to a run whose every log ends in an exception its
own program raised: a SIGKILLed process prints no traceback. The logs here are what real Python
processes printed, run by the test (a main-thread exception, another thread's, and a process
that just stops)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from diagnose.engine.attribution import OWN, UNATTRIBUTED, attribute
from diagnose.engine.kernel_events import KernelEvent
from diagnose.engine.runview import _ends_in_exception, _read_log, run_view
from diagnose.evidence.model import Evidence, RunInfo, TextFile, TextKind

MAIN = "import time\nfor i in range(3):\n    print(f'step {i} loss 0.5', flush=True)\nraise ValueError('bad batch at step 3')\n"
THREAD = ("import threading\nprint('step 1 loss 0.5', flush=True)\n"
          "def upload():\n    raise ConnectionError('upload failed')\n"
          "t = threading.Thread(target=upload, name='uploader'); t.start(); t.join()\n")
STOPS = "for i in range(3):\n    print(f'step {i} loss 0.5', flush=True)\n"


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


def _kill_after(text: TextFile) -> tuple[str, str]:
    evidence = Evidence(run=RunInfo(id="r", mode="live"), texts=(text,))
    view = run_view(evidence)
    assert view.last_write is not None
    event = KernelEvent("oom_kill", 4242, "python3", view.last_write + 1.0, "dmesg", 1, "Killed process 4242 (python3)")
    verdict = attribute(event, view)
    return verdict.verdict, verdict.basis


def test_a_kill_after_the_run_raised_is_not_tied_to_it_by_name_and_time(tmp_path: Path) -> None:
    verdict, basis = _kill_after(_log(tmp_path, "main", MAIN))
    assert verdict == UNATTRIBUTED and "end in its own exceptions" in basis
    verdict, basis = _kill_after(_log(tmp_path, "stops", STOPS))  # a log that just stops: the kill may be how
    assert verdict == OWN and "after the run's log last moved" in basis
