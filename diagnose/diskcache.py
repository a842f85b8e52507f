"""A small on-disk cache for things that are slow to build and cheap to check: the compiled
hyperscan database of a pattern set, the parsed rule set. Entries are named by a hash of
everything they depend on, so a stale entry is never read, only left behind.

Where: $DIAGNOSE_CACHE_DIR, else $XDG_CACHE_HOME/diagnose, else ~/.cache/diagnose.
DIAGNOSE_NO_CACHE=1 turns the cache off (nothing read, nothing written).
A cache that cannot be read or written only costs time: every failure here is silent.
"""

from __future__ import annotations

import os
from pathlib import Path

KEEP = 8  # entries kept per kind


def enabled() -> bool:
    return os.environ.get("DIAGNOSE_NO_CACHE", "") in ("", "0")


def cache_dir() -> Path:
    base = os.environ.get("DIAGNOSE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "diagnose"
    )
    return Path(base)


def read(name: str) -> bytes | None:
    if not enabled():
        return None
    try:
        return (cache_dir() / name).read_bytes()
    except OSError:
        return None


def write(name: str, data: bytes, keep: int = KEEP) -> None:
    """Store atomically: readers see the old entry or the whole new one, never a part. Then
    drop all but the `keep` newest entries of the same kind (the name up to its first '-'):
    every edit of a rule makes new ones, and old ones are never read again."""
    if not enabled():
        return
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{name}.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        tmp.replace(directory / name)
        kind = name.split("-", 1)[0] + "-"
        entries = [entry for entry in os.scandir(directory) if entry.name.startswith(kind) and entry.is_file()]
        entries.sort(key=lambda entry: entry.stat().st_mtime_ns, reverse=True)
        for entry in entries[keep:]:
            if entry.name != name:
                os.unlink(entry.path)
    except OSError:
        pass
