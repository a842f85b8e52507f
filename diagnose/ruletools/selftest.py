"""`diagnose rules test`: every rule's own test cases, and the fixtures' expected rankings."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from diagnose.engine.evaluate import run_rules
from diagnose.errors import DiagnoseError
from diagnose.evidence.model import (
    CheckpointFile,
    CheckpointState,
    Evidence,
    ExitRecord,
    ExpectedFile,
    Gpu,
    GpuState,
    MetricSeries,
    Packages,
    ProcessState,
    RunInfo,
    TextFile,
    TextKind,
    TmuxPane,
    TmuxServer,
    TmuxSession,
    TmuxState,
)
from diagnose.evidence.parsers.packages import normalise_package
from diagnose.rules.model import Rule, RuleSet, RuleTest
from diagnose.rules.predicates import parse_signal
from diagnose.vocab import Severity

Echo = Callable[[str], Any]


def _lines(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]


def evidence_for_case(case: Mapping[str, Any], workdir: Path) -> Evidence:
    """Build in-memory evidence from a rule test case (text goes to files the scanner reads)."""
    texts: list[TextFile] = []
    for kind in (TextKind.LOG, TextKind.DMESG):
        if kind.value in case:
            path = workdir / f"{kind.value}.txt"
            path.write_text("\n".join(_lines(case[kind.value])) + "\n", encoding="utf-8")
            texts.append(TextFile(kind, path, f"{kind.value}.txt"))
    packages = None
    if "packages" in case:
        packages = Packages({normalise_package(str(k)): str(v) for k, v in dict(case["packages"]).items()}, "packages")
    tmux = None
    if "tmux" in case:
        t = dict(case["tmux"])
        sessions = tuple(
            TmuxSession(s["name"], tuple(TmuxPane(p.get("target", f"{s['name']}:0.0"), bool(p.get("dead")), p.get("status"), p.get("command", ""))
                                         for p in s.get("panes", [])))
            for s in t.get("sessions", [])
        )
        tmux = TmuxState(TmuxServer(t.get("server", "running")), t.get("socket", "/tmp/tmux-0/default"), t.get("message", ""),
                         sessions, t.get("expected_session"))
    files = None
    if "files" in case:
        files = tuple(
            ExpectedFile(f.get("role", "log"), f["path"], bool(f.get("exists", True)), f.get("size"), None, tuple(f.get("siblings", ())))
            for f in case["files"]
        )
    checkpoints = None
    if "checkpoint" in case:
        c = dict(case["checkpoint"])
        now = 1_000_000_000.0
        newest = CheckpointFile(c.get("newest", "ckpt.pt"), 1, now - float(c["newest_age"])) if "newest_age" in c else None
        checkpoints = CheckpointState(c.get("directory", "checkpoints"), bool(c.get("exists", True)), now, int(c.get("file_count", 0)),
                                      int(c.get("total_bytes", 0)), newest, tuple(c.get("zero_byte", ())), tuple(c.get("partial", ())),
                                      c.get("free_bytes"))
    gpu = None
    if "gpu" in case:
        g = dict(case["gpu"])
        gpus = tuple(Gpu(**{"index": i, **dict(item)}) if "index" not in item else Gpu(**dict(item)) for i, item in enumerate(g.get("gpus", [])))
        gpu = GpuState("gpu", g.get("driver"), g.get("cuda"), gpus)
    exits = None
    if "exits" in case:
        exits = tuple(
            ExitRecord(e.get("source", "exit"), e.get("code"), parse_signal(e["signal"]) if e.get("signal") is not None else None, e.get("rank"))
            for e in case["exits"]
        )
    process = None
    if "process" in case:
        process = ProcessState("process", bool(case["process"].get("alive")), tuple(case["process"].get("pids", ())))
    metrics = None
    if "metrics" in case:
        # {train_loss: [47.9, 657294.3, inf]}: values by step 0, 1, 2 ...; or [[step, value], ...]
        metrics = tuple(
            MetricSeries("metrics", str(name), tuple(
                (int(v[0]), float(v[1]), None) if isinstance(v, list) else (i, float(v), None) for i, v in enumerate(values)))
            for name, values in dict(case["metrics"]).items()
        )
    return Evidence(RunInfo("test", "test"), tuple(texts), packages, gpu, tmux, files, checkpoints, process, exits,
                    metrics=metrics)


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
