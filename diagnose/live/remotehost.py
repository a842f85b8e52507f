"""SshHost: the machine a run lives on, reached over OpenSSH (with an exec prefix), asked
with nothing but what any Linux box has: POSIX sh, coreutils, GNU grep and find, /proc.

Every operation is one small shell script from this module, run as `sh -c SCRIPT diagnose
MARK ARG...`: the script is a constant, every path, pattern and id is an argument (never
script text), and the output comes in sections that end with the per-command marker, so a
login banner or a file that holds our framing cannot be mistaken for an answer. Operations
that matter on a slow link are batched: a directory is listed three levels deep at once with
every entry's stat (discovery then asks the cache), the process table (stat, cmdline,
environ, cgroup, cwd/exe/fd links of every process) is one command, heads and tails of a log
are read once and kept. Each command has its own time limit (killed there, on both sides); a
dropped connection is noticed once (ssh.Connection) and makes every later operation fail at
once with ConnectionLost, an OSError the collectors turn into gaps.
"""

from __future__ import annotations

import errno
import math
import os
import posixpath
import re
import stat as stat_module
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diagnose.errors import DiagnoseError
from diagnose.live.hosts import (
    MAX_OUTPUT,
    CommandResult,
    FileStat,
    Host,
    ProcessInfo,
    ProcStat,
    cgroup_of,
    parse_stat,
)
from diagnose.live.ssh import Connection, ConnectionLost, Remote, env_words, nonce

OP_TIMEOUT = 20.0  # seconds one small remote operation may take
LIST_DEPTH = 4  # a directory listed on a cache miss brings its subtree this deep (discovery walks 3)
LIST_CAP = 8 * 1024 * 1024  # bytes of listing one directory may send
FETCH_CAP = 256 * 1024 * 1024  # a whole file fetched for local_path
HEAD_KEEP = 128 * 1024  # heads at least this long are read once per file
TAIL_KEEP = 5 * 1024 * 1024  # and tails (the crash finder reads 4 MiB): one read serves all
_PRUNE = (".git", "node_modules", "__pycache__", "site-packages", ".venv", "venv", ".tox", ".mypy_cache")
_STAT_FORMAT = "%s %.9Y %f %u %.9Z"
MARK = re.compile(r"DGX[0-9a-f]{24}")  # ssh.nonce(): in the arguments of every command we run there

PRELUDE = (
    'n=$1; shift; LC_ALL=C; export LC_ALL; e() { printf "\\n%s\\n" "$n"; }; '
    'printf "%s\\n" "$n"; printf "%s\\n" "$n" >&2; '
)

RUN = '"$@" </dev/null; r=$?; [ "$r" -eq 255 ] && r=254; exit "$r"'
# The same with the output compressed; the exit status comes after the marker on stderr.
RUN_GZIP = ('{ "$@" </dev/null; r=$?; printf "\\n%s rc=%s\\n" "$n" "$r" >&2; } | gzip -1 -c; exit 0')

PROBE = r"""
printf 'INFO\n'
printf 'host=%s\n' "$(uname -n 2>/dev/null)"
printf 'uid=%s\n' "$(id -u)"
printf 'user=%s\n' "$(id -un 2>/dev/null)"
h=$(getent passwd "$(id -u)" 2>/dev/null | cut -d: -f6); [ -n "$h" ] || h=${HOME:-/}
printf 'home=%s\n' "$h"
printf 'cwd=%s\n' "$(pwd)"
printf 'time=%s\n' "$(date +%s)"
printf 'ticks=%s\n' "$(getconf CLK_TCK 2>/dev/null || echo 100)"
printf 'btime=%s\n' "$(sed -n 's/^btime //p' /proc/stat 2>/dev/null)"
printf 'tz=%s\n' "$(date +%z)"
t=''; for c in gzip timeout find stat grep python3 tmux py-spy; do command -v "$c" >/dev/null 2>&1 && t="$t $c"; done
printf 'tools=%s\n' "$t"
e
printf 'ENV\n'; env -0 2>/dev/null || env; e
"""

STATS = """
for f do printf 'S\\n%s\\0' "$f"; stat -L -c '""" + _STAT_FORMAT + """' -- "$f" 2>&1; e; done
"""

LIST = r"""
m=$1; c=$2; shift 2
fmt='%d %y %s %T@ %m %U %C@\0%h\0%f\0'
for d do
  if [ -d "$d" ] && [ -r "$d" ] && [ -x "$d" ]; then
    printf 'L 1\n%s\0' "$d"
    find -L "$d" -mindepth 1 -maxdepth "$m" \( -type d \( -name '.*' """ + " ".join(
    f"-o -name {name}" for name in _PRUNE) + r""" \) -prune -printf "$fmt" \) -o -printf "$fmt" 2>/dev/null | head -c "$c"
  else
    printf 'L 0\n%s\0' "$d"
  fi
  e
done
"""

