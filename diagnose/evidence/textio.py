"""Reading evidence files safely: compression, binary detection, chunking at line boundaries.

Nothing here ever writes to or deletes the evidence it reads.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import re
import stat as stat_module
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple, TypeVar, cast

from diagnose.errors import InputError

T = TypeVar("T")
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz")
HEAD_BYTES = 64 * 1024
CHUNK_BYTES = 16 * 1024 * 1024
# A run of text with no newline longer than this is cut into chunks anyway.
MAX_CARRY = 64 * 1024 * 1024
# A line ('\r' or '\n' ends one) longer than this keeps its first MAX_LINE bytes; the rest is
# dropped as it is read, so nothing downstream (regexes, hyperscan, buffers) ever sees more, and
# a 10 GB line costs one pass and 16 MiB of memory.
MAX_LINE = 64 * 1024
_SEPARATOR = re.compile(rb"[\r\n]")


@dataclass
class LineCuts:
    """What the line cap dropped while reading one file."""

    lines: int = 0  # lines cut to their first MAX_LINE bytes
    dropped: int = 0  # bytes dropped


def _last_separator(buf: bytearray, start: int, end: int) -> int:
    # The last '\n', then a '\r' only after it: a '\r' is rare, and looking for one in the whole
    # window was most of the cost of reading a log without long lines.
    newline = buf.rfind(b"\n", start, end)
    cr = buf.rfind(b"\r", newline + 1 if newline >= 0 else start, end)
    return cr if cr >= 0 else newline


def cap_region(buf: bytearray, start: int, end: int, run: int, cuts: LineCuts, limit: int = MAX_LINE) -> tuple[int, int]:
    """Cut, in place, every line of buf[start:end] at `limit` bytes; `run` is the length of the
    line already under way before `start` (its bytes as read, dropped ones too). Returns the new
    end of the kept bytes and the length of the line under way at `end`.

    Linear: the search jumps `limit` bytes a step (a window holding a separator moves on past
    its last one) and each kept byte is copied at most once, only after a cut.
    """
    write = start
    pos = start
    while pos < end:
        if run > limit:  # inside a cut line: drop up to its end
            found = _SEPARATOR.search(buf, pos, end)
            stop = found.start() if found else end
            cuts.dropped += stop - pos
            run += stop - pos
            pos = stop
            if found:
                run = 0
            continue
        span = pos
        while True:
            over = pos + (limit - run)  # the first byte past the limit, if no separator comes first
            if over >= end:
                last = _last_separator(buf, pos, end)
                run = end - last - 1 if last >= 0 else run + (end - pos)
                pos = end
                break
            last = _last_separator(buf, pos, over + 1)
            if last >= 0:
                run = 0
                pos = last + 1
                continue
            cuts.lines += 1
            run = limit + 1
            pos = over
            break
        if write != span:
            buf[write : write + (pos - span)] = buf[span:pos]  # a copy: the two ranges overlap
        write += pos - span
    return write, run


def cap_lines(data: bytes, limit: int = MAX_LINE) -> tuple[bytes, int]:
    """`data` with each line cut at `limit` bytes, and how many were cut."""
    cuts = LineCuts()
    if len(data) <= limit:
        return data, 0
    buf = bytearray(data)
    end, _run = cap_region(buf, 0, len(buf), 0, cuts, limit)
    if not cuts.lines:
        return data, 0
    del buf[end:]
    return bytes(buf), cuts.lines


def special_kind(mode: int) -> str | None:
    """What a non-regular, non-directory file is ("a FIFO", "a socket", ...); None for a regular
    file or a directory. Reading one blocks forever (a FIFO with no writer) or never ends (/dev/zero)."""
    if stat_module.S_ISREG(mode) or stat_module.S_ISDIR(mode):
        return None
    if stat_module.S_ISFIFO(mode):
        return "a FIFO"
    if stat_module.S_ISSOCK(mode):
        return "a socket"
    if stat_module.S_ISCHR(mode) or stat_module.S_ISBLK(mode):
        return "a device"
    return "not a file"


def not_regular(path: Path) -> str | None:
    """`special_kind` of what `path` names (after symlinks); None when it cannot be stat'ed."""
    try:
        return special_kind(os.stat(path).st_mode)
    except OSError:
        return None


