"""Reading a file once, in pieces that end at a newline, into reused buffers; the read-ahead
thread; compressed files."""

from __future__ import annotations

import gzip
import threading
from pathlib import Path

import pytest

from diagnose.errors import InputError
from diagnose.evidence.textio import MAX_LINE, iter_blocks, iter_chunks, prefetch, read_last, read_tail
from tests.support.scan import SCAN_DATA

DDP = SCAN_DATA / "ddp-healthy-train.log"


def _pieces(path: Path, chunk: int, ring: int = 2) -> list[bytes]:
    return [bytes(buf[:size]) for buf, size in iter_blocks(path, chunk, ring)]


@pytest.mark.parametrize("chunk", [64, 1000, 4096, 1 << 20])
def test_pieces_end_at_newlines_and_add_up_to_the_file(chunk: int) -> None:
    data = DDP.read_bytes()
    pieces = _pieces(DDP, chunk)
    assert b"".join(pieces) == data
    assert all(piece.endswith(b"\n") for piece in pieces)
    assert (len(pieces) == 1) == (chunk > len(data))
    expected = 1
    for line_no, piece in iter_chunks(DDP, chunk):
        assert line_no == expected
        expected += piece.count(b"\n")


def test_buffers_are_reused_and_a_piece_survives_while_the_next_is_read() -> None:
    seen: list[int] = []
    previous: tuple[bytearray, bytes] | None = None
    for buf, size in iter_blocks(DDP, 2048, ring=2):
        seen.append(id(buf))
        if previous is not None:
            assert bytes(previous[0][: len(previous[1])]) == previous[1]  # untouched by this read
        previous = (buf, bytes(buf[:size]))
    assert len(set(seen)) == 2 and len(seen) > 4


def test_a_line_longer_than_a_piece_grows_the_buffer(tmp_path: Path) -> None:
    # Mechanical: a real line repeated into one 10 KB line.
    line = next(line for line in DDP.read_bytes().split(b"\n") if b"NCCL INFO Trees" in line)
    log = tmp_path / "long.log"
    data = b"first\n" + line * 40 + b"\n" + DDP.read_bytes()
    log.write_bytes(data)
    pieces = _pieces(log, 1024)
    assert b"".join(pieces) == data
    assert max(len(p) for p in pieces) > len(line) * 40


def test_prefetch_reads_ahead_and_stops_cleanly(tmp_path: Path) -> None:
    data = DDP.read_bytes()
    got = [bytes(buf[:size]) for buf, size in prefetch(iter_blocks(DDP, 1024, ring=3))]
    assert b"".join(got) == data
    before = threading.active_count()
    stream = prefetch(iter_blocks(DDP, 1024, ring=3))
    next(stream)
    stream.close()  # the consumer stops early: the reader thread ends, the file is closed
    assert threading.active_count() == before


def test_read_errors_arrive_through_the_read_ahead_thread(tmp_path: Path) -> None:
    packed = tmp_path / "cut.log.gz"
    packed.write_bytes(gzip.compress(DDP.read_bytes() * 4)[:-200])  # a truncated download
    with pytest.raises(InputError, match="corrupt or truncated"):
        for _ in prefetch(iter_blocks(packed, 4096, ring=3)):
            pass


def test_read_tail_of_a_compressed_file_keeps_line_numbers(tmp_path: Path) -> None:
    packed = tmp_path / "train.log.gz"
    packed.write_bytes(gzip.compress(DDP.read_bytes()))
    tail, first = read_tail(packed, 2000)
    plain_tail, plain_first = read_tail(DDP, 2000)
    assert (tail, first) == (plain_tail, plain_first)
    assert DDP.read_bytes().split(b"\n")[first - 1] == tail.split(b"\n")[0]


def test_a_scanned_logs_tail_is_not_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from diagnose.engine.scan import PatternSet, Scanner
    from diagnose.evidence import logview
    from diagnose.evidence.model import TextFile, TextKind

    log = tmp_path / "train.log"
    log.write_bytes(DDP.read_bytes() * 3)
    expected = read_tail(log, 5000)
    source = TextFile(TextKind.LOG, log, "train.log")
    Scanner(TextKind.LOG, PatternSet([r"NCCL version"]), "pure").scan(source)  # reads the file, once
    opened: list[object] = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    assert logview.tail(source, 5000) == expected
    assert opened == [] and source.view.reads == 0


def test_read_last_is_the_files_end_with_its_lines_cut(tmp_path: Path) -> None:
    data = DDP.read_bytes()
    assert read_last(DDP, len(data) + 10) == data
    assert read_last(DDP, 1000) == data[-1000:]
    long = tmp_path / "long.log"
    long.write_bytes(data + b"y" * (3 * MAX_LINE) + b"\nend\n")
    last = read_last(long, 2 * MAX_LINE)  # all inside the long line: its first MAX_LINE bytes are kept
    assert last == b"y" * MAX_LINE + b"\nend\n"
    with pytest.raises(InputError):
        read_last(tmp_path / "missing.log", 10)
