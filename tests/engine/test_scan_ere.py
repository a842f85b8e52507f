"""The ERE supersets grep runs on a remote host (diagnose/patterns/ere.py): wherever a rule
pattern matches a line as users see it (split at '\\r', escapes removed, invalid UTF-8 as
U+FFFD), `LC_ALL=C grep -a -E` must match the raw '\\n'-line that holds it, or the remote scan
would miss a finding. Checked with the real GNU grep on every real log of the repo with the
whole rule pack, shape by shape on the tricky cases, and byte by byte on character classes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import regex

from diagnose.engine import scan
from diagnose.engine.finders import PatternSet
from diagnose.engine.scan import Scanner
from diagnose.evidence.model import TextFile, TextKind
from diagnose.patterns import ere
from tests.engine.test_scan_prefilter import TRICKY, _bytes_of
from tests.support.scan import real_logs, rule_pack_patterns

pytestmark = pytest.mark.skipif(shutil.which("grep") is None, reason="needs GNU grep")


def grep_lines(patterns: bytes, data: bytes) -> set[int]:
    """Line numbers `LC_ALL=C grep -a -n -E -f PATTERNS` prints for data."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="diagnose-ere-"))
    try:
        (folder / "p").write_bytes(patterns)
        (folder / "d").write_bytes(data)
        result = subprocess.run(["grep", "-a", "-n", "-E", "-f", str(folder / "p"), str(folder / "d")],
                                capture_output=True, env={"LC_ALL": "C"}, timeout=120)
    finally:
        shutil.rmtree(folder)
    assert result.returncode in (0, 1), result.stderr
    assert not result.stderr, result.stderr  # no "stray \\" warnings: every pattern is plain ERE
    return {int(line.split(b":", 1)[0]) for line in result.stdout.split(b"\n") if line}  # not splitlines: "\r"


def test_the_pack_on_every_real_log(tmp_path, monkeypatch):
    """Every line the scanner finds with the whole pack is among grep's lines."""
    monkeypatch.setattr(scan, "KEEP", 10**9)  # keep every hit, not the first and last few
    patterns = rule_pack_patterns()
    pattern_bytes, refused = ere.pattern_file(patterns)
    assert refused == []
    scanner = Scanner(TextKind.LOG, PatternSet(patterns), "auto")
    checked = 0
    for log in real_logs():
        data = log.read_bytes()
        found = scanner.scan(TextFile(TextKind.LOG, log, str(log)))
        wanted = {hit.line_no for by_rank in found.hits.values() for s in by_rank.values() for hit in s.hits()}
        missing = wanted - grep_lines(pattern_bytes, data)
        assert not missing, f"{log}: grep misses lines {sorted(missing)[:10]}"
        checked += len(wanted)
    assert checked > 300  # the real logs hold hundreds of hits


@pytest.mark.parametrize(("pattern", "line"), TRICKY)
def test_tricky_shapes(pattern: str, line: str) -> None:
    raw = _bytes_of(line)
    assert regex.search(pattern, raw.decode("utf-8", errors="replace"))
    expression = ere.to_ere(pattern) + b"\n"
    # As its own line, after a progress bar's '\r' updates, before them, colored.
    for before, after in ((b"", b""), (b"x\r", b""), (b"", b"\ry"), (b"\r", b"\r"), (b"a\rb\r", b"\rc")):
        assert grep_lines(expression, b"noise\n" + before + raw + after + b"\nnoise\n") == {2}, (pattern, before, after)


CLASSES = [r"[\]\[^-]", r"[^a-z]", r"[^\]]", r"\W", r"[^\n]", r"[\\]", r"[-^]", r"[^^]", r"[\x00-\x1f]", r"\S",
           r"[^\x00]", r".", r"[a\-z]", r"(?i)[k]", r"(?i)s", r"[\d\s]", r"[^\d\s]", r"[\[:]", r"[.=]", r"\D{2,40}"]


@pytest.mark.parametrize("pattern", CLASSES)
def test_classes_byte_by_byte(pattern: str) -> None:
    """Each byte (and a few characters) alone on a line: where Python's class matches, grep's must."""
    samples = [bytes([b]) for b in range(1, 256) if b not in (10, 13)] + [c.encode() for c in "éß\u212a\u017f\u0130ı٣"]
    samples = [s * 3 for s in samples] if "{2," in pattern else samples
    expected = {index + 1 for index, sample in enumerate(samples)
                if regex.search(pattern, sample.decode("utf-8", errors="replace"))}
    found = grep_lines(ere.to_ere(pattern) + b"\n", b"\n".join(samples) + b"\n")
    assert expected - found == set(), [samples[i - 1] for i in sorted(expected - found)][:10]


def test_pattern_file_shape() -> None:
    data, refused = ere.pattern_file([r"loss (?P<v>nan)", r"\p{L}+ crashed", "NUL\x00 inside", "a\nb", r"loss (?P<v>nan)"])
    lines = data.split(b"\n")
    assert lines[0] == b"\x1b"  # lines with an escape sequence are always candidates
    assert refused == [1]  # `regex`-only syntax: no ERE, said so
    assert b"\0" not in data and data.endswith(b"\n")
    assert len(lines) == 5  # ESC, three written (the duplicate once), the final newline
    assert grep_lines(data, b"x NUL\x00 inside\nloss nan\nab\n") == {1, 2}


def test_prefilter_keeps_separator_controls_in_non_space() -> None:
    """`regex` matches \\x1c-\\x1f with \\S (str.isspace calls them space): the scanner's own
    superset (prefilter.py, hyperscan and pure) must keep them too, as the ERE does."""
    from diagnose.patterns import prefilter as pf

    for pattern in (r"a\Sb", r"a[^\d\s]b"):
        superset = regex.compile(pf.prefilter(pattern, pf.FOR_REGEX))
        for code in range(0x1c, 0x20):
            line = b"a" + bytes([code]) + b"b"
            assert regex.search(pattern, line.decode()), (pattern, code)
            assert superset.search(line), (pattern, code)
