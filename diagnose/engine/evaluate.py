"""Evaluate rules over evidence: three-valued logic over all/any/none, captures, findings.

A condition is True, False, or None (its evidence was not collected). `all` is False if any
child is False, else None if any is None; `any` is True if any child is True, else None if any
is None; `none` is True unless a child is True - an exclusion only excludes on positive
evidence; `maybe` is always True and only adds the captures and evidence of its true children.
A rule that ends None is reported as skipped with the reasons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from diagnose.engine.finders import PatternSet
from diagnose.engine.findings import Finding, Skipped
from diagnose.engine.scan import FileScan, LineHit, scan_texts
from diagnose.engine.wrapped import add_wrapped_hits
from diagnose.evidence.lines import split_host
from diagnose.evidence.model import Evidence, EvidenceItem, Gap, TextKind
from diagnose.rules import conditions as facts
from diagnose.rules.conditions import FactCondition
from diagnose.rules.model import Condition, Rule, TextCondition

EVIDENCE_PER_CONDITION = 6

MISSING_TEXT = {
    TextKind.LOG: "no training log was found or given",
    TextKind.DMESG: "no kernel log (dmesg) was collected or given",
    TextKind.SLURM: "no Slurm job record (sacct / scontrol show job) was collected or given",
}


@dataclass
class Outcome:
    truth: bool | None
    items: list[EvidenceItem] = field(default_factory=list)
    captures: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    hits: list[tuple[FileScan, LineHit]] = field(default_factory=list)


@dataclass
class EngineResult:
    findings: list[Finding]
    skipped: list[Skipped]
    scans: list[FileScan]
    pattern_sets: dict[TextKind, PatternSet]
    gaps: list[Gap] = field(default_factory=list)  # patterns stopped on a file: their budget was spent


def pattern_sets(rules: Sequence[Rule], extra: Mapping[TextKind, Sequence[str]] | None = None) -> dict[TextKind, PatternSet]:
    """One pattern set per text kind holding every distinct pattern of every rule.

    Kernel-log patterns are searched in training logs too: kernel lines end up in them (a
    launcher that merges `dmesg` or `journalctl` output, lines pasted into a captured log), and
    a kernel line is the same evidence wherever it was saved.
    """
    wanted: dict[TextKind, dict[str, None]] = {kind: {} for kind in TextKind}
    for rule in rules:
        for cond in rule.conditions(TextCondition):
            wanted[cond.kind].setdefault(cond.pattern, None)
            if cond.kind is TextKind.DMESG:
                wanted[TextKind.LOG].setdefault(cond.pattern, None)
    for kind, patterns in (extra or {}).items():
        for pattern in patterns:
            wanted[kind].setdefault(pattern, None)
    return {kind: PatternSet(list(patterns)) for kind, patterns in wanted.items()}


class _Context:
    def __init__(self, evidence: Evidence, scans: Sequence[FileScan], sets: Mapping[TextKind, PatternSet],
                 since: float | None, until: float | None) -> None:
        self.evidence = evidence
        self.since = since
        self.until = until
        self.index = {kind: {p: i for i, p in enumerate(s.patterns)} for kind, s in sets.items()}
        self.scans_by_kind: dict[TextKind, list[FileScan]] = {kind: [] for kind in TextKind}
        for scan in scans:
            self.scans_by_kind[scan.source.kind].append(scan)
        self.source_order = {id(scan): n for n, scan in enumerate(scans)}
        self.host = evidence.run.host
        self.analyzed = False  # an analyzer ran (it may have found logs it could not read again)

    def in_window(self, hit: LineHit) -> bool:
        if hit.time is None:
            return True
        if self.since is not None and hit.time < self.since:
            return False
        return not (self.until is not None and hit.time > self.until)


def _text(cond: TextCondition, ctx: _Context) -> Outcome:
    sources = [(scan, ctx.index[cond.kind][cond.pattern]) for scan in ctx.scans_by_kind[cond.kind]]
    if cond.kind is TextKind.DMESG and cond.pattern in ctx.index[TextKind.LOG]:
        # Kernel lines found in training logs count too (see pattern_sets).
        sources += [(scan, ctx.index[TextKind.LOG][cond.pattern]) for scan in ctx.scans_by_kind[TextKind.LOG]]
    if not sources:
        return Outcome(None, missing=[MISSING_TEXT[cond.kind]])
    kept: list[tuple[FileScan, LineHit, int]] = []
    total = 0
    windowed = ctx.since is not None or ctx.until is not None
    for scan, index in sources:
        for summary in scan.summaries(index).values():
            hits = [h for h in summary.hits() if ctx.in_window(h)]
            if not hits:
                continue
            # Outside a window every counted hit is real; inside one, only the kept ones are known.
            total += summary.count if not windowed else len(hits)
            kept.extend((scan, hit, summary.count) for hit in hits)
    if total == 0:
        if not ctx.scans_by_kind[cond.kind]:
            # Logs without the kernel line do not prove the kernel log would not have it.
            return Outcome(None, missing=[MISSING_TEXT[cond.kind]])
        return Outcome(False)
    kept.sort(key=lambda item: (item[1].time is None, item[1].time or 0.0, ctx.source_order[id(item[0])], item[1].line_no))
    shown = kept if len(kept) <= EVIDENCE_PER_CONDITION else kept[: EVIDENCE_PER_CONDITION // 2] + kept[-(EVIDENCE_PER_CONDITION // 2):]
    items = [
        EvidenceItem(
            source=scan.source.display, text=hit.text, line=hit.line_no, time=hit.time,
            rank=hit.rank if hit.rank is not None else scan.source.rank,
            host=(split_host(hit.text)[0] or scan.source.host or ctx.host) if scan.source.host_prefixed
            else (scan.source.host or ctx.host), count=count,
            match=hit.text[hit.span[0]:hit.span[1]] if hit.span else "",
        )
        for scan, hit, count in shown
    ]
    first = kept[0][1]
    captures = {k: v for k, v in first.captures.items()}
    return Outcome(True, items, captures, hits=[(scan, hit) for scan, hit, _ in kept])


def _fact(cond: FactCondition, ctx: _Context) -> Outcome:
    result = facts.evaluate(cond, ctx.evidence)
    if result.truth is None:
        return Outcome(None, missing=[result.missing or f"{cond.kind} evidence missing"])
    if not result.truth:
        return Outcome(False)
    return Outcome(True, list(result.items), dict(result.captures or {}))


def evaluate_condition(cond: Condition, ctx: _Context) -> Outcome:
    if isinstance(cond, TextCondition):
        return _text(cond, ctx)
    if isinstance(cond, FactCondition):
        return _fact(cond, ctx)
    outcomes = [evaluate_condition(child, ctx) for child in cond.children]
    if cond.op == "maybe":
        # Never decides the answer; contributes captures and evidence when its conditions hold.
        true = [o for o in outcomes if o.truth is True]
        return _merge(true) if true else Outcome(True)
    if cond.op == "none":
        return Outcome(False) if any(o.truth is True for o in outcomes) else Outcome(True)
    missing = [m for o in outcomes if o.truth is None for m in o.missing]
    if cond.op == "all":
        if any(o.truth is False for o in outcomes):
            return Outcome(False)
        if any(o.truth is None for o in outcomes):
            return Outcome(None, missing=missing)
        return _merge(outcomes)
    true = [o for o in outcomes if o.truth is True]
    if true:
        return _merge(true)
    if missing:
        return Outcome(None, missing=missing)
    return Outcome(False)


def _merge(outcomes: Sequence[Outcome]) -> Outcome:
    merged = Outcome(True)
    for outcome in outcomes:
        merged.items.extend(outcome.items)
        merged.hits.extend(outcome.hits)
        for key, value in outcome.captures.items():
            merged.captures.setdefault(key, value)
    return merged


def evaluate_rule(rule: Rule, ctx: _Context) -> Finding | Skipped | None:
    outcome = evaluate_condition(rule.when, ctx)
    if outcome.truth is None:
        reasons = list(dict.fromkeys(outcome.missing))
        return Skipped(rule.id, "; ".join(reasons) or "evidence missing")
    if not outcome.truth:
        return None
    captures = dict(outcome.captures)
    items = _dedupe(outcome.items)
    if rule.analyze:
        from diagnose.engine.analyzers.registry import (  # only when such a rule matched
            ANALYZERS,
            AnalyzerInput,
        )

        extra = ANALYZERS[rule.analyze](AnalyzerInput(ctx.evidence, outcome.hits, captures))
        ctx.analyzed = True
        if extra.discard:  # the analyzer found the rule does not hold after all
            return None
        captures.update(extra.captures)
        items = _dedupe(extra.evidence + items if extra.lead else items + extra.evidence)
        if extra.confidence_delta:
            rule = replace(rule, confidence=round(min(1.0, max(0.0, rule.confidence + extra.confidence_delta)), 4))
    times = [item.time for item in items if item.time is not None]
    lines = [(0, item.line) for item in items if item.line is not None]
    order = min(lines) if lines else (1 << 30, 0)
    matched = frozenset((scan.source.display, hit.line_no) for scan, hit in outcome.hits)
    return Finding(rule, tuple(items), captures, min(times) if times else None, order, matched)


def _dedupe(items: Sequence[EvidenceItem]) -> list[EvidenceItem]:
    seen: dict[tuple[str, int | None, str], int] = {}
    out: list[EvidenceItem] = []
    for item in items:
        key = (item.source, item.line, item.text)
        at = seen.get(key)
        if at is None:
            seen[key] = len(out)
            out.append(item)
        elif item.match and not out[at].match:  # an analyzer's copy of a matched line: keep what matched
            out[at] = replace(out[at], match=item.match)
    return out


def run_rules(rules: Sequence[Rule], evidence: Evidence, engine: str = "auto", since: float | None = None,
              until: float | None = None, extra_patterns: Mapping[TextKind, Sequence[str]] | None = None) -> EngineResult:
    sets = pattern_sets(rules, extra_patterns)
    # The scan leaves each log's head, tail and line count on its view (evidence/logview.py): the
    # readers after it read nothing again.
    scans = scan_texts(evidence.texts, sets, engine)
    add_wrapped_hits(scans, sets, engine)
    return evaluate_scanned(rules, evidence, scans, sets, since, until)


def evaluate_scanned(rules: Sequence[Rule], evidence: Evidence, scans: Sequence[FileScan],
                     sets: Mapping[TextKind, PatternSet], since: float | None = None,
                     until: float | None = None) -> EngineResult:
    ctx = _Context(evidence, scans, sets, since, until)
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    for rule in rules:
        result = evaluate_rule(rule, ctx)
        if isinstance(result, Finding):
            findings.append(result)
        elif isinstance(result, Skipped):
            skipped.append(result)
    gaps: list[Gap] = []
    for scan in scans:
        kind = scan.source.kind

        def owners(index: int, kind: TextKind = kind) -> str:
            pattern = sets[kind].patterns[index]
            ids = [r.id for r in rules if any(c.kind is kind and c.pattern == pattern for c in r.conditions(TextCondition))]
            return ",".join(ids) or pattern

        for index, (lines, line_no) in scan.stopped.items():
            # Shown with the gaps, not the skipped rules: the file was only partly checked.
            gaps.append(Gap(scan.source.display,
                            f"rule {owners(index)}: regex confirmation budget spent on {scan.source.display} after "
                            f"{lines} line(s); not checked from line {line_no} on (pattern may be catastrophic)"))
        for index, count in scan.timeouts.items():
            if index not in scan.stopped:
                skipped.append(Skipped(owners(index), f"pattern gave up on {count} long line(s) of {scan.source.display}"))
    if ctx.analyzed:
        from diagnose.engine.analyzers.runlog import cached_gaps

        gaps.extend(cached_gaps(evidence))
    return EngineResult(findings, skipped, list(scans), dict(sets), gaps)
