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
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from diagnose.evidence.model import Evidence, TextFile, TextKind
from diagnose.evidence.textio import is_compressed, known_newlines, remember_newlines

MIN_TAIL_WORK = 12 << 20  # bytes of tails in all below which one process reads them sooner
MIN_LOGS = 2
DEADLINE = 120.0  # seconds for all the tails; past it the workers are killed and the readers read here
POOL_COST = 1.0  # seconds a pool takes to start and import its readers, on a busy 16-core machine


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
        if is_compressed(text.path):
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
    """Read the big logs' crash tails into the crash finder's cache: here, one after another,
    until the rest look slower that way than in a pool of processes; the number read in processes."""
    logs = worth_it(evidence.texts_of(TextKind.LOG))
    if not logs:
        return 0
    from diagnose.engine.tracebacks import keep_crashes

    _cpus, forced = workers()
    started = time.monotonic()
    rest = list(logs)
    while rest and not forced:
        if len(rest) >= MIN_LOGS and len(logs) > len(rest):
            spent = time.monotonic() - started
            if spent / (len(logs) - len(rest)) * len(rest) <= POOL_COST:
                return 0  # the rest are read as cheaply where they are asked for
            break
        text = rest.pop(0)
        try:
            _crashes_of(text)
        except Exception:  # unreadable now: its readers say so when they ask
            continue
    if len(rest) < MIN_LOGS:
        return 0
    answers = in_processes(_crashes_of, rest)
    if answers is None:
        return 0
    for text, crashes in zip(rest, answers, strict=True):
        keep_crashes(text.path, text.rank, crashes)
    return len(rest)