def why_unreadable(exc: OSError) -> str:
    """The reason a path cannot be read, in the words a user searches for."""
    import errno

    reasons = {
        errno.ELOOP: "symlink loop",  # checked before EACCES: a loop is not a permission problem
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENOENT: "no such file or directory",
        errno.ENAMETOOLONG: "file name too long",
        errno.ENOTDIR: "not a directory",
        errno.EISDIR: "is a directory",
    }
    return reasons.get(exc.errno or 0) or f"cannot read ({exc.strerror or exc})"


def open_stream(path: Path) -> IO[bytes]:
    """Open a file for binary reading, decompressing .gz/.bz2/.xz transparently. Anything but
    a regular file is refused before it is opened (opening a FIFO blocks until a writer comes)."""
    name = path.name.lower()
    special = not_regular(path)
    if special is not None:
        raise InputError(f"{path}: not a regular file ({special})")
    try:
        # Decompressors are imported when a compressed file comes: most runs never need them.
        if name.endswith(".gz"):
            import gzip

            return gzip.open(path, "rb")  # type: ignore[return-value]
        if name.endswith(".bz2"):
            import bz2

            return bz2.open(path, "rb")
        if name.endswith(".xz"):
            import lzma

            return lzma.open(path, "rb")
        raw = open(path, "rb", buffering=0)  # noqa: SIM115 - returned open
        encoding = _utf16_bom(os.pread(raw.fileno(), 2, 0))
        return raw if encoding is None else cast(IO[bytes], _Utf8FromUtf16(raw, encoding))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: {why_unreadable(exc)}") from None


def _read_error(path: Path, exc: Exception) -> InputError:
    if isinstance(exc, PermissionError):
        return InputError(f"{path}: permission denied")
    if is_compressed(path):
        import gzip
        import lzma
        import zlib

        if isinstance(exc, (gzip.BadGzipFile, zlib.error, EOFError, lzma.LZMAError)):
            return InputError(f"{path}: corrupt or truncated compressed file ({exc})")
    return InputError(f"{path}: cannot read ({exc})")


def is_compressed(path: Path) -> bool:
    return path.name.lower().endswith(COMPRESSED_SUFFIXES)


def is_streamed(path: Path) -> bool:
    """Read only as a stream from its start: compressed, or UTF-16 text (PowerShell's `>` writes
    it) decoded to UTF-8 as it is read. Its byte offsets are not the text's."""
    if is_compressed(path):
        return True
    try:
        with open(path, "rb") as handle:
            return _utf16_bom(handle.read(2)) is not None
    except OSError:
        return False


def _utf16_bom(start: bytes) -> str | None:
    return {b"\xff\xfe": "utf-16-le", b"\xfe\xff": "utf-16-be"}.get(start[:2])


class _Utf8FromUtf16(io.RawIOBase):
    """A UTF-16 file (after its byte order mark) read as UTF-8: every later step sees the text as
    it sees any log. Invalid code units become U+FFFD, as invalid UTF-8 does elsewhere."""

    _READ = 1 << 20

    def __init__(self, raw: IO[bytes], encoding: str) -> None:
        import codecs

        super().__init__()
        self._raw = raw
        self._raw.read(2)  # the byte order mark
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._pending = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with memoryview(buffer) as view:
            while not self._pending and not self._eof:
                chunk = self._raw.read(self._READ)
                self._eof = not chunk
                self._pending = self._decoder.decode(chunk, final=self._eof).encode("utf-8")
            size = min(len(view), len(self._pending))
            view[:size] = self._pending[:size]
            self._pending = self._pending[size:]
            return size

    def close(self) -> None:
        self._raw.close()
        super().close()


def read_head(path: Path, limit: int = HEAD_BYTES) -> bytes:
    """The first `limit` bytes of the (decompressed) file."""
    with open_stream(path) as stream:
        try:
            return stream.read(limit)
        except Exception as exc:  # decompression errors come in many types
            raise _read_error(path, exc) from None


def read_text(path: Path, limit: int = 32 * 1024 * 1024) -> str:
    """A whole small file as text (invalid UTF-8 replaced). Larger files are cut at `limit`."""
    with open_stream(path) as stream:
        try:
            data = stream.read(limit)
        except Exception as exc:
            raise _read_error(path, exc) from None
    return data.decode("utf-8", errors="replace")


