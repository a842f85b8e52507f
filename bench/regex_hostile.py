"""Time every regex of the package on hostile long lines and list the slow ones.

Finds the patterns two ways: compiled pattern objects held by modules (module globals, class
attributes, tuples/lists/dicts of them, redact's _Pattern wrappers), and string literals passed
to re./regex. calls in the source (AST). Each pattern is timed with search/match on a small and
a doubled line of each shape; one that takes long or grows faster than linearly is listed.

    python bench/regex_hostile.py [--size 20000] [--all]

It also times the functions that run many regexes over one text: redact(), sarif normalise(),
tracebacks.crashes_in_text(), lineinfo.log_time().
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
import re
import sys
import time
from pathlib import Path
from typing import Any

import regex

import diagnose

ROOT = Path(diagnose.__file__).parent
SHAPES: dict[str, str] = {
    "a": "a", "A": "A", "space": " ", "tab": "\t", "digits": "7", "Error: ": "Error: ", "File \"": 'File "',
    "[rank0]:": "[rank0]:", "a.": "a.", "a ": "a ", "0.": "0.", "x=": "x=", "key=": "key=", "KEY_": "KEY_",
    "[": "[", "[1": "[1", "<": "<", "(": "(", "'": "'", "\"": '"', "a/": "a/", ":": ":", "-": "-",
    "Aa": "Aa", "a:": "a:", "a=a ": "a=a ", "token ": "token ", "hf_": "hf_", "0x": "0x", "Killed ": "Killed ",
    "Error": "Error", "at ": "at ", "#": "#", "|": "|", ",": ",", "rank": "rank", "1.": "1.", "1:": "1:",
    "x": "x", "_": "_", "://": "://", "a@": "a@", "Traceback": "Traceback", "CUDA ": "CUDA ", "eyJ": "eyJ",
    "sk-": "sk-", "login(": "login(", "a\\": "a\\", "\\x1b[": "\x1b[", "%": "%", "NCCL ": "NCCL ",
}


# Each shape is also tried behind these: anchored patterns only ever see a line's start.
PREFIXES = ("", "[", "Error: ", " ", "x=")


def _patterns_in_objects() -> dict[str, Any]:
    found: dict[str, Any] = {}

    def add(name: str, value: Any) -> None:
        if isinstance(value, (re.Pattern, regex.Pattern)):
            found.setdefault(f"{name}", value)
        elif isinstance(value, (tuple, list)):
            for i, item in enumerate(value):
                add(f"{name}[{i}]", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                add(f"{name}[{key!r}]", item)
        elif hasattr(value, "regex") and isinstance(value.regex, (re.Pattern, regex.Pattern)):
            add(f"{name}.regex", value.regex)

    for info in pkgutil.walk_packages(diagnose.__path__, "diagnose."):
        try:
            module = importlib.import_module(info.name)
        except Exception as exc:  # a module needing an absent optional package
            print(f"# cannot import {info.name}: {exc}", file=sys.stderr)
            continue
        for attr, value in vars(module).items():
            add(f"{info.name}.{attr}", value)
            if isinstance(value, type) and value.__module__ == info.name:
                for cattr, cvalue in vars(value).items():
                    add(f"{info.name}.{attr}.{cattr}", cvalue)
    return found


# Modules whose in-function regexes only ever see our own inputs, never evidence: the command
# line (cli), the repo's rule and fixture files (ruletools), the user's config file (runs).
TRUSTED = ("diagnose/cli.py", "diagnose/ruletools.py", "diagnose/runs.py")


def _patterns_in_source() -> dict[str, tuple[Any, str]]:
    """String literals given to re.X(...) / regex.X(...) inside functions, with X."""
    found: dict[str, tuple[Any, str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        if str(path.relative_to(ROOT.parent)) in TRUSTED:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("re", "regex")):
                continue
            if not node.args or not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[0].value, (str, bytes)):
                continue
            text = node.args[0].value
            module = re if node.func.value.id == "re" else regex
            try:
                compiled = module.compile(text)
            except Exception:
                continue
            # Timed the way it is called: a fullmatch() of `\s*(\d+)\s*` is linear, its search() is not.
            found[f"{path.relative_to(ROOT.parent)}:{node.lineno}"] = (compiled, node.func.attr)
    return found


def _time(pattern: Any, text: Any, how: str) -> float:
    started = time.perf_counter()
    if how == "search":
        pattern.search(text)
    elif how == "match":
        pattern.match(text)
    elif how == "fullmatch":
        pattern.fullmatch(text)
    elif how == "sub":
        pattern.sub("", text)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=20000, help="characters of the small line (the big one is 2x)")
    parser.add_argument("--slow", type=float, default=0.02, help="seconds on the 2x line that count as slow")
    parser.add_argument("--all", action="store_true", help="list every pattern's worst time")
    args = parser.parse_args()
    patterns: dict[str, Any] = dict(_patterns_in_objects())
    patterns.update(_patterns_in_source())
    print(f"# {len(patterns)} patterns, lines of {args.size} and {2 * args.size} characters, {len(SHAPES)} shapes")
    slow = 0
    worst_all: list[tuple[float, str, str, str, float]] = []
    for name, entry in sorted(patterns.items()):
        pattern, called = entry if isinstance(entry, tuple) else (entry, "search")
        hows = ("fullmatch",) if called == "fullmatch" else ("match",) if called == "match" else ("search", "match")
        worst = (0.0, "", "", 0.0)
        for (shape, unit), prefix in ((item, prefix) for item in SHAPES.items() for prefix in PREFIXES):
            if worst[0] >= args.slow * 20:
                break  # already known slow: no need to measure how slow on every shape
            for how in hows:
                small = prefix + (unit * (args.size // len(unit) + 1))[: args.size]
                big = prefix + small[len(prefix):] * 2
                shape_name = prefix + shape
                if isinstance(pattern.pattern, bytes):
                    small_t: Any = small.encode("utf-8", "surrogateescape")
                    big_t: Any = big.encode("utf-8", "surrogateescape")
                else:
                    small_t, big_t = small, big
                t1 = _time(pattern, small_t, how)
                t2 = _time(pattern, big_t, how)
                if t2 > worst[0]:
                    worst = (t2, shape_name, how, t2 / max(t1, 1e-9))
        worst_all.append((worst[0], name, worst[1], worst[2], worst[3]))
        if worst[0] >= args.slow:
            slow += 1
    worst_all.sort(reverse=True)
    for seconds, name, shape, how, ratio in worst_all if args.all else [w for w in worst_all if w[0] >= args.slow]:
        print(f"{seconds:8.3f}s  x{ratio:5.1f}  {how:6} {shape!r:14} {name}")
    print(f"# {slow} slow pattern(s) (>= {args.slow}s on {2 * args.size} characters)")
    _functions(args.size * 2)
    return 1 if slow else 0


def _functions(size: int) -> None:
    from diagnose.engine.tracebacks import crashes_in_text
    from diagnose.evidence.lines import log_time
    from diagnose.evidence.redact import redact
    from diagnose.report.sarif import normalise

    for label, func in (("redact", redact), ("sarif.normalise", normalise), ("crashes_in_text", crashes_in_text),
                        ("log_time", log_time)):
        worst = (0.0, "")
        for (shape, unit), prefix in ((item, prefix) for item in SHAPES.items() for prefix in PREFIXES):
            line = prefix + (unit * (size // len(unit) + 1))[:size]
            shape = prefix + shape
            started = time.perf_counter()
            func(line)
            took = time.perf_counter() - started
            if took > worst[0]:
                worst = (took, shape)
        print(f"# function {label}: worst {worst[0]:.3f}s on {worst[1]!r} x {size}")


if __name__ == "__main__":
    sys.exit(main())
