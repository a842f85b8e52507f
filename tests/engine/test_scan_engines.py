"""Both scan engines against the definition of a line match, on every real log in the repo and
on a generated training log: identical hits, line numbers, captures, counts, times."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest

from diagnose.evidence.model import TextKind
from tests.support.scan import (
    ENGINES,
    REPO,
    RefHit,
    assert_matches_reference,
    real_logs,
    reference,
    rule_pack_patterns,
    run_scan,
    summary_of,
)

SYNTHETIC = [line for line in (REPO / "bench" / "synthetic_patterns.txt").read_text().splitlines()
             if line and not line.startswith("#")]


@functools.cache
def _reference(path: Path, patterns: tuple[str, ...], kind: TextKind) -> dict[tuple[int, int | None], list[RefHit]]:
    return reference(path, patterns, kind)


@functools.lru_cache(maxsize=1)
def _log_patterns() -> tuple[str, ...]:
    return tuple(rule_pack_patterns(TextKind.LOG)) + tuple(SYNTHETIC)


def test_there_are_real_logs_and_patterns() -> None:
    assert len(real_logs()) >= 10
    assert len(_log_patterns()) >= 50


@pytest.mark.parametrize("engine", ENGINES)
def test_real_logs_match_the_definition(engine: str, cache_dir: Path) -> None:
    patterns = _log_patterns()
    matched = 0
    for path in real_logs():
        result = run_scan(path, patterns, engine)
        expected = _reference(path, patterns, TextKind.LOG)
        assert_matches_reference(result, expected)
        matched += bool(expected)
    assert matched >= 10  # the rule pack does fire on the captured crashes


@pytest.mark.parametrize("engine", ENGINES)
def test_kernel_logs_match_the_definition(engine: str, cache_dir: Path) -> None:
    patterns = tuple(rule_pack_patterns(TextKind.DMESG))
    kernel = [p for p in real_logs() if "dmesg" in p.name or "kern" in p.name or p.parent.name == "kernel"]
    assert kernel
    for path in kernel:
        assert_matches_reference(run_scan(path, patterns, engine, TextKind.DMESG), _reference(path, patterns, TextKind.DMESG))


def _generate(path: Path, size: int) -> None:
    spec = importlib.util.spec_from_file_location("loggen", REPO / "bench" / "loggen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(path, size)


def test_engines_identical_on_a_generated_training_log(tmp_path: Path, cache_dir: Path) -> None:
    pytest.importorskip("hyperscan", reason="hyperscan is not installed on this platform")
    log = tmp_path / "train.log"
    _generate(log, 3 * 2**20)  # tqdm '\r' bars, rank lines, NCCL INFO, warnings, two real crashes
    patterns = _log_patterns()
    # Small pieces put many lines (and the crashes' timestamp look-backs) on piece edges.
    results = {(engine, chunk): summary_of(run_scan(log, patterns, engine, chunk_bytes=chunk))
               for engine in ("pure", "hyperscan") for chunk in (None, 300_000)}
    first = results[("hyperscan", None)]
    for key, found in results.items():
        assert found == first, key
    assert first["hits"]  # the inserted crashes were found