def read_tail(path: Path, limit: int) -> tuple[bytes, int]:
    """The last `limit` bytes of the (decompressed) file, starting at a line boundary, and the
    1-based number of the first line returned."""
    if is_streamed(path):
        # A whole decompression (10 GB for a gz bomb): a scanned log's readers take the tail the
        # scan kept (evidence/logview.py) instead.
        return _compressed_tail(path, limit)
    try:
        with open(path, "rb") as handle:
            window = _tail_window(handle, os.fstat(handle.fileno()), limit)
            if window.newlines is None:
                return window.data, window.first_line
            # Counting newlines before the window costs one pass over the head; it keeps line
            # numbers true to the file (a scanned log's readers take the scan's count instead).
            handle.seek(0)
            before = 0
            remaining = window.size - limit
            while remaining > 0:
                block = handle.read(min(CHUNK_BYTES, remaining))
                if not block:
                    break
                before += block.count(b"\n")
                remaining -= len(block)
    except OSError as exc:
        raise _read_error(path, exc) from None
    return window.data, window.first_line + before

class TailWindow(NamedTuple):
    """A plain file's tail as read_tail gives it, read without numbering its lines: `data` and
    the number its first line has when counting from the window's start (`first_line`); the
    true number is first_line + `before`, the newlines ahead of the window, which is
    total newlines - `newlines` (the window's own) once the scan has counted the file.
    `newlines` is None where the window is the whole file: its numbers are true already."""

    data: bytes
    first_line: int
    newlines: int | None
    size: int
    mtime_ns: int
    mtime: float
    complete: bool  # the whole window was read (a file truncated meanwhile gives less)


def read_tail_window(path: Path, limit: int) -> TailWindow | None:
    """read_tail of a plain file without the pass over its head; None if it changed while read."""
    try:
        with open(path, "rb") as handle:
            window = _tail_window(handle, os.fstat(handle.fileno()), limit)
    except OSError as exc:
        raise _read_error(path, exc) from None
    return window if window.complete else None  # truncated while read: the readers read it again


def _tail_window(handle: IO[bytes], stat: os.stat_result, limit: int) -> TailWindow:
    """The tail read_tail returns, numbered from the window's start (one read of the window)."""
    if stat.st_size <= limit:
        data, first = _capped(handle.read(), 1)
        return TailWindow(data, first, None, stat.st_size, stat.st_mtime_ns, stat.st_mtime, True)
    handle.seek(stat.st_size - limit)
    raw = handle.read(limit)
    data, first = _capped(*_drop_partial_line(raw, 1))
    return TailWindow(data, first, raw.count(b"\n"), stat.st_size, stat.st_mtime_ns, stat.st_mtime, len(raw) == limit)

