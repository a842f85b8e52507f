"""`diagnose RUN_ID` end to end on a live run with a 1 GB log, against what a user does by hand.

Builds (once; reused from bench/out/ when present) a run folder with a 1 GB training log
(bench/loggen.py: real shapes from real captures), a checkpoint folder, a config naming its
log, tmux session and interpreter; then times, each as a subprocess, median of N:

  diagnose   `diagnose benchrun --format json` (every collector: logs, dmesg, checkpoints,
             tmux, packages, gpu, process; then the scan and ranking)
  scan       `diagnose scan train_benchrun.log`: the same log without collectors (what collecting adds)
  baseline   `grep -c -E -f <the rule pack's log patterns as ERE> train_benchrun.log` (LC_ALL=C),
             the one-pass search a user would type by hand over the same log

and prints the per-collector times diagnose recorded (manifest stats), the scan time, peak
memory (the log is never read whole), and the ratio to the baseline. Both run warm (page
cache, hyperscan database cache) after one untimed run each.

    python bench/run_bench.py [--size-gb 1] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
RUN_ID = "benchrun"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))


def build_run(size: int) -> Path:
    import loggen

    folder = OUT / f"live-{size // (1024 * 1024)}m"
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"train_{RUN_ID}.log"
    stamp = folder / ".loggen-version"
    wanted = f"{loggen.VERSION} {size}"
    if not log.exists() or not stamp.exists() or stamp.read_text() != wanted:
        print(f"writing {log} ({size / 2**30:.2f} GiB) ...", file=sys.stderr)
        started = time.monotonic()
        loggen.generate(log, size)
        stamp.write_text(wanted)
        print(f"  written in {time.monotonic() - started:.1f} s", file=sys.stderr)
    ckpt = folder / "ckpt"
    ckpt.mkdir(exist_ok=True)
    for step in (1000, 2000):
        shard = ckpt / f"step_{step}.pt"
        if not shard.exists():
            shard.write_bytes(os.urandom(1 << 20))
    (folder / "diagnose.toml").write_text(
        "[run]\n"
        f'dir = "{folder}"\n'
        'logs = "train_{run}.log"\n'
        'checkpoints = "ckpt"\n'
        'tmux_session = "{run}"\n'
        f'tmux_socket = "{folder}/tmux-socket"\n'  # a server that is not there: tmux answers 'no socket'
        f'python = "{sys.executable}"\n'
    )
    return folder


def baseline_patterns(folder: Path) -> tuple[Path, int, int]:
    """The rule pack's `log:` patterns as one ERE file for grep -E -f."""
    from ere import Untranslatable, to_ere

    from diagnose.evidence.model import TextKind
    from diagnose.rules.load import load_rules
    from diagnose.rules.model import TextCondition

    patterns = sorted({c.pattern for r in load_rules().rules for c in r.conditions(TextCondition) if c.kind is TextKind.LOG})
    lines = []
    skipped = 0
    for pattern in patterns:
        try:
            ere, _approximate = to_ere(pattern)
        except Untranslatable:
            skipped += 1
            continue
        lines.append(ere)
    path = folder / "rule-pack-log-patterns.ere"
    path.write_text("\n".join(lines) + "\n")
    return path, len(lines), skipped


