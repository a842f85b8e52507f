#!/usr/bin/env python3
"""Where the time of `diagnose scan` goes on this machine (issue 18), piece by piece, in process.

    python bench/scan_probe.py LOG [--src DIR] [--threads N]

Prints, for the log (warm page cache): reading it in 16 MiB pieces; counting its newlines with
bytes.count (what the scanner did) and with numpy; looking for escapes; the hyperscan database
of the built-in pack (its platform features) scanning the pieces on 1 thread and on N threads
(a scratch each); the scanner end to end; and a whole `diagnose scan` process split into rule
loading, scan and what follows it (ranking: crash finder, run view), plus Python's start-up.
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import redirect_stdout, suppress
from pathlib import Path
from typing import Any

PIECE = 16 * 2**20


def timed(label: str, size: int, fn: Callable[[], Any], repeat: int = 3) -> Any:
    best = float("inf")
    result = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    print(f"  {label:<58} {best:7.3f} s  {size / best / 1e9:6.2f} GB/s")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path)
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    log: Path = args.log
    size = log.stat().st_size
    print(f"== scan probe: {log} ({size / 2**30:.2f} GiB), {args.threads} threads, diagnose from {args.src} ==")

    pieces: list[bytes] = []
    with open(log, "rb", buffering=0) as handle:
        while block := handle.read(PIECE):
            pieces.append(block)

    def read() -> None:
        buf = bytearray(PIECE)
        with open(log, "rb", buffering=0) as handle, memoryview(buf) as view:
            while handle.readinto(view):
                pass

    timed("read, 16 MiB readinto", size, read)
    timed("newlines: bytes.count (1 thread, holds the GIL)", size, lambda: sum(p.count(b"\n") for p in pieces))
    try:
        import numpy as np

        def np_count() -> int:
            scratch = np.empty(2**20, np.bool_)
            total = 0
            for p in pieces:
                a = np.frombuffer(p, np.uint8)
                for i in range(0, len(a), len(scratch)):
                    part = a[i : i + len(scratch)]
                    np.equal(part, 10, out=scratch[: len(part)])
                    total += int(np.count_nonzero(scratch[: len(part)]))
            return total

        timed("newlines: numpy equal + count_nonzero (1 thread)", size, np_count)
    except ImportError:
        print("  numpy not importable")
    timed("escapes: bytes.find(b'\\x1b')", size, lambda: [p.find(b"\x1b") for p in pieces])

    from diagnose.engine import finders, scan
    from diagnose.engine.evaluate import pattern_sets
    from diagnose.evidence.model import TextFile, TextKind
    from diagnose.rules.load import load_rules

    patterns = pattern_sets(load_rules().rules)[TextKind.LOG]
    name, finder = finders.make_finder(patterns)
    print(f"  built-in pack: {len(patterns)} log patterns, finder {name}")
    if isinstance(finder, finders.HyperscanFinder) and finder.db is not None:
        import hyperscan as hs

        print(f"  hyperscan {hs.__version__}: database {finder.db.info().decode()}")
        count = [0]

        def on_match(*_args: Any) -> None:
            count[0] += 1

        def hs_one() -> None:
            scratch = hs.Scratch(finder.db)
            for p in pieces:
                finder.db.scan(p, match_event_handler=on_match, scratch=scratch)

        timed("hyperscan scan, 1 thread", size, hs_one)

        def hs_many() -> None:
            shares = [pieces[i :: args.threads] for i in range(args.threads)]

            def work(share: list[bytes]) -> None:
                scratch = hs.Scratch(finder.db)
                for p in share:
                    finder.db.scan(p, match_event_handler=on_match, scratch=scratch)

            threads = [threading.Thread(target=work, args=(share,)) for share in shares]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        timed(f"hyperscan scan, {args.threads} threads (a scratch each)", size, hs_many)
    source = TextFile(TextKind.LOG, log, str(log), mtime=log.stat().st_mtime)
    scanner = scan.Scanner(TextKind.LOG, patterns)
    timed("Scanner.scan end to end, 1 thread (in process)", size, lambda: scanner.scan(source, workers=1), repeat=2)
    if hasattr(scan, "scan_files"):
        workers = scan.default_workers()
        timed(f"scan_files end to end, {workers} threads (in process)", size,
              lambda: scan.scan_files([(source, scanner)], workers), repeat=2)
    pieces.clear()
    phases(log, args.src)
    startup(args.src)
    return 0


def phases(log: Path, src: Path) -> None:
    """A whole `diagnose scan LOG --format json` in this process, split by phase."""
    import diagnose.engine.evaluate as evaluate
    import diagnose.engine.rank as rank
    import diagnose.engine.runview as runview
    import diagnose.engine.state as state
    from diagnose.cli import main as cli_main

    spent: dict[str, float] = {}

    def wrap(module: Any, name: str) -> None:
        original = getattr(module, name)

        @functools.wraps(original)
        def wrapper(*a: Any, **k: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - started

        setattr(module, name, wrapper)

    for module, name in ((evaluate, "scan_texts"), (evaluate, "evaluate_scanned"), (rank, "rank_all"),
                         (state, "find_crashes"), (runview, "_read_log"), (state, "derive_state"),
                         (rank, "run_view")):
        if hasattr(module, name):
            wrap(module, name)
    total = 0.0
    import diagnose.engine.tracebacks as tracebacks
    import diagnose.evidence.textio as textio

    for _attempt in range(2):  # the first run warms the disk caches (rule set, hyperscan database)
        spent.clear()
        for memo in (getattr(tracebacks, "_CACHE", {}), getattr(textio, "_NEWLINES", {}), getattr(textio, "_TAILS", {})):
            memo.clear()  # in-process memos of the first run would hide the second's work
        sys.argv = ["diagnose", "scan", str(log), "--format", "json", "--fail-on", "never"]
        started = time.perf_counter()
        with redirect_stdout(io.StringIO()), suppress(SystemExit):
            cli_main()
        total = time.perf_counter() - started
    print(f"  whole `diagnose scan` in process: {total:.3f} s; by phase: "
          + ", ".join(f"{k} {v:.3f}" for k, v in spent.items()))


def startup(src: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])))
    for label, code in (("python -c pass", "pass"), ("import diagnose.cli", "import diagnose.cli"),
                        ("import hyperscan", "import hyperscan"), ("import numpy", "import numpy"),
                        ("import regex", "import regex")):
        best = float("inf")
        failed = False
        for _ in range(5):
            started = time.perf_counter()
            failed |= subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=False,
                                     cwd=tempfile.gettempdir()).returncode != 0
            best = min(best, time.perf_counter() - started)
        print(f"  start-up: {label:<40} {best:7.3f} s (best of 5, whole process){' FAILED' if failed else ''}")


if __name__ == "__main__":
    sys.exit(main())
