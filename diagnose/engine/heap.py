"""Keep a big scan's freed buffers in the C heap (glibc), instead of handing them back to the
kernel after every piece.

Each scanning thread allocates a few MiB a piece and frees them (the piece with its escapes
stripped, numpy's scratch, decoded text). glibc serves allocations above its mmap threshold with
a fresh mmap, and trims a thread arena's heap as soon as its free top passes the trim threshold:
every piece then page-faults its buffers in again. On the 2-core machine that was 1.0-1.1 s of
system time per GiB scanned (1.4-1.5 s in all, against 0.4 s), measured on the real 1 GiB log of
bench/reallog.py. Both thresholds at 32 MiB keep a piece's worth in each thread's arena; only
where the threads are few (see keep_freed_buffers).
"""

from __future__ import annotations

import ctypes
import sys

KEEP_BYTES = 32 * 2**20  # per scanning thread's arena
KEEP_TOTAL = 64 * 2**20  # kept in all: with many threads each keeps less
FEW_THREADS = 4  # above this many threads nothing is changed: faults spread over the cores too
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_applied: int | None = None


def keep_freed_buffers(threads: int) -> bool:
    """Raise glibc's mmap and trim thresholds so that each of `threads` scanning threads keeps a
    piece's buffers (at most KEEP_BYTES each, KEEP_TOTAL in all; once per process). Not with
    more than FEW_THREADS: 16 arenas keeping 32 MiB each held 430 MB at the peak of a 16-core scan,
    and there the page faults are spread over the cores like the rest. False where nothing was
    changed: the C library has no mallopt (musl, macOS), or it refused."""
    global _applied
    if threads > FEW_THREADS or not sys.platform.startswith("linux"):
        return False
    keep = min(KEEP_BYTES, KEEP_TOTAL // max(threads, 1))
    if _applied is not None:
        return _applied >= keep
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, keep) == 1 and mallopt(_M_TRIM_THRESHOLD, keep) == 1:
        _applied = keep
        return True
    return False
