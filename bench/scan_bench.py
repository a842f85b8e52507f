#!/usr/bin/env python3
"""Scan benchmark (issue 6): `diagnose scan` against grep and ripgrep, side by side, one run.

    /work/venvs/dev/bin/python bench/scan_bench.py            # 1 GiB log, 5 GiB for peak RSS
    /work/venvs/dev/bin/python bench/scan_bench.py --quick    # 256 MiB / 1 GiB, 3 runs

What it does, and why it is fair:
- generates (once, cached under --workdir) a realistic training log (bench/loggen.py);
- exports the log patterns of the loaded rule pack (the same RuleSet `diagnose scan` loads)
  and translates each for the baselines (bench/ere.py): POSIX ERE for `grep -E -c -f`, run
  with LC_ALL=C (grep's fastest mode; the C.UTF-8 run is shown too) and Rust syntax for
  `rg -c -f` with ASCII patterns in byte mode (?-u) (rg's Unicode mode is over 100x slower on
  this pattern set). The translations are checked: per pattern, the number of lines grep and
  rg find in the real captured logs of bench/data must equal Python's count;
- times each tool end to end as a subprocess (warm page cache, warm diagnose caches, median
  of --runs, tools interleaved run by run), `diagnose scan` with the full built-in rule pack;
- peak RSS of `diagnose scan` on a 5 GiB log (the 1 GiB log five times over);
- `diagnose scan` of a 10 KB log and `diagnose --help` (wall, median), and which heavy
  modules `--help` imports (python -X importtime);
- the hyperscan and pure engines' JSON reports on the big log must be identical.
While the built-in pack has fewer than 50 log patterns the timings are repeated with a
synthetic 53-pattern set (bench/synthetic_patterns.txt) added as user rules.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

import ere  # noqa: E402
import loggen  # noqa: E402

TARGET_GREP_RATIO = 0.5
TARGET_RSS_MB = 150
TARGET_SMALL_S = 0.3
TARGET_HELP_S = 0.15
HEAVY_MODULES = ("regex", "rich", "yaml", "hyperscan", "diagnose.engine.evaluate", "diagnose.engine.scan", "diagnose.rules.model")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the timed log (MiB)")
    parser.add_argument("--big-mb", type=int, default=5120, help="size of the log for peak RSS (MiB); 0 skips it")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--small-runs", type=int, default=15)
    parser.add_argument("--workdir", type=Path, default=HERE / "out")
    parser.add_argument("--synthetic", choices=("auto", "yes", "no"), default="auto")
    parser.add_argument("--no-pure", action="store_true", help="skip the pure-engine comparison on the big log")
    parser.add_argument("--quick", action="store_true", help="256 MiB log, 1 GiB for RSS, 3 runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.size_mb, args.big_mb, args.runs, args.small_runs = 256, 1024, 3, 7
    work: Path = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    diagnose = diagnose_command()
    env = dict(os.environ, DIAGNOSE_CACHE_DIR=str(work / "cache"), PYTHONDONTWRITEBYTECODE="")
    env.pop("DIAGNOSE_NO_CACHE", None)

    header(diagnose)
    log = ensure_log(work, args.size_mb)
    size = log.stat().st_size
    lines = count_lines(log)
    patterns = export_patterns([])
    print(f"log: {log} ({size / 2**30:.2f} GiB, {lines:,} lines)")
    print(f"rule pack: {patterns['rules']} rules, {len(patterns['log'])} log patterns (scan uses all of them)")
    synthetic_dir = None
    if args.synthetic == "yes" or (args.synthetic == "auto" and len(patterns["log"]) < 50):
        synthetic_dir = write_synthetic_rules(work)
    print()

    results: dict[str, object] = {}
    ok = True
    sets = [("built-in pack", [])]
    if synthetic_dir is not None:
        sets.append(("built-in pack + synthetic 53", [str(synthetic_dir)]))
    for label, extra in sets:
        exported = export_patterns([Path(d) for d in extra]) if extra else patterns
        files = write_pattern_files(work, exported["log"], label)
        check_translations(files, exported["log"])
        timing = time_tools(diagnose, env, log, files, extra, args.runs, label)
        results[label] = timing
        ok &= timing["ratio_grep"] <= TARGET_GREP_RATIO

    small = small_log(work, log)
    ok &= time_small(diagnose, env, small, args.small_runs)
    ok &= time_help(diagnose, env, args.small_runs)
    if args.big_mb:
        ok &= peak_rss(diagnose, env, ensure_big_log(work, log, args.big_mb))
    if not args.no_pure:
        ok &= same_results(diagnose, env, log)
    print()
    print("ALL TARGETS MET" if ok else "SOME TARGETS MISSED (see above)")
    return 0 if ok else 1


# ---------------------------------------------------------------- setup


def diagnose_command() -> list[str]:
    script = Path(sys.executable).with_name("diagnose")
    return [str(script)] if script.exists() else [sys.executable, "-m", "diagnose"]


def tool_version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    except OSError:
        return "missing"
    return out.splitlines()[0] if out else "?"


def header(diagnose: list[str]) -> None:
    try:
        import hyperscan

        hs_version = getattr(hyperscan, "__version__", "?")
    except ImportError:
        hs_version = "not installed"
    load = os.getloadavg()
    print("== diagnose scan benchmark (issue 6) ==")
    print(f"machine: {os.cpu_count()} cores, {platform.machine()}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"python {platform.python_version()}, hyperscan {hs_version}, {tool_version(['grep', '--version'])}, "
          f"{tool_version(['rg', '--version'])}")
    print(f"diagnose: {' '.join(diagnose)}")


def ensure_log(work: Path, size_mb: int) -> Path:
    path = work / f"scan-bench-v{loggen.VERSION}-{size_mb}MiB.log"
    if not path.exists():
        started = time.perf_counter()
        print(f"generating {path.name} ...", flush=True)
        loggen.generate(path, size_mb * 2**20)
        print(f"  generated in {time.perf_counter() - started:.0f} s")
    return path


def ensure_big_log(work: Path, log: Path, big_mb: int) -> Path:
    times = max(1, round(big_mb * 2**20 / log.stat().st_size))
    path = work / f"{log.stem}-x{times}.log"
    if not path.exists() or path.stat().st_size != times * log.stat().st_size:
        print(f"writing {path.name} ({times} copies) ...", flush=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as out:
            for _ in range(times):
                with open(log, "rb") as src:
                    shutil.copyfileobj(src, out, 16 * 2**20)
        tmp.replace(path)
    return path


def count_lines(path: Path) -> int:
    count = 0
    with open(path, "rb") as handle:
        while block := handle.read(16 * 2**20):
            count += block.count(b"\n")
    return count


def warm(path: Path) -> None:
    with open(path, "rb") as handle:
        while handle.read(16 * 2**20):
            pass


def export_patterns(extra_dirs: list[Path]) -> dict[str, object]:
    """The log patterns of the rule set `diagnose scan` loads (plus extra rule folders)."""
    from diagnose.engine.evaluate import pattern_sets
    from diagnose.evidence.model import TextKind
    from diagnose.rules.load import load_rules

    ruleset = load_rules(extra_dirs)
    sets = pattern_sets(ruleset.rules)
    return {"rules": len(ruleset.rules), "log": list(sets[TextKind.LOG].patterns)}


def write_synthetic_rules(work: Path) -> Path:
    folder = work / "synthetic-rules"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "bench").mkdir(parents=True)
    patterns = [line for line in (HERE / "synthetic_patterns.txt").read_text().splitlines() if line and not line.startswith("#")]
    for n, pattern in enumerate(patterns):
        rule_id = f"bench.synthetic-{n:02d}"
        (folder / "bench" / f"{rule_id}.yaml").write_text(
            f"id: {rule_id}\ntitle: Synthetic benchmark rule {n}\ncategory: bench\nrole: root\nseverity: error\n"
            f"confidence: 0.5\nwhen:\n  log: {json.dumps(pattern)}\nexplanation: A synthetic rule of the scan benchmark.\n"
            "fix:\n  - Nothing to fix.\n"
        )
    return folder


def write_pattern_files(work: Path, patterns: list[str], label: str) -> dict[str, Path]:
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    files = {"ere": work / f"patterns-{slug}.ere", "rust": work / f"patterns-{slug}.rg"}
    notes: list[str] = []
    with open(files["ere"], "w", encoding="utf-8", newline="") as grep_file, \
            open(files["rust"], "w", encoding="utf-8", newline="") as rg_file:
        for pattern in patterns:
            text, approx = ere.to_ere(pattern)
            rust, _ = ere.to_ere(pattern, rust=True)
            grep_file.write(text + "\n")
            rg_file.write((f"(?-u:{rust})" if rust.isascii() else rust) + "\n")
            if approx:
                notes.append(f"{pattern!r}: {', '.join(sorted(set(approx)))}")
    print(f"[{label}] {len(patterns)} patterns exported to {files['ere'].name} (grep -E) and {files['rust'].name} (rg)")
    for note in notes:
        print(f"  approximated for grep/rg (can only match more lines): {note}")
    return files


def probe_lines() -> list[bytes]:
    """Real captured log lines (bench/data and the repo's test data), for the translation check."""
    lines: list[bytes] = []
    for folder in (HERE / "data", REPO / "tests" / "data", REPO / "fixtures"):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix in (".log", ".txt") and path.stat().st_size < 4 * 2**20:
                lines.extend(path.read_bytes().split(b"\n"))
    return lines


def check_translations(files: dict[str, Path], patterns: list[str]) -> None:
    """Per pattern, grep's and rg's matching-line counts on real logs must equal Python's."""
    import regex

    lines = probe_lines()
    with tempfile.NamedTemporaryFile("wb", suffix=".log", delete=False) as handle:
        handle.write(b"\n".join(lines))
        probe = Path(handle.name)
    texts = [line.decode("utf-8", errors="replace") for line in lines]
    # One pattern a line; split at '\n' only: a pattern may hold a raw '\r' (grep takes it as is).
    ere_lines = files["ere"].read_bytes().decode("utf-8").split("\n")[:-1]
    rust_lines = files["rust"].read_bytes().decode("utf-8").split("\n")[:-1]
    bad: list[str] = []
    checked = matched = 0
    try:
        for pattern, ere_text, rust_text in zip(patterns, ere_lines, rust_lines, strict=True):
            compiled = regex.compile(pattern)
            want = sum(1 for text in texts if compiled.search(text))
            got_grep = run_count(["grep", "-E", "-c", "-e", ere_text, str(probe)], {"LC_ALL": "C"})
            got_rg = run_count(["rg", "--no-config", "-c", "-e", rust_text, str(probe)], {}) if shutil.which("rg") else want
            checked += 1
            matched += want > 0
            if got_grep != want or got_rg != want:
                bad.append(f"{pattern!r}: python {want}, grep {got_grep}, rg {got_rg}")
    finally:
        probe.unlink()
    print(f"  translation check on {len(lines):,} real captured log lines: {checked} patterns, {matched} with matches, "
          f"{len(bad)} mismatches")
    for line in bad:
        print(f"    MISMATCH {line}")


def run_count(cmd: list[str], extra_env: dict[str, str]) -> int:
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **extra_env), check=False).stdout.strip()
    return int(out) if out.isdigit() else 0


