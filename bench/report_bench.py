"""What the look of the reports costs (issue 17): building the run's timeline and rendering the
terminal and HTML reports, against the diagnosis that precedes them, in the same process.

On a log made by bench/loggen.py (8 ranks, real shapes) and on the real fixture bundles, times
(median of N, warm caches):

  diagnose   app.diagnose(): scan, rules, ranking, checks and the timeline (the baseline)
  timeline   engine.timeline.build_timeline() alone (its share of the above)
  terminal   the terminal report into a pipe (plain writer, 80 columns) and through rich (140)
  html       the HTML report

and prints each as a ratio of `diagnose`. Target: the timeline and either report stay small
beside the diagnosis (each <= 0.25 of it on the big log).

    python bench/report_bench.py [--size-mb 64] [--runs 5]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))


def median_time(func: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        func()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(name: str, evidence: object, runs: int) -> None:
    from rich.console import Console

    from diagnose.app import diagnose
    from diagnose.engine.kernel_events import kernel_events
    from diagnose.engine.runview import run_view
    from diagnose.engine.timeline import build_timeline
    from diagnose.report import html, terminal
    from diagnose.rules.cache import load_rules_cached

    rules = load_rules_cached([])
    diagnosis = diagnose(evidence, rules)  # type: ignore[arg-type]  # warm: caches, imports
    base = median_time(lambda: diagnose(evidence, rules), runs)  # type: ignore[arg-type]
    view, events = run_view(evidence), kernel_events(evidence)  # type: ignore[arg-type]
    timeline = median_time(lambda: build_timeline(evidence, diagnosis.causes, events, view), runs)  # type: ignore[arg-type]
    plain = median_time(lambda: terminal.write(diagnosis, terminal.PlainWriter(io.StringIO(), 80)), runs)
    coloured = median_time(lambda: terminal.write(diagnosis, terminal.RichWriter(
        console=Console(file=io.StringIO(), width=140, force_terminal=True))), runs)
    page = median_time(lambda: html.render_html(diagnosis), runs)
    print(f"{name}: diagnose {base:.3f} s | timeline {timeline:.4f} s ({timeline / base:.3f}) | "
          f"terminal plain {plain:.4f} s ({plain / base:.3f}), rich {coloured:.4f} s ({coloured / base:.3f}) | "
          f"html {page:.4f} s ({page / base:.3f}, {len(html.render_html(diagnosis)) // 1024} KiB)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    import loggen

    from diagnose.evidence.bundle import evidence_from_bundle
    from diagnose.evidence.inputs import evidence_from_paths

    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / f"report-{args.size_mb}m.log"
    if not log.exists() or log.stat().st_size < args.size_mb * 1024 * 1024 * 0.9:
        loggen.generate(log, args.size_mb * 1024 * 1024)
    measure(f"loggen {args.size_mb} MiB", evidence_from_paths([str(log)]), args.runs)
    for case in ("nccl-hang-2gpu", "seed-host-oom", "seed-flex7-tmux-died"):
        measure(case, evidence_from_bundle(REPO / "fixtures" / case), args.runs * 4)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
