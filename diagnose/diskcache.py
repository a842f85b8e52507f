"""A small on-disk cache for things that are slow to build and cheap to check: the compiled
hyperscan database of a pattern set, the parsed rule set. Entries are named by a hash of
everything they depend on, so a stale entry is never read, only left behind.

Where: $DIAGNOSE_CACHE_DIR, else $XDG_CACHE_HOME/diagnose, else ~/.cache/diagnose.
DIAGNOSE_NO_CACHE=1 turns the cache off (nothing read, nothing written).
A cache that cannot be read or written only costs time: every failure here is silent.

The cache is never trusted (a pickle or a hyperscan database planted there would run or
corrupt code as whoever runs diagnose, root included):
- the folder is created 0700 and used only when it is a directory owned by the current user
  that nobody else may write (else no cache at all, no error);
- every operation goes through one descriptor of that checked folder (dir_fd), so a folder
  swapped for another after the check is never the one used;
- each entry is written atomically (temp file + os.replace), 0600, and carries an
  HMAC-SHA256 of its name and bytes under a random per-user key kept in the folder (`.key`,
  0600); read() hands back only bytes whose HMAC checks out.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

KEEP = 8  # entries kept per kind
KEY_NAME = ".key"
_KEY_BYTES = 32
_TAG_BYTES = 32  # sha256
_keys: dict[tuple[int, int], bytes] = {}  # (st_dev, st_ino) of the folder -> its key, once per process


def enabled() -> bool:
    return os.environ.get("DIAGNOSE_NO_CACHE", "") in ("", "0")


def cache_dir() -> Path:
    base = os.environ.get("DIAGNOSE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "diagnose"
    )
    return Path(base)


def _private(st: os.stat_result) -> bool:
    """Ours, and nobody else may change it."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


@contextlib.contextmanager
def _folder(create: bool) -> Iterator[int | None]:
    """A descriptor of the cache folder, or None when it is missing or not safe to use."""
    directory = cache_dir()
    if create:
        with contextlib.suppress(OSError):
            directory.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(directory, 0o700)  # already there: checked below like any other
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        st = os.fstat(fd)
        yield fd if stat.S_ISDIR(st.st_mode) and _private(st) else None
    finally:
        os.close(fd)


def _key(fd: int, create: bool) -> bytes | None:
    """The folder's HMAC key: a 0600 file of ours, made once (linked into place complete, so a
    concurrent reader never sees half a key)."""
    st = os.fstat(fd)
    known = _keys.get((st.st_dev, st.st_ino))
    if known is not None:
        return known
    for _attempt in range(2):
        try:
            key_fd = os.open(KEY_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                return None
            tmp = f".key.{os.getpid()}.tmp"
            try:
                tmp_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
                try:
                    os.write(tmp_fd, os.urandom(_KEY_BYTES))
                finally:
                    os.close(tmp_fd)
                with contextlib.suppress(FileExistsError):  # another process made one first: use theirs
                    os.link(tmp, KEY_NAME, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
            except OSError:
                return None
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
            continue
        except OSError:
            return None
        try:
            key_st = os.fstat(key_fd)
            if not stat.S_ISREG(key_st.st_mode) or not _private(key_st) or key_st.st_mode & 0o077:
                return None
            key = os.read(key_fd, _KEY_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(key_fd)
        if len(key) != _KEY_BYTES:
            return None
        _keys[(st.st_dev, st.st_ino)] = key
        return key
    return None


def _tag(key: bytes, name: str, data: bytes) -> bytes:
    # The name is signed too: an entry copied under another name is not accepted.
    return hmac.new(key, name.encode() + b"\0" + data, hashlib.sha256).digest()


def read(name: str) -> bytes | None:
    """The bytes stored under `name`, or None: missing, unsafe folder, or not signed by us."""
    if not enabled():
        return None
    try:
        with _folder(create=False) as fd:
            if fd is None:
                return None
            key = _key(fd, create=False)
            if key is None:
                return None
            entry = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            try:
                st = os.fstat(entry)
                if not stat.S_ISREG(st.st_mode) or not _private(st):
                    return None
                with os.fdopen(entry, "rb", closefd=False) as handle:
                    blob = handle.read()
            finally:
                os.close(entry)
    except OSError:
        return None
    tag, data = blob[:_TAG_BYTES], blob[_TAG_BYTES:]
    if len(tag) != _TAG_BYTES or not hmac.compare_digest(tag, _tag(key, name, data)):
        return None  # planted, corrupt or from another key: the caller rebuilds it
    return data


def write(name: str, data: bytes, keep: int = KEEP) -> None:
    """Store atomically: readers see the old entry or the whole new one, never a part. Then
    drop all but the `keep` newest entries of the same kind (the name up to its first '-'):
    every edit of a rule makes new ones, and old ones are never read again."""
    if not enabled() or "/" in name or name.startswith("."):
        return
    try:
        with _folder(create=True) as fd:
            if fd is None:
                return
            key = _key(fd, create=True)
            if key is None:
                return
            tmp = f".{name}.{os.getpid()}.tmp"
            tmp_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
            try:
                with os.fdopen(tmp_fd, "wb", closefd=False) as handle:
                    handle.write(_tag(key, name, data))
                    handle.write(data)
            finally:
                os.close(tmp_fd)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            kind = name.split("-", 1)[0] + "-"
            # Only names of our own shape (kind, hex key, same suffix) are pruned: DIAGNOSE_CACHE_DIR
            # may name a folder of the user's that holds other files too.
            suffix = name[len(kind):].lstrip("0123456789abcdef")
            ours = re.compile(re.escape(kind) + "[0-9a-f]+" + re.escape(suffix))
            with os.scandir(fd) as scan:
                entries = [(entry.stat(follow_symlinks=False).st_mtime_ns, entry.name) for entry in scan
                           if ours.fullmatch(entry.name) and entry.is_file(follow_symlinks=False)]
            entries.sort(reverse=True)
            for _mtime, old in entries[keep:]:
                if old != name:
                    os.unlink(old, dir_fd=fd)
    except OSError:
        pass
