"""Lines as users see them, in both engines: '\\r' progress updates, ANSI escapes, invalid UTF-8,
lines over 64 KiB, compressed logs, and matches on the edges of the pieces a file is read in.

Inputs are real captured logs (tests/data/scan/README.md); where a test needs a harder shape it
makes it from those lines mechanically (repeat, cut mid-character, join, compress) and says so.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path

import pytest

from diagnose.engine.scan import MAX_LINE
from diagnose.evidence.textio import CHUNK_BYTES
from tests.support.scan import ENGINES, SCAN_DATA, assert_matches_reference, reference, run_scan, summary_of

PLAIN = SCAN_DATA / "healthy-torchrun-plain.log"  # tqdm '\r' updates sharing lines with rank prints
TTY = SCAN_DATA / "pip-download-tty.log"  # colour and cursor escapes, '\r\n' line ends
DDP = SCAN_DATA / "ddp-healthy-train.log"  # timestamps, rank prefixes, NCCL INFO, warnings, tqdm bars

BAR_START = r"^train:\s+(?P<pct>\d+)%\|"  # a tqdm update as its own line
BAR_END = r"(?P<rate>[\d.]+)it/s\]$"  # ... ending where the next '\r' starts
RANK_STEP = r"\[rank(?P<rank>\d+)\] step (?P<step>\d+)/\d+ loss (?P<loss>[\d.]+)"
PIP_WARNING = r"^WARNING: Location '(?P<url>[^']+)' is ignored"
PIP_SAVED = r"^Saved (?P<file>\S+)$"


@pytest.mark.parametrize("engine", ENGINES)
def test_progress_updates_are_lines_and_keep_the_newline_count(engine: str, cache_dir: Path) -> None:
    patterns = [BAR_START, BAR_END, RANK_STEP]
    result = run_scan(PLAIN, patterns, engine)
    assert_matches_reference(result, reference(PLAIN, patterns))
    data = PLAIN.read_bytes()
    assert result.lines == data.count(b"\n")
    assert result.count(0) == data.count(b"train:")  # every update, even several on one line
    assert 0 < result.count(1) < result.count(0)  # `$` holds before '\r', not inside a line
    first = next(iter(result.summaries(0).values())).first[0]
    # The first update's line number is the '\n' line holding it.
    assert first.line_no == data[: data.index(b"train:")].count(b"\n") + 1
    assert first.text.startswith("train:") and "\r" not in first.text


@pytest.mark.parametrize("engine", ENGINES)
def test_ansi_escapes_are_stripped_and_crlf_lines_numbered(engine: str, cache_dir: Path) -> None:
    patterns = [PIP_WARNING, PIP_SAVED]
    result = run_scan(TTY, patterns, engine)
    assert_matches_reference(result, reference(TTY, patterns))
    warnings = next(iter(result.summaries(0).values())).hits()
    assert [h.captures["url"] for h in warnings] == ["file:///opt/pypi-more/simple/tqdm/", "file:///opt/pypi-more/simple/rich/"]
    assert all("\x1b" not in h.text and "\r" not in h.text for h in warnings)
    raw_lines = TTY.read_bytes().split(b"\n")
    assert b"\x1b[33mWARNING" in raw_lines[warnings[0].line_no - 1]  # true to the file
    assert result.count(1) == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_an_unterminated_escape_never_joins_lines(engine: str, cache_dir: Path, tmp_path: Path) -> None:
    # Mechanical: every line of the real log gets an escape sequence opened and never closed.
    log = tmp_path / "osc.log"
    log.write_bytes(b"\x1b]0;\n".join(DDP.read_bytes().split(b"\n")))
    patterns = [r"NCCL INFO (?P<what>Init COMPLETE|Connected all rings)", r"INFO train: epoch (?P<epoch>\d+) step (?P<step>\d+)"]
    result = run_scan(log, patterns, engine)
    assert result.lines == DDP.read_bytes().count(b"\n")
    assert_matches_reference(result, reference(log, patterns))
    plain = run_scan(DDP, patterns, engine)
    for index in (0, 1):  # the same lines, under the same numbers
        assert {r: (s.count, [(h.line_no, h.captures) for h in s.hits()]) for r, s in result.summaries(index).items()} == \
               {r: (s.count, [(h.line_no, h.captures) for h in s.hits()]) for r, s in plain.summaries(index).items()}


@pytest.mark.parametrize("engine", ENGINES)
def test_invalid_utf8_is_tolerated_and_matched_as_replacement_characters(engine: str, cache_dir: Path,
                                                                         tmp_path: Path) -> None:
    # Mechanical: tqdm's 3-byte block characters cut to 2 bytes (as a truncated write leaves them),
    # plus stray bytes >= 0x80 before rank prefixes.
    data = DDP.read_bytes().replace("█".encode(), "█".encode()[:2]).replace(b"[rank1]:", b"\xff\xfe[rank1]:")
    log = tmp_path / "broken.log"
    log.write_bytes(data)
    patterns = [
        r"train:\s+\d+%\|(?P<bar>.{1,3})\s*\|",  # `.` is one character: a replacement char here
        r"\|\W{2,}\|", r"\|\S+\s*\| (?P<n>\d+)/400", r"[^\x00-\x7f]+\| (?P<n>\d+)/400", "\ufffd",
        r"(?i)NCCL INFO comm 0X[0-9A-F]+ RANK (?P<rank>\d) NRANKS", r"\w+ INFO train: epoch", r"^..\[rank1\]",
    ]
    result = run_scan(log, patterns, engine)
    assert_matches_reference(result, reference(log, patterns))
    assert result.count(0) > 0 and result.count(4) > 0 and result.count(7) > 0
    assert "\ufffd" in next(iter(result.summaries(4).values())).first[0].text


@pytest.mark.parametrize("engine", ENGINES)
def test_unicode_classes_and_case_folding_are_not_missed(engine: str, cache_dir: Path, tmp_path: Path) -> None:
    # Mechanical: the real warning lines with words turned upper case and one letter replaced by
    # a look-alike that Python's Unicode regex treats as a word character / the same letter.
    lines = [line for line in DDP.read_text(encoding="utf-8").splitlines() if "Warning" in line]
    mutated = [line.upper() for line in lines] + [line.replace("k", "\u212a") for line in lines] + \
              [line.replace("e", "é") for line in lines] + [line.replace(" ", "\u00a0") for line in lines]
    log = tmp_path / "unicode.log"
    log.write_text("\n".join(lines + mutated) + "\n", encoding="utf-8")
    patterns = [r"(?i)pytorch\sskipping\sthe\sfirst", r"(?i)detected call", r"Detected \w+ of", r"GradScaler\(args\.\.\.\)`\sis",
                r"(?i)deprecated\. please use", r"sch\wd\.st", r"(?i)\bwarning:"]
    result = run_scan(log, patterns, engine)
    expected = reference(log, patterns)
    assert_matches_reference(result, expected)
    found = {index: [hit.text for (i, _), hits in expected.items() if i == index for hit in hits] for index in range(len(patterns))}
    assert len(found[0]) == 4 * 2 and any("\u212a" in t for t in found[0]) and any("\u00a0" in t for t in found[0])
    assert any("schéd" in t for t in found[5])  # a Unicode word character inside


@pytest.mark.parametrize("engine", ENGINES)
def test_long_lines_are_cut_and_counted(engine: str, cache_dir: Path, tmp_path: Path) -> None:
    # Mechanical: one real NCCL line repeated on a single line (130 KB), and 3000 tqdm updates
    # joined by '\r' on one '\n' line (long physical line, short lines as users see them).
    nccl = next(line for line in DDP.read_bytes().split(b"\n") if b"NCCL INFO Trees" in line)
    bar = next(line for line in DDP.read_bytes().split(b"\n") if b"train:  50%" in line).split(b"]:", 1)[1]
    head = DDP.read_bytes()[:2000]
    head = head[: head.rindex(b"\n") + 1]
    marker = b" Init COMPLETE"
    long_line = b" ".join([nccl] * (2 * MAX_LINE // len(nccl) + 1)) + marker
    log = tmp_path / "long.log"
    log.write_bytes(head + long_line + b"\n" + b"\r".join([bar] * 3000) + b"\n" + head)
    patterns = [r"NCCL INFO Trees \[0\]", r"Init COMPLETE$", r"(?P<pct>\d+)%\|"]
    result = run_scan(log, patterns, engine)
    assert result.cut_lines == 1
    assert_matches_reference(result, reference(log, patterns))
    hit = next(iter(result.summaries(0).values())).first[0]
    assert len(hit.text.encode()) <= MAX_LINE
    assert result.count(1) == 0  # past the cut: not part of the line as scanned
    assert result.count(2) == 3000


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
@pytest.mark.parametrize("engine", ENGINES)
def test_compressed_logs_scan_like_plain_ones(engine: str, suffix: str, cache_dir: Path, tmp_path: Path) -> None:
    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}[suffix]
    packed = tmp_path / f"train.log{suffix}"
    with opener(packed, "wb") as out:
        out.write(DDP.read_bytes())
    patterns = [r"NCCL version (?P<version>\S+)", RANK_STEP, r"INFO train: epoch (?P<epoch>\d+) step (?P<step>\d+)"]
    plain = summary_of(run_scan(DDP, patterns, engine))
    assert summary_of(run_scan(packed, patterns, engine)) == plain
    assert summary_of(run_scan(packed, patterns, engine, chunk_bytes=4096)) == plain


@pytest.mark.parametrize("engine", ENGINES)
def test_pieces_of_any_size_give_the_same_result(engine: str, cache_dir: Path) -> None:
    patterns = [BAR_START, BAR_END, RANK_STEP, r"NCCL INFO (?P<key>\w+)", r"UserWarning: (?P<msg>.+)$",
                r"loss (?P<loss>[\d.]+) lr", PIP_WARNING]
    for path in (PLAIN, DDP, TTY):
        whole = summary_of(run_scan(path, patterns, engine))
        for chunk in (64, 1000, 4096, 10_000):
            assert summary_of(run_scan(path, patterns, engine, chunk_bytes=chunk)) == whole, (path.name, chunk)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_match_across_the_16_mib_piece_edge(engine: str, cache_dir: Path, tmp_path: Path) -> None:
    # Mechanical: the real healthy log repeated up to the first piece's edge, then the real
    # crash line placed so that it starts before byte 16 MiB and ends after it.
    crash = b"RuntimeError: DataLoader worker (pid(s) 6440) exited unexpectedly\n"
    filler = DDP.read_bytes()
    edge = CHUNK_BYTES - 20
    body = (filler * (edge // len(filler) + 1))[:edge]
    body = body[: body.rindex(b"\n") + 1]
    body += b"x" * (edge - len(body)) + b"\n"  # pad the last line so the crash starts at `edge`
    log = tmp_path / "big.log"
    log.write_bytes(body + crash + filler)
    assert len(body) < CHUNK_BYTES < len(body) + len(crash)
    patterns = [r"DataLoader worker \(pid\(s\) (?P<pids>[\d, ]+)\) exited unexpectedly", r"NCCL version (?P<version>\S+)"]
    result = run_scan(log, patterns, engine)
    hits = next(iter(result.summaries(0).values())).hits()
    assert [(h.line_no, h.captures["pids"]) for h in hits] == [(body.count(b"\n") + 1, "6440")]
    assert result.lines == (body + crash + filler).count(b"\n")
    # The same line well inside a piece: same result.
    assert summary_of(run_scan(log, patterns, engine, chunk_bytes=CHUNK_BYTES // 2 + 12345))["hits"] == summary_of(result)["hits"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_line_longer_than_a_piece_and_odd_file_ends(engine: str, cache_dir: Path, tmp_path: Path) -> None:
    line = next(line for line in DDP.read_bytes().split(b"\n") if b"NCCL INFO Trees" in line)
    log = tmp_path / "odd.log"
    log.write_bytes(b"\r\n".join([line * 20, line, line]))  # '\r\n' ends, no newline at the end
    patterns = [r"NCCL INFO Trees \[0\] (?P<tree>\S+)", r"Trees.*\[23\] \S+$"]
    small = run_scan(log, patterns, engine, chunk_bytes=1024)  # the first line is longer than a piece
    assert summary_of(small) == summary_of(run_scan(log, patterns, engine))
    assert_matches_reference(small, reference(log, patterns))
    assert small.lines == 2 and small.count(0) == 3
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert run_scan(empty, patterns, engine).lines == 0