# ---------------------------------------------------------------- timings


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, check=False)
    return time.perf_counter() - started, done.stdout.decode("utf-8", errors="replace")


def time_tools(diagnose: list[str], env: dict[str, str], log: Path, files: dict[str, Path], extra: list[str],
               runs: int, label: str) -> dict[str, float]:
    rules = [arg for d in extra for arg in ("--rules", d)]
    commands: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "diagnose scan": ([*diagnose, "scan", str(log), "--format", "json", "--fail-on", "never", *rules], env),
        "grep -E -c -f (LC_ALL=C)": (["grep", "-E", "-c", "-f", str(files["ere"]), str(log)], dict(os.environ, LC_ALL="C")),
        "grep -E -c -f (C.UTF-8)": (["grep", "-E", "-c", "-f", str(files["ere"]), str(log)], dict(os.environ, LC_ALL="C.UTF-8")),
    }
    if shutil.which("rg"):
        commands["rg -c -f"] = (["rg", "--no-config", "-c", "-f", str(files["rust"]), str(log)], None)
    # Cold: no diagnose caches (rule set, hyperscan database) - shown, not used for the ratio.
    with tempfile.TemporaryDirectory() as cold:
        cold_s, _ = timed(commands["diagnose scan"][0], dict(env, DIAGNOSE_CACHE_DIR=cold))
    warm(log)
    outputs: dict[str, str] = {}
    for name, (cmd, cmd_env) in commands.items():  # warm-up: page cache, diagnose caches
        outputs[name] = timed(cmd, cmd_env)[1]
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, (cmd, cmd_env) in commands.items():
            seconds, out = timed(cmd, cmd_env)
            samples[name].append(seconds)
            outputs[name] = out
    median = {name: statistics.median(values) for name, values in samples.items()}
    grep_best = min(median["grep -E -c -f (LC_ALL=C)"], median["grep -E -c -f (C.UTF-8)"])
    report = json.loads(outputs["diagnose scan"])
    causes = ", ".join(f"{c['id']}@{','.join(str(e['line']) for e in c['evidence'])}" for c in report["causes"])
    print(f"[{label}] {log.name}, median of {runs} runs (warm page cache; diagnose caches warm)")
    print(f"  {'tool':<28} {'median s':>9} {'min s':>7} {'max s':>7}   output")
    for name, values in samples.items():
        out = f"causes: {causes}" if name == "diagnose scan" else f"{outputs[name].strip()} matching lines"
        print(f"  {name:<28} {median[name]:>9.2f} {min(values):>7.2f} {max(values):>7.2f}   {out}")
    ratio_grep = median["diagnose scan"] / grep_best
    print(f"  diagnose scan with no caches (first run ever: YAML parse, hyperscan compile): {cold_s:.2f} s")
    print(f"  scan inside diagnose: {report['stats']['seconds']:.2f} s for {report['stats']['bytes_scanned'] / 2**30:.2f} GiB, "
          f"engine {report['stats']['engine']}")
    print(f"  ratio diagnose/grep (faster grep) = {ratio_grep:.2f}   target <= {TARGET_GREP_RATIO}   "
          f"{'PASS' if ratio_grep <= TARGET_GREP_RATIO else 'FAIL'}")
    if "rg -c -f" in median:
        print(f"  ratio diagnose/rg = {median['diagnose scan'] / median['rg -c -f']:.2f}")
    print()
    return {"ratio_grep": ratio_grep, **median}


