#!/usr/bin/env python3
"""Scan speed on every core (issues 18 and 23): `diagnose scan` against wc -l, grep and ripgrep, one run.

    python bench/speed_bench.py                 # 1 GiB logs, 8 x 256 MiB rank logs, 1,000 rules
    python bench/speed_bench.py --quick         # 256 MiB / 8 x 64 MiB, 3 runs
    python bench/speed_bench.py --src DIR       # time the diagnose package found in DIR (a checkout)
    python bench/speed_bench.py --baseline DIR  # and, interleaved in the same tables, DIR's ("before")
    python bench/speed_bench.py --logs real,metrics   # only these of the 1 GiB logs

Every figure is a whole process (start-up, rule loading, scan, ranking, JSON report), warm page
cache, warm diagnose caches (rule set, hyperscan database), median of --runs with the tools
interleaved run by run; peak RSS is each process's own (wait4), the largest over the runs.

- 1 GiB training logs, each timed on its own: `diagnose scan` on all the cores it may use and
  pinned to one (the speed-up from 1 to N), against `wc -l`, `grep -E -c -f` (LC_ALL=C) and
  `rg -c -f` with the fixed 53-pattern list bench/synthetic_patterns.txt (translated by
  bench/ere.py); rg's column is left out when it is not installed. The logs (--logs):
  - real: real output of many frameworks that people committed to public repositories
    (bench/data/real, SOURCES.md), repeated, a real CUDA OOM at the end (bench/reallog.py);
  - metrics: only their metric lines (loss, grad norm, lr in every framework's shape): the
    adversarial log, every line a metric line;
  - plain: only their other lines, the baseline of `metrics` (metrics / plain <= 1.3);
  - synthetic: bench/loggen.py's (real shapes with fresh numbers, two real crashes).
- 8 rank logs of 256 MiB (one rank's lines each, as torchrun --log-dir writes them): the same
  tools over the 8 files.
- 1,000 user rules (bench/rulegen.py) next to the built-in pack, against the built-in pack alone.
- `diagnose --help` and `diagnose scan` of a 10 KB log.
With --baseline, every diagnose command is also run with the baseline checkout's package
("before: ..."), interleaved run by run with the rest, and the after/before ratios are printed.
Targets (issue 23): 2 cores: diagnose <= 0.5 x grep on every log; 16 cores: <= 0.3 x grep and
>= 6 x faster than on 1 core; metrics <= 1.3 x plain; 1,000 rules <= 1.2 x; peak RSS <= 150 MB;
a 10 KB scan <= 0.15 s.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# ere.py translates the patterns with this checkout's diagnose, installed or not (the timed
# commands find theirs through PYTHONPATH).
sys.path.insert(1, str(HERE.parent))

import loggen  # noqa: E402
import reallog  # noqa: E402
import rulegen  # noqa: E402

TARGET_RSS_MB = 150.0
Cmd = tuple[list[str], dict[str, str], int | None]  # argv, environment, the one CPU to pin it to


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, default=HERE.parent, help="checkout whose diagnose package is timed")
    parser.add_argument("--baseline", type=Path, help="a checkout timed beside it, in the same tables (before)")
    parser.add_argument("--workdir", type=Path, default=HERE / "out")
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rank-mb", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="big,ranks,rules,startup", help="sections to run (comma-separated)")
    parser.add_argument("--logs", default="real,metrics,plain,synthetic", help="the 1 GiB logs of the big section")
    parser.add_argument("--without-numpy", action="store_true",
                        help="also time the scan of the real log with numpy not importable (does numpy pay?)")
    args = parser.parse_args(argv)
    if args.quick:
        args.size_mb, args.rank_mb, args.runs = 256, 64, 3
    work: Path = args.workdir.resolve()  # the timed commands run from another folder
    work.mkdir(parents=True, exist_ok=True)
    src = args.src.resolve()
    nocache = os.environ.get("PYTHONDONTWRITEBYTECODE")
    env = checkout_env(src, work)
    base = checkout_env(args.baseline.resolve(), work) if args.baseline else None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    header(src, env, cores)
    if args.baseline:
        print(f"baseline (before) diagnose from {args.baseline.resolve()}")
    if nocache:
        print(f"PYTHONDONTWRITEBYTECODE={nocache} in the environment: unset for the timed commands")
    sections = set(args.only.split(","))
    big = work / f"scan-bench-v{loggen.VERSION}-{args.size_mb}MiB.log"  # the log bench/scan_bench.py uses
    ranks = ensure_rank_logs(work, args.rank_mb, (big, args.size_mb * 2**20)) if "ranks" in sections else []
    log = ensure_log(big)
    patterns = pattern_files(work)
    diagnose = [sys.executable, "-m", "diagnose"]
    scan = [*diagnose, "scan", "--format", "json", "--fail-on", "never"]
    results: dict[str, float] = {}
    if "big" in sections:
        for kind in args.logs.split(","):
            path = log if kind == "synthetic" else ensure_real_log(work, kind, args.size_mb)
            results.update(section_big(scan, env, path, patterns, args.runs, cores, base, kind,
                                       no_numpy_env(env, work) if args.without_numpy and kind == "real" else None))
        if "metrics/grep" in results and "plain/grep" in results:
            print(f"\n  {'every line a metric line / no metric line (metrics / plain)':<58} "
                  f"{results['metrics/seconds'] / results['plain/seconds']:6.2f}   target <= 1.3  "
                  f"{'PASS' if results['metrics/seconds'] <= 1.3 * results['plain/seconds'] else 'FAIL'}")
    if "ranks" in sections:
        results.update(section_ranks(scan, env, ranks, patterns, max(3, args.runs - 2), base))
    if "rules" in sections:
        results.update(section_rules(scan, env, log, work, max(3, args.runs - 2), base))
    if "startup" in sections:
        section_startup(diagnose, env, work, log, base)
    print()
    print("summary: " + ", ".join(f"{k} {v:.2f}" for k, v in results.items() if not k.endswith("/seconds")))
    return 0


# ---------------------------------------------------------------- setup


def checkout_env(src: Path, work: Path) -> dict[str, str]:
    """The environment that runs `python -m diagnose` from checkout `src`, with caches of its own."""
    tag = hashlib.sha256(str(src).encode()).hexdigest()[:10]
    # Byte-code cached as an installed package has it: some images set PYTHONDONTWRITEBYTECODE
    # and ship site-packages without .pyc files, so every start compiles every module it imports
    # (~0.3-0.5 s on the H200 machine); the first (untimed) run writes them under the workdir.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])]),
               DIAGNOSE_CACHE_DIR=str(work / f"cache-{tag}"), PYTHONPYCACHEPREFIX=str(work / f"pycache-{tag}"))
    env.pop("DIAGNOSE_NO_CACHE", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


BEFORE = "before: "


def no_numpy_env(env: dict[str, str], work: Path) -> dict[str, str]:
    """`env` with a folder first on PYTHONPATH whose `numpy` fails to import, as on an install
    without it (engine/bytecount.py then counts with bytes.count)."""
    shim = work / "no-numpy" / "numpy"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "__init__.py").write_text('raise ImportError("numpy hidden by speed_bench --without-numpy")\n')
    return dict(env, PYTHONPATH=os.pathsep.join([str(shim.parent), env["PYTHONPATH"]]))


def with_baseline(commands: dict[str, Cmd], base: dict[str, str] | None) -> dict[str, Cmd]:
    """Each diagnose command followed by the same with the baseline's environment."""
    if base is None:
        return commands
    out: dict[str, Cmd] = {}
    for name, (argv, env, cpu) in commands.items():
        out[name] = (argv, env, cpu)
        if name.startswith("diagnose"):
            out[BEFORE + name] = (argv, base, cpu)
    return out


