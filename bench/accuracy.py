#!/usr/bin/env python3
"""How often `diagnose scan` names the right cause on real logs nobody here wrote (issue 31).

    python bench/accuracy.py                    # every case of corpus/cases, both splits
    python bench/accuracy.py --split dev        # only the development split, its misses listed
    python bench/accuracy.py --src CHECKOUT     # score another checkout's diagnose
    python bench/accuracy.py --json out.json    # every case's result, for comparing two runs

Each case (corpus/README.md) holds a real log and the cause its source concluded, written down
before the tool ran on it. The tool runs as a user would run it on the case's files
(`diagnose scan FILES --format json --fail-on never`, a process each); its top cause is compared
with the expected rule id(s):
- a crashed or hung case is right at top-1 when the first cause is one of the expected ids, at
  top-3 when one of the first three is; an expected `new:<family>` is a miss until a rule is
  written for the family and corpus/new-rules.yaml names it (the label itself is never rewritten);
- a healthy case is right when no cause of warning severity or above is reported (no error, and
  no "killed from outside" warning);
- also counted: crashes with no cause at all (silent), healthy logs flagged, top-1 hits only
  through the engine's generic causes (unrecognised.crash, run.*), logs not read (exit 2, or no
  line scanned).
A quarter of the cases (sha256 of the id starting 0-3) is the held-out split: scored, but its
misses are listed only with --show-held-out, so rules are not written to fit it. To look for a
shape in the corpus, search only the development split's folders (--dev-dirs): a grep over
corpus/cases/* reads held-out cases too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CASES = HERE.parent / "corpus" / "cases"
NEW_RULES = HERE.parent / "corpus" / "new-rules.yaml"  # `new:<family>` labels -> the rule written for them since
GENERIC = ("unrecognised.crash", "run.stalled", "run.never-started", "run.killed-from-outside",
           "run.stopped-without-error", "run.exited-with-error")
LOUD = ("warning", "error", "critical")


@dataclass
class Case:
    id: str
    folder: Path
    files: list[Path]
    origin: str
    framework: str
    ranks: int
    outcome: str
    expected: list[str]
    held_out: bool
    length: str = "full"


@dataclass
class Result:
    id: str
    split: str
    origin: str
    framework: str
    outcome: str
    expected: list[str]
    multirank: bool
    causes: list[tuple[str, str]] = field(default_factory=list)  # (id, severity), ranked
    state: str = ""
    exit: int = 0
    error: str = ""
    lines: int = 0
    top1: bool = False
    top3: bool = False
    silent: bool = False
    flagged: bool = False
    generic: bool = False
    unread: bool = False


def held_out(case_id: str) -> bool:
    return hashlib.sha256(case_id.encode()).hexdigest()[0] in "0123"


def load_cases(folder: Path = CASES) -> list[Case]:
    answered = yaml.safe_load(NEW_RULES.read_text(encoding="utf-8")) if NEW_RULES.exists() else {}
    rules = {p.stem for p in (HERE.parent / "rules").rglob("*.yaml")}
    cases = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        meta_path = sub / "case.yaml"
        if not meta_path.exists():
            continue
        meta = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
        expected = meta.get("expected")
        expected = [str(e) for e in expected] if isinstance(expected, list) else [str(expected)]
        # a family labelled new: whose rule has been written since is answered by that rule
        expected += [answered[e] for e in expected if e in (answered or {}) and answered[e] in rules]
        files = sorted(p for p in sub.iterdir() if p.is_file() and p.name != "case.yaml")
        cases.append(Case(sub.name, sub, files, str(meta.get("origin", "?")), str(meta.get("framework", "?")),
                          int(meta.get("ranks") or 1), str(meta.get("outcome", "crashed")), expected,
                          held_out(sub.name), str(meta.get("length", "full"))))
    return cases


def run_case(case: Case, python: str, env: dict[str, str]) -> Result:
    result = Result(case.id, "held-out" if case.held_out else "dev", case.origin, case.framework, case.outcome,
                    case.expected, case.ranks > 1)
    argv = [python, "-m", "diagnose", "scan", *(str(f.resolve()) for f in case.files), "--format", "json",
            "--fail-on", "never"]
    try:
        # From a folder with no diagnose package in it: `-m diagnose` finds the one PYTHONPATH names.
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False,
                              cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        result.exit, result.error, result.unread = -1, "timed out", True
        return result
    result.exit = done.returncode
    try:
        report = json.loads(done.stdout)
    except ValueError:
        result.error = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        result.unread = True
        return result
    result.causes = [(c["id"], c["severity"]) for c in report.get("causes", [])]
    result.state = report.get("run", {}).get("state", "")
    result.lines = int(report.get("stats", {}).get("lines_scanned", 0))
    result.unread = result.lines == 0
    return score(result)


def score(result: Result) -> Result:
    ids = [cause for cause, _severity in result.causes]
    if result.outcome == "healthy":
        loud = [cause for cause, severity in result.causes if severity in LOUD]
        result.flagged = bool(loud)
        result.top1 = result.top3 = not loud and not result.unread
        return result
    result.silent = not ids
    result.top1 = bool(ids) and ids[0] in result.expected
    result.top3 = any(cause in result.expected for cause in ids[:3])
    result.generic = result.top1 and ids[0] in GENERIC
    return result


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f} %" if whole else "    -  "


def report(results: Sequence[Result], show_held_out: bool) -> None:
    for split in ("dev", "held-out", "all"):
        chosen = [r for r in results if split in ("all", r.split)]
        if not chosen:
            continue
        n = len(chosen)
        crashed = [r for r in chosen if r.outcome != "healthy"]
        healthy = [r for r in chosen if r.outcome == "healthy"]
        print(f"\n== {split}: {n} cases ({len(crashed)} crashed or hung, {len(healthy)} healthy, "
              f"{sum(r.multirank for r in chosen)} multi-rank)")
        print(f"  top-1 {percent(sum(r.top1 for r in chosen), n)}   top-3 {percent(sum(r.top3 for r in chosen), n)}")
        print(f"  crashes with no cause {sum(r.silent for r in crashed)}; healthy logs flagged "
              f"{sum(r.flagged for r in healthy)}; top-1 only through a generic cause "
              f"{sum(r.generic for r in crashed)}; logs not read {sum(r.unread for r in chosen)}; "
              f"expected a rule that does not exist yet {sum(all(e.startswith('new:') for e in r.expected) for r in crashed)}")
        for label, key in (("origin", "origin"), ("framework", "framework")):
            groups: dict[str, list[Result]] = defaultdict(list)
            for r in chosen:
                groups[getattr(r, key)].append(r)
            cells = [f"{name} {sum(r.top1 for r in rs)}/{len(rs)}" for name, rs in
                     sorted(groups.items(), key=lambda kv: -len(kv[1]))]
            print(f"  by {label}: " + ", ".join(cells))
    misses = [r for r in results if not r.top1 and (show_held_out or r.split == "dev")]
    if misses:
        print(f"\n== misses ({'both splits' if show_held_out else 'dev split only'}): {len(misses)}")
        for r in misses:
            got = ", ".join(f"{c}({s[0]})" for c, s in r.causes[:3]) or (r.error or "no cause")
            print(f"  {r.id:<44} expected {'|'.join(r.expected):<40} got {got}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, default=HERE.parent, help="checkout whose diagnose is scored")
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--split", choices=("dev", "held-out", "all"), default="all")
    parser.add_argument("--show-held-out", action="store_true", help="list the held-out split's misses too")
    parser.add_argument("--json", type=Path, help="write every case's result here")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--dev-dirs", action="store_true",
                        help="print the development split's case folders and stop: search those, never "
                             "corpus/cases/* (grep -l TEXT -r $(python bench/accuracy.py --dev-dirs))")
    args = parser.parse_args(argv)
    if args.dev_dirs:
        print("\n".join(str(sub) for sub in sorted(args.cases.iterdir()) if sub.is_dir() and not held_out(sub.name)))
        return 0
    cases = [c for c in load_cases(args.cases) if args.split in ("all", "held-out" if c.held_out else "dev")]
    env = dict(os.environ, PYTHONPATH=str(args.src.resolve()), COLUMNS="200")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda c: run_case(c, sys.executable, env), cases))
    report(results, args.show_held_out)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1), encoding="utf-8")
    counts: Counter[str] = Counter(r.split for r in results)
    print(f"\nscored {len(results)} cases ({counts['dev']} dev, {counts['held-out']} held-out) "
          f"with diagnose from {args.src.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