def small_log(work: Path, log: Path) -> Path:
    """The first ~8 KB of the benchmark log and the late crash: a 10 KB crashed run."""
    path = work / "small-10k.log"
    crash = (HERE / "data" / "late-error-dataloader-worker-oom.log").read_bytes()
    with open(log, "rb") as handle:
        head = handle.read(10 * 1024 - len(crash))
    path.write_bytes(head[: head.rfind(b"\n") + 1] + crash)
    return path


def time_small(diagnose: list[str], env: dict[str, str], small: Path, runs: int) -> bool:
    default = [*diagnose, "scan", str(small)]
    as_json = [*diagnose, "scan", str(small), "--format", "json"]
    timed(default, env)
    terminal = statistics.median(timed(default, env)[0] for _ in range(runs))
    json_s = statistics.median(timed(as_json, env)[0] for _ in range(runs))
    with tempfile.TemporaryDirectory() as cold:
        cold_s = timed(default, dict(env, DIAGNOSE_CACHE_DIR=cold))[0]
    verdict = terminal <= TARGET_SMALL_S
    print(f"diagnose scan of a {small.stat().st_size / 1024:.0f} KB log (wall, median of {runs}, rule loading included): "
          f"{terminal:.3f} s terminal report, {json_s:.3f} s --format json; target <= {TARGET_SMALL_S} s  "
          f"{'PASS' if verdict else 'FAIL'}")
    print(f"  same with no caches (YAML parse of every rule file, hyperscan compile): {cold_s:.2f} s")
    print_imports(["scan", str(small)], env)
    return verdict


