"""Run the parser fuzz targets of tests/support/fuzz.py for longer than CI does.

    python bench/fuzz_parsers.py --examples 20000            # every target
    python bench/fuzz_parsers.py --examples 5000 --only xml  # targets whose name contains "xml"

Prints, per target, how many inputs it was fed, how long that took, and any failure (an
exception other than ParseError) with the shrunk input that caused it. Exit status 1 when a
target failed. Random each run (no example database): run it again to explore further.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.support.fuzz import Target, targets


def fuzz(target: Target, examples: int) -> tuple[int, float, str | None]:
    """(inputs fed, seconds, failure text or None)."""
    fed = 0

    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate, Phase.shrink],
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        nonlocal fed
        fed += 1
        value: Any = data.draw(target.strategy)
        target.run(value)

    started = time.perf_counter()
    failure = None
    try:
        check()
    except Exception as exc:  # what the target let escape, after shrinking
        lines = traceback.format_exception_only(type(exc), exc)
        failure = "".join(lines).strip()
    return fed, time.perf_counter() - started, failure


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="inputs per target (default 2000)")
    parser.add_argument("--only", default="", help="run only targets whose name contains this (case-insensitive)")
    args = parser.parse_args()
    chosen = [t for t in targets() if args.only.lower() in t.name.lower()]
    if not chosen:
        print(f"no target matches {args.only!r}", file=sys.stderr)
        return 2
    failed = 0
    total = 0
    began = time.perf_counter()
    print(f"{'target':<52} {'inputs':>8} {'seconds':>8} {'inputs/s':>9}  result")
    for target in chosen:
        fed, seconds, failure = fuzz(target, args.examples)
        total += fed
        result = "ok" if failure is None else "FAILED"
        print(f"{target.name:<52} {fed:>8} {seconds:>8.1f} {fed / max(seconds, 1e-9):>9.0f}  {result}", flush=True)
        if failure is not None:
            failed += 1
            print("    " + failure[:4000].replace("\n", "\n    "), flush=True)
    print(f"{len(chosen)} target(s), {total} inputs in {time.perf_counter() - began:.0f} s, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
