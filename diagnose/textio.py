"""Reading evidence files safely: compression, binary detection, chunking at line boundaries.

Nothing here ever writes to or deletes the evidence it reads.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from diagnose.errors import InputError

COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz")
HEAD_BYTES = 64 * 1024
CHUNK_BYTES = 16 * 1024 * 1024
# A run of text with no newline longer than this is cut into chunks anyway.
MAX_CARRY = 64 * 1024 * 1024


def open_stream(path: Path) -> IO[bytes]:
    """Open a file for binary reading, decompressing .gz/.bz2/.xz transparently."""
    name = path.name.lower()
    try:
        if name.endswith(".gz"):
            return gzip.open(path, "rb")  # type: ignore[return-value]
        if name.endswith(".bz2"):
            return bz2.open(path, "rb")
        if name.endswith(".xz"):
            return lzma.open(path, "rb")
        return open(path, "rb", buffering=0)
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _read_error(path: Path, exc: Exception) -> InputError:
    if isinstance(exc, PermissionError):
        return InputError(f"{path}: permission denied")
    if isinstance(exc, (gzip.BadGzipFile, zlib.error, EOFError)):
        return InputError(f"{path}: corrupt or truncated compressed file ({exc})")
    if isinstance(exc, (lzma.LZMAError, OSError)) and not isinstance(exc, FileNotFoundError):
        return InputError(f"{path}: cannot read ({exc})")
    return InputError(f"{path}: cannot read ({exc})")


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
    if path.name.lower().endswith(COMPRESSED_SUFFIXES):
        window = b""
        next_line = 1
        for base_line, chunk in iter_chunks(path):
            window = (window + chunk)[-limit:]
            next_line = base_line + chunk.count(b"\n")
        first_line = next_line - window.count(b"\n")
        whole = first_line == 1 and next_line == 1 + window.count(b"\n")
        return (window, 1) if whole and len(window) < limit else _drop_partial_line(window, first_line)
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            if size <= limit:
                return handle.read(), 1
            handle.seek(size - limit)
            data = handle.read(limit)
            # Counting newlines before the window costs one pass over the head; it keeps line
            # numbers true to the file.
            handle.seek(0)
            before = 0
            remaining = size - limit
            while remaining > 0:
                block = handle.read(min(CHUNK_BYTES, remaining))
                if not block:
                    break
                before += block.count(b"\n")
                remaining -= len(block)
    except OSError as exc:
        raise _read_error(path, exc) from None
    return _drop_partial_line(data, before + 1)


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
    carry = b""
    with open_stream(path) as stream:
        while True:
            try:
                block = stream.read(chunk_bytes)
            except Exception as exc:
                raise _read_error(path, exc) from None
            if not block:
                break
            data = carry + block if carry else block
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) < MAX_CARRY:
                    carry = data
                    continue
                cut = max(data.rfind(b"\r"), len(data) - 1)  # a giant line: cut it anyway
            chunk, carry = data[: cut + 1], data[cut + 1 :]
            yield line_no, chunk
            line_no += chunk.count(b"\n")
    if carry:
        yield line_no, carry


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