def read_last(path: Path, limit: int) -> bytes:
    """The last `limit` bytes of a plain file, its lines cut at MAX_LINE: one seek and one read
    (read_tail also numbers the lines, which can cost a pass over the whole file)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                handle.seek(size - limit)
            data = handle.read(limit)
    except OSError as exc:
        raise _read_error(path, exc) from None
    return cap_lines(data)[0]


def _capped(data: bytes, line_no: int) -> tuple[bytes, int]:
    # The tail is read straight from the file, past iter_blocks: the line cap is applied here.
    return cap_lines(data)[0], line_no


def _compressed_tail(path: Path, limit: int) -> tuple[bytes, int]:
    window = b""
    next_line = 1
    for base_line, chunk in iter_chunks(path):
        window = (window + chunk)[-limit:]
        next_line = base_line + chunk.count(b"\n")
    first_line = next_line - window.count(b"\n")
    whole = first_line == 1 and next_line == 1 + window.count(b"\n")
    return (window, 1) if whole and len(window) < limit else _drop_partial_line(window, first_line)


def _drop_partial_line(data: bytes, line_no: int) -> tuple[bytes, int]:
    """`data` starts somewhere inside line `line_no`; drop that partial line."""
    cut = data.find(b"\n")
    if cut < 0:
        return data, line_no
    return data[cut + 1 :], line_no + 1


def looks_binary(head: bytes) -> bool:
    """True for data that is not text: many NUL bytes, or mostly control bytes.

    A stray NUL is normal in real training logs (torch's DataLoader prints one after "killed by
    signal"; a crash can leave a run of zeros at the end of a file), so a few do not make a
    binary file; checkpoints and archives are full of them.
    """
    if not head:
        return False
    sample = head[:8192]
    if sample.count(b"\x00") > max(8, len(sample) // 100):
        return True
    # Bytes that never appear in text (control chars other than \t \n \v \f \r \b BEL ESC, and NUL).
    text_controls = {0, 7, 8, 9, 10, 11, 12, 13, 27}
    odd = sum(1 for b in sample if b < 32 and b not in text_controls)
    return odd > len(sample) * 0.05


def iter_chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, bytes]]:
    """Yield (line number of the chunk's first line, chunk) with chunks ending at a newline.

    Line numbers count '\\n' only, as editors and grep do; a progress bar's '\\r' updates stay
    on the line number of the '\\n' line that holds them.
    """
    line_no = 1
    for buffer, size in iter_blocks(path, chunk_bytes):
        chunk = bytes(memoryview(buffer)[:size])
        yield line_no, chunk
        line_no += chunk.count(b"\n")


def iter_blocks(path: Path, chunk_bytes: int = CHUNK_BYTES, ring: int = 2,
                cuts: LineCuts | None = None) -> Iterator[tuple[bytearray, int]]:
    """Yield (buffer, size): the (decompressed) file in pieces, `buffer[:size]`, each ending at
    a newline except the file's last and a line longer than MAX_CARRY (cut at a '\\r' if it
    has one, else anywhere).

    The bytes are read straight into `ring` reusable buffers, so a long file costs no
    allocation per piece: a piece stays valid while the next `ring - 1` pieces are read
    (with the default of 2: while the next one is read), then its buffer is reused. Only the
    unfinished line at a piece's end is copied, to the next buffer's start.

    Lines are cut at MAX_LINE as they are read (counted in `cuts`): memory and every later
    step stay bounded whatever the file (a .gz expanding to one 10 GB line).
    """
    known = file_size(path) if not is_streamed(path) else 0
    # A small file gets a buffer its size: allocating (and zeroing) 16 MiB would dominate.
    first_size = min(chunk_bytes, known + 1) if known else chunk_bytes
    with open_stream(path) as stream:
        readinto = cast(io.RawIOBase, stream).readinto  # every stream open_stream returns has it
        yield from _blocks(readinto, path, first_size, chunk_bytes, [], max(ring, 2), cuts)


def _blocks(readinto: Callable[[memoryview], int | None], path: Path, first_size: int, chunk_bytes: int,
            buffers: list[bytearray], ring: int, cuts: LineCuts | None) -> Iterator[tuple[bytearray, int]]:
    """The pieces of iter_blocks, read with `readinto` into `buffers` (reused when they are
    given: a buffer grown past chunk_bytes by a long line is dropped, not kept)."""
    cuts = cuts if cuts is not None else LineCuts()
    run = 0  # length, as read, of the line under way at the end of what was kept
    buffers[:] = [b for b in buffers if len(b) <= max(chunk_bytes, first_size)][:ring]
    if not buffers or len(buffers[0]) < first_size:
        buffers[:1] = [bytearray(first_size)]
    index = 0
    filled = 0  # bytes in buffers[index]: the carried unfinished line, then what was read
    eof = False
    while not eof:
        buffer = buffers[index]
        with memoryview(buffer) as view:
            while filled < len(buffer):
                try:
                    count = readinto(view[filled:])
                except Exception as exc:
                    raise _read_error(path, exc) from None
                if not count:
                    eof = True
                    break
                filled, run = cap_region(buffer, filled, filled + count, run, cuts)
        if not filled:
            break
        if eof:
            cut = filled
        else:
            newline = buffer.rfind(b"\n", 0, filled)
            if newline < 0:
                if len(buffer) < MAX_CARRY:  # one line longer than the buffer: grow it
                    buffers[index] = buffer = buffer + bytes(len(buffer))
                    continue
                newline = buffer.rfind(b"\r", 0, filled)
                cut = newline + 1 if newline >= 0 else filled
            else:
                cut = newline + 1
        yield buffer, cut  # in use while the next piece is read into another buffer
        if eof:
            break
        rest = filled - cut
        index = (index + 1) % ring
        if index == len(buffers):
            buffers.append(bytearray(max(len(buffer), rest + 1)))
        elif len(buffers[index]) < rest + 1:
            buffers[index] = bytearray(max(len(buffer), rest + 1))
        if rest:  # the unfinished line moves to the next buffer's start
            buffers[index][:rest] = memoryview(buffer)[cut:filled]
        filled = rest


def plan_ranges(path: Path, size: int, piece: int) -> list[tuple[int, int]]:
    """Byte ranges of a plain file, about `piece` bytes each, every one ending just after a
    '\\n' (or at the end of the file), so each holds whole lines and they add up to the file.

    A boundary is the first '\\n' at or after each multiple of `piece`, found by reading a small
    window there; a line longer than the window is followed to its end (memchr speed, one
    window in memory at a time), so a range is never cut inside a line.
    """
    ranges: list[tuple[int, int]] = []
    start = 0
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(f"{path}: {why_unreadable(exc)}") from None
    try:
        while start < size:
            probe = start + piece
            if probe >= size:
                ranges.append((start, size))
                break
            end = size
            window_size = 4096  # lines are short: a small read finds the newline; a long line doubles it
            while probe < size:
                window = os.pread(fd, window_size, probe - 1)
                if not window:
                    break
                at = window.find(b"\n")
                if at >= 0:
                    end = probe + at  # just after the newline: probe - 1 + at + 1
                    break
                probe += len(window)
                window_size = min(2 * window_size, _PLAN_WINDOW)
            ranges.append((start, min(end, size)))
            start = end
    except OSError as exc:
        raise _read_error(path, exc) from None
    finally:
        os.close(fd)
    return ranges


_PLAN_WINDOW = 1024 * 1024


def iter_range_blocks(path: Path, start: int, end: int, buffers: list[bytearray], chunk_bytes: int = CHUNK_BYTES,
                      cuts: LineCuts | None = None) -> Iterator[tuple[bytearray, int]]:
    """iter_blocks over bytes [start, end) of a plain file, read with pread into `buffers`
    (reused between calls: a worker thread keeps its own). `start` must begin a line (0, or
    just after a '\\n'). Pieces and line cuts are as iter_blocks makes them for the whole file;
    a piece is valid until the next one is asked for."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(f"{path}: {why_unreadable(exc)}") from None
    try:
        offset = start

        def readinto(view: memoryview) -> int:
            nonlocal offset
            want = min(len(view), end - offset)
            if want <= 0:
                return 0
            count = os.preadv(fd, [view[:want]], offset) if _PREADV else _pread_into(fd, view, want, offset)
            offset += count
            return count

        # A part close to a piece's size gets a whole piece: the buffer is then reused by every
        # part, never reallocated (and zeroed) for one a few bytes longer than the last.
        want = end - start + 1
        yield from _blocks(readinto, path, chunk_bytes if want > chunk_bytes // 2 else min(chunk_bytes, want),
                           chunk_bytes, buffers, 2, cuts)
    finally:
        os.close(fd)


_PREADV = hasattr(os, "preadv")


def _pread_into(fd: int, view: memoryview, want: int, offset: int) -> int:
    data = os.pread(fd, want, offset)
    view[: len(data)] = data
    return len(data)


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def prefetch(items: Iterator[T]) -> Iterator[T]:
    """Run the iterator one item ahead in a thread: reading and decompressing release the
    GIL, so the next piece is read while this one is scanned. With iter_blocks, give it a
    ring of 3: one piece in use, one waiting, one being read."""
    waiting: queue.Queue[object] = queue.Queue(maxsize=1)
    stop = threading.Event()
    done = object()

    def run() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        waiting.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    break
        except BaseException as exc:  # handed to the consumer
            waiting.put(_Failure(exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # a generator: its `with` blocks close the file
        waiting.put(done)

    thread = threading.Thread(target=run, name="diagnose-read", daemon=True)
    thread.start()
    try:
        while True:
            item = waiting.get()
            if item is done:
                break
            if isinstance(item, _Failure):
                raise item.error
            yield cast(T, item)
    finally:
        stop.set()
        while thread.is_alive():  # let the reader see `stop`, never block on a full queue
            with contextlib.suppress(queue.Empty):
                waiting.get(timeout=0.1)
        thread.join()


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