def print_imports(args: list[str], env: dict[str, str]) -> set[str]:
    """Where start-up goes: import time (python -X importtime, self times) by module, top first."""
    probe = (f"import sys; sys.argv = ['diagnose', *{args!r}]\nfrom diagnose.cli import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n")
    totals: dict[str, float] = {}
    for _ in range(3):
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", probe], capture_output=True, text=True, env=env,
                              check=False)
        for line in done.stderr.splitlines():
            fields = line.split("|")
            if line.startswith("import time:") and fields[0].split(":")[1].strip().isdigit():
                name = fields[-1].strip()
                key = name if name.startswith("diagnose") else name.split(".")[0]
                totals[key] = totals.get(key, 0.0) + int(fields[0].split(":")[1]) / 3e6
    own = sum(v for k, v in totals.items() if k.startswith("diagnose"))
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:10]
    print(f"  imports: {sum(totals.values()):.3f} s ({own:.3f} s in diagnose's own modules); top: "
          + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in top))
    return set(totals)


def time_help(diagnose: list[str], env: dict[str, str], runs: int) -> bool:
    cmd = [*diagnose, "--help"]
    timed(cmd, env)
    help_s = statistics.median(timed(cmd, env)[0] for _ in range(runs))
    bare = statistics.median(timed([sys.executable, "-c", "pass"], env)[0] for _ in range(runs))
    print_imports_header = f"diagnose --help (wall, median of {runs}): {help_s:.3f} s (python -c pass: {bare:.3f} s)"
    probe = ("import sys; sys.argv = ['diagnose', '--help']\nfrom diagnose.cli import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n")
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", probe], capture_output=True, text=True, env=env, check=False)
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    heavy = sorted(m for m in imported if m in HEAVY_MODULES)
    verdict = help_s <= TARGET_HELP_S and not heavy
    print(f"{print_imports_header}; target <= {TARGET_HELP_S} s; heavy modules imported: {', '.join(heavy) or 'none'} "
          f"({len(imported)} modules in all)  {'PASS' if verdict else 'FAIL'}")
    print_imports(["--help"], env)
    return verdict