def before_lines(got: dict[str, tuple[float, float, str]]) -> None:
    for name, (seconds, _rss, out) in got.items():
        if name.startswith(BEFORE):
            after = got[name.removeprefix(BEFORE)]
            same = "same result" if summary(after[2]) == summary(out) else "RESULTS DIFFER"
            print(ratio_line(f"after / before: {name.removeprefix(BEFORE)}", after[0], seconds, None) + f"   ({same})")


def header(src: Path, env: dict[str, str], cores: int) -> None:
    model = ""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    simd = " ".join(f for f in ("sse4_2", "avx2", "avx512f", "avx512bw", "avx512vbmi") if f in flags)
    probe = ("import hyperscan as hs; db = hs.Database(); db.compile(expressions=[b'abc'], ids=[0], elements=1, "
             "flags=[0]); print(hs.__version__, '|', db.info().decode())")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    hs_info = done.stdout.strip() or "not importable"
    load = os.getloadavg()
    print("== diagnose scan speed benchmark (issue 18) ==")
    print(f"machine: {cores} usable cores ({os.cpu_count()} online), {model or platform.machine()}; SIMD: {simd or '?'}")
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; python {platform.python_version()}")
    print(f"hyperscan (python package | library): {hs_info}")
    print(f"{version(['grep', '--version'])}; {version(['rg', '--version'])}; {version(['wc', '--version'])}")
    print(f"diagnose from {src}")


