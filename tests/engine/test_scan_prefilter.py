"""The byte-level supersets the finders search for: wherever a pattern matches a line as users
see it, its superset matches the raw bytes around that line (so no line is ever missed)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import regex

from diagnose.patterns import prefilter as pf
from tests.support.scan import (
    ENGINES,
    SCAN_DATA,
    assert_matches_reference,
    real_logs,
    reference,
    rule_pack_patterns,
    run_scan,
)

# Shapes the translation must get right, each with a line (mechanically derived from real
# captured lines) that the pattern matches.
TRICKY = [
    (r"(?i)pytorch\sskipping", "Failure to do this will result in PyTorch s\u212aipping the first value"),  # Kelvin sign
    (r"(?i)LR_SCHEDULER", "Detected call of `lr_scheduler.step()` before `optimizer.step()`"),
    (r"sch\wd\.step", "  schéd.step()  # before opt.step()"),  # a Unicode word character
    (r"GradScaler\(args\.\.\.\)`\sis", "`torch.cuda.amp.GradScaler(args...)`\u00a0is deprecated"),  # NBSP is \s
    (r"step (\d+)/400", "train:  50%|\u2588\u2588\u2588\u2588\u2588     | step \u0664\u0660/400"),  # Arabic-Indic digits
    (r"\|.\| 1/400", "train:   0%|\u258f| 1/400 [00:00<02:17,  2.91it/s]"),  # `.` is one 3-byte character
    (r"\|\ufffd\ufffd", "train:   1%|\ufffd\ufffd        | 5/400"),  # invalid UTF-8, as users see it
    (r"^train:", "train:   1%|  | 5/400"),
    (r"it/s\]$", "train:   1%|  | 5/400 [00:00<00:24, 15.99it/s]"),
    (r"(?<![a-z])loss (?P<v>nan)\b", "INFO train: epoch 1 step 2 loss nan lr 1.00e-03"),
    (r"(\d+) Killed\s+\1", "line 1:  6440 Killed  6440"),
    (r"(?P<n>NCCL) (?(n)INFO|WARN)", "[rank0]:vm:704:704 [0] NCCL INFO cudaDriverVersion 13000"),
    (r"\AEpoch (?P<e>\d+)\Z", "Epoch 1"),
    (r"(?<name>NCCL) version", "NCCL INFO NCCL version 2.28.9+cuda13.0"),
]


def _bytes_of(line: str) -> bytes:
    # U+FFFD stands for invalid bytes in the file; everything else is UTF-8.
    return line.encode("utf-8").replace("\ufffd".encode(), b"\xe2\x96")


@pytest.mark.parametrize(("pattern", "line"), TRICKY)
def test_tricky_shapes(pattern: str, line: str) -> None:
    assert regex.search(pattern, _bytes_of(line).decode("utf-8", errors="replace"))
    superset = regex.compile(pf.prefilter(pattern, pf.FOR_REGEX), regex.MULTILINE)
    for before, after in ((b"", b""), (b"x\n", b"\ny"), (b"x\r", b"\ry"), (b"\r\n", b"\r\n")):
        assert superset.search(before + _bytes_of(line) + after), (pattern, before, after)
    literals = pf.required_literals(pattern)
    if literals is not None:
        raw = _bytes_of(line)
        assert any((literal in raw.lower()) if fold else (literal in raw) for literal, fold in literals)


@pytest.mark.parametrize("pattern", [pattern for pattern, _ in TRICKY])
def test_hyperscan_accepts_the_supersets(pattern: str) -> None:
    hs = pytest.importorskip("hyperscan", reason="hyperscan is not installed on this platform")
    db = hs.Database(mode=hs.HS_MODE_BLOCK)
    db.compile(expressions=[pf.prefilter(pattern, pf.FOR_HYPERSCAN)], ids=[0], elements=1,
               flags=[hs.HS_FLAG_MULTILINE | hs.HS_FLAG_PREFILTER])


@functools.cache
def _segments() -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for path in real_logs():
        for physical in path.read_bytes().split(b"\n"):
            for segment in physical.split(b"\r"):
                seen.setdefault(segment.decode("utf-8", errors="replace"), None)
    return tuple(seen)


def test_required_texts_hold_on_every_real_match() -> None:
    patterns = rule_pack_patterns() + [p for p, _ in TRICKY]
    checked = 0
    for pattern in patterns:
        literals = pf.required_literals(pattern)
        if literals is None:
            continue
        compiled = regex.compile(pattern)
        for text in _segments():
            if compiled.search(text):
                raw = text.encode("utf-8")
                assert any((lit in raw.lower()) if fold else (lit in raw) for lit, fold in literals), (pattern, text)
                checked += 1
    assert checked > 50


def test_odd_letters_are_the_ones_with_non_ascii_cases() -> None:
    letters = [chr(c) for c in range(65, 91)] + [chr(c) for c in range(97, 123)]
    computed = {c for c in letters if any(not v.isascii() for v in pf._case_variants(c))}
    assert computed == set(pf._ODD_LETTERS)
    # ... and `regex` agrees: these are the letters it matches with non-ASCII ones.
    odd = {c for c in letters for other in pf._ODD_CASES if regex.fullmatch(f"(?i){c}", other)}
    assert odd <= set(pf._ODD_LETTERS)


@pytest.mark.parametrize("engine", ENGINES)
def test_regex_only_syntax_gets_no_superset_and_is_searched_line_by_line(engine: str, cache_dir: Path) -> None:
    patterns = [r"\p{Lu}{4} INFO (?P<what>\w+)", r"[[:upper:]]{4} version", r"NCCL version (?P<v>\S+)"]
    for pattern in patterns[:2]:
        with pytest.raises(pf.Unsupported):  # \p{..} is `regex`-only; [[:upper:]] is a nested set to `re`
            pf.prefilter(pattern, pf.FOR_REGEX)
    log = SCAN_DATA / "ddp-healthy-train.log"
    result = run_scan(log, patterns, engine)
    assert_matches_reference(result, reference(log, patterns))
    assert result.count(0) > 100 and result.count(1) == result.count(2) > 0
