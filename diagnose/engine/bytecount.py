"""Counting a piece's newlines and spotting its escape characters at memory speed.

bytes.count holds the GIL and runs at 1-2 GB/s, so with the scan spread over threads it was
the one step that did not spread: on 16 cores it cost as long as all the matching. With numpy
the same counts are SIMD loops that release the GIL (numpy is imported only for scans big
enough to repay its import, ~0.1-0.3 s); without it, bytes.count and bytes.find. Both give the
same numbers.
"""

from __future__ import annotations

import os
import threading
from typing import Any

NUMPY_WORTH = 192 * 1024 * 1024  # bytes to scan from which importing numpy pays for itself
_MIN_NUMPY = 256 * 1024  # below this a piece is counted with bytes.count: numpy's call costs more
_BLOCK = 1024 * 1024  # numpy compares this much at a time into a per-thread scratch array

_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
LOAD_WAIT = 60.0  # seconds a count waits for numpy's import before it counts without it
_np: Any = None
_loading: threading.Event | None = None  # set once the import prepare() started is over
_local = threading.local()


def prepare(total_bytes: int) -> None:
    """Use numpy from now on if the scan ahead is big enough and numpy is importable. It is
    imported on a thread of its own (~0.1-0.3 s): the scan threads read and match their first
    parts meanwhile (neither holds the GIL) and wait for it only to count."""
    global _loading
    if _np is None and _loading is None and total_bytes >= NUMPY_WORTH:
        _loading = threading.Event()
        threading.Thread(target=_load, args=(_loading,), name="diagnose-numpy", daemon=True).start()


def load_now() -> bool:
    """Import numpy on this thread (before a fork: a child must not wait for a thread it does
    not have); whether the counts use it."""
    global _loading
    if _np is None and _loading is None:
        _loading = threading.Event()
        _load(_loading)
    return _np is not None


def _load(done: threading.Event) -> None:
    global _np
    # No BLAS is used: without this, OpenBLAS starts a thread per core as numpy loads
    # (~0.1-0.3 s on a 16-core machine). The environment is put back for later children.
    saved = {name: os.environ.get(name) for name in _BLAS_THREADS}
    os.environ.update(dict.fromkeys(_BLAS_THREADS, "1"))
    try:
        import numpy

        _np = numpy
    except Exception:  # not installed or broken: the plain counts are as right, only slower
        pass
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        done.set()


def _numpy() -> Any:
    """numpy once its import (if one was started) is over; None: count without it."""
    loading = _loading
    if _np is None and loading is not None:
        loading.wait(LOAD_WAIT)
    return _np


def numpy_for(size: int) -> Any:
    """numpy, if the scan uses it and a buffer of `size` bytes is worth its calls; else None."""
    return _numpy() if size >= _MIN_NUMPY else None


def using_numpy() -> bool:
    """Do the counts use numpy (waiting for an import prepare() started)?"""
    return _numpy() is not None


def reset() -> None:
    """Back to the plain counts (tests compare both)."""
    global _np, _loading
    _np = None
    _loading = None


def _scratch(np: Any) -> Any:
    scratch = getattr(_local, "scratch", None)
    if scratch is None:
        scratch = _local.scratch = np.empty(_BLOCK, dtype=np.bool_)
    return scratch


def newlines_and_escape(buf: bytes | bytearray, size: int) -> tuple[int, bool]:
    """('\\n' count, whether an ESC byte is there) of buf[:size]."""
    np = numpy_for(size)
    if np is None:
        return buf.count(b"\n", 0, size), buf.find(b"\x1b", 0, size) >= 0
    scratch = _scratch(np)
    data = np.frombuffer(buf, dtype=np.uint8, count=size)
    newlines = 0
    escape = False
    for at in range(0, size, _BLOCK):
        part = data[at : at + _BLOCK]
        flags = scratch[: len(part)]
        np.equal(part, 10, out=flags)
        newlines += int(np.count_nonzero(flags))
        if not escape:
            np.equal(part, 27, out=flags)
            escape = bool(flags.any())
    del data, part, flags  # release the export: the buffer may be reused or resized next
    return newlines, escape


def count_newlines(buf: bytes | bytearray, start: int, end: int) -> int:
    """'\\n' count of buf[start:end]."""
    np = numpy_for(end - start)
    if np is None:
        return buf.count(b"\n", start, end)
    scratch = _scratch(np)
    data = np.frombuffer(buf, dtype=np.uint8, count=end - start, offset=start)
    total = 0
    for at in range(0, end - start, _BLOCK):
        part = data[at : at + _BLOCK]
        flags = scratch[: len(part)]
        np.equal(part, 10, out=flags)
        total += int(np.count_nonzero(flags))
    del data, part, flags
    return total
