"""A "chrooted" view of this machine: a LocalHost whose files live under a folder.

`RootedHost("/srv/nodes/b", "node-b")` answers for a node whose `/job/train.log` is the local
`/srv/nodes/b/job/train.log`: every path a collector asks for is a path of that node, read
under the root; what comes back (glob, walk, open fds, cwd) is that node's path again. It is
how several nodes are put on one machine (tests, a CI that copied each node's files into a
folder), and the Host the fan-out uses for a node whose files were mounted here.

A node's folder runs no commands by default: its kernel is not this machine's, so its kernel
log is the one under its root (var/log/kern.log, as copied), not this machine's dmesg, and the
GPU and package collectors find nothing to run (gaps that say so). Its clock is this machine's.
`commands=True` runs them here, arguments unchanged (a folder view of this very machine). The
process table is the processes whose working directory lies under the root, with their paths
shown as the node's. Links inside the root are followed as the local file system resolves them
(an absolute link leaves the root): a view, not a jail.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from diagnose.live.hosts import CommandResult, FileStat, LocalHost, ProcessInfo


class RootedHost(LocalHost):
    """This machine seen through a folder: the node `name` whose `/` is `root`."""

    def __init__(self, root: str | Path, name: str, commands: bool = False) -> None:
        super().__init__()
        self.root = os.path.realpath(os.fspath(root))
        self.name = name
        self.commands = commands

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str | None] | None = None,
            keep: str = "head") -> CommandResult:
        if self.commands:
            return super().run(argv, timeout, env, keep)
        return CommandResult(tuple(argv), None, error="not found (a node's folder runs no commands)")

    def clock(self, timeout: float) -> float | None:
        if self.commands:
            return super().clock(timeout)
        return time.time()  # the same machine: the same clock

    # -- path mapping

    def inside(self, path: str) -> str:
        """The local path of the node's `path` (relative paths count from the node's /)."""
        clean = os.path.normpath("/" + path.lstrip("/")) if path else "/"
        return self.root if clean == "/" else self.root + clean

    def outside(self, local: str) -> str | None:
        """The node's path of a local one; None when it is not under the root."""
        if local == self.root:
            return "/"
        if local.startswith(self.root + "/"):
            return local[len(self.root):]
        return None

    # -- files

    def stat(self, path: str) -> FileStat | None:
        return super().stat(self.inside(path))

    def listdir(self, path: str) -> list[str]:
        return super().listdir(self.inside(path))

    def glob(self, pattern: str) -> list[str]:
        import glob as glob_module

        # The root itself may hold glob characters: escaped, only the node's pattern matches.
        local = glob_module.escape(self.root) + os.path.normpath("/" + pattern.lstrip("/"))
        found = (self.outside(p) for p in glob_module.glob(local, recursive=True))
        return sorted(p for p in found if p is not None)

    def read_bytes(self, path: str, limit: int, offset: int = 0) -> bytes:
        return super().read_bytes(self.inside(path), limit, offset)

    def walk(self, top: str, max_entries: int) -> Iterator[tuple[str, FileStat]]:
        for local, st in super().walk(self.inside(top), max_entries):
            mapped = self.outside(local)
            if mapped is not None:
                yield mapped, st

    def free_bytes(self, path: str) -> int | None:
        return super().free_bytes(self.inside(path))

    def local_path(self, path: str) -> Path:
        return Path(self.inside(path))

    # -- processes: those that work inside the root

    def processes(self) -> list[ProcessInfo]:
        mine = []
        for proc in super().processes():
            cwd = self.outside(proc.cwd) if proc.cwd else None
            if cwd is None:
                continue
            exe = self.outside(proc.exe) if proc.exe else None
            mine.append(replace(proc, cwd=cwd, exe=exe or proc.exe))
        return mine

    def proc_fds(self, pid: int) -> list[str] | None:
        targets = super().proc_fds(pid)
        if targets is None:
            return None
        return [self.outside(t) or t for t in targets]