def version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    except OSError:
        return f"{cmd[0]} missing"
    return out.splitlines()[0] if out else "?"


def ensure_real_log(work: Path, kind: str, size_mb: int) -> Path:
    path = reallog.log_path(work, kind, size_mb)
    if not path.exists():
        started = time.perf_counter()
        reallog.generate(path, kind, size_mb * 2**20)
        print(f"assembled {path.name} in {time.perf_counter() - started:.0f} s")
    return path


def ensure_log(path: Path) -> Path:
    if not path.exists():
        started = time.perf_counter()
        loggen.generate(path, int(path.name.rsplit("-", 1)[1].removesuffix("MiB.log")) * 2**20)
        print(f"generated {path.name} in {time.perf_counter() - started:.0f} s")
    return path


_GENERATE = ("import sys, loggen; from pathlib import Path; rank = int(sys.argv[3]); "
             "loggen.generate(Path(sys.argv[1]), int(sys.argv[2]), *((rank, rank) if rank >= 0 else ()))")


def ensure_rank_logs(work: Path, size_mb: int, big: tuple[Path, int] | None = None) -> list[Path]:
    """8 rank logs (and the big log, if `big` names one missing), generated one process each."""
    folder = work / f"ranks-v{loggen.VERSION}-8x{size_mb}MiB"
    paths = [folder / f"rank{rank}.log" for rank in range(8)]
    jobs = [(p, size_mb * 2**20, rank) for rank, p in enumerate(paths) if not p.exists()]
    if big is not None and not big[0].exists():
        jobs.append((big[0], big[1], -1))
    if jobs:
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", _GENERATE, str(p), str(n), str(rank)], cwd=HERE)
                 for p, n, rank in jobs]
        if any(p.wait() for p in procs):
            raise SystemExit("generating the logs failed")
        print(f"generated {len(jobs)} log(s) in {time.perf_counter() - started:.0f} s")
    return paths


def pattern_files(work: Path) -> dict[str, Path]:
    import ere

    patterns = [line for line in (HERE / "synthetic_patterns.txt").read_text().splitlines()
                if line and not line.startswith("#")]
    files = {"ere": work / "synthetic53.ere", "rust": work / "synthetic53.rg"}
    with open(files["ere"], "w", encoding="utf-8", newline="") as grep_file, \
            open(files["rust"], "w", encoding="utf-8", newline="") as rg_file:
        for pattern in patterns:
            text, _ = ere.to_ere(pattern)
            rust, _ = ere.to_ere(pattern, rust=True)
            grep_file.write(text + "\n")
            rg_file.write((f"(?-u:{rust})" if rust.isascii() else rust) + "\n")
    return files


# ---------------------------------------------------------------- timing


