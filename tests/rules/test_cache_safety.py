"""The disk cache is never trusted: a planted pickle runs nothing, a folder others may write (or
that is not ours) is not used, entries are private and signed, and a RuleSet that comes back
from the cache is the one the rule files give."""

from __future__ import annotations

import json
import os
import pickle
import stat
from pathlib import Path
from typing import Any

import pytest

from diagnose import diskcache
from diagnose.engine.evaluate import run_rules
from diagnose.rules import cache as rulecache
from diagnose.rules.load import load_rules
from diagnose.ruletools.selftest import evidence_for_case
from tests.support.cli import run_cli
from tests.support.scan import SCAN_DATA

LOG = SCAN_DATA / "ddp-healthy-train.log"


class _Touch:
    """A pickle that, loaded by plain pickle.loads, runs `touch MARKER`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _scan(cache: Path, *extra: str) -> Any:
    result = run_cli(["scan", str(LOG), "--format", "json", *extra], env={"DIAGNOSE_CACHE_DIR": str(cache)})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    data.pop("stats")  # timings differ run to run
    return data


def _rule_entry(cache: Path) -> Path:
    (entry,) = cache.glob("rules-*.pickle")
    return entry


def test_a_planted_pickle_runs_nothing_and_is_rebuilt(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    marker = tmp_path / "marker"
    first = _scan(cache)
    entry = _rule_entry(cache)
    evil = pickle.dumps(_Touch(marker))
    pickle.loads(evil)  # the payload is real: plain pickle runs it
    assert marker.exists()
    marker.unlink()

    # 1. Planted as-is (no valid HMAC).
    entry.write_bytes(evil)
    assert _scan(cache) == first
    assert not marker.exists()
    assert rulecache.loads(_signed_blob(cache, entry.name)) is not None  # replaced by a good entry

    # 2. Signed with the user's own key (as if the key leaked): the restricted unpickler still
    # refuses os.system, so the signature is not the only wall.
    _sign_into(cache, entry.name, evil)
    assert _scan(cache) == first
    assert not marker.exists()
    assert rulecache.loads(evil) is None


def _signed_blob(cache: Path, name: str) -> bytes:
    os.environ["DIAGNOSE_CACHE_DIR"] = str(cache)
    try:
        blob = diskcache.read(name)
    finally:
        del os.environ["DIAGNOSE_CACHE_DIR"]
    assert blob is not None
    return blob


def _sign_into(cache: Path, name: str, data: bytes) -> None:
    key = (cache / diskcache.KEY_NAME).read_bytes()
    (cache / name).write_bytes(diskcache._tag(key, name, data) + data)


@pytest.mark.parametrize("how", ["group-writable", "other-writable", "not-ours"])
def test_a_cache_folder_others_may_write_is_not_used(tmp_path: Path, how: str) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    if how == "group-writable":
        cache.chmod(0o770)
    elif how == "other-writable":
        cache.chmod(0o703)
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give the folder to another user")
        cache.chmod(0o700)
        os.chown(cache, 65534, 65534)
    expected = _scan(tmp_path / "good-cache")
    assert _scan(cache) == expected
    assert list(cache.iterdir()) == []  # nothing read, nothing written


def test_the_cache_folder_and_its_entries_are_private(tmp_path: Path) -> None:
    cache = tmp_path / "deep" / "cache"
    _scan(cache)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    names = sorted(p.name for p in cache.iterdir())
    assert diskcache.KEY_NAME in names and any(n.startswith("rules-") for n in names)
    assert not [n for n in names if n.endswith(".tmp")]
    for path in cache.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
    assert len((cache / diskcache.KEY_NAME).read_bytes()) == 32


def test_a_key_others_could_read_or_a_symlinked_entry_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("DIAGNOSE_CACHE_DIR", str(cache))
    monkeypatch.delenv("DIAGNOSE_NO_CACHE", raising=False)
    monkeypatch.setattr(diskcache, "_keys", {})
    diskcache.write("t-one", b"payload")
    assert diskcache.read("t-one") == b"payload"
    (cache / "t-two").symlink_to(cache / "t-one")
    assert diskcache.read("t-two") is None  # a link, and signed for another name
    (cache / "t-one").write_bytes((cache / "t-one").read_bytes()[:-1] + b"X")
    assert diskcache.read("t-one") is None  # one byte changed
    diskcache.write("t-one", b"payload")
    monkeypatch.setattr(diskcache, "_keys", {})
    (cache / diskcache.KEY_NAME).chmod(0o644)
    assert diskcache.read("t-one") is None


def test_the_cached_rule_set_equals_the_freshly_loaded_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIAGNOSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DIAGNOSE_NO_CACHE", raising=False)
    fresh = load_rules()
    rulecache.load_rules_cached()  # fills the cache
    calls: list[object] = []
    monkeypatch.setattr(rulecache, "load_rules", lambda *a, **k: calls.append(a) or fresh)
    cached = rulecache.load_rules_cached()
    assert calls == [] and cached is not fresh  # it came from the cache
    assert [r.id for r in cached.rules] == [r.id for r in fresh.rules]
    assert cached == fresh  # plain data all the way down, predicates included
    # Same answers on sample evidence: the rules' own test cases that use structured facts.
    cases = [t.case for r in fresh.rules for t in r.tests
             if set(t.case) & {"package", "gpu", "exit", "tmux", "file", "checkpoint", "process"}]
    assert len(cases) >= 20
    matched = 0
    for number, case in enumerate(cases):
        work = tmp_path / f"case-{number}"
        work.mkdir()
        evidence = evidence_for_case(case, work)
        want = run_rules(fresh.rules, evidence)
        got = run_rules(cached.rules, evidence)
        assert [(f.rule.id, f.captures) for f in got.findings] == [(f.rule.id, f.captures) for f in want.findings]
        assert [s.rule_id for s in got.skipped] == [s.rule_id for s in want.skipped]
        matched += bool(want.findings)
    assert matched >= 10  # the comparison saw rules fire, not only silence
