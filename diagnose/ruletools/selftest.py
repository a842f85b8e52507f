"""`diagnose rules test`: every rule's own test cases, and the fixtures' expected rankings."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from diagnose.engine.evaluate import run_rules
from diagnose.errors import DiagnoseError
from diagnose.evidence.facts import CheckpointState, ExpectedFile, GpuState, ProcessState, TmuxState
from diagnose.evidence.model import Evidence, ExitRecord, MetricSeries, Packages, RunInfo, TextFile, TextKind
from diagnose.rules.model import Rule, RuleSet, RuleTest
from diagnose.rules.testcase import modernise
from diagnose.vocab import Severity

Echo = Callable[[str], Any]


def _lines(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _records(value: Any, key: str) -> list[Any]:
    """`file` and `exit` hold one record or a list of them."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return value
    raise ValueError(f"{key}: expected an object or a list of them, got {type(value).__name__}")


def _metrics(data: Any) -> tuple[MetricSeries, ...]:
    """{train_loss: [47.9, 657294.3, inf]}: values by step 0, 1, 2 ...; or [[step, value], ...]."""
    return tuple(
        MetricSeries("metrics", str(name), tuple(
            (int(v[0]), float(v[1]), None) if isinstance(v, list) else (i, float(v), None) for i, v in enumerate(values)))
        for name, values in dict(data).items()
    )


def evidence_for_case(case: Mapping[str, Any], workdir: Path) -> Evidence:
    """In-memory evidence from a rule test case: under each condition key, that fact in its JSON
    form (the one the bundle stores; strict: an unknown key is an error). Lines go to files the
    scanner reads."""
    case = modernise(case)
    texts: list[TextFile] = []
    for kind in (TextKind.LOG, TextKind.DMESG, TextKind.SLURM):
        if kind.value in case:
            path = workdir / f"{kind.value}.txt"
            path.write_text("\n".join(_lines(case[kind.value])) + "\n", encoding="utf-8")
            texts.append(TextFile(kind, path, f"{kind.value}.txt"))
    files = exits = None
    if "file" in case:
        files = tuple(ExpectedFile.from_json(f, f"file[{n}]", strict=True) for n, f in enumerate(_records(case["file"], "file")))
    if "exit" in case:
        exits = tuple(ExitRecord.from_json(e, f"exit[{n}]", strict=True) for n, e in enumerate(_records(case["exit"], "exit")))
    return Evidence(
        run=RunInfo("test", "test"), texts=tuple(texts),
        packages=Packages.from_json(case["package"], "packages") if "package" in case else None,
        gpu=GpuState.from_json(case["gpu"], strict=True) if "gpu" in case else None,
        tmux=TmuxState.from_json(case["tmux"], strict=True) if "tmux" in case else None,
        files=files,
        checkpoints=CheckpointState.from_json(case["checkpoint"], "checkpoint", strict=True) if "checkpoint" in case else None,
        process=ProcessState.from_json(case["process"], strict=True) if "process" in case else None,
        exits=exits,
        metrics=_metrics(case["metric"]) if "metric" in case else None,
    )


def check_case(rule: Rule, test: RuleTest, engine: str = "auto") -> str | None:
    """None when the case passes, else what went wrong."""
    with tempfile.TemporaryDirectory(prefix="diagnose-ruletest-") as tmp:
        try:
            evidence = evidence_for_case(test.case, Path(tmp))
        except (KeyError, TypeError, ValueError) as exc:
            return f"malformed test case: {exc}"
        result = run_rules([rule], evidence, engine=engine)
    matched = bool(result.findings)
    if test.should_match and not matched:
        skipped = [s.reason for s in result.skipped]
        return "expected a match, got none" + (f" (skipped: {'; '.join(skipped)})" if skipped else "")
    if not test.should_match and matched:
        lines = [item.text for item in result.findings[0].evidence][:2]
        return f"expected no match, but it matched: {lines}"
    if test.should_match:
        wanted = test.case.get("captures") or {}
        got = result.findings[0].captures
        wrong = {k: (v, got.get(k)) for k, v in wanted.items() if str(v) != got.get(k)}
        if wrong:
            return "captures differ: " + ", ".join(f"{k}: expected {v[0]!r}, got {v[1]!r}" for k, v in wrong.items())
    return None


def run_rule_tests(ruleset: RuleSet, engine: str = "auto", echo: Echo = print, only: Sequence[str] = ()) -> int:
    failures = 0
    for rule in sorted(ruleset.rules, key=lambda r: r.id):
        if only and rule.id not in only:
            continue
        for test in rule.tests:
            problem = check_case(rule, test, engine)
            if problem:
                failures += 1
                kind = "match" if test.should_match else "no_match"
                echo(f"FAIL {rule.path}:{test.line}: {rule.id} {kind}: {problem}")
    return failures


def fixture_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/expect.yaml"))


def load_expect(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise DiagnoseError(f"{path}: unreadable expect.yaml ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("causes"), list):
        raise DiagnoseError(f"{path}: expect.yaml needs a 'causes' list (ranked rule ids, [] for a healthy run)")
    return data


def ranked_ids(fixture: Path, ruleset: RuleSet, engine: str = "auto", via_scan: bool = False) -> list[str]:
    from diagnose.app import diagnose
    from diagnose.evidence.bundle import evidence_from_bundle
    from diagnose.evidence.inputs import evidence_from_paths

    evidence = evidence_from_paths([str(fixture)]) if via_scan else evidence_from_bundle(fixture)
    diagnosis = diagnose(evidence, ruleset, engine=engine)
    return [c.id for c in diagnosis.causes if Severity(c.severity).at_least(Severity.WARNING)]


def expand_fixtures(paths: Sequence[Path]) -> list[Path]:
    """Fixture folders: each PATH is one (an expect.yaml inside) or holds several."""
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise DiagnoseError(f"{path}: no such fixture folder")
        found.extend([path] if (path / "expect.yaml").is_file() else fixture_dirs(path))
    return found


def run_fixture_tests(ruleset: RuleSet, paths: Sequence[Path], engine: str = "auto", echo: Echo = print) -> int:
    from diagnose.rules.load import builtin_rules_dir

    if not paths:
        root = builtin_rules_dir().parent / "fixtures"
        paths = fixture_dirs(root) if root.is_dir() else []
    failures = 0
    for fixture in paths:
        expect = load_expect(fixture / "expect.yaml")
        got = ranked_ids(fixture, ruleset, engine)
        if got != list(expect["causes"]):
            failures += 1
            echo(f"FAIL {fixture}: expected causes {expect['causes']}, got {got}")
    return failures
