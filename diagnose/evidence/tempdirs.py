"""Private scratch folders that are removed on every way out of the program.

atexit alone does not run when the process is killed by SIGTERM (or SIGHUP: the terminal
closed), so the first folder made here also turns those signals into SystemExit, but only
where nobody else has installed a handler. Only the exact folders made here are ever removed.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

# (pid, folder): a forked child inherits the list but must not remove its parent's folders.
_MADE: list[tuple[int, Path]] = []
_LOCK = threading.Lock()
_AT_EXIT = False
_ON_SIGNALS = False
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def private_tempdir(prefix: str) -> Path:
    """A new 0700 folder under $TMPDIR, registered for removal before anything goes into it."""
    _install()
    # Block the signals between making the folder and registering it, so that a SIGTERM
    # arriving in between cannot leave it behind (the handler runs once they are unblocked).
    blocked = _block()
    try:
        folder = Path(tempfile.mkdtemp(prefix=prefix))  # mode 0700, a name nobody else has
        with _LOCK:
            _MADE.append((os.getpid(), folder))
    finally:
        _unblock(blocked)
    return folder


def remove(folder: Path) -> None:
    """Remove one folder made by private_tempdir (now, not at exit)."""
    with _LOCK:
        mine = [entry for entry in _MADE if entry[1] == folder and entry[0] == os.getpid()]
        for entry in mine:
            _MADE.remove(entry)
    if mine:
        shutil.rmtree(folder, ignore_errors=True)


def remove_all() -> None:
    """Remove every folder this process made (atexit hook; tests may call it)."""
    with _LOCK:
        mine = [folder for pid, folder in _MADE if pid == os.getpid()]
        _MADE[:] = [entry for entry in _MADE if entry[0] != os.getpid()]
    for folder in mine:
        shutil.rmtree(folder, ignore_errors=True)


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    # Raised in the main thread: `finally` blocks and atexit hooks then run as on any exit.
    for number in _SIGNALS:
        signal.signal(number, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
    sys.stderr.write(f"diagnose: terminated by {signal.Signals(signum).name}\n")
    raise SystemExit(128 + signum)


def _install() -> None:
    global _AT_EXIT, _ON_SIGNALS
    with _LOCK:
        first, _AT_EXIT = not _AT_EXIT, True
    if first:
        atexit.register(remove_all)
    # signal.signal works only in the main thread: a folder made in a worker thread relies on
    # atexit (normal exits) until one is made in the main thread.
    if _ON_SIGNALS or threading.current_thread() is not threading.main_thread():
        return
    _ON_SIGNALS = True
    for number in _SIGNALS:
        if signal.getsignal(number) is signal.SIG_DFL:  # never replace someone else's handler (or SIG_IGN of nohup)
            signal.signal(number, _exit_on_signal)


def _block() -> set[int | signal.Signals] | None:
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)


def _unblock(previous: set[int | signal.Signals] | None) -> None:
    if previous is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
