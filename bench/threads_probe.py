"""Where a many-core scan stops gaining (issue 23).

    python bench/threads_probe.py [--work bench/out] [--runs 2]

`diagnose scan` of the real and plain 1 GiB logs of bench/reallog.py (made if missing) with 1, 2,
4, 8 and all usable threads (DIAGNOSE_SCAN_THREADS), and with all threads again where glibc keeps
freed buffers (MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ at 32 MiB: what engine/heap.py sets
up to 4 threads). Whole processes, warm page cache, best of --runs, peak RSS of each (wait4).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reallog

KEPT = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(32 * 2**20)}


def timed(cmd: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    best, peak = float("inf"), 0.0
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _pid, _status, usage = os.wait4(proc.pid, 0)
        best = min(best, time.perf_counter() - started)
        peak = max(peak, usage.ru_maxrss / 1024)
    return best, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="bench/out")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    cores = len(os.sched_getaffinity(0))
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for kind in ("real", "plain"):
        log = reallog.log_path(work, kind, 1024)
        if not log.exists():
            reallog.generate(log, kind, 1024 * 2**20)
        cmd = [sys.executable, "-m", "diagnose", "scan", str(log), "--format", "json", "--fail-on", "never"]
        subprocess.run(cmd, env=base, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)  # warm
        print(f"[{kind} 1 GiB, {cores} usable cores]  best of {args.runs}")
        for threads in sorted({1, 2, 4, 8, cores}):
            seconds, rss = timed(cmd, {**base, "DIAGNOSE_SCAN_THREADS": str(threads)}, args.runs)
            print(f"  threads {threads:<3}                      {seconds:7.3f} s  {rss:6.0f} MB")
        seconds, rss = timed(cmd, {**base, "DIAGNOSE_SCAN_THREADS": str(cores), **KEPT}, args.runs)
        print(f"  threads {cores:<3} buffers kept         {seconds:7.3f} s  {rss:6.0f} MB")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
