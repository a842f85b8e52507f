"""No benign line costs a confirmation (issue 23): the guard that a fast machine cannot fool.

Every candidate line a finder nominates is confirmed in Python (~10 us a line, under the GIL);
one that the pattern does not match is time spent on nothing. A rule whose prefilter passes a
line every training log prints (`grad_norm` for "grad_norm is NaN") made a 1 GB log of step
lines 17 x slower than grep, while every timing test stayed green on a fast box. So this counts,
deterministically, the confirmations that find nothing per MB of real output, for the built-in
pack and both finders, and names the rule and the line's shape when a rule makes common lines
candidates.

The texts are real output only: the logs of bench/data/real (committed to public repositories,
bench/data/real/SOURCES.md), bench/data, every fixture's logs and the captured shapes of
tests/data, plus the adversarial log of bench/reallog.py (their metric lines alone, every line a
metric line).
"""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

from diagnose.engine import finders
from diagnose.engine.evaluate import pattern_sets
from diagnose.evidence.lines import ANSI_BYTES
from diagnose.evidence.model import FileKind, TextKind
from diagnose.evidence.sniff import sniff
from diagnose.evidence.textio import read_head
from diagnose.rules.cache import load_rules_cached
from diagnose.rules.model import TextCondition
from tests.support.scan import ENGINES

REPO = Path(__file__).resolve().parents[2]
FOLDERS = (REPO / "bench" / "data", REPO / "fixtures", REPO / "tests" / "data" / "logs", REPO / "tests" / "data" / "shapes")
SUFFIXES = (".log", ".txt", ".out", ".err")
# A rule may waste this many confirmations per MB of real output, over all the texts...
WASTED_PER_MB = 10.0
# ... and, in any one text, this share of its lines (at least MIN_FLAGGED of them): a pattern
# that nominates a line every step prints fails here even if that text is small.
WASTED_SHARE = 0.01
MIN_FLAGGED = 5


def _real_texts() -> list[Path]:
    return sorted(path for folder in FOLDERS for path in folder.rglob("*")
                  if path.is_file() and path.suffix in SUFFIXES and path.stat().st_size < 8 << 20)


def _metric_lines() -> bytes:
    spec = importlib.util.spec_from_file_location("reallog", REPO / "bench" / "reallog.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # 60,000 lines (~3 MB), every framework's shapes among them: this process stays small (a
    # subprocess forked by a later test inherits its peak RSS).
    return b"".join(module._lines("metrics", limit=60_000))


@cache
def _pack(kind: TextKind = TextKind.LOG) -> tuple[finders.PatternSet, dict[str, str]]:
    rules = load_rules_cached().rules
    owners: dict[str, str] = {}
    for rule in rules:
        for cond in rule.conditions(TextCondition):
            owners.setdefault(cond.pattern, rule.id)
    return pattern_sets(rules)[kind], owners


def _kind(path: Path) -> TextKind | None:
    """The pattern set the scan searches this file with (as `diagnose scan` sniffs it), if any."""
    kind = sniff(path, read_head(path))
    return {FileKind.LOG: TextKind.LOG, FileKind.DMESG: TextKind.DMESG}.get(kind)


def shape(line: str) -> str:
    """A line as its kind: numbers as N, cut to 120 characters (what a failure names)."""
    return re.sub(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", "N", line.strip())[:120]


def _complaints(found: finders.Census, where: str, per_mb: float | None, share: float | None,
                kind: TextKind = TextKind.LOG) -> list[str]:
    patterns, owners = _pack(kind)
    said = []
    for index, wasted in found.wasted.most_common():
        rate = wasted / max(found.bytes / 1e6, 1e-9)
        too_many = (per_mb is not None and rate > per_mb) or (
            share is not None and wasted >= MIN_FLAGGED and wasted > share * max(found.lines, 1))
        if too_many:
            said.append(f"{owners.get(patterns.patterns[index], '?')}: {wasted} wasted confirmations in {where} "
                        f"({rate:.1f}/MB, {wasted / max(found.lines, 1):.1%} of its lines), lines like: "
                        f"{shape(found.example[index])!r}")
    return said


def test_the_real_texts_are_there() -> None:
    texts = _real_texts()
    assert len(texts) > 150
    assert len(list((REPO / "bench" / "data" / "real").glob("*.log"))) >= 15
    assert sum(p.stat().st_size for p in texts) > 6e6


@pytest.mark.parametrize("engine", ENGINES)
def test_no_rule_makes_common_real_lines_candidates(engine: str) -> None:
    totals = {kind: finders.Census() for kind in (TextKind.LOG, TextKind.DMESG)}
    complaints: list[str] = []
    for path in _real_texts():
        kind = _kind(path)
        if kind is None:
            continue  # nvidia-smi output, package lists ...: not searched with line patterns
        patterns, _owners = _pack(kind)
        _name, finder = finders.make_finder(patterns, engine)
        found = finders.census(finder, patterns, ANSI_BYTES.sub(b"", path.read_bytes()))
        complaints += _complaints(found, str(path.relative_to(REPO)), None, WASTED_SHARE, kind)
        totals[kind].add(found)
    for kind, total in totals.items():
        complaints += _complaints(total, f"all the real texts read as {kind.value}", WASTED_PER_MB, None, kind)
    assert totals[TextKind.LOG].lines > 50_000 and totals[TextKind.DMESG].lines > 1_000
    assert not complaints, "\n".join(complaints)


@pytest.mark.parametrize("engine", ENGINES)
def test_metric_lines_cost_no_confirmation(engine: str) -> None:
    """Every line a metric line (loss, grad norm, lr in the shapes of HF Trainer, Megatron,
    DeepSpeed, llm.c, fairseq, JAX, verl): none of them NaN, so none is worth a confirmation."""
    patterns, _owners = _pack()
    _name, finder = finders.make_finder(patterns, engine)
    data = _metric_lines()
    found = finders.census(finder, patterns, ANSI_BYTES.sub(b"", data))
    assert found.lines > 10_000
    complaints = _complaints(found, "the metric lines of bench/data/real", 1.0, WASTED_SHARE / 10)
    assert not complaints, "\n".join(complaints)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_rule_that_nominates_every_step_line_is_named(engine: str) -> None:
    """The guard can fail: a pattern found by a text every step line prints ('grad_norm' of a
    real HF Trainer line) is reported with its line's shape."""
    rule_pattern = r"(?i)grad_norm['\"]?\s*[:=]\s*['\"]?(?P<v>\d+\.\d{20,})"  # one found by 'grad_norm' alone
    patterns = finders.PatternSet([rule_pattern])
    _name, finder = finders.make_finder(patterns, engine)
    data = (REPO / "fixtures" / "healthy-hf-trainer" / "logs" / "train-transformers-4.44.2.log").read_bytes()
    found = finders.census(finder, patterns, ANSI_BYTES.sub(b"", data))
    # The superset keeps every line with grad_norm and digits: the census must see them wasted.
    assert found.wasted[0] >= 5
    assert "grad_norm" in shape(found.example[0])
