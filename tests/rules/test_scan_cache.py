"""The disk caches: the compiled hyperscan database (keyed by the patterns) and the parsed rule
set (keyed by the rule files' bytes and the code that parses them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from diagnose.engine import finders
from diagnose.rules import cache as rulecache
from diagnose.rules.conditions import FactCondition
from diagnose.rules.load import load_rules
from diagnose.rules.model import TextCondition
from tests.support.scan import SCAN_DATA, run_scan, summary_of

DDP = SCAN_DATA / "ddp-healthy-train.log"
PATTERNS = [r"NCCL version (?P<version>\S+)", r"INFO train: epoch (?P<epoch>\d+) step (?P<step>\d+)"]


def _fresh_finder(patterns: list[str]) -> finders.HyperscanFinder:
    finders.CACHE.clear()
    name, finder = finders.make_finder(finders.PatternSet(patterns), "hyperscan")
    assert name == "hyperscan" and isinstance(finder, finders.HyperscanFinder)
    return finder


def test_the_hyperscan_database_is_compiled_once_and_invalidated_by_a_pattern_change(cache_dir: Path) -> None:
    pytest.importorskip("hyperscan", reason="hyperscan is not installed on this platform")
    first = _fresh_finder(PATTERNS)
    assert not first.loaded_from_cache
    assert len(list(cache_dir.glob("hs-*.db"))) == 1
    again = _fresh_finder(PATTERNS)
    assert again.loaded_from_cache and again.key == first.key
    found = summary_of(run_scan(DDP, PATTERNS, "hyperscan"))
    assert found["hits"]
    changed = _fresh_finder([*PATTERNS[:1], PATTERNS[1].replace("step", "step ")])
    assert not changed.loaded_from_cache and changed.key != first.key
    assert len(list(cache_dir.glob("hs-*.db"))) == 2
    # Results never depend on where the database came from.
    finders.CACHE.clear()
    assert summary_of(run_scan(DDP, PATTERNS, "hyperscan")) == found


def test_a_corrupt_or_unwritable_cache_costs_time_not_results(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("hyperscan", reason="hyperscan is not installed on this platform")
    expected = summary_of(run_scan(DDP, PATTERNS, "pure"))
    _fresh_finder(PATTERNS)
    (entry,) = cache_dir.glob("hs-*.db")
    entry.write_bytes(b"0\nnot a database")
    finders.CACHE.clear()
    assert summary_of(run_scan(DDP, PATTERNS, "hyperscan")) == expected
    assert _fresh_finder(PATTERNS).loaded_from_cache  # the bad entry was replaced
    blocked = cache_dir.parent / "not-a-dir"
    blocked.write_text("a file where the cache folder should be")
    monkeypatch.setenv("DIAGNOSE_CACHE_DIR", str(blocked))
    finders.CACHE.clear()
    assert summary_of(run_scan(DDP, PATTERNS, "hyperscan")) == expected
    monkeypatch.setenv("DIAGNOSE_CACHE_DIR", str(cache_dir.parent / "off"))
    monkeypatch.setenv("DIAGNOSE_NO_CACHE", "1")
    assert not _fresh_finder(PATTERNS).loaded_from_cache
    assert not (cache_dir.parent / "off").exists()


def _rule_dir(tmp_path: Path) -> Path:
    # A real built-in rule, copied as a user rule we can edit.
    source = next(p for p in sorted(Path(load_rules.__code__.co_filename).parent.parent.parent.joinpath("rules").rglob("*.yaml"))
                  if "data.worker-killed" in p.name)
    folder = tmp_path / "user-rules"
    folder.mkdir()
    shutil.copy(source, folder / source.name)
    return folder


def test_the_rule_set_is_cached_and_a_changed_rule_file_is_read_again(cache_dir: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _rule_dir(tmp_path)
    fresh = load_rules([folder])
    cached = rulecache.load_rules_cached([folder])
    assert [r.id for r in cached.rules] == [r.id for r in fresh.rules]
    assert len(list(cache_dir.glob("rules-*.pickle"))) == 1

    calls: list[object] = []
    monkeypatch.setattr(rulecache, "load_rules", lambda *a, **k: calls.append(a) or fresh)
    again = rulecache.load_rules_cached([folder])
    assert calls == []  # answered from the cache
    assert [(r.id, list(r.conditions(TextCondition)), r.explanation) for r in again.rules] == \
           [(r.id, list(r.conditions(TextCondition)), r.explanation) for r in fresh.rules]
    # Predicates (plain data) came back working.
    for loaded, original in zip(again.rules, fresh.rules, strict=True):
        for got, want in zip(loaded.conditions(FactCondition), original.conditions(FactCondition), strict=True):
            for name, test in want.tests.items():
                for value in (0, 1, 9, -1, 3600.0, "running", True, ["a"]):
                    try:
                        expected: object = test(value)
                    except Exception as exc:
                        expected = type(exc)
                    try:
                        actual: object = got.tests[name](value)
                    except Exception as exc:
                        actual = type(exc)
                    assert actual == expected
    monkeypatch.undo()
    monkeypatch.setenv("DIAGNOSE_CACHE_DIR", str(cache_dir))

    # An edit of the same size, with the file's times put back: still seen.
    (rule,) = folder.glob("*.yaml")
    stat = rule.stat()
    text = rule.read_text()
    edited = text.replace("title: ", "title: X", 1)[:-1] if text.endswith("\n") else text
    assert len(edited.encode()) == len(text.encode())
    rule.write_text(edited)
    os.utime(rule, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    reloaded = rulecache.load_rules_cached([folder])
    assert next(r for r in reloaded.rules if r.path == rule).title.startswith("X")


def test_a_broken_rule_file_is_never_served_from_the_cache(cache_dir: Path, tmp_path: Path) -> None:
    from diagnose.errors import RuleError

    folder = _rule_dir(tmp_path)
    rulecache.load_rules_cached([folder])
    (rule,) = folder.glob("*.yaml")
    rule.write_text(rule.read_text().replace("severity:", "severity: [", 1))
    with pytest.raises(RuleError):
        rulecache.load_rules_cached([folder])
    with pytest.raises(RuleError):
        rulecache.load_rules_cached([tmp_path / "missing"])


def test_old_cache_entries_are_pruned(cache_dir: Path) -> None:
    from diagnose import diskcache

    # Files of the user's that merely start like an entry are never pruned (the cache folder
    # may be one they share): only names of the cache's own shape go.
    theirs = ["hs-notes.txt", "hs-0001.db.bak", "rules-list.pickle"]
    cache_dir.mkdir(parents=True, exist_ok=True)
    for name in theirs:
        (cache_dir / name).write_text("keep me")
        os.utime(cache_dir / name, ns=(0, 0))
    for n in range(diskcache.KEEP + 5):
        diskcache.write(f"hs-{n:04d}.db", b"x")
        os.utime(cache_dir / f"hs-{n:04d}.db", ns=(n * 10**9, n * 10**9))
    diskcache.write("rules-a.pickle", b"y")
    names = sorted(p.name for p in cache_dir.iterdir() if not p.name.startswith("."))  # not the HMAC key
    assert names == sorted([f"hs-{n:04d}.db" for n in range(5, diskcache.KEEP + 5)] + ["rules-a.pickle", *theirs])
