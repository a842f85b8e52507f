"""Helpers of the scanner tests: engines to run, a brute-force reference scan, comparisons."""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import regex

from diagnose.engine import scan
from diagnose.engine.finders import PatternSet
from diagnose.engine.scan import KEEP, MAX_LINE, FileScan, Scanner
from diagnose.evidence.lines import ANSI_BYTES, split_prefix
from diagnose.evidence.model import TextFile, TextKind

DATA = Path(__file__).resolve().parents[1] / "data"
SCAN_DATA = DATA / "scan"
REPO = Path(__file__).resolve().parents[2]

ENGINES = [
    "pure",
    pytest.param("hyperscan", marks=pytest.mark.skipif(not scan.hyperscan_available(),
                                                       reason="hyperscan is not installed on this platform")),
]


def run_scan(path: Path, patterns: Sequence[str], engine: str, kind: TextKind = TextKind.LOG,
             chunk_bytes: int | None = None) -> FileScan:
    return Scanner(kind, PatternSet(list(patterns)), engine).scan(TextFile(kind, path, str(path), mtime=path.stat().st_mtime),
                                                                   chunk_bytes)


def decompressed(path: Path) -> bytes:
    name = path.name.lower()
    opener: Any = gzip.open if name.endswith(".gz") else bz2.open if name.endswith(".bz2") else lzma.open if name.endswith(".xz") else open
    with opener(path, "rb") as handle:
        return bytes(handle.read())


@dataclass(frozen=True)
class RefHit:
    line_no: int
    text: str
    captures: dict[str, str]


def reference(path: Path, patterns: Sequence[str], kind: TextKind = TextKind.LOG) -> dict[tuple[int, int | None], list[RefHit]]:
    """The definition, line by line: ANSI stripped, '\\r' and '\\n' end lines, invalid UTF-8
    replaced, cut at 64 KiB; line numbers count '\\n'; a pattern is tried on the whole line, then on the line without its
    launcher prefixes when the whole line does not match. Every hit, per (pattern, rank)."""
    compiled = [regex.compile(p) for p in patterns]
    data = ANSI_BYTES.sub(b"", decompressed(path))
    hits: dict[tuple[int, int | None], list[RefHit]] = {}
    for line_no, physical in enumerate(data.split(b"\n"), start=1):
        for segment in physical.split(b"\r"):
            text = segment[:MAX_LINE].decode("utf-8", errors="replace")
            prefix, body = split_prefix(text)
            rank = prefix.global_rank if kind is TextKind.LOG else None
            for index, pattern in enumerate(compiled):
                match = pattern.search(text) or (pattern.search(body) if prefix.width else None)
                if match:
                    captures = {k: v for k, v in match.groupdict().items() if v is not None}
                    hits.setdefault((index, rank), []).append(RefHit(line_no, text, captures))
    return hits


def assert_matches_reference(result: FileScan, expected: dict[tuple[int, int | None], list[RefHit]]) -> None:
    got: dict[tuple[int, int | None], tuple[int, list[RefHit]]] = {}
    for index, by_rank in result.hits.items():
        for rank, summary in by_rank.items():
            got[(index, rank)] = (summary.count, [RefHit(h.line_no, h.text, dict(h.captures)) for h in summary.hits()])
    want = {key: (len(hits), hits if len(hits) <= 2 * KEEP else hits[:KEEP] + hits[-KEEP:]) for key, hits in expected.items()}
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], key


def summary_of(result: FileScan) -> dict[str, object]:
    """Everything a scan found, for comparing engines (times and match spans included)."""
    return {
        "lines": result.lines, "bytes": result.bytes, "cut": result.cut_lines, "timeouts": dict(result.timeouts),
        "hits": {(i, r): (s.count, [(h.line_no, h.text, h.time, h.rank, dict(h.captures), h.span) for h in s.hits()])
                 for i, by_rank in result.hits.items() for r, s in by_rank.items()},
    }


def real_logs() -> list[Path]:
    """Every real log in the repo: test data, fixtures, benchmark inputs."""
    found: list[Path] = []
    for folder in (DATA, REPO / "fixtures", REPO / "bench" / "data"):
        found.extend(p for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix in (".log", ".txt")
                     and p.stat().st_size < 8 * 2**20)
    return found


def rule_pack_patterns(kind: TextKind = TextKind.LOG) -> list[str]:
    from diagnose.engine.evaluate import pattern_sets
    from diagnose.rules.load import load_rules

    return list(pattern_sets(load_rules().rules)[kind].patterns)