def peak_rss(diagnose: list[str], env: dict[str, str], big: Path) -> bool:
    warm_note = "page cache may not hold it" if big.stat().st_size > 8 * 2**30 else "warm"
    rows = []
    for name, cmd in (("diagnose scan", [*diagnose, "scan", str(big), "--format", "json", "--fail-on", "never"]),
                      ("grep -E -c (LC_ALL=C)", ["grep", "-E", "-c", "-f", str(next(big.parent.glob("patterns-built-in-pack.ere"))), str(big)])):
        # A fresh process per measurement: RUSAGE_CHILDREN keeps the largest child ever waited for.
        # Output to a pipe, not /dev/null: GNU grep stops at the first match when nobody can see it.
        code = ("import resource, subprocess, sys, time\nstart = time.perf_counter()\n"
                "subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)\n"
                "print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        run_env = dict(env, LC_ALL="C") if name.startswith("grep") else env
        out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True, env=run_env, check=False).stdout.split()
        rows.append((name, float(out[0]), int(out[1]) / 1024))
    rss = rows[0][2]
    verdict = rss <= TARGET_RSS_MB
    print(f"peak RSS on {big.name} ({big.stat().st_size / 2**30:.1f} GiB, {warm_note}):")
    for name, seconds, mb in rows:
        print(f"  {name:<24} {mb:7.1f} MB   {seconds:6.1f} s")
    print(f"  target diagnose <= {TARGET_RSS_MB} MB  {'PASS' if verdict else 'FAIL'}")
    return verdict


def same_results(diagnose: list[str], env: dict[str, str], log: Path) -> bool:
    reports = {}
    for engine in ("hyperscan", "pure"):
        seconds, out = timed([*diagnose, "scan", str(log), "--format", "json", "--fail-on", "never", "--engine", engine], env)
        report = json.loads(out)
        report["stats"].pop("seconds", None)
        report["stats"].pop("engine", None)
        reports[engine] = (report, seconds)
    same = reports["hyperscan"][0] == reports["pure"][0]
    print(f"engines on {log.name}: hyperscan {reports['hyperscan'][1]:.1f} s, pure {reports['pure'][1]:.1f} s; "
          f"JSON reports {'IDENTICAL' if same else 'DIFFER'}  {'PASS' if same else 'FAIL'}")
    if not same:
        for key in reports["hyperscan"][0]:
            if reports["hyperscan"][0][key] != reports["pure"][0][key]:
                print(f"  differs in {key!r}")
    return same


if __name__ == "__main__":
    sys.exit(main())
