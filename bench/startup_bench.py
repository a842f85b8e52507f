"""Start-up of a small scan, this tree against a named baseline tree, in the same run.

`python -m diagnose scan LOG` of a ~10 KB real log (a fixture), wall clock per process, each
tree through PYTHONPATH, runs interleaved (A B B A ...) so load on the machine falls on both.
PYTHONDONTWRITEBYTECODE is removed from the environment: with it set every start compiles
every module again, while an installed wheel has its byte code. Warm-up runs first (byte code
written, rule cache and hyperscan database cached, in a cache folder of the bench's own); the
processes run in an empty folder (no diagnose.toml / pyproject.toml to look up, and `-m` puts
the working folder first on sys.path: run from a tree, that tree's code would be imported). Then `python -X importtime` once per tree: how
many modules a run imports, their import time, and the modules only one tree imports.

    python bench/startup_bench.py [--baseline /work/wt/baseline] [--tree PATH ...] [--runs 15] [--log PATH]
                                  [--format terminal]

Prints the median (and min) per tree and the ratio of each measured tree (this one by default;
--tree may repeat, e.g. a copy of the tree before a change) to the baseline, and whether their
outputs agree. The log is read from the first tree that has the file (all scan the same bytes).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_LOG = "fixtures/nccl-hang-2gpu/logs/nccl-hang.log"  # 12.7 KB, two ranks: the Ranks table and timeline


def env_for(tree: Path, cache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "DIAGNOSE_DEBUG", "DIAGNOSE_NO_CACHE")}
    env["PYTHONPATH"] = str(tree)
    # A cache of our own: the shared one keeps 8 entries of a kind, and other trees' runs evict
    # ours (a rule set parsed again costs ~0.6 s, which would be measured instead of start-up).
    env["DIAGNOSE_CACHE_DIR"] = cache
    return env


def run_once(tree: Path, args: list[str], cwd: str) -> tuple[float, bytes]:
    env = env_for(tree, os.path.join(cwd, ".cache"))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "diagnose", "scan", *args], env=env, cwd=cwd,
                          capture_output=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{tree}: exit {done.returncode}: {done.stderr.decode(errors='replace')[-400:]}")
    return seconds, done.stdout


def comparable(output: bytes) -> bytes:
    """A report without its timings ("in 0.147 s", "seconds": 0.031, JUnit's time="...")."""
    output = re.sub(rb"\b\d+\.\d+ s\b", b"X s", output)
    output = re.sub(rb'"seconds": \d+(?:\.\d+)?', b'"seconds": X', output)
    return re.sub(rb'time="\d+(?:\.\d+)?"', b'time="X"', output)


def imports(tree: Path, args: list[str], cwd: str) -> dict[str, int]:
    """module -> its own import time in microseconds (python -X importtime)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "diagnose", "scan", *args],
                          env=env_for(tree, os.path.join(cwd, ".cache")), cwd=cwd, capture_output=True, text=True, check=False)
    found: dict[str, int] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        own_us, _cumulative, name = line.split("|", 2)  # "import time: self [us] | cumulative | package"
        own = own_us.replace("import time:", "").strip()
        if own.isdigit():
            found[name.strip()] = int(own)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=Path("/work/wt/baseline"), help="the baseline tree")
    parser.add_argument("--tree", type=Path, action="append", help="a tree measured (default: this one; may repeat)")
    parser.add_argument("--log", default=DEFAULT_LOG, help="the log scanned (relative: in the trees)")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--format", default="terminal")
    opts = parser.parse_args()
    trees = {"baseline": opts.baseline.resolve()}
    for index, tree in enumerate(opts.tree or [REPO]):
        trees["this tree" if index == 0 else f"tree {index + 1}"] = tree.resolve()
    for tree in trees.values():
        if not (tree / "diagnose" / "__main__.py").is_file():
            raise SystemExit(f"{tree}: not a diagnose tree")
    log = Path(opts.log)
    if not log.is_absolute():
        log = next((t / log for t in trees.values() if (t / log).is_file()), log)
    if not log.is_file():
        raise SystemExit(f"{opts.log}: no such log")
    args = [str(log), "--format", opts.format]
    samples: dict[str, list[float]] = {name: [] for name in trees}
    outputs: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as cwd:
        for name, tree in trees.items():  # warm-up: byte code, rule cache, hyperscan database
            for _ in range(2):
                outputs[name] = comparable(run_once(tree, args, cwd)[1])
        order = list(trees.items())
        for index in range(opts.runs):
            for name, tree in order if index % 2 == 0 else reversed(order):
                samples[name].append(run_once(tree, args, cwd)[0])
        modules = {name: imports(tree, args, cwd) for name, tree in trees.items()}
    print(f"diagnose scan {log.name} ({log.stat().st_size / 1024:.1f} KB) --format {opts.format}: wall per process, "
          f"median of {opts.runs}, interleaved; PYTHONDONTWRITEBYTECODE unset; load average {os.getloadavg()[0]:.2f}")
    median = {name: statistics.median(values) for name, values in samples.items()}
    for name, tree in trees.items():
        mods = modules[name]
        own = [m for m in mods if m.split(".")[0] == "diagnose"]
        print(f"  {name:<10} {median[name]:.3f} s (min {min(samples[name]):.3f})   {len(mods)} modules imported "
              f"({len(own)} of diagnose), {sum(mods.values()) / 1000:.1f} ms in imports (under -X importtime)   {tree}")
    for name in list(trees)[1:]:
        same = "same output" if outputs[name] == outputs["baseline"] else "output differs from the baseline's"
        print(f"  ratio {name} / baseline = {median[name] / median['baseline']:.2f} (of the minimums "
              f"{min(samples[name]) / min(samples['baseline']):.2f})   ({same})")
        # diagnose's own modules are counted above (a tree may lay them out differently); others by name
        for one, other in (("baseline", name), (name, "baseline")):
            only = sorted(m for m in set(modules[one]) - set(modules[other]) if m.split(".")[0] != "diagnose")
            if only:
                print(f"    imported only by {one} (not diagnose's): {', '.join(only)}")
    if len(trees) > 2:
        names = list(trees)[1:]
        same = all(outputs[n] == outputs[names[0]] for n in names)
        print(f"  the measured trees' outputs: {'identical' if same else 'differ'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
