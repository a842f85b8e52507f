"""A plain map in forked worker processes, for work that holds the GIL.

The scan's parts are matched by hyperscan off the GIL, but every true hit is then confirmed,
numbered and decoded in Python under it, so past a few threads the parts queue for the GIL
(bench/threads_probe.py). Forked workers share nothing but what they inherit: each one runs
`work(n, *extra)` for the numbers handed to it and sends the answer back pickled. The work and
everything it reads (compiled patterns, the files' plans) are inherited from this process at
the fork, never pickled, so only numbers go out and answers come back.

Fork is used only where it is safe: on Linux, from the main thread of a process with no other
thread alive but the terminal's progress spinner's (a thread holding a lock at the fork would leave
it held in the child). Anywhere else `available` says no, and where the pool cannot start (a
sandbox without processes) the caller is told so: it then uses its threads.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_work: Callable[..., Any] | None = None  # set in this process before the fork; the workers inherit it
_PROCESSES_ENV = "DIAGNOSE_SCAN_PROCESSES"


def wanted(cores: int) -> bool:
    """Whether the scan should use processes here: DIAGNOSE_SCAN_PROCESSES=0/1 decides, else
    from MIN_CORES usable cores up, where fork is safe."""
    asked = os.environ.get(_PROCESSES_ENV, "").strip()
    if asked in ("0", "1"):
        return asked == "1" and available()
    return cores >= MIN_CORES and available()


# From how many cores the scan forks: below it the GIL is not what limits it (two threads on two
# cores already keep both busy with hyperscan) and a fork's start-up is not repaid.
MIN_CORES = 2


# Threads that may be alive at a fork: the terminal's progress spinner (report/_progress.py) and
# rich's refresh thread that draws it only write to stderr, which no worker touches, so no lock
# they may hold is one a worker needs.
FORK_SAFE_THREADS = frozenset({"progress"})
_FORK_SAFE_KINDS = frozenset({("rich.live", "_RefreshThread")})


def available() -> bool:
    """Fork is possible and safe: Linux, and no other thread alive but FORK_SAFE_THREADS."""
    if not (sys.platform.startswith("linux") and hasattr(os, "fork")):
        return False
    main = threading.main_thread()
    return threading.current_thread() is main and all(
        thread is main or thread.name in FORK_SAFE_THREADS or (type(thread).__module__, type(thread).__name__)
        in _FORK_SAFE_KINDS for thread in threading.enumerate())


def fork_map(work: Callable[..., Any], jobs: Iterable[tuple[Any, ...]], processes: int,
             ahead: int) -> Iterator[Any]:
    """work(*job) for each job, in `processes` forked workers, answers in the jobs' order; at
    most `ahead` jobs handed out and not yet answered (bounds what waits in memory). The jobs
    are read lazily, so a job may be built from the answers before it (a stop list)."""
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor

    global _work
    _work = work
    pool = ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("fork"))
    queue: deque[Future[Any]] = deque()
    try:
        upcoming = iter(jobs)
        for job in upcoming:
            queue.append(pool.submit(_call, *job))
            if len(queue) >= ahead:
                break
        while queue:
            answer = queue.popleft().result()
            following = next(upcoming, None)
            if following is not None:
                queue.append(pool.submit(_call, *following))
            yield answer
    finally:
        for future in queue:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        _work = None


def _call(*job: Any) -> Any:
    """In a worker: the inherited work, on one job."""
    assert _work is not None, "fork_map's work is set before the fork"
    return _work(*job)