DIRS = r"""
c=$1; t=$2
printf 'D\n'; find -L "$t" -mindepth 1 -type d \( -name '.*' -prune -o -printf '%P\0' \) 2>/dev/null | head -c "$c"; e
"""

WALK = r"""
c=$1; t=$2
printf 'W\n'; find -P "$t" -mindepth 1 \( -type d -o -type f \) -printf '%y %s %T@ %m %U\0%P\0' 2>/dev/null | head -c "$c"; e
"""

READ = r"""
k=$1; o=$2; shift 2
for f do
  d=${f%/*}
  if [ ! -e "$f" ] && [ -n "$d" ] && [ -e "$d" ] && [ ! -d "$d" ]; then printf 'R ENOTDIR\n'
  elif [ ! -e "$f" ]; then printf 'R ENOENT\n'
  elif [ ! -f "$f" ]; then printf 'R EINVAL\n'
  elif [ ! -r "$f" ]; then printf 'R EACCES\n'
  else
    st=$(stat -L -c '%s %.9Y' -- "$f"); s=${st%% *}
    if [ "$o" -lt 0 ]; then b=$((s + o)); [ "$b" -lt 0 ] && b=0; else b=$o; fi
    printf 'R OK %s %s\n' "$b" "$st"
    tail -c +"$((b + 1))" -- "$f" | head -c "$k"
  fi
  e
done
"""

RANGES = r"""
f=$1; shift
if [ ! -f "$f" ] || [ ! -r "$f" ]; then printf 'X\n'; e; exit 0; fi
while [ "$#" -ge 2 ]; do
  printf 'P %s %s\n' "$1" "$2"; tail -c +"$(($1 + 1))" -- "$f" | head -c "$2"; e; shift 2
done
"""

FREE = r"""
p=$1
while [ ! -e "$p" ]; do q=${p%/*}; [ -n "$q" ] || q=/; [ "$q" = "$p" ] && break; p=$q; done
printf 'F\n'; df -P -k -- "$p" 2>/dev/null | tail -n 1; e
"""

PROCS = r"""
cd /proc || exit 0
for s in stat cmdline environ cgroup; do
  printf '%s\n' "$s"; grep -a -z -H '' [0-9]*/"$s" 2>/dev/null; e
done
printf 'links\n'; find [0-9]*/cwd [0-9]*/exe -maxdepth 0 -printf '%p:%l\0' 2>/dev/null; e
printf 'fds\n'; find [0-9]*/fd -mindepth 1 -maxdepth 1 -printf '%h:%l\0' 2>/dev/null; e
"""

PSTAT = r"""
cd /proc || exit 0
printf 'stat\n'; grep -a -z -H '' -- "$@" 2>/dev/null; e
"""


class Sections:
    """A remote script's answer: (header, content) pairs, each ended by the command's marker."""

    def __init__(self, data: bytes, mark: str) -> None:
        self.items: list[tuple[str, bytes]] = []
        self.complete = False
        token = mark.encode()
        start = data.find(token + b"\n")
        if start < 0:
            return
        end = b"\n" + token + b"\n"
        pos = start + len(token) + 1
        while pos < len(data):
            newline = data.find(b"\n", pos)
            if newline < 0:
                return
            header = data[pos:newline].decode("utf-8", errors="replace")
            close = data.find(end, newline)
            if close < 0:
                return  # cut short (a dropped connection, a time limit): this section is lost
            self.items.append((header, data[newline + 1 : close]))
            pos = close + len(end)
        self.complete = True

    def get(self, tag: str) -> bytes | None:
        return next((content for header, content in self.items if header.split(" ", 1)[0] == tag), None)


@dataclass
class Listing:
    names: list[str]
    complete: bool = True


def _mode(kind: str, perms: str) -> int:
    bits = {"d": stat_module.S_IFDIR, "f": stat_module.S_IFREG, "s": stat_module.S_IFSOCK, "p": stat_module.S_IFIFO,
            "c": stat_module.S_IFCHR, "b": stat_module.S_IFBLK, "l": stat_module.S_IFLNK}.get(kind, 0)
    try:
        return bits | int(perms, 8)
    except ValueError:
        return bits


def _find_stat(kind: str, size: str, mtime: str, perms: str, uid: str, ctime: str | None = None) -> FileStat | None:
    if kind == "l":  # followed (-L) and still a link: it points nowhere
        return None
    try:
        return FileStat(int(size), float(mtime), kind == "d", kind == "f", kind == "s", _mode(kind, perms), int(uid),
                        float(ctime) if ctime else None)
    except ValueError:
        return None


