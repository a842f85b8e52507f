"""Several big logs' tails read at once, in worker processes, where that is sooner.

When a rule asks for the run's logs across ranks, the run-log analyzer reads every line of each
log's 4 MiB tail in pure Python (~0.5-1 s a log). That holds the GIL, so threads would not help;
for several big logs it is done in a pool of processes (forkserver: this process may hold
threads): a plain map, `read(log)` for each log, whose answers come back in order for the caller
to keep on each log's view. Anything going wrong here (no processes allowed, a pickling problem)
returns None and the caller reads them itself; the answers are the same, only sooner.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from diagnose.evidence.model import TextFile
from diagnose.evidence.textio import (
    is_streamed,
)

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
    """read(log) for each log, in a pool of worker processes: a plain map whose answers are
    returned, in order, for the caller to keep (each log's view carries the scan's line count, so
    no worker counts a head again); None where that could not be done in time."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(read, text) for text in logs]
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


def _job(read: Callable[[TextFile], Any], text: TextFile) -> Any:
    """In a worker: one reader's answer for one log (its view brought the scan's line count, so
    its tail is numbered without counting the head again)."""
    return read(text)