CPU: list[float] = []  # user+sys seconds of the last timed command (a shared 2-core machine makes wall time noisy)


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return seconds, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    size = int(args.size_gb * 1024**3)
    folder = build_run(size)
    log = folder / f"train_{RUN_ID}.log"
    env = dict(os.environ)
    env.pop("TMUX", None)
    env.setdefault("DIAGNOSE_CACHE_DIR", str(OUT / "cache"))
    diagnose = [sys.executable, "-m", "diagnose", RUN_ID, "--format", "json", "--fail-on", "never"]
    ere, count, skipped = baseline_patterns(folder)
    grep = ["grep", "-c", "-E", "-f", str(ere), str(log)]
    grep_env = dict(env, LC_ALL="C")

    timed(diagnose, folder, env)  # warm: page cache, hyperscan database cache
    timed(grep, folder, grep_env)
    load_before = os.getloadavg()[0]
    totals: list[float] = []
    cpu: list[float] = []
    per_collector: dict[str, list[float]] = {}
    collect_total: list[float] = []
    scan_seconds: list[float] = []
    stats: dict[str, Any] = {}
    data: dict[str, Any] = {}
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    for _ in range(args.runs):
        seconds, result = timed(diagnose, folder, env)
        if result.returncode not in (0, 1):
            print(result.stderr, file=sys.stderr)
            return 2
        totals.append(seconds)
        cpu.append(CPU[-1])
        data = json.loads(result.stdout)
        stats = data["stats"]
        scan_seconds.append(float(stats["seconds"]))
        collect_total.append(float(stats["collect"]["collect_seconds"]))
        for name, status in stats["collect"]["collectors"].items():
            per_collector.setdefault(name, []).append(float(status["duration_s"]))
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # The same log through `diagnose scan` (no collectors): what collecting adds to the scan.
    scan_only = [sys.executable, "-m", "diagnose", "scan", str(log), "--format", "json", "--fail-on", "never"]
    scan_times, scan_cpu = [], []
    for _ in range(args.runs):
        seconds, _result = timed(scan_only, folder, env)
        scan_times.append(seconds)
        scan_cpu.append(CPU[-1])
    grep_times = []
    grep_cpu = []
    matched = ""
    for _ in range(args.runs):
        seconds, result = timed(grep, folder, grep_env)
        grep_times.append(seconds)
        grep_cpu.append(CPU[-1])
        matched = result.stdout.strip()
    load_after = os.getloadavg()[0]

    ours, theirs = statistics.median(totals), statistics.median(grep_times)
    print(f"run: {folder}  log: {log.stat().st_size / 2**30:.2f} GiB, {stats.get('lines_scanned', 0):,} lines; "
          f"{os.cpu_count()} CPU(s); engine {stats.get('engine')}; {stats.get('rules')} rules")
    print(f"load average {load_before:.2f} before, {load_after:.2f} after (other work on this machine inflates wall times)")
    print(f"{'':24}{'median':>9}  {'cpu':>6}  runs (wall)")
    print(f"{'diagnose ' + RUN_ID:24}{ours:8.2f}s {statistics.median(cpu):6.2f}s  " + " ".join(f"{t:.2f}" for t in totals))
    print(f"{'  collectors (wall)':24}{statistics.median(collect_total):8.2f}s")
    for name, values in per_collector.items():
        status = stats["collect"]["collectors"][name]
        note = f"  {status['status']}" + (f": {status['reason'][:70]}" if status["reason"] else "")
        print(f"{'    ' + name:24}{statistics.median(values):8.2f}s  {status['bytes']:>14,} B{note}")
    print(f"{'  scan + rank':24}{statistics.median(scan_seconds):8.2f}s")
    print(f"{'diagnose scan LOG':24}{statistics.median(scan_times):8.2f}s {statistics.median(scan_cpu):6.2f}s  "
          + " ".join(f"{t:.2f}" for t in scan_times) + "   (the same log, no collectors)")
    print(f"{'baseline grep -c -E -f':24}{theirs:8.2f}s {statistics.median(grep_cpu):6.2f}s  "
          + " ".join(f"{t:.2f}" for t in grep_times)
          + f"   ({count} rule-pack log patterns as ERE, {skipped} untranslatable; {matched} matching lines)")
    print(f"ratio diagnose / baseline: {ours / theirs:.2f}x   target: diagnose under 3 s -> "
          f"{'met' if ours < 3.0 else 'NOT met'}")
    print(f"peak RSS of a child process (diagnose or grep): {max(peak_kib, before) / 1024:.0f} MiB "
          f"(log {log.stat().st_size / 2**20:.0f} MiB)")
    print(f"top cause: {data['causes'][0]['id'] if data.get('causes') else None}")
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        sys.exit(main())
