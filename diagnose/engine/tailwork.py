"""The tails of several big logs read at once, in worker processes, where that is sooner.

After the scan, each log's last 4 MiB is read again in pure Python by the crash finder
(tracebacks.read_crashes) and, when a rule asks for the run's logs across ranks, by the run-log
analyzer (runlog.read_file). That work holds the GIL, so threads would not help; it can be done
for every big log at once in a pool of processes (forkserver: this process may hold threads),
each answer put in the reader's own cache, keyed by the file's size and mtime as the readers key
it. The readers then find what they would have computed themselves: the output is the same, only
sooner. Anything going wrong here (no processes allowed, a pickling problem) leaves the caches
as they were.

A pool costs ~0.5 s to start and import diagnose in on a 16-core machine, and the crash finder
reads a healthy tail in ~0.05 s (it skims the lines before the first crash), so the crash tails
are read here first, and only when reading them one by one turns out slower than a pool would be
(a tail with a crash early in it is read line by line after it) are the rest sent to processes.
The run-log analyzer reads every line, so its tails go to processes whenever there are several.

Where the logs are big enough for the scan to take a while, their crash tails are also read
beside the scan, in a child forked before the scan starts its threads (no import to pay; the
scan's cores hold no GIL the child needs): numbered from the start of each tail, and renumbered
once the scan has counted the lines ahead of it. A tail that changed meanwhile is left to its
readers.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from diagnose.evidence.model import Evidence, TextFile, TextKind
from diagnose.evidence.textio import (
    is_streamed,
    known_newlines,
    not_regular,
    read_tail_window,
    remember_newlines,
)

MIN_TAIL_WORK = 12 << 20  # bytes of tails in all below which one process reads them sooner
MIN_LOGS = 2
DEADLINE = 120.0  # seconds for all the tails; past it the workers are killed and the readers read here
POOL_COST = 1.0  # seconds a pool takes to start and import its readers, on a busy 16-core machine
BESIDE_MIN = 64 << 20  # bytes of plain logs in all from which their crash tails are read beside the scan
BESIDE_LOGS = 16  # the biggest this many logs (the child reads them one after another)


def workers() -> tuple[int, bool]:
    """How many worker processes, and whether that was asked for: DIAGNOSE_TAIL_PROCESSES=N
    (0 or 1: none; N: N, whatever the logs' sizes), else one per core."""
    asked = os.environ.get("DIAGNOSE_TAIL_PROCESSES", "").strip()
    if asked.isdigit():
        return int(asked), True
    from diagnose.engine.scan import usable_cores

    return usable_cores(), False


def worth_it(texts: Sequence[TextFile]) -> list[TextFile]:
    """The logs whose tails may be read in workers (none when it would not be faster)."""
    from diagnose.engine.tracebacks import TAIL_BYTES

    cpus, forced = workers()
    if len(texts) < MIN_LOGS or cpus < (2 if forced else 3):
        return []  # decided before any stat: the common small machine and the one-log scan
    logs = []
    for text in texts:
        if is_streamed(text.path):
            continue  # its tail costs a whole decompression: kept where it is (textio's own cache)
        try:
            size = os.stat(text.path).st_size
        except OSError:
            continue
        logs.append((text, min(size, TAIL_BYTES)))
    if len(logs) < MIN_LOGS or cpus < (2 if forced else 3):
        return []
    if not forced and sum(work for _t, work in logs) < MIN_TAIL_WORK:
        return []
    return [text for text, _work in logs]


def in_processes(read: Callable[[TextFile], Any], logs: Sequence[TextFile]) -> list[Any] | None:
    """read(log) for each log, in a pool of worker processes (the scan's newline counts go with
    each, so no worker counts a head again); None where that could not be done in time."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    jobs = []
    try:
        for text in logs:
            size = os.stat(text.path).st_size
            jobs.append((read, text, known_newlines(text.path, size), size))
    except OSError:  # gone since the scan: its readers will say so
        return None
    pool: ProcessPoolExecutor | None = None
    answers: list[Any] | None = None
    try:
        context = multiprocessing.get_context("forkserver")
        pool = ProcessPoolExecutor(max_workers=min(len(jobs), workers()[0]), mp_context=context)
        answers = list(pool.map(_job, *zip(*jobs, strict=True), timeout=DEADLINE))
    except Exception:  # no processes here (a sandbox), one died, or a hung read: the readers read as before
        return None
    finally:
        if pool is not None:
            if answers is None:  # past the deadline: a worker stuck on a hung file system is killed
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.kill()
            pool.shutdown(wait=True, cancel_futures=True)
    return answers


def _job(read: Callable[[TextFile], Any], text: TextFile, newlines: int | None, size: int) -> Any:
    """In a worker: one reader's answer for one log."""
    if newlines is not None:
        remember_newlines(text.path, size, newlines)  # counted by the scan already
    return read(text)


def _crashes_of(text: TextFile) -> Any:
    from diagnose.engine.tracebacks import read_crashes

    return read_crashes(text.path, text.rank)


def prefetch_tails(evidence: Evidence) -> int:
    """Read the big logs' crash tails into the crash finder's cache in a pool of processes when
    reading the first here shows the rest would take longer than the pool; the number read there."""
    logs = worth_it(evidence.texts_of(TextKind.LOG))
    if not logs:
        return 0
    from diagnose.engine.tracebacks import keep_crashes

    rest = list(logs)
    if not workers()[1]:  # not asked for: the first read here tells what the rest would cost
        started = time.monotonic()
        with contextlib.suppress(Exception):  # unreadable now: its readers say so when they ask
            _crashes_of(rest.pop(0))
        if len(rest) < MIN_LOGS or (time.monotonic() - started) * len(rest) <= POOL_COST:
            return 0  # the rest are read as cheaply where they are asked for
    answers = in_processes(_crashes_of, rest)
    if answers is None:
        return 0
    for text, crashes in zip(rest, answers, strict=True):
        keep_crashes(text.path, text.rank, crashes)
    return len(rest)


@dataclass
class BesideScan:
    """The child reading crash tails while the scan runs, and what it has written so far."""

    pid: int
    logs: list[TextFile]
    reader: threading.Thread
    chunks: list[bytes] = field(default_factory=list)


def read_beside_scan(evidence: Evidence) -> BesideScan | None:
    """Fork a child that reads the biggest plain logs' crash tails while the scan runs (None
    where that would not pay or is not safe: small logs, other threads alive, no fork)."""
    asked = os.environ.get("DIAGNOSE_TAIL_PROCESSES", "").strip()
    if asked.isdigit() or not sys.platform.startswith("linux") or threading.active_count() != 1:
        return None  # asked for a pool (or none), or a fork could inherit another thread's locks
    sized = []
    for text in evidence.texts_of(TextKind.LOG):
        if is_streamed(text.path) or not_regular(text.path) is not None:
            continue
        try:
            sized.append((os.stat(text.path).st_size, text))
        except OSError:
            continue
    if sum(size for size, _t in sized) < BESIDE_MIN:
        return None
    logs = [text for _size, text in sorted(sized, key=lambda pair: -pair[0])[:BESIDE_LOGS]]
    try:
        readable, writable = os.pipe()
        pid = os.fork()
    except OSError:
        return None
    if pid == 0:  # the child: write the answers, then leave at once (no atexit, no buffers flushed)
        code = 1
        try:
            os.close(readable)
            payload = pickle.dumps([_tail_beside(text) for text in logs], protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(payload)
            while view:
                view = view[os.write(writable, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(writable)
    chunks: list[bytes] = []

    def drain() -> None:  # the pipe holds 64 KiB: read as the child writes, or it would wait
        with os.fdopen(readable, "rb", buffering=0) as pipe:
            while block := pipe.read(1 << 20):
                chunks.append(block)

    reader = threading.Thread(target=drain, name="diagnose-tails", daemon=True)
    reader.start()
    return BesideScan(pid, logs, reader, chunks)


def _tail_beside(text: TextFile) -> tuple[Any, int | None, int, int] | None:
    """In the child: (crashes numbered from the tail's start, the tail's newlines, size, mtime_ns)."""
    from diagnose.engine.tracebacks import TAIL_BYTES, crashes_of_tail

    try:
        window = read_tail_window(text.path, TAIL_BYTES)
        if window is None:
            return None
        found = crashes_of_tail(window.data, window.first_line, text.rank, window.mtime)
    except Exception:  # unreadable: its readers say so when they ask
        return None
    return found, window.newlines, window.size, window.mtime_ns


def collect_beside_scan(beside: BesideScan | None, deadline: float = DEADLINE) -> int:
    """After the scan: the child's answers, renumbered by the scan's newline counts, into the
    crash finder's cache; the number kept. The child is reaped whatever happens."""
    if beside is None:
        return 0
    from diagnose.engine.tracebacks import keep_crashes, shifted

    ended = time.monotonic() + deadline
    status = None
    while status is None:
        try:
            done, code = os.waitpid(beside.pid, os.WNOHANG)
        except ChildProcessError:
            return 0
        if done:
            status = code
        elif time.monotonic() > ended:  # stuck on a hung file system: its readers read here
            os.kill(beside.pid, signal.SIGKILL)
            os.waitpid(beside.pid, 0)
            return 0
        else:
            time.sleep(0.002)
    beside.reader.join(5.0)
    if status != 0 or beside.reader.is_alive():
        return 0
    try:
        answers = pickle.loads(b"".join(beside.chunks))
    except Exception:
        return 0
    kept = 0
    for text, answer in zip(beside.logs, answers, strict=False):
        if answer is None:
            continue
        found, newlines, size, mtime_ns = answer
        try:
            now = os.stat(text.path)
        except OSError:
            continue
        if (now.st_size, now.st_mtime_ns) != (size, mtime_ns):
            continue  # written to since: read afresh when asked
        ahead = 0
        if newlines is not None:
            total = known_newlines(text.path, size)
            if total is None:
                continue  # the scan did not count it whole
            ahead = total - newlines
        keep_crashes(text.path, text.rank, shifted(found, ahead))
        kept += 1
    return kept