def run(cmd: Cmd) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) and stdout of one process."""
    argv, env, cpu = cmd

    def pin() -> None:
        os.sched_setaffinity(0, {cpu})

    # No preexec_fn unless pinning: without one the child is spawned (vfork), so its peak RSS
    # is its own, not this process's pages inherited by a fork.
    started = time.perf_counter()
    # From a folder with no diagnose package in it: `-m diagnose` finds the one PYTHONPATH names.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=tempfile.gettempdir(),
                            preexec_fn=pin if cpu is not None else None)
    out = proc.stdout.read() if proc.stdout else b""
    _pid, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.stdout:
        proc.stdout.close()
    return seconds, usage.ru_maxrss / 1024, out.decode("utf-8", errors="replace")


def warm(paths: Sequence[Path]) -> None:
    for path in paths:
        with open(path, "rb") as handle:
            while handle.read(16 * 2**20):
                pass


def table(title: str, commands: dict[str, Cmd], runs: int, inputs: Sequence[Path]) -> dict[str, tuple[float, float, str]]:
    """Median wall, peak RSS and last output of each command, interleaved run by run."""
    warm(inputs)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    rss: dict[str, float] = dict.fromkeys(commands, 0.0)
    outputs: dict[str, str] = {}
    for name, cmd in commands.items():  # warm-up: page cache, diagnose caches
        outputs[name] = run(cmd)[2]
    for _ in range(runs):
        for name, cmd in commands.items():
            seconds, mb, out = run(cmd)
            samples[name].append(seconds)
            rss[name] = max(rss[name], mb)
            outputs[name] = out
    print(f"\n[{title}] median of {runs} runs (warm page cache, warm diagnose caches)")
    print(f"  {'command':<48} {'median s':>9} {'min s':>7} {'max s':>7} {'peak RSS MB':>12}   output"
          "   (a tool's RSS counts the ~30 MB of the Python that spawns it)")
    result = {}
    for name, values in samples.items():
        med = statistics.median(values)
        result[name] = (med, rss[name], outputs[name])
        print(f"  {name:<48} {med:>9.3f} {min(values):>7.3f} {max(values):>7.3f} {rss[name]:>12.1f}   {summary(outputs[name])}")
    return result


def summary(out: str) -> str:
    text = out.strip()
    if text.startswith("{"):
        try:
            report = json.loads(text)
        except ValueError:
            return "diagnose: unreadable JSON"
        stats = report["stats"]
        causes = ",".join(c["id"] for c in report["causes"][:3])
        return f"{stats['lines_scanned']:,} lines, engine {stats['engine']}, causes {causes}"
    lines = text.splitlines()
    counts = [(x.rsplit(":", 1)[-1].split() or [""])[0] for x in lines if x.strip()]
    if len(lines) > 1 and all(c.isdigit() for c in counts):
        return f"{sum(map(int, counts)):,} total over {len(lines)} outputs"
    return lines[0][:60] if lines else ""


def baselines(files: Sequence[Path], patterns: dict[str, Path]) -> dict[str, Cmd]:
    plain = dict(os.environ)
    commands: dict[str, Cmd] = {
        "wc -l": (["wc", "-l", *map(str, files)], plain, None),
        "grep -E -c -f synthetic53 (C)": (["grep", "-E", "-c", "-f", str(patterns["ere"]), *map(str, files)],
                                          dict(plain, LC_ALL="C"), None),
    }
    if shutil.which("rg"):
        commands["rg -c -f synthetic53"] = (["rg", "--no-config", "-c", "-f", str(patterns["rust"]), *map(str, files)],
                                            plain, None)
    return commands


def rss_line(label: str, rss: float) -> str:
    return f"  {label:<58} {rss:6.1f}   target <= {TARGET_RSS_MB:.0f}  {'PASS' if rss <= TARGET_RSS_MB else 'FAIL'}"


def ratio_line(label: str, ours: float, theirs: float, target: float | None) -> str:
    value = ours / theirs
    verdict = "" if target is None else f"   target <= {target}  {'PASS' if value <= target else 'FAIL'}"
    return f"  {label:<58} {value:6.2f}{verdict}"


def section_big(scan: list[str], env: dict[str, str], log: Path, patterns: dict[str, Path], runs: int,
                cores: int, base: dict[str, str] | None = None, kind: str = "synthetic",
                no_numpy: dict[str, str] | None = None) -> dict[str, float]:
    commands: dict[str, Cmd] = {f"diagnose scan ({cores} cores)": ([*scan, str(log)], env, None)}
    if cores > 1:
        commands["diagnose scan (1 core)"] = ([*scan, str(log)], env, min(os.sched_getaffinity(0)))
    commands = with_baseline(commands, base)
    if no_numpy is not None:
        commands[f"diagnose scan ({cores} cores), numpy not importable"] = ([*scan, str(log)], no_numpy, None)
    commands.update(baselines([log], patterns))
    got = table(f"{kind} log: {log.name}, {log.stat().st_size / 2**30:.2f} GiB", commands, runs, [log])
    ours = got[f"diagnose scan ({cores} cores)"][0]
    grep = got["grep -E -c -f synthetic53 (C)"][0]
    wc = got["wc -l"][0]
    grep_target = 0.5 if cores <= 2 else 0.3
    print(ratio_line("diagnose / grep", ours, grep, grep_target))
    print(ratio_line("diagnose / wc -l", ours, wc, None))
    if "rg -c -f synthetic53" in got:
        print(ratio_line("diagnose / rg", ours, got["rg -c -f synthetic53"][0], None))
    out: dict[str, float] = {f"{kind}/grep": ours / grep, f"{kind}/wc": ours / wc, f"{kind}/seconds": ours}
    if cores > 1:
        one = got["diagnose scan (1 core)"][0]
        target = 6.0 if cores >= 16 else None
        verdict = "" if target is None else f"   target >= {target}  {'PASS' if one / ours >= target else 'FAIL'}"
        print(f"  {'speed-up from 1 to ' + str(cores) + ' cores':<58} {one / ours:6.2f}{verdict}")
        out[f"{kind}/speed-up"] = one / ours
    print(rss_line("peak RSS of diagnose scan (MB)", got[f"diagnose scan ({cores} cores)"][1]))
    if base is not None:
        before = got[f"{BEFORE}diagnose scan ({cores} cores)"][0]
        print(ratio_line("before: diagnose / grep", before, grep, None))
        before_lines(got)
        out[f"{kind}/before"] = ours / before
    if no_numpy is not None:
        without = got[f"diagnose scan ({cores} cores), numpy not importable"][0]
        print(ratio_line("without numpy / with numpy", without, ours, None))
        out[f"{kind}/no-numpy"] = without / ours
    return out


def section_ranks(scan: list[str], env: dict[str, str], ranks: list[Path], patterns: dict[str, Path],
                  runs: int, base: dict[str, str] | None = None) -> dict[str, float]:
    size = sum(p.stat().st_size for p in ranks)
    commands = with_baseline({"diagnose scan (8 files)": ([*scan, *map(str, ranks)], env, None)}, base)
    commands.update(baselines(ranks, patterns))
    got = table(f"8 rank logs: {ranks[0].parent.name}, {size / 2**30:.2f} GiB in all", commands, runs, ranks)
    ours = got["diagnose scan (8 files)"][0]
    grep = got["grep -E -c -f synthetic53 (C)"][0]
    print(ratio_line("diagnose / grep over the 8 files", ours, grep, None))
    print(ratio_line("diagnose / wc -l over the 8 files", ours, got["wc -l"][0], None))
    print(rss_line("peak RSS of diagnose scan (MB)", got["diagnose scan (8 files)"][1]))
    out = {"ranks/grep": ours / grep}
    if base is not None:
        before = got[f"{BEFORE}diagnose scan (8 files)"][0]
        print(ratio_line("before: diagnose / grep over the 8 files", before, grep, None))
        before_lines(got)
        out["ranks/before"] = ours / before
    return out


def section_rules(scan: list[str], env: dict[str, str], log: Path, work: Path, runs: int,
                  base: dict[str, str] | None = None) -> dict[str, float]:
    folder = work / "rules-1000"
    patterns = rulegen.generate(folder, 1000)
    commands = with_baseline({
        "diagnose scan (built-in pack)": ([*scan, str(log)], env, None),
        "diagnose scan (+1,000 user rules)": ([*scan, str(log), "--rules", str(folder)], env, None),
    }, base)
    got = table(f"1,000 user rules ({len(set(patterns))} distinct patterns) on {log.name}", commands, runs, [log])
    alone, more = got["diagnose scan (built-in pack)"][0], got["diagnose scan (+1,000 user rules)"][0]
    print(ratio_line("+1,000 rules / built-in pack alone", more, alone, 1.2))
    print(rss_line("peak RSS with 1,000 more rules (MB)", got["diagnose scan (+1,000 user rules)"][1]))
    out = {"rules-1000/builtin": more / alone}
    if base is not None:
        print(ratio_line("before: +1,000 rules / built-in pack alone", got[f"{BEFORE}diagnose scan (+1,000 user rules)"][0],
                         got[f"{BEFORE}diagnose scan (built-in pack)"][0], None))
        before_lines(got)
    return out


def section_startup(diagnose: list[str], env: dict[str, str], work: Path, log: Path,
                    base: dict[str, str] | None = None) -> None:
    small = work / "small-10k.log"
    with open(log, "rb") as handle:
        head = handle.read(10 * 1024)
    small.write_bytes(head[: head.rfind(b"\n") + 1])
    commands = with_baseline({
        "python -c pass": ([sys.executable, "-c", "pass"], env, None),
        "diagnose --help": ([*diagnose, "--help"], env, None),
        "diagnose scan (10 KB log)": ([*diagnose, "scan", str(small)], env, None),
        "diagnose scan (10 KB log) --format json": ([*diagnose, "scan", str(small), "--format", "json"], env, None),
    }, base)
    got = table("start-up", commands, 15, [small])
    small_scan = got["diagnose scan (10 KB log)"][0]
    print(f"  {'diagnose scan of a 10 KB log (s)':<58} {small_scan:6.3f}   target <= 0.15  "
          f"{'PASS' if small_scan <= 0.15 else 'FAIL'}")
    if base is not None:
        before_lines(got)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        sys.exit(main())