def _stat_line(text: str) -> FileStat | None:
    """`stat -c '%s %.9Y %f %u %.9Z'` output; None when it is not one."""
    parts = text.split()
    if len(parts) != 5:
        return None
    try:
        mode = int(parts[2], 16)
        return FileStat(int(parts[0]), float(parts[1]), stat_module.S_ISDIR(mode), stat_module.S_ISREG(mode),
                        stat_module.S_ISSOCK(mode), mode, int(parts[3]), float(parts[4]))
    except ValueError:
        return None


class SshHost(Host):
    """A machine behind `ssh TARGET [EXEC PREFIX]`; see the module doc."""

    local = False

    def __init__(self, remote: Remote, folder: Path | None = None) -> None:
        from diagnose.evidence.tempdirs import private_tempdir

        self.remote = remote
        self.folder = folder or private_tempdir("diagnose-ssh-")  # 0700: the control socket lives here
        self.conn = Connection(remote, self.folder)
        self.conn.open()
        self._lock = threading.Lock()
        self._stats: dict[str, FileStat | None] = {}
        self._lists: dict[str, Listing] = {}
        self._heads: dict[str, tuple[bytes, str]] = {}  # path -> (first bytes, "size mtime" when read)
        self._tails: dict[str, tuple[bytes, str, int]] = {}  # path -> (last bytes, "size mtime", their offset)
        self._procs: list[ProcessInfo] | None = None
        self._proc_files: dict[str, dict[int, Any]] = {}
        self._fetched: dict[str, Path] = {}
        self._whole: dict[str, bytes] = {}  # small files read whole
        self._file_locks: dict[str, threading.Lock] = {}
        self.info: dict[str, str] = {}
        self.env: dict[str, str] = {}
        self._probe()
        self.name = self.info.get("host") or remote.target.host

    # ---------------------------------------------------------------- plumbing

    def _deadline_words(self, timeout: float) -> list[str]:
        if "timeout" not in self.tools:
            return []
        return ["timeout", "-k", "2", str(max(1, math.ceil(timeout)))]

    @property
    def tools(self) -> set[str]:
        return set(self.info.get("tools", "").split())

    def script(self, body: str, args: Sequence[str], timeout: float = OP_TIMEOUT, stdin: bytes | None = None,
               keep: str = "head", compress: bool = False) -> Sections:
        """Run one of this module's scripts (its output compressed on the way when asked and
        the remote side has gzip); ConnectionLost when the connection is gone, TimeoutError
        (an OSError too) when it did not answer in time."""
        return self._script(body, args, timeout, stdin, keep, compress)[0]

    def _script(self, body: str, args: Sequence[str], timeout: float, stdin: bytes | None = None,
                keep: str = "head", compress: bool = False) -> tuple[Sections, CommandResult]:
        mark = nonce()
        compress = compress and "gzip" in self.tools
        if compress:
            body = "z() {\n" + body + '\n}\nz "$@" | gzip -1 -c\n'
        argv = [*self._deadline_words(timeout), "sh", "-c", PRELUDE + body, "diagnose", mark, *args]
        result = self.conn.run(argv, timeout + 3.0, stdin=stdin, keep=keep)
        if self.conn.lost is not None:
            raise ConnectionLost(errno.ECONNRESET, self.conn.lost)
        stdout = result.stdout
        if compress:
            stdout = mark.encode() + b"\n" + _gunzip(_after_mark(stdout, mark))
        answer = Sections(stdout, mark)
        if result.timed_out or (result.rc == 124 and "timeout" in self.tools):
            raise TimeoutError(errno.ETIMEDOUT, f"{self.remote.target}: no answer within {timeout:.0f} s")
        return answer, result

    def _probe(self) -> None:
        try:
            answer, result = self._script(PROBE, [], timeout=self.remote.connect_timeout + 10)
        except OSError as exc:
            raise DiagnoseError(f"{self.remote.describe()}: {exc.strerror or exc}") from None
        info = answer.get("INFO")
        if info is None:
            words = " ".join(self.remote.exec_prefix)
            what = f"the exec prefix {words!r} failed" if words else "the remote shell did not run our command"
            first = next((line.strip() for line in result.err.splitlines() if line.strip()), "")
            raise DiagnoseError(f"{self.remote.describe()}: {what}" + (f": {first[:300]}" if first else "")
                                + (f" (exit {result.rc})" if result.rc not in (0, None) else ""))
        for line in info.decode("utf-8", errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                self.info[key] = value.strip()
        raw = answer.get("ENV") or b""
        separator = b"\0" if b"\0" in raw else b"\n"
        for item in raw.split(separator):
            name, equals, setting = item.partition(b"=")
            if equals and name:
                self.env[name.decode("utf-8", errors="replace")] = setting.decode("utf-8", errors="replace")
        missing = {"find", "stat", "grep"} - self.tools
        if missing:
            raise DiagnoseError(f"{self.remote.describe()}: the remote side lacks {', '.join(sorted(missing))} "
                                "(diagnose needs POSIX sh, coreutils, GNU grep and find there)")

    # ---------------------------------------------------------------- commands

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str | None] | None = None,
            keep: str = "head") -> CommandResult:
        args = tuple(argv)
        if timeout <= 0:
            return CommandResult(args, None, timed_out=True)
        mark = nonce()
        compress = "gzip" in self.tools
        inner = [*self._deadline_words(timeout), "sh", "-c", PRELUDE + (RUN_GZIP if compress else RUN), "diagnose", mark,
                 *env_words(env), *args]
        # A compressed stream is read whole (its tail alone could not be inflated) and cut after.
        result = self.conn.run(inner, timeout + 3.0, keep="head" if compress else keep)
        if result.error:
            return CommandResult(args, None, seconds=result.seconds, error=result.error)
        stdout, stderr = _after_mark(result.stdout, mark), _after_mark(result.stderr, mark)
        if compress:
            if result.truncated:
                return CommandResult(args, None, seconds=result.seconds, truncated=True,
                                     error=f"printed more than {MAX_OUTPUT >> 20} MiB even compressed")
            stdout = _gunzip(stdout)
            status = stderr.rfind(b"\n" + mark.encode() + b" rc=")
            code: int | None = None
            if status >= 0:
                text = stderr[status:].split(b"rc=", 1)[1].split(b"\n", 1)[0]
                code = int(text) if text.isdigit() else None
                stderr = stderr[:status]
            if code is None and not (result.timed_out or result.rc == 124):
                return CommandResult(args, None, stdout, stderr, result.seconds, error=f"connection to {self.remote.target} "
                                     "lost" if self.conn.lost else "the command's end was not seen")
            truncated = len(stdout) > MAX_OUTPUT
            if truncated:
                stdout = stdout[:MAX_OUTPUT] if keep == "head" else stdout[-MAX_OUTPUT:]
            result = CommandResult(result.argv, code if code is not None else result.rc, result.stdout, result.stderr,
                                   result.seconds, result.timed_out, result.error, truncated)
        if result.timed_out or result.rc == 124 or (result.rc == 137 and "timeout" in self.tools):
            return CommandResult(args, None, stdout, stderr, result.seconds, timed_out=True, truncated=result.truncated)
        if result.rc == 127:
            return CommandResult(args, None, stdout, stderr, result.seconds, error="not found")
        if result.rc == 126:
            return CommandResult(args, None, stdout, stderr, result.seconds, error="permission denied")
        return CommandResult(args, result.rc, stdout, stderr, result.seconds, truncated=result.truncated)

    # ---------------------------------------------------------------- files

    def _known(self, path: str) -> tuple[bool, FileStat | None]:
        """(whether the cache can answer, the answer): a stat seen, or a name missing from its
        folder's complete listing."""
        with self._lock:
            if path in self._stats:
                return True, self._stats[path]
            current = path
            while current not in ("/", ""):  # a folder above it that is known to be missing
                parent, name = posixpath.split(current)
                listing = self._lists.get(parent)
                if listing is not None and listing.complete and name not in listing.names:
                    return True, None
                if parent in self._stats:
                    above = self._stats[parent]
                    if above is None or not above.is_dir:
                        return True, None
                current = parent
        return False, None

    def stat(self, path: str) -> FileStat | None:
        path = posixpath.normpath(path)
        known, value = self._known(path)
        if known:
            return value
        answer = self.stats([path]).get(path)
        if isinstance(answer, PermissionError):
            raise answer
        return answer if isinstance(answer, FileStat) else None

    def stats(self, paths: Sequence[str]) -> dict[str, FileStat | PermissionError | None]:
        """Stats of several paths in one command (cached)."""
        wanted = [posixpath.normpath(p) for p in paths]
        missing = [p for p in dict.fromkeys(wanted) if not self._known(p)[0]]
        found: dict[str, FileStat | PermissionError | None] = {}
        if missing:
            answer = self.script(STATS, missing)
            for header, content in answer.items:
                if header != "S":
                    continue
                name, _, text = content.partition(b"\0")
                path = name.decode("utf-8", errors="surrogateescape")
                line = text.decode("utf-8", errors="replace").strip()
                st = _stat_line(line)
                if st is not None:
                    found[path] = st
                elif "Permission denied" in line:
                    found[path] = PermissionError(errno.EACCES, "Permission denied", path)
                else:
                    found[path] = None  # no such file, not a directory, a link to nowhere
            if not answer.complete:
                raise ConnectionLost(errno.ECONNRESET, f"{self.remote.target}: answer cut short")
            with self._lock:
                for path, value in found.items():
                    if not isinstance(value, PermissionError):
                        self._stats[path] = value
        result: dict[str, FileStat | PermissionError | None] = {}
        for path in wanted:
            result[path] = found[path] if path in found else self._known(path)[1]
        return result

    def listdir(self, path: str) -> list[str]:
        path = posixpath.normpath(path)
        with self._lock:
            known = self._lists.get(path)
        if known is None or not known.complete:
            self._list_tree([path])
            with self._lock:
                known = self._lists.get(path)
        return sorted(known.names) if known is not None else []

    def _list_tree(self, folders: Sequence[str], depth: int = LIST_DEPTH) -> None:
        """List folders `depth` levels deep in one command: their listings, and those of the
        folders below them that came whole, go into the cache with every entry's stat."""
        answer = self.script(LIST, [str(depth), str(LIST_CAP), *folders], timeout=OP_TIMEOUT * 2, compress=True)
        lists: dict[str, Listing] = {}
        stats: dict[str, FileStat | None] = {}
        for header, content in answer.items:
            if not header.startswith("L "):
                continue
            top, _, rest = content.partition(b"\0")
            root = top.decode("utf-8", errors="surrogateescape")
            lists[root] = Listing([], True)
            if header != "L 1":
                continue  # not there, no folder, or not ours to list: nothing in it
            fields = rest.split(b"\0")
            usable = len(fields) - 1  # the last piece follows the last NUL: empty, or cut short
            cut = len(rest) >= LIST_CAP or (usable % 3) != 0
            last_parent, last_child = root, ""
            for i in range(0, usable - usable % 3, 3):
                meta = fields[i].decode("ascii", errors="replace").split()
                parent = posixpath.normpath(fields[i + 1].decode("utf-8", errors="surrogateescape"))
                name = fields[i + 2].decode("utf-8", errors="surrogateescape")
                if len(meta) != 7 or not name or not meta[0].isdigit():
                    continue
                level, kind = int(meta[0]), meta[1]
                child = posixpath.join(parent, name)
                lists.setdefault(parent, Listing([], True)).names.append(name)
                stats[child] = _find_stat(kind, meta[2], meta[3], meta[4], meta[5], meta[6])
                if kind == "d" and level < depth and not (name.startswith(".") or name in _PRUNE):
                    lists.setdefault(child, Listing([], True))  # its entries follow (it may have none)
                last_parent, last_child = parent, child
            if cut:
                # find lists depth first: a folder is whole once find has left it; still open at
                # the cut are the folders above the last entry (and that entry, if a folder).
                for folder, listing in lists.items():
                    inside = last_parent == folder or last_parent.startswith(folder.rstrip("/") + "/")
                    if inside or folder == last_child:
                        listing.complete = False
        if not answer.complete:
            raise ConnectionLost(errno.ECONNRESET, f"{self.remote.target}: answer cut short")
        with self._lock:
            for folder, listing in lists.items():
                old = self._lists.get(folder)
                if old is None or not old.complete or listing.complete:
                    self._lists[folder] = listing
            self._stats.update(stats)

    def glob(self, pattern: str) -> list[str]:
        """Shell patterns matched here against remote listings, one level at a time (`**`
        spans folders); hidden names only for a part that starts with '.', as glob does."""
        import fnmatch
        import glob as glob_module

        if not pattern.startswith("/"):
            pattern = posixpath.join(self.home(), pattern)
        parts = [part for part in pattern.split("/") if part]
        current = ["/"]
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            if part == "**":
                found = list(current)
                for base in current:
                    found.extend(self._dirs_under(base))
                current = sorted(set(found))
                continue
            if not glob_module.has_magic(part):
                # Checked where it matters: listing a folder that is not there gives nothing,
                # and a last part is stat'ed below.
                current = [posixpath.join(c, part) for c in current]
                continue
            # A folder the cache already knows is not there (or is no folder) has nothing to list.
            current = [c for c in current if not ((known := self._known(c))[0] and (known[1] is None or not known[1].is_dir))]
            unlisted = [c for c in current if c not in self._lists or not self._lists[c].complete]
            if unlisted:
                self._list_tree(unlisted, depth=1 if len(unlisted) > 50 else LIST_DEPTH)
            nxt: list[str] = []
            for base in current:
                listing = self._lists.get(base)
                for name in listing.names if listing else ():
                    if name.startswith(".") and not part.startswith("."):
                        continue
                    if fnmatch.fnmatchcase(name, part):
                        child = posixpath.join(base, name)
                        st = self._stats.get(child)
                        if last or (st is not None and st.is_dir):
                            nxt.append(child)
            current = nxt
            if not current:
                return []
        if parts and not glob_module.has_magic(parts[-1]) and parts[-1] != "**":
            stats = self.stats(current)
            current = [c for c in current if stats.get(c) is not None]
        return sorted(set(current))

    def _dirs_under(self, top: str) -> list[str]:
        """The folders below `top` as glob's `**` walks them: through links, hidden ones skipped."""
        answer = self.script(DIRS, [str(LIST_CAP), top], timeout=OP_TIMEOUT * 2, compress=True)
        names = (answer.get("D") or b"").split(b"\0")[:-1]
        return [posixpath.join(top, name.decode("utf-8", errors="surrogateescape")) for name in names if name]

    def _walk_entries(self, top: str, limit: int) -> list[tuple[str, FileStat]]:
        answer = self.script(WALK, [str(min(LIST_CAP * 4, max(limit, 1) * 200)), top], timeout=OP_TIMEOUT * 2,
                             compress=True)
        content = answer.get("W") or b""
        fields = content.split(b"\0")
        usable = len(fields) - 1
        entries: list[tuple[str, FileStat]] = []
        for i in range(0, usable - usable % 2, 2):
            meta = fields[i].decode("ascii", errors="replace").split()
            rel = fields[i + 1].decode("utf-8", errors="surrogateescape")
            if len(meta) != 5 or not rel:
                continue
            st = _find_stat(meta[0], meta[1], meta[2], meta[3], meta[4])
            if st is not None:
                entries.append((rel, st))
        return entries

    def walk(self, top: str, max_entries: int) -> Iterator[tuple[str, FileStat]]:
        """LocalHost.walk's order (files of a folder, names descending, before its subfolders,
        ascending), replayed on one remote listing."""
        top = posixpath.normpath(top)
        children: dict[str, list[tuple[str, FileStat]]] = {}
        for rel, st in self._walk_entries(top, max_entries):
            parent, _, name = rel.rpartition("/")
            children.setdefault(parent, []).append((name, st))
        count = 0
        stack = [""]
        while stack:
            folder = stack.pop()
            for name, st in sorted(children.get(folder, ()), key=lambda item: item[0], reverse=True):
                rel = f"{folder}/{name}" if folder else name
                if st.is_dir:
                    stack.append(rel)
                    continue
                if not st.is_file:
                    continue
                yield posixpath.join(top, rel), st
                count += 1
                if count >= max_entries:
                    return

    def read_bytes(self, path: str, limit: int, offset: int = 0) -> bytes:
        path = posixpath.normpath(path)
        with self._lock:
            whole = self._whole.get(path)
        if whole is not None:  # a small file read whole once serves every later read
            begin = max(0, len(whole) + offset) if offset < 0 else offset
            return whole[begin : begin + limit]
        # The head and the tail of a log are asked for by several collectors: read once, kept.
        if offset == 0 and limit <= HEAD_KEEP:
            with self._lock:
                kept = self._heads.get(path)
            if kept is None:
                data, info = self._read(path, HEAD_KEEP, 0)
                with self._lock:
                    self._heads[path] = kept = (data, info)
            return kept[0][:limit]
        if offset < 0 and limit <= TAIL_KEEP and -offset <= TAIL_KEEP:
            with self._file_lock(path):  # collectors ask at once: one of them reads it, the others wait
                with self._lock:
                    tail = self._tails.get(path)
                if tail is None:
                    data, info = self._read(path, TAIL_KEEP, -TAIL_KEEP)
                    size = int(info.split()[0]) if info else len(data)
                    with self._lock:
                        self._tails[path] = tail = (data, info, size - len(data))
            data, info, start = tail
            size = start + len(data)
            begin = max(0, size + offset)
            return data[begin - start : begin - start + limit]
        return self._read(path, limit, offset)[0]

    def _file_lock(self, path: str) -> threading.Lock:
        with self._lock:
            return self._file_locks.setdefault(path, threading.Lock())

    def _read(self, path: str, limit: int, offset: int) -> tuple[bytes, str]:
        answer = self.script(READ, [str(limit), str(offset), path], timeout=OP_TIMEOUT + limit / (1 << 20),
                             compress=limit > 64 * 1024)
        for header, content in answer.items:
            words = header.split()
            if not words or words[0] != "R":
                continue
            status = words[1] if len(words) > 1 else "?"
            if status == "OK":
                info = " ".join(words[3:5])
                if words[2] == "0" and info and words[3].isdigit() and len(content) == int(words[3]):
                    with self._lock:
                        self._whole[path] = content
                return content, info
            code = {"ENOENT": errno.ENOENT, "ENOTDIR": errno.ENOTDIR, "EINVAL": errno.EINVAL,
                    "EACCES": errno.EACCES}.get(status, errno.EIO)
            if code == errno.ENOENT:
                raise FileNotFoundError(code, os.strerror(code), path)
            if code == errno.ENOTDIR:
                raise NotADirectoryError(code, os.strerror(code), path)
            if code == errno.EACCES:
                raise PermissionError(code, os.strerror(code), path)
            raise OSError(code, "not a regular file" if code == errno.EINVAL else os.strerror(code), path)
        raise ConnectionLost(errno.ECONNRESET, f"{self.remote.target}: no answer reading {path}")

    def read_heads(self, paths: Sequence[str], limit: int) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        wanted = list(paths)
        for start in range(0, len(wanted), 200):  # a few hundred paths fit any command line
            batch = wanted[start : start + 200]
            answer = self.script(READ, [str(limit), "0", *batch], timeout=OP_TIMEOUT + len(batch) * limit / (1 << 20),
                                 compress=True)
            replies = [(header, content) for header, content in answer.items if header.startswith("R ")]
            for path, (header, content) in zip(batch, replies, strict=False):
                if header.startswith("R OK "):
                    found[path] = content
        return found

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Byte ranges (offset, length) of one file, in one command."""
        args = [path]
        for start, length in ranges:
            args += [str(start), str(length)]
        answer = self.script(RANGES, args, timeout=OP_TIMEOUT + sum(n for _s, n in ranges) / (1 << 20), compress=True)
        return [content for header, content in answer.items if header.startswith("P ")]

    def cached_tail(self, path: str) -> tuple[bytes, str, int] | None:
        with self._lock:
            return self._tails.get(posixpath.normpath(path))

    def keep_tail(self, path: str, data: bytes, info: str, start: int) -> None:
        with self._lock:
            self._tails[posixpath.normpath(path)] = (data, info, start)

    def free_bytes(self, path: str) -> int | None:
        try:
            answer = self.script(FREE, [path])
        except OSError:
            return None
        line = (answer.get("F") or b"").decode("ascii", errors="replace").split()
        try:
            return int(line[3]) * 1024
        except (IndexError, ValueError):
            return None

    def boot_time(self) -> float | None:
        try:
            return float(self.info.get("btime", ""))
        except ValueError:
            return None

    def local_path(self, path: str) -> Path:
        """A local copy of a small remote file (the whole of it, up to FETCH_CAP)."""
        path = posixpath.normpath(path)
        with self._lock:
            if path in self._fetched:
                return self._fetched[path]
        with self._lock:
            whole = self._whole.get(path)
        data = whole if whole is not None else self._read(path, FETCH_CAP, 0)[0]
        copy = self.folder / "files" / path.lstrip("/")
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(data)
        with self._lock:
            self._fetched[path] = copy
        return copy

    # ---------------------------------------------------------------- processes

    def _process_table(self) -> None:
        answer = self.script(PROCS, [], timeout=OP_TIMEOUT * 2, compress=True)
        if not answer.complete:
            raise ConnectionLost(errno.ECONNRESET, f"{self.remote.target}: the process table was cut short")
        files: dict[str, dict[int, Any]] = {name: {} for name in ("stat", "cmdline", "environ", "cgroup", "cwd", "exe", "fds")}
        for header, content in answer.items:
            for record in content.split(b"\0"):
                name, sep, value = record.partition(b":")
                if not sep:
                    continue
                pid_text, _, kind = name.decode("ascii", errors="replace").partition("/")
                if not pid_text.isdigit():
                    continue
                pid = int(pid_text)
                if header in ("cmdline", "environ"):
                    files[header].setdefault(pid, []).append(value)
                elif header in ("stat", "cgroup"):
                    files[header][pid] = value.decode("utf-8", errors="replace")
                elif header == "links" and kind in ("cwd", "exe"):
                    files[kind][pid] = value.decode("utf-8", errors="surrogateescape")
                elif header == "fds":
                    files["fds"].setdefault(pid, []).append(value.decode("utf-8", errors="surrogateescape"))
        boot = self.boot_time()
        ticks = int(self.info.get("ticks") or 100) if (self.info.get("ticks") or "").isdigit() else 100
        table: list[ProcessInfo] = []
        for pid, line in files["stat"].items():
            comm, ppid, start = parse_stat(line, boot, ticks)
            argv = tuple(part.decode("utf-8", errors="replace") for part in files["cmdline"].get(pid, []) if part)
            table.append(ProcessInfo(pid, ppid, argv, comm, files["cwd"].get(pid), files["exe"].get(pid), start))
        with self._lock:
            self._procs = sorted(_without_ours(table), key=lambda p: p.pid)
            self._proc_files = files

    def refresh(self) -> None:
        with self._lock:
            self._stats.clear()
            self._lists.clear()
            self._heads.clear()
            self._tails.clear()
            self._whole.clear()
            self._procs = None
            self._proc_files = {}

    def processes(self) -> list[ProcessInfo]:
        if self._procs is None:
            self._process_table()
        return list(self._procs or [])

    def proc_environ(self, pid: int) -> dict[str, str] | None:
        if self._procs is None:
            self._process_table()
        items = self._proc_files.get("environ", {}).get(pid)
        if items is None:
            return None
        env: dict[str, str] = {}
        for item in items:
            key, sep, value = item.partition(b"=")
            if sep and key:
                env[key.decode("utf-8", errors="replace")] = value.decode("utf-8", errors="replace")
        return env

    def proc_fds(self, pid: int) -> list[str] | None:
        if self._procs is None:
            self._process_table()
        found = self._proc_files.get("fds", {}).get(pid)
        return list(found[:4096]) if found is not None else None

    def proc_cgroup(self, pid: int) -> str | None:
        if self._procs is None:
            self._process_table()
        text = self._proc_files.get("cgroup", {}).get(pid)
        return cgroup_of(text) if text is not None else None

    def proc_stat(self, pid: int) -> ProcStat | None:
        return self.proc_stats([pid]).get(pid)

    def proc_stats(self, pids: Sequence[int]) -> dict[int, ProcStat]:
        if not pids:
            return {}
        try:
            answer = self.script(PSTAT, [f"{int(pid)}/stat" for pid in pids])
        except OSError:
            return {}
        ticks = int(self.info.get("ticks") or 100) if (self.info.get("ticks") or "").isdigit() else 100
        found: dict[int, ProcStat] = {}
        for record in (answer.get("stat") or b"").split(b"\0"):
            name, sep, value = record.partition(b":")
            pid_text = name.decode("ascii", errors="replace").partition("/")[0]
            if not sep or not pid_text.isdigit():
                continue
            fields = value.decode("utf-8", errors="replace").rpartition(")")[2].split()
            try:
                found[int(pid_text)] = ProcStat(fields[0], int(fields[11]) + int(fields[12]), ticks)
            except (IndexError, ValueError):
                continue
        return found

    # ---------------------------------------------------------------- the user there

    def environ(self) -> Mapping[str, str]:
        return dict(self.env)

    def uid(self) -> int:
        value = self.info.get("uid", "")
        return int(value) if value.isdigit() else -1

    def user(self) -> str:
        return self.info.get("user") or str(self.uid())

    def home(self) -> str:
        return self.info.get("home") or "/"

    def start_dir(self) -> str | None:
        return self.info.get("cwd") or None

    def has_program(self, name: str) -> bool:
        """Only the programs the probe looks for are known (PROBE's tools)."""
        return name in self.tools

    def clock_skew(self) -> float | None:
        """Seconds the remote clock is ahead of ours (whole seconds: `date +%s`)."""
        try:
            return float(self.info["time"]) - time.time()
        except (KeyError, ValueError):
            return None

    def describe(self) -> dict[str, Any]:
        """For the manifest: where the run was, how it was reached, what crossed the connection."""
        traffic = self.conn.traffic
        return {
            "target": str(self.remote.target), "exec": list(self.remote.exec_prefix), "hostname": self.name,
            "commands": traffic.commands, "bytes_received": traffic.received, "bytes_sent": traffic.sent,
            "connect_seconds": round(self.conn.connect_seconds, 3), "lost": self.conn.lost,
            "clock_skew_s": None if (skew := self.clock_skew()) is None else round(skew, 1),
        }

    def close(self) -> None:
        self.conn.close()


def _without_ours(table: list[ProcessInfo]) -> list[ProcessInfo]:
    """The process table without our own commands there: the ones whose arguments hold a
    command marker (`timeout ... sh -c SCRIPT diagnose MARK ...`) and everything below them (the
    grep, stat and tail of a search that names the run's log, collected while they run)."""
    ours = {p.pid for p in table if any(MARK.fullmatch(arg) for arg in p.cmdline)}
    children: dict[int, list[int]] = {}
    for proc in table:
        children.setdefault(proc.ppid, []).append(proc.pid)
    queue = list(ours)
    while queue:
        for child in children.get(queue.pop(), ()):
            if child not in ours:
                ours.add(child)
                queue.append(child)
    return [p for p in table if p.pid not in ours]


def _gunzip(data: bytes) -> bytes:
    """What a (maybe cut short) gzip stream holds: as much as can be inflated."""
    import zlib

    inflate = zlib.decompressobj(wbits=31)
    try:
        return inflate.decompress(data) + inflate.flush()
    except zlib.error:
        return b""


def _after_mark(data: bytes, mark: str) -> bytes:
    token = mark.encode() + b"\n"
    at = data.find(token)
    return data[at + len(token) :] if at >= 0 else data

