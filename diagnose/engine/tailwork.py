"""The tails of several big logs read at once, in worker processes.

After the scan, each log's last 4 MiB is read again, line by line in pure Python, by the crash
finder (tracebacks.read_crashes) and the run-log analyzer (runlog.read_file): about a second a
log, one log after another, which is most of a diagnosis of 8 rank logs on a 16-core machine.
That work holds the GIL, so threads would not help; here it is done for every big log at once in
a pool of processes (forkserver: this process may hold threads), and each answer is put in the
reader's own cache, keyed by the file's size and mtime as the readers key it. The readers then
find what they would have computed themselves: the output is the same, only sooner. Anything
going wrong here (no processes allowed, a pickling problem) leaves the caches as they were.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from diagnose.evidence.model import Evidence, TextFile, TextKind
from diagnose.evidence.textio import is_compressed, known_newlines, remember_newlines

MIN_TAIL_WORK = 12 << 20  # bytes of tails in all below which one process reads them sooner
MIN_LOGS = 2
DEADLINE = 120.0  # seconds for all the tails; past it the workers are killed and the readers read here


def workers() -> tuple[int, bool]:
    """How many worker processes, and whether that was asked for: DIAGNOSE_TAIL_PROCESSES=N
    (0 or 1: none; N: N, whatever the logs' sizes), else one per core."""
    asked = os.environ.get("DIAGNOSE_TAIL_PROCESSES", "").strip()
    if asked.isdigit():
        return int(asked), True
    from diagnose.engine.scan import usable_cores

    return usable_cores(), False


def worth_it(texts: Sequence[TextFile]) -> list[TextFile]:
    """The logs to read in workers (none when it would not be faster)."""
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


def _read(text: TextFile, newlines: int | None, size: int) -> tuple[Any, Any]:
    """In a worker: what the two readers would find in this log's tail."""
    from diagnose.engine.analyzers.runlog import read_file
    from diagnose.engine.tracebacks import read_crashes

    if newlines is not None:
        remember_newlines(text.path, size, newlines)  # counted by the scan already
    return read_crashes(text.path, text.rank), read_file(text)


def prefetch_tails(evidence: Evidence) -> int:
    """Read the big logs' tails in parallel into the readers' caches; the number of logs read."""
    logs = worth_it(evidence.texts_of(TextKind.LOG))
    if not logs:
        return 0
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from diagnose.engine.analyzers.runlog import keep_file
    from diagnose.engine.tracebacks import keep_crashes

    jobs = []
    try:
        for text in logs:
            size = os.stat(text.path).st_size
            jobs.append((text, known_newlines(text.path, size), size))
    except OSError:  # gone since the scan: its readers will say so
        return 0
    pool: ProcessPoolExecutor | None = None
    answers: list[tuple[Any, Any]] | None = None
    try:
        context = multiprocessing.get_context("forkserver")
        pool = ProcessPoolExecutor(max_workers=min(len(jobs), workers()[0]), mp_context=context)
        answers = list(pool.map(_read, *zip(*jobs, strict=True), timeout=DEADLINE))
    except Exception:  # no processes here (a sandbox), one died, or a hung read: the readers read as before
        return 0
    finally:
        if pool is not None:
            if answers is None:  # past the deadline: a worker stuck on a hung file system is killed
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.kill()
            pool.shutdown(wait=True, cancel_futures=True)
    for text, (crashes, part) in zip(logs, answers, strict=True):
        keep_crashes(text.path, text.rank, crashes)
        keep_file(text, part)
    return len(logs)
