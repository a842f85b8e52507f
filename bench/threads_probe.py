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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reallog
import speed_bench

KEPT = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(32 * 2**20)}


def best_of(cmd: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    """Best wall seconds and largest peak RSS (MB) of `runs` runs (speed_bench.run each)."""
    timings = [speed_bench.run((cmd, env, None))[:2] for _ in range(runs)]
    return min(seconds for seconds, _ in timings), max(rss for _, rss in timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="bench/out")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    work = Path(args.work).resolve()  # speed_bench.run starts each process in the temp folder
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
            seconds, rss = best_of(cmd, {**base, "DIAGNOSE_SCAN_THREADS": str(threads)}, args.runs)
            print(f"  threads {threads:<3}                      {seconds:7.3f} s  {rss:6.0f} MB")
        seconds, rss = best_of(cmd, {**base, "DIAGNOSE_SCAN_THREADS": str(cores), **KEPT}, args.runs)
        print(f"  threads {cores:<3} buffers kept         {seconds:7.3f} s  {rss:6.0f} MB")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
